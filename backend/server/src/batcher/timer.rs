//! A microsecond-precision timer for queue delays.
//!
//! tokio's timer wheel ticks in milliseconds, so a 100 µs `max_queue_delay` would become 1 ms. One
//! background thread keeps a heap of deadlines and sleeps on a condition variable with the exact time
//! left (futex precision, tens of microseconds), waking the batcher through a oneshot channel.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::oneshot;

struct Entry {
    at: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Heap {
    entries: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

struct Timer {
    heap: Mutex<Heap>,
    cv: Condvar,
}

fn timer() -> Option<&'static Timer> {
    static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            heap: Mutex::new(Heap::default()),
            cv: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("infergate-batch-timer".into())
            .spawn(move || run(t))
            .ok()
            .map(|_| t)
    })
}

fn run(t: &'static Timer) {
    let mut heap = t.heap.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        while heap.entries.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(e)) = heap.entries.pop() {
                let _ = e.tx.send(());
            }
        }
        // Drop entries nobody waits for any more, so the heap does not grow under churn.
        if heap.entries.len() > 1024 {
            let kept: BinaryHeap<_> = heap
                .entries
                .drain()
                .filter(|Reverse(e)| !e.tx.is_closed())
                .collect();
            heap.entries = kept;
        }
        heap = match heap.entries.peek() {
            Some(Reverse(e)) => {
                let wait = e.at.saturating_duration_since(Instant::now());
                t.cv.wait_timeout(heap, wait).unwrap_or_else(|e| e.into_inner()).0
            }
            None => t.cv.wait(heap).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Completes at `at` (to within tens of microseconds). Falls back to tokio's timer if the timer thread
/// could not be started.
pub(super) async fn sleep_until(at: Instant) {
    let Some(t) = timer() else {
        tokio::time::sleep_until(at.into()).await;
        return;
    };
    let (tx, rx) = oneshot::channel();
    {
        let mut heap = t.heap.lock().unwrap_or_else(|e| e.into_inner());
        heap.seq += 1;
        let seq = heap.seq;
        heap.entries.push(Reverse(Entry { at, seq, tx }));
    }
    t.cv.notify_one();
    let _ = rx.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_after_the_deadline_with_sub_millisecond_precision() {
        // Real time here (the point of this timer); generous bounds for a loaded CI machine.
        let start = Instant::now();
        sleep_until(start + Duration::from_micros(300)).await;
        let took = start.elapsed();
        assert!(took >= Duration::from_micros(300), "woke early: {took:?}");
        // Deadlines fire in order.
        let a = tokio::spawn(sleep_until(start + Duration::from_millis(50)));
        let b = sleep_until(Instant::now() + Duration::from_micros(100));
        b.await;
        assert!(!a.is_finished(), "the later deadline fired first");
        a.await.unwrap();
    }
}

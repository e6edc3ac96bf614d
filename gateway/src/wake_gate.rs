//! A future polled only when it asked to be: for the rarely-ready branches beside a busy one in `select!`.
//!
//! `tokio::select!` polls every branch each time its task wakes. A client connection's task wakes for every
//! read and write, while the shutdown signal and the idle timer beside it are ready once in a connection's
//! life; polling them on each wake cost ≈ 600 instructions per proxied request. [`WakeGate`] hands its inner
//! future a waker of its own and polls it again only after that waker fired.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Wraps `F`; see the module docs.
pub(crate) struct WakeGate<F> {
    inner: F,
    signal: Arc<Signal>,
    /// The waker handed to `inner`, made once.
    waker: Waker,
}

/// Set by the inner future's waker; forwards the wake to the task.
struct Signal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> WakeGate<F> {
    /// Gates `inner`; its first poll always goes through.
    pub(crate) fn new(inner: F) -> Self {
        let signal = Arc::new(Signal {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&signal));
        WakeGate { inner, signal, waker }
    }
}

impl<F> WakeGate<F> {
    /// The inner future.
    pub(crate) fn get(&self) -> &F {
        &self.inner
    }

    /// The inner future, to change (a timer reset): it is polled at the next poll of the gate, so that it
    /// registers the gate's waker again whatever the change did to the waker it held.
    pub(crate) fn get_mut(&mut self) -> &mut F {
        self.signal.woken.store(true, Ordering::Release);
        &mut self.inner
    }
}

impl<F: Future + Unpin> Future for WakeGate<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Registered before the flag is read, so a wake in between is not lost.
        this.signal.task.register(cx.waker());
        if !this.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Counts its polls and stays pending, keeping the last waker it was given.
    struct Probe {
        polls: Arc<AtomicUsize>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_and_then_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let inner_waker = Arc::new(std::sync::Mutex::new(None));
        let mut gate = WakeGate::new(Probe {
            polls: Arc::clone(&polls),
            waker: Arc::clone(&inner_waker),
        });
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..3 {
            assert!(Pin::new(&mut gate).poll(&mut cx).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "other wakes of the task do not reach it"
        );
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert!(Pin::new(&mut gate).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut gate).poll(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            2,
            "its own wake lets one poll through"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_gated_timer_still_fires_beside_a_busy_branch() {
        let started = tokio::time::Instant::now();
        let mut idle = WakeGate::new(Box::pin(tokio::time::sleep(Duration::from_secs(5))));
        let mut ticks = 0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => ticks += 1,
                _ = &mut idle => break,
            }
        }
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(ticks >= 49, "the busy branch kept running: {ticks}");
    }
}

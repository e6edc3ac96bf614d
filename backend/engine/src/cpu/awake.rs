//! Keeps the pool's other workers awake while a run lasts, so that each parallel node of a small
//! request does not first wake a sleeping thread.
//!
//! A rayon worker that finds no work sleeps after a few dozen yields (tens of microseconds). A
//! batch-1 run alternates short serial stretches with parallel nodes, so every parallel node used
//! to start by waking the other worker: a futex wake, and on a VM an idle virtual CPU to resume,
//! tens of microseconds each, a fifth of a small quantized classifier's run. onnxruntime's pool
//! spins between its parallel sections for the same reason.
//!
//! While a run is in flight (and it is the only one in the process: with several, the workers are
//! busy anyway and a spinning one would take a core another run could use), one job per other
//! worker executes whatever work appears (`rayon::yield_now`) until the run ends. It gives up after
//! [`MAX_IDLE`] without work: a long serial stretch lets the worker sleep as before, and a job that
//! landed on a worker in the middle of other work cannot hold that work up for longer than this.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a worker waits for work before it goes back to sleeping between parallel sections.
const MAX_IDLE: Duration = Duration::from_micros(500);

/// Runs in flight in the process.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// While alive, the other workers of the current pool look for work instead of sleeping
/// (see the module doc). Dropping it ends that.
pub(crate) struct KeepAwake {
    done: Option<Arc<AtomicBool>>,
}

/// Keep the current pool's other workers awake until the returned guard is dropped. Call it on
/// one of the pool's threads at the start of a run.
pub(crate) fn keep_awake() -> KeepAwake {
    let alone = IN_FLIGHT.fetch_add(1, Ordering::AcqRel) == 0;
    let Some(me) = rayon::current_thread_index().filter(|_| alone) else {
        return KeepAwake { done: None };
    };
    let done = Arc::new(AtomicBool::new(false));
    for _ in 1..rayon::current_num_threads() {
        let done = Arc::clone(&done);
        rayon::spawn(move || {
            // on the run's own thread (taken while it waits for a stolen task) it would only spin
            if rayon::current_thread_index() != Some(me) {
                look_for_work(&done);
            }
        });
    }
    KeepAwake { done: Some(done) }
}

/// Execute the pool's pending work until `done`, or until none came for [`MAX_IDLE`].
fn look_for_work(done: &AtomicBool) {
    let mut idle_since = Instant::now();
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle_since = Instant::now(),
            Some(rayon::Yield::Idle) if idle_since.elapsed() < MAX_IDLE => std::hint::spin_loop(),
            _ => return,
        }
    }
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        if let Some(done) = &self.done {
            done.store(true, Ordering::Release);
        }
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Runs that keep the pool awake, from several threads at once and with nested parallel
    /// sections (so a worker may take a run's job in the middle of another task), all finish with
    /// the right results: no worker is held by a job waiting for a run it sits on top of.
    #[test]
    fn runs_keeping_the_pool_awake_finish_when_they_overlap_and_nest() {
        let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        for caller in 0..3u64 {
            let (pool, tx) = (Arc::clone(&pool), tx.clone());
            std::thread::spawn(move || {
                for round in 0..40u64 {
                    let sum: u64 = pool.install(|| {
                        let _awake = keep_awake();
                        (0..64u64)
                            .into_par_iter()
                            .map(|i| {
                                (0..100u64)
                                    .into_par_iter()
                                    .map(|j| i * j + round + caller)
                                    .sum::<u64>()
                            })
                            .sum()
                    });
                    let want: u64 = (0..64u64)
                        .flat_map(|i| (0..100u64).map(move |j| i * j + round + caller))
                        .sum();
                    assert_eq!(sum, want);
                }
                tx.send(caller).unwrap();
            });
        }
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(60))
                .expect("a run that kept the pool awake did not finish");
        }
    }

    /// A worker takes the pool's pending work while the run lasts, then waits for more for about
    /// MAX_IDLE before it gives up (and sleeps as rayon's do); once the run is done it takes none.
    #[test]
    fn a_worker_takes_work_until_none_comes_or_the_run_ends() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        pool.install(|| {
            let ran = Arc::new(AtomicBool::new(false));
            let job_ran = Arc::clone(&ran);
            rayon::spawn(move || job_ran.store(true, Ordering::SeqCst));
            look_for_work(&AtomicBool::new(true));
            assert!(!ran.load(Ordering::SeqCst), "took work after the run ended");
            let start = Instant::now();
            look_for_work(&AtomicBool::new(false));
            assert!(ran.load(Ordering::SeqCst), "left the pending job");
            let waited = start.elapsed();
            assert!(waited >= MAX_IDLE, "stopped looking after {waited:?}");
            assert!(waited < Duration::from_secs(60), "looked for work for {waited:?}");
        });
    }
}

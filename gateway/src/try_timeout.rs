//! How the retry layer tells the upstream that it abandoned a try at its per-try timeout.
//!
//! A try cut by its per-try timeout is a slow endpoint's doing, and outlier detection counts it as it counts a
//! 5xx (Envoy does the same with a timeout's 504). But the try's future is simply dropped, and a drop alone
//! cannot tell a timeout from a caller who went away, which must count as nothing (or any client could eject
//! endpoints by hanging up). So the retry layer hands each timed try a [`TryTimeout`] in the request's
//! extensions and fires it *before* the try's future is dropped; the upstream, when the future it made is
//! dropped unfinished, counts a failure only if the signal fired. A leaf module: `retry` and `upstream` both
//! use it and neither imports the other.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::{Instant, error::Elapsed};

/// Fired when the try it travels with was abandoned at its per-try timeout.
#[derive(Debug, Clone, Default)]
pub struct TryTimeout(Arc<AtomicBool>);

impl TryTimeout {
    /// Marks the try as timed out.
    pub fn fire(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the try timed out.
    pub fn fired(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// `tokio::time::timeout_at` that fires `signal` when the deadline passes, while `call` is still alive: the
/// future is dropped only after the signal is set, so its drop can read it.
pub async fn timeout_signalled<F: Future>(
    deadline: Instant,
    call: F,
    signal: TryTimeout,
) -> Result<F::Output, Elapsed> {
    let mut timed = std::pin::pin!(tokio::time::timeout_at(deadline, call));
    let result = timed.as_mut().await;
    if result.is_err() {
        signal.fire();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records, when dropped, whether the signal had fired by then.
    struct SeesSignal(TryTimeout, Arc<AtomicBool>);

    impl Drop for SeesSignal {
        fn drop(&mut self) {
            self.1.store(self.0.fired(), Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_signal_is_set_before_the_abandoned_try_is_dropped() {
        let signal = TryTimeout::default();
        let seen = Arc::new(AtomicBool::new(false));
        let watcher = SeesSignal(signal.clone(), seen.clone());
        let hang = async move {
            let _watcher = watcher;
            std::future::pending::<()>().await
        };
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        assert!(timeout_signalled(deadline, hang, signal.clone()).await.is_err());
        assert!(seen.load(Ordering::SeqCst), "the drop saw the fired signal");

        let quick = TryTimeout::default();
        assert_eq!(
            timeout_signalled(
                deadline + std::time::Duration::from_secs(1),
                async { 7 },
                quick.clone()
            )
            .await
            .ok(),
            Some(7)
        );
        assert!(!quick.fired());
    }
}

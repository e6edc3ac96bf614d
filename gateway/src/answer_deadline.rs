//! Deadlines for the answers the listener sends over HTTP/2. An answer stream that stops moving is reset
//! (`CANCEL`), which drops the answer's body and with it the upstream stream and its concurrency slot:
//!
//! - its upstream sends nothing for `stream_idle_timeout` (the answer's head came, then silence);
//! - its client takes nothing for `write_timeout` (it keeps the connection alive but holds the stream's
//!   flow-control window shut, so the connection-wide write timeout never sees a blocked write).
//!
//! Why the deadline is not a timer inside the body: hyper polls an answer's body only while the stream's
//! window has room, so a timer there never runs while the client holds the window shut. Instead every stream
//! task hyper spawns goes through [`StreamExecutor`], which races the task against a deadline that the
//! answer's body ([`AnswerBody`]) moves forward with each piece; dropping the task makes h2 reset the stream.
//! The two halves meet through a task-local value, since hyper gives the executor nothing to name a stream by.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::metrics as m;
use crate::proxy::{Body, BoxError};

tokio::task_local! {
    /// The progress of the answer the current stream task sends.
    static ANSWER: Arc<AnswerProgress>;
}

/// How long an HTTP/2 answer may wait on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AnswerLimits {
    /// The upstream has yielded nothing this long (`stream_idle_timeout`).
    pub(crate) upstream_idle: Duration,
    /// The client has taken nothing this long (`write_timeout`).
    pub(crate) client_write: Duration,
}

impl AnswerLimits {
    /// How often a stream whose answer has not started looks again.
    fn recheck(&self) -> Duration {
        self.upstream_idle.min(self.client_write)
    }
}

/// hyper's executor for the streams of an HTTP/2 client connection: spawns each on the current runtime under
/// the answer deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamExecutor {
    limits: AnswerLimits,
}

impl StreamExecutor {
    /// Streams spawned by this executor are reset when their answer stalls past `limits`.
    pub(crate) fn new(limits: AnswerLimits) -> StreamExecutor {
        StreamExecutor { limits }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        tokio::spawn(under_deadline(stream, self.limits));
    }
}

/// An answer body whose progress moves its stream's deadline.
pub(crate) struct AnswerBody {
    inner: Body,
    /// None outside a stream task of [`StreamExecutor`] or for an answer without a body: no deadline.
    progress: Option<Arc<AnswerProgress>>,
}

/// Puts `resp`'s body under the deadline of the stream task it is answered on.
pub(crate) fn watched(resp: Response<Body>) -> Response<AnswerBody> {
    let progress = if resp.body().is_end_stream() {
        None
    } else {
        ANSWER.try_with(Arc::clone).ok()
    };
    if let Some(p) = &progress {
        p.wait_on(Side::Upstream, true);
    }
    resp.map(|inner| AnswerBody { inner, progress })
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(p) = &this.progress {
            match &polled {
                // The wait for the upstream starts now, unless it was already running.
                Poll::Pending => p.wait_on(Side::Upstream, false),
                // A piece handed to hyper: the client's turn to take it, from now.
                Poll::Ready(Some(Ok(_))) => p.wait_on(Side::Client, true),
                Poll::Ready(Some(Err(_)) | None) => p.finish(),
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whose turn it is to move an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Upstream = 1,
    Client = 2,
}

const NOT_STARTED: u8 = 0;
const DONE: u8 = 3;

/// Where one answer stands: whose turn it is, since when. Written by the body and read by the deadline,
/// both in the stream's own task.
struct AnswerProgress {
    opened: Instant,
    /// Nanoseconds from `opened` to the start of the current wait.
    since: AtomicU64,
    /// `NOT_STARTED`, a [`Side`], or `DONE`.
    state: AtomicU8,
}

impl AnswerProgress {
    fn new() -> AnswerProgress {
        AnswerProgress {
            opened: Instant::now(),
            since: AtomicU64::new(0),
            state: AtomicU8::new(NOT_STARTED),
        }
    }

    /// Now waiting on `side`; the wait restarts if `restart` or if it was not `side`'s turn.
    fn wait_on(&self, side: Side, restart: bool) {
        if self.state.swap(side as u8, Ordering::Relaxed) != side as u8 || restart {
            let since = Instant::now().saturating_duration_since(self.opened);
            self.since.store(
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }

    fn finish(&self) {
        self.state.store(DONE, Ordering::Relaxed);
    }

    /// When the current wait runs out, and on whom; None when no wait is running.
    fn deadline(&self, limits: &AnswerLimits) -> Option<(Instant, Side)> {
        let (side, limit) = match self.state.load(Ordering::Relaxed) {
            s if s == Side::Upstream as u8 => (Side::Upstream, limits.upstream_idle),
            s if s == Side::Client as u8 => (Side::Client, limits.client_write),
            _ => return None,
        };
        let since = self.opened + Duration::from_nanos(self.since.load(Ordering::Relaxed));
        Some((since + limit, side))
    }
}

/// Runs a stream task until it ends, or until its answer has waited past its limit; then drops it, which
/// resets the stream (h2 sends `RST_STREAM(CANCEL)` for a stream dropped before its end) and drops the
/// answer's body (the upstream stream is reset and the concurrency slot given back).
async fn under_deadline<F: Future<Output = ()>>(stream: F, limits: AnswerLimits) {
    let progress = Arc::new(AnswerProgress::new());
    let stream = ANSWER.scope(Arc::clone(&progress), stream);
    tokio::pin!(stream);
    // One timer per stream, moved only when it fires: the pieces of a moving answer never touch the timer wheel.
    let timer = tokio::time::sleep(limits.recheck());
    tokio::pin!(timer);
    loop {
        tokio::select! {
            biased;
            () = &mut stream => return,
            () = &mut timer => {
                let now = Instant::now();
                match progress.deadline(&limits) {
                    Some((deadline, _)) if deadline > now => timer.as_mut().reset(deadline),
                    Some((_, side)) => {
                        report_stall(side, &limits);
                        return;
                    }
                    None => timer.as_mut().reset(now + limits.recheck()),
                }
            }
        }
    }
}

fn report_stall(side: Side, limits: &AnswerLimits) {
    match side {
        Side::Upstream => {
            metrics::counter!(m::REFUSED, "reason" => "stream_idle_timeout").increment(1);
            tracing::debug!(
                limit = ?limits.upstream_idle,
                "resetting an HTTP/2 answer whose upstream sent nothing for listeners.limits.stream_idle_timeout"
            );
        }
        Side::Client => {
            metrics::counter!(m::REFUSED, "reason" => "write_timeout").increment(1);
            tracing::debug!(
                limit = ?limits.client_write,
                "resetting an HTTP/2 answer whose client took nothing for listeners.limits.write_timeout (its stream window stayed shut)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: AnswerLimits = AnswerLimits {
        upstream_idle: Duration::from_secs(300),
        client_write: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn each_side_gets_its_own_limit_from_the_start_of_its_wait() {
        let p = AnswerProgress::new();
        assert!(p.deadline(&LIMITS).is_none(), "no answer yet: no deadline");
        p.wait_on(Side::Upstream, true);
        let start = Instant::now();
        assert_eq!(
            p.deadline(&LIMITS),
            Some((start + LIMITS.upstream_idle, Side::Upstream))
        );
        // A wait on the upstream that goes on (a spurious wake) keeps its start.
        tokio::time::advance(Duration::from_secs(5)).await;
        p.wait_on(Side::Upstream, false);
        assert_eq!(
            p.deadline(&LIMITS),
            Some((start + LIMITS.upstream_idle, Side::Upstream))
        );
        // A piece handed over: the client's turn, from now.
        p.wait_on(Side::Client, true);
        let handed = Instant::now();
        assert_eq!(
            p.deadline(&LIMITS),
            Some((handed + LIMITS.client_write, Side::Client))
        );
        p.finish();
        assert!(p.deadline(&LIMITS).is_none(), "a finished answer has no deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_whose_upstream_goes_quiet_is_dropped_at_the_limit() {
        let limits = AnswerLimits {
            upstream_idle: Duration::from_secs(3),
            client_write: Duration::from_secs(1),
        };
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        // A stream task whose answer starts and then never yields: the body is polled and stays pending.
        let stream = async move {
            let _dropped = dropped_tx;
            tokio::time::sleep(Duration::from_secs(10)).await;
            let resp = watched(Response::new(crate::proxy::boxed(
                http_body_util::StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, BoxError>>()),
            )));
            let mut body = resp.into_body();
            let _ = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        };
        let started = Instant::now();
        under_deadline(stream, limits).await;
        // The head took 10 s (the route timeout's business, not this deadline's); the silence after it 3 s.
        let ended = started.elapsed();
        assert!(
            ended >= Duration::from_secs(13) && ended < Duration::from_secs(14),
            "dropped after {ended:?}"
        );
        assert!(dropped_rx.await.is_err(), "the stream task was dropped");
    }
}

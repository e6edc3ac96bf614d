//! The connection task: drives the `h2` crate's connection until it ends, pings an upstream that has gone
//! quiet while requests wait on it, and lets the connection finish once the pool no longer holds it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::client::Connection;
use h2::{Ping, PingPong};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};

/// What the connection task and the requests on it share.
pub(super) struct ConnState {
    /// The connection has ended or takes no new streams.
    closed: AtomicBool,
    /// The keep-alive PING went unanswered (requests that fail on this connection timed out).
    timed_out: AtomicBool,
    /// Streams sent and not yet finished (keep-alive pings only while some are).
    open_streams: AtomicUsize,
    /// A request has been sent on the connection (see `index_request_id_name`).
    pub(super) sent_any: AtomicBool,
    /// When the connection was made, and nanoseconds from then to the last frame read for a request.
    born: Instant,
    last_read: AtomicU64,
}

impl ConnState {
    pub(super) fn new() -> ConnState {
        ConnState {
            closed: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            open_streams: AtomicUsize::new(0),
            sent_any: AtomicBool::new(false),
            born: Instant::now(),
            last_read: AtomicU64::new(0),
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(super) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Acquire)
    }

    /// Something was read for a request: the upstream is alive.
    pub(super) fn touch(&self) {
        let ns = Instant::now().saturating_duration_since(self.born).as_nanos();
        self.last_read
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn idle_for(&self, now: Instant) -> Duration {
        let last = self.born + Duration::from_nanos(self.last_read.load(Ordering::Relaxed));
        now.saturating_duration_since(last)
    }
}

/// Counts a stream as open on its connection until dropped.
pub(super) struct OpenStream(Arc<ConnState>);

impl OpenStream {
    pub(super) fn new(state: &Arc<ConnState>) -> OpenStream {
        state.open_streams.fetch_add(1, Ordering::AcqRel);
        OpenStream(Arc::clone(state))
    }

    pub(super) fn touch(&self) {
        self.0.touch();
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Drives the connection until it ends, pinging while requests wait and nothing has been read for
/// [`KEEP_ALIVE_INTERVAL`]. When the pool drops its handle (`dropped` resolves), the connection is polled
/// on so that it notices it has no users left and shuts down after its last stream (h2 would not wake a
/// parked connection to notice).
pub(super) async fn drive<T>(
    mut conn: Connection<T, Bytes>,
    ping: Option<PingPong>,
    state: Arc<ConnState>,
    mut dropped: oneshot::Receiver<()>,
) where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let keep_alive = keep_alive(ping, Arc::clone(&state));
    tokio::pin!(keep_alive);
    let mut pool_gone = false;
    let result = loop {
        tokio::select! {
            r = &mut conn => break r,
            _ = &mut dropped, if !pool_gone => pool_gone = true,
            _ = &mut keep_alive => {
                tracing::debug!("upstream HTTP/2 connection closed: keep-alive PING unanswered");
                break Ok(());
            }
        }
    };
    state.mark_closed();
    if let Err(e) = result {
        tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
    }
}

/// Resolves when a keep-alive PING went unanswered (never, when pings are unavailable).
async fn keep_alive(ping: Option<PingPong>, state: Arc<ConnState>) {
    let Some(mut ping) = ping else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(KEEP_ALIVE_INTERVAL).await;
        if state.open_streams.load(Ordering::Acquire) == 0
            || state.idle_for(Instant::now()) < KEEP_ALIVE_INTERVAL
        {
            continue;
        }
        match tokio::time::timeout(KEEP_ALIVE_TIMEOUT, ping.ping(Ping::opaque())).await {
            Ok(Ok(_)) => state.touch(),
            // The connection failed: its own future reports it.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_) => {
                state.timed_out.store(true, Ordering::Release);
                return;
            }
        }
    }
}

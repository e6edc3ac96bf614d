//! The data listener: accepts TCP (optionally TLS) connections and serves HTTP/1.1 and HTTP/2 (h2c by prior
//! knowledge in clear text, h2 by ALPN over TLS) on one port, with the connection limits that keep a sidecar
//! alive under hostile clients: a cap on open connections, header size and count, header read timeout
//! (slowloris), idle timeout, write timeout (a client that does not read), HTTP/2 stream limits and answer
//! deadlines (`answer_deadline.rs`), rapid-reset and CONTINUATION-flood guards.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::answer_deadline::{self, AnswerLimits, StreamExecutor};
use crate::h1;
use crate::idle_body::IdleBody;
use crate::metrics as m;
use crate::prefixed_io::PrefixedIo;
use crate::proxy::{self, Body};
use crate::tls::PeerIdentity;
use crate::wake_gate::WakeGate;
use crate::write_deadline::WriteDeadline;

pub use crate::connection::{ConnInfo, ConnLimits};

/// A client connection as the listener serves it: TCP with the write timeout applied.
type ClientIo = WriteDeadline<TcpStream>;

/// Refused connections that may linger at once (each for up to [`REFUSAL_LINGER`]) so their clients read the
/// refusal; beyond this they are closed at once.
const MAX_LINGERING_REFUSALS: usize = 256;

/// How long a refused connection waits for its client to read the refusal.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);

/// What a plaintext client over `max_connections` reads before the connection closes.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 115\r\nconnection: close\r\nretry-after: 1\r\n\r\n{\"error\":\"too many client connections are open (listeners.limits.max_connections); retry later or raise the limit\"}";

/// Counts open connections, over all data workers and per worker, and lets shutdown wait for them to finish.
#[derive(Debug)]
pub struct ConnTracker {
    open: AtomicUsize,
    closed: Notify,
    per_worker: Box<[WorkerCounts]>,
    /// Refused connections lingering now.
    lingering: AtomicUsize,
}

#[derive(Debug, Default)]
struct WorkerCounts {
    open: AtomicUsize,
    accepted: AtomicU64,
}

/// One data worker's client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConnections {
    /// Open now.
    pub open: usize,
    /// Accepted since the start.
    pub accepted: u64,
}

impl Default for ConnTracker {
    fn default() -> Self {
        ConnTracker::new(1)
    }
}

impl ConnTracker {
    /// A tracker for `workers` data workers.
    pub fn new(workers: usize) -> Self {
        ConnTracker {
            open: AtomicUsize::new(0),
            closed: Notify::new(),
            per_worker: (0..workers.max(1)).map(|_| WorkerCounts::default()).collect(),
            lingering: AtomicUsize::new(0),
        }
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Open and accepted connections of each data worker, in worker order.
    pub fn per_worker(&self) -> Vec<WorkerConnections> {
        self.per_worker
            .iter()
            .map(|w| WorkerConnections {
                open: w.open.load(Ordering::Acquire),
                accepted: w.accepted.load(Ordering::Acquire),
            })
            .collect()
    }

    /// Waits until every connection has closed, or `limit` has passed; returns the connections still open.
    pub async fn wait_closed(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.closed.notified();
            if self.open() == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.open();
            }
        }
    }

    /// Counts a connection accepted on this thread's worker, open until the guard drops; `None` when
    /// `max` connections are open already (over all workers).
    fn enter(self: &Arc<Self>, max: usize) -> Option<ConnGuard> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let worker = crate::worker::current() % self.per_worker.len();
        let w = &self.per_worker[worker];
        w.accepted.fetch_add(1, Ordering::AcqRel);
        w.open.fetch_add(1, Ordering::AcqRel);
        metrics::gauge!(m::OPEN_CONNECTIONS, "listener" => "data").increment(1.0);
        Some(ConnGuard {
            tracker: Arc::clone(self),
            worker,
        })
    }
}

struct ConnGuard {
    tracker: Arc<ConnTracker>,
    worker: usize,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let t = &self.tracker;
        t.per_worker[self.worker].open.fetch_sub(1, Ordering::AcqRel);
        t.open.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(m::OPEN_CONNECTIONS, "listener" => "data").decrement(1.0);
        t.closed.notify_waiters();
    }
}

/// Request activity on one connection, for the idle timeout. Lock-free: it is touched by every request.
struct Activity {
    in_flight: AtomicUsize,
    seen_request: AtomicBool,
    /// When the connection was accepted.
    opened: Instant,
    /// Nanoseconds from `opened` to the last activity.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            seen_request: AtomicBool::new(false),
            opened: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let since = Instant::now().saturating_duration_since(self.opened);
        self.last.store(
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
    }

    /// When the connection becomes idle-expired if nothing happens (None while requests are in flight).
    fn deadline(&self, limits: &ConnLimits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = self.opened + Duration::from_nanos(self.last.load(Ordering::Acquire));
        let allowed = if self.seen_request.load(Ordering::Acquire) {
            limits.idle_timeout
        } else {
            limits.header_read_timeout.min(limits.idle_timeout)
        };
        Some(last + allowed)
    }
}

struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Builds hyper's HTTP/2 connection builder with the limits applied (and hyper's timer set: without it the
/// keep-alive pings do nothing). Each stream runs under the answer deadline (`answer_deadline.rs`). HTTP/1.1
/// is served by [`h1`].
fn h2_builder(limits: &ConnLimits) -> http2::Builder<StreamExecutor> {
    let mut b = http2::Builder::new(StreamExecutor::new(AnswerLimits {
        upstream_idle: limits.stream_idle_timeout,
        client_write: limits.write_timeout,
    }));
    b.timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_pending_accept_reset_streams(limits.h2_max_pending_accept_reset_streams)
        .max_local_error_reset_streams(limits.h2_max_local_error_reset_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20))
        .adaptive_window(true);
    b
}

/// Accepts connections on `listener` until `shutdown` turns true, serving each with `handler` on a task of
/// the current runtime (a data worker's, see `worker.rs`). Connections
/// open at shutdown are told to finish (HTTP/1.1 `Connection: close` after the response in flight, HTTP/2
/// `GOAWAY`); `tracker` counts them so the caller can wait for the drain. While `ready` (the admin `/ready`)
/// is false before that, HTTP/1.1 connections close after each response (`h1`); HTTP/2 ones wait for the
/// drain's `GOAWAY`, which a client can never miss.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnLimits,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
    tracker: Arc<ConnTracker>,
) where
    H: Fn(Arc<ConnInfo>, Request<Body>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let builder = Arc::new(h2_builder(&limits));
    let limits = Arc::new(limits);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let local = listener.local_addr().ok();
    let accepted_here =
        metrics::counter!(m::WORKER_CONNECTIONS, "worker" => crate::worker::current().to_string());
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = signalled(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        accepted_here.increment(1);
        let Some(guard) = tracker.enter(limits.max_connections) else {
            refuse(stream, acceptor.is_none(), &tracker);
            continue;
        };
        let stream = WriteDeadline::new(stream, limits.write_timeout);
        let conn = ConnSetup {
            builder: Arc::clone(&builder),
            limits: Arc::clone(&limits),
            acceptor: acceptor.clone(),
            local: local.unwrap_or(peer),
            peer,
            shutdown: shutdown.clone(),
            ready: Arc::clone(&ready),
        };
        let handler = handler.clone();
        tokio::spawn(conn.run(stream, handler, guard));
    }
}

struct ConnSetup {
    builder: Arc<http2::Builder<StreamExecutor>>,
    limits: Arc<ConnLimits>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    local: SocketAddr,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
}

impl ConnSetup {
    /// Serves the connection; `guard` counts it as open until its socket is about to close.
    async fn run<H, F>(self, stream: ClientIo, handler: H, guard: ConnGuard)
    where
        H: Fn(Arc<ConnInfo>, Request<Body>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        match &self.acceptor {
            None => {
                metrics::counter!(m::CONNECTIONS, "listener" => "data", "protocol" => "tcp").increment(1);
                let info = ConnInfo::new(self.peer, self.local, false, None);
                self.serve_io(stream, info, false, handler, guard).await;
            }
            Some(acceptor) => {
                let handshake = acceptor.accept(stream);
                let tls = match tokio::time::timeout(self.limits.header_read_timeout, handshake).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        metrics::counter!(m::TLS_HANDSHAKE_FAILURES, "listener" => "data").increment(1);
                        tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        metrics::counter!(m::TLS_HANDSHAKE_FAILURES, "listener" => "data").increment(1);
                        tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                        return;
                    }
                };
                metrics::counter!(m::CONNECTIONS, "listener" => "data", "protocol" => "tls").increment(1);
                let identity = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .and_then(|c| PeerIdentity::from_der(c));
                let alpn_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let info = ConnInfo::new(self.peer, self.local, true, identity);
                self.serve_io(tls, info, alpn_h2, handler, guard).await;
            }
        }
    }

    /// Serves HTTP on `io`: HTTP/2 when ALPN chose it (`alpn_h2`) or the client opens with the HTTP/2 preface,
    /// HTTP/1.1 otherwise. The connection stops counting as open (`guard`) just before its socket is
    /// dropped, so a client that sees its connection closed also sees the gateway count it closed (the
    /// count lives on another thread than the client's task when there are several workers).
    async fn serve_io<I, H, F>(self, io: I, info: ConnInfo, alpn_h2: bool, handler: H, guard: ConnGuard)
    where
        I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
        H: Fn(Arc<ConnInfo>, Request<Body>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let info = Arc::new(info);
        if alpn_h2 {
            return self.serve_h2(io, info, handler, guard).await;
        }
        let ended = h1::serve(
            io,
            Arc::clone(&info),
            Arc::clone(&self.limits),
            handler.clone(),
            self.shutdown.clone(),
            Arc::clone(&self.ready),
            guard,
        )
        .await;
        match ended {
            h1::Ended::Closed => {}
            h1::Ended::Http2 { io, read, guard } => {
                self.serve_h2(PrefixedIo::new(read, io), info, handler, guard)
                    .await;
            }
        }
    }

    /// Serves HTTP/2 on `io` until the client is done, the connection idles out or the gateway shuts down.
    async fn serve_h2<I, H, F>(self, io: I, info: Arc<ConnInfo>, handler: H, guard: ConnGuard)
    where
        I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
        H: Fn(Arc<ConnInfo>, Request<Body>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let stream_idle = self.limits.stream_idle_timeout;
        let svc = {
            let activity = Arc::clone(&activity);
            let info = Arc::clone(&info);
            service_fn(move |req: Request<Incoming>| {
                activity.in_flight.fetch_add(1, Ordering::AcqRel);
                activity.seen_request.store(true, Ordering::Release);
                let in_flight = InFlight(Arc::clone(&activity));
                // A body still to come waits at most stream_idle_timeout for each piece.
                let fut = if req.body().is_end_stream() {
                    handler(Arc::clone(&info), req.map(proxy::boxed))
                } else {
                    let req = req.map(|b| proxy::boxed(IdleBody::new(b, stream_idle, "request body")));
                    handler(Arc::clone(&info), req)
                };
                async move {
                    let resp = fut.await;
                    drop(in_flight);
                    Ok::<_, Infallible>(answer_deadline::watched(resp))
                }
            })
        };
        let builder = Arc::clone(&self.builder);
        let conn = builder.serve_connection(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let mut shutdown = self.shutdown.clone();
        let limits = Arc::clone(&self.limits);
        let mut closing = *shutdown.borrow();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            let deadline = activity.deadline(&limits);
            // Both are gated: the task wakes for every read and write of the connection, and these two
            // need polling only when they signal.
            let idle = WakeGate::new(Box::pin(match deadline {
                Some(d) => tokio::time::sleep_until(d),
                // Requests in flight: look again a little later.
                None => tokio::time::sleep(limits.idle_timeout),
            }));
            let shutdown_signal = WakeGate::new(Box::pin(signalled(&mut shutdown)));
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(peer = %info.peer, error = %e, "client connection ended with an error");
                    }
                    drop(guard);
                    return;
                }
                _ = shutdown_signal, if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = idle, if !closing => {
                    if let Some(d) = activity.deadline(&limits) && Instant::now() >= d {
                        if !activity.seen_request.load(Ordering::Acquire) {
                            // Connected but never sent a request: a slow or silent client. Close hard.
                            tracing::debug!(peer = %info.peer, "closing a connection that sent no request in time");
                            metrics::counter!(m::REFUSED, "reason" => "header_read_timeout").increment(1);
                            drop(guard);
                            return;
                        }
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// Refuses a connection over `max_connections`: a plaintext client is answered 503 naming the limit (TLS
/// clients, whose handshake cannot be answered in plain text, see the connection close), and the socket
/// lingers briefly so the answer is not lost to a reset, unless many refusals linger already.
fn refuse(stream: TcpStream, plaintext: bool, tracker: &Arc<ConnTracker>) {
    metrics::counter!(m::REFUSED, "reason" => "connection_limit").increment(1);
    tracing::debug!("refusing a client connection: max_connections are open");
    if !plaintext {
        return;
    }
    // The socket's send buffer is empty at accept: the answer fits without waiting.
    let _ = stream.try_write(REFUSAL);
    if tracker.lingering.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING_REFUSALS {
        tracker.lingering.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let tracker = Arc::clone(tracker);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 1024];
        let deadline = Instant::now() + REFUSAL_LINGER;
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            if n == 0 {
                break;
            }
        }
        tracker.lingering.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Resolves once `rx` holds `true` (or its sender is gone).
pub(crate) async fn signalled(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

//! HTTP/2 to an upstream on the `h2` crate directly: the connection task with its keep-alive, sending a
//! request (head, then the body piped under flow control), and the response body.
//!
//! hyper's HTTP/2 client puts a dispatch channel between the caller and the connection and spawns a task
//! per request to wait for its response (a task sized for hyper's largest connection future, allocated
//! and copied for every request). Here the request's own task sends on the connection's shared stream
//! state and awaits the response itself; only a request body that cannot be written at once gets a task
//! of its own. The behaviour kept from hyper: hop-by-hop headers never go out, `content-length` is set
//! from an exact body size, a body pipe resets its stream when the caller gives up, idle references let
//! the connection shut down, and a connection whose keep-alive PING goes unanswered is closed with its
//! requests failing as timeouts.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use h2::client::{Connection, SendRequest};
use h2::{Ping, PingPong, Reason, RecvStream, SendStream};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::{FailureKind, UpstreamError};
use crate::headers::{REQUEST_ID, strip_hop_by_hop};
use crate::proxy::Body;

#[cfg(test)]
mod tests;

/// hyper's HTTP/2 client defaults, kept: 2 MiB per stream and 5 MiB per connection of receive window
/// (fixed, no BDP probing: the upstream is a sidecar hop away), 16 KiB frames and header lists, 1 MiB
/// of send buffer per stream, 100 streams before the server's SETTINGS arrive.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 5 << 20;
const MAX_FRAME_SIZE: u32 = 16 << 10;
const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;
const MAX_SEND_BUFFER: usize = 1 << 20;
const INITIAL_MAX_SEND_STREAMS: usize = 100;
/// With requests in flight and nothing read for this long, the connection sends a PING...
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// ...and closes when its PONG does not come back within this.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP/2 connection, shared by the requests multiplexed on it. Dropping the last handle tells the
/// connection task to finish (h2 itself would not wake a parked connection to notice).
pub(crate) struct H2Conn {
    send: SendRequest<Bytes>,
    state: Arc<ConnState>,
    _alive: oneshot::Sender<()>,
}

/// What the connection task and the requests on it share.
struct ConnState {
    /// The connection task has ended.
    closed: AtomicBool,
    /// The keep-alive PING went unanswered (requests that fail on this connection timed out).
    timed_out: AtomicBool,
    /// Streams sent and not yet finished (keep-alive pings only while some are).
    open_streams: AtomicUsize,
    /// A request has been sent on the connection (see [`index_request_id_name`]).
    sent_any: AtomicBool,
    /// When the connection was made, and nanoseconds from then to the last frame read for a request.
    born: Instant,
    last_read: AtomicU64,
}

impl ConnState {
    fn touch(&self) {
        let ns = Instant::now().saturating_duration_since(self.born).as_nanos();
        self.last_read
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn idle_for(&self, now: Instant) -> Duration {
        let last = self.born + Duration::from_nanos(self.last_read.load(Ordering::Relaxed));
        now.saturating_duration_since(last)
    }
}

impl H2Conn {
    /// Performs the HTTP/2 handshake on `io` and spawns the connection task.
    pub(crate) async fn handshake<T>(io: T) -> Result<H2Conn, h2::Error>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (send, mut conn) = h2::client::Builder::new()
            .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE)
            .max_header_list_size(MAX_HEADER_LIST_SIZE)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .enable_push(false)
            .handshake::<_, Bytes>(io)
            .await?;
        let state = Arc::new(ConnState {
            closed: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            open_streams: AtomicUsize::new(0),
            sent_any: AtomicBool::new(false),
            born: Instant::now(),
            last_read: AtomicU64::new(0),
        });
        let (alive, dropped) = oneshot::channel();
        let ping = conn.ping_pong();
        tokio::spawn(drive(conn, ping, Arc::clone(&state), dropped));
        Ok(H2Conn {
            send,
            state,
            _alive: alive,
        })
    }

    /// False once the connection has ended or cannot open streams (GOAWAY received, fatal error).
    pub(crate) fn is_usable(&self) -> bool {
        !self.state.closed.load(Ordering::Acquire)
    }

    /// Sends `req` on a new stream. When the connection takes a stream at once (the common case) the head is
    /// handed to h2 before the future is made, and the future holds only the stream (see `Pool::send`).
    pub(crate) fn send(
        &self,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<H2Body>, SendFailure>> + Send + use<> {
        let mut tx = self.send.clone();
        let conn = Streams {
            state: Arc::clone(&self.state),
        };
        // A first look with a no-op waker: `Pending` only means the wait below polls again with a real one.
        // (A fresh handle is ready unless the connection failed: h2 queues streams over the upstream's
        // concurrent-stream limit itself. The wait keeps to its API all the same.)
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match tx.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => Either::Left(conn.open(tx, req)),
            Poll::Ready(Err(e)) => Either::Right(Either::Left(std::future::ready(Err(conn.unsent(req, e))))),
            // Boxed: rare (above).
            Poll::Pending => Either::Right(Either::Right(Box::pin(async move {
                if let Err(e) = poll_fn(|cx| tx.poll_ready(cx)).await {
                    return Err(conn.unsent(req, e));
                }
                conn.open(tx, req).await
            }))),
        }
    }
}

/// What a request needs of its connection to open a stream and follow it: the shared state, not the
/// connection (its future must not borrow the pool).
struct Streams {
    state: Arc<ConnState>,
}

impl Streams {
    /// The connection could not take `req`: it is done for new streams, and later requests should not try it.
    fn unsent(&self, req: Request<Body>, e: h2::Error) -> SendFailure {
        self.state.closed.store(true, Ordering::Release);
        SendFailure::Unsent(Box::new(req), e)
    }

    /// Opens the stream for `req` on `tx` (ready) and sends the head now; the future pipes the body and
    /// awaits the response.
    fn open(
        self,
        mut tx: SendRequest<Bytes>,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<H2Body>, SendFailure>> + Send + 'static {
        let state = self.state;
        let (parts, body) = req.into_parts();
        let mut head = Request::from_parts(parts, ());
        prepare_head(&mut head, &body);
        if !state.sent_any.swap(true, Ordering::Relaxed) {
            index_request_id_name(head.headers_mut());
        }
        let eos = body.is_end_stream();
        let (response, stream) = match tx.send_request(head, eos) {
            Ok(pair) => pair,
            Err(e) => {
                if e.is_go_away() || e.is_io() {
                    state.closed.store(true, Ordering::Release);
                }
                let kind = classify(&state, &e);
                return Either::Left(std::future::ready(Err(SendFailure::Failed(kind, e))));
            }
        };
        // Only the streams keep the connection busy from here on: a held `SendRequest` would stop it from
        // shutting down once the pool lets go of it.
        drop(tx);
        let open = OpenStream::new(&state);
        Either::Right(async move {
            let cancel = if eos {
                drop((body, stream));
                None
            } else {
                pipe(body, stream).await
            };
            match response.await {
                Ok(resp) => {
                    state.touch();
                    if let Some(c) = cancel {
                        c.disarm();
                    }
                    let length = content_length(resp.headers());
                    Ok(resp.map(|recv| H2Body {
                        recv,
                        data_done: false,
                        remaining: length,
                        open: Some(open),
                    }))
                }
                Err(e) => Err(SendFailure::Failed(classify(&state, &e), e)),
            }
        })
    }
}

/// The failure kind of an error of a stream on the connection with `state`.
fn classify(state: &ConnState, e: &h2::Error) -> FailureKind {
    if state.timed_out.load(Ordering::Acquire) {
        return FailureKind::Timeout;
    }
    super::error::classify_h2_error(e)
}

/// Why [`H2Conn::send`] produced no response.
pub(crate) enum SendFailure {
    /// The connection could not take the request, which is handed back unsent.
    Unsent(Box<Request<Body>>, h2::Error),
    /// The request was (at least partly) sent and then failed.
    Failed(FailureKind, h2::Error),
}

impl SendFailure {
    /// The error for an upstream and endpoint.
    pub(crate) fn into_error(self, upstream: &str, addr: std::net::SocketAddr) -> UpstreamError {
        let (kind, e) = match self {
            SendFailure::Unsent(_, e) => (FailureKind::RefusedStream, e),
            SendFailure::Failed(kind, e) => (kind, e),
        };
        let detail = match kind {
            FailureKind::RefusedStream => "the upstream refused the stream before processing it",
            FailureKind::Timeout => "the upstream did not answer the HTTP/2 keep-alive PING in time",
            _ => "the stream was reset or the connection closed before a response arrived",
        };
        UpstreamError::new(kind, upstream, detail)
            .with_endpoint(addr)
            .with_source(e)
    }
}

/// hyper's request rules for HTTP/2: connection-specific headers never go out, and a body of known exact
/// size declares it (unless it is empty on a method without payload semantics).
fn prepare_head(head: &mut Request<()>, body: &Body) {
    strip_hop_by_hop(head.headers_mut());
    if let Some(len) = body.size_hint().exact()
        && (len != 0
            || !matches!(
                *head.method(),
                Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
            ))
        && !head.headers().contains_key(CONTENT_LENGTH)
    {
        head.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
}

/// Lets the `x-request-id` of a connection's first request enter its HPACK table, so that the name is there
/// to be referred to. Request ids are otherwise sent never-indexed (a value unique to one request would only
/// evict useful entries), and `h2` then writes a never-indexed literal that reuses the name in the table:
/// without it every request spells the name out and the upstream decodes and allocates it again. Once only:
/// `h2` compares a never-indexed value with every entry of that name, so more seeds would cost each request
/// more. Should other headers push the entry out, the name is spelled out again, as before.
fn index_request_id_name(headers: &mut HeaderMap) {
    if let Some(v) = headers.get_mut(&REQUEST_ID) {
        v.set_sensitive(false);
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// Drives the connection until it ends, pinging while requests wait and nothing has been read for
/// [`KEEP_ALIVE_INTERVAL`]. When the pool drops its handle (`dropped` resolves), the connection is polled
/// on so that it notices it has no users left and shuts down after its last stream.
async fn drive<T>(
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
    state.closed.store(true, Ordering::Release);
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

/// Counts a stream as open on its connection until dropped.
struct OpenStream(Arc<ConnState>);

impl OpenStream {
    fn new(state: &Arc<ConnState>) -> OpenStream {
        state.open_streams.fetch_add(1, Ordering::AcqRel);
        OpenStream(Arc::clone(state))
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes `body` to `stream`. Returns `None` when it was all written (or failed) at once; otherwise the
/// rest is written by a task, and the returned guard resets the stream when dropped armed.
async fn pipe(body: Body, stream: SendStream<Bytes>) -> Option<CancelOnDrop> {
    let mut pipe = Pipe {
        body,
        stream,
        cancel: None,
    };
    // Most bodies fit the stream's window and go in this one poll, without a task.
    if poll_fn(|cx| Poll::Ready(Pin::new(&mut pipe).poll(cx).is_ready())).await {
        return None;
    }
    let (tx, rx) = oneshot::channel();
    pipe.cancel = Some(rx);
    tokio::spawn(pipe);
    Some(CancelOnDrop(Some(tx)))
}

/// Tells a spawned body pipe to reset its stream (CANCEL) when dropped before [`CancelOnDrop::disarm`].
struct CancelOnDrop(Option<oneshot::Sender<()>>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// A request body being written to its stream under HTTP/2 flow control (hyper's `PipeToSendStream`).
struct Pipe {
    body: Body,
    stream: SendStream<Bytes>,
    cancel: Option<oneshot::Receiver<()>>,
}

impl Future for Pipe {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if let Some(rx) = &mut this.cancel {
            match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(())) => {
                    tracing::debug!("request abandoned before its response: resetting the upstream stream");
                    this.stream.send_reset(Reason::CANCEL);
                    return Poll::Ready(());
                }
                // Disarmed: the response arrived; the body goes on.
                Poll::Ready(Err(_)) => this.cancel = None,
                Poll::Pending => {}
            }
        }
        match this.write(cx) {
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "writing the request body upstream failed");
                Poll::Ready(())
            }
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Pipe {
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), crate::proxy::BoxError>> {
        loop {
            // Ask for some window before reading the next chunk; h2 buffers the chunk beyond it, so at
            // most one chunk waits in memory while the upstream reads slowly.
            self.stream.reserve_capacity(1);
            if self.stream.capacity() == 0 {
                loop {
                    match ready!(self.stream.poll_capacity(cx)) {
                        Some(Ok(0)) => {}
                        Some(Ok(_)) => break,
                        Some(Err(e)) => return Poll::Ready(Err(e.into())),
                        None => {
                            return Poll::Ready(Err(
                                "the upstream stream closed while the request body was being sent".into(),
                            ));
                        }
                    }
                }
            } else if let Poll::Ready(reason) = self.stream.poll_reset(cx) {
                let reason = reason?;
                return Poll::Ready(Err(h2::Error::from(reason).into()));
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let eos = self.body.is_end_stream();
                        self.stream.send_data(data, eos)?;
                        if eos {
                            return Poll::Ready(Ok(()));
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.stream.reserve_capacity(0);
                            self.stream.send_trailers(trailers)?;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
                Some(Err(e)) => {
                    // The caller's body failed (too large, caller gone): the upstream must not take a
                    // truncated request for a whole one.
                    self.stream.send_reset(Reason::INTERNAL_ERROR);
                    return Poll::Ready(Err(e));
                }
                None => {
                    self.stream.send_data(Bytes::new(), true)?;
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

/// The body of an HTTP/2 response: data (its window released as it is read, as hyper does), then
/// trailers.
pub(crate) struct H2Body {
    recv: RecvStream,
    data_done: bool,
    /// Bytes still to come, from `content-length`.
    remaining: Option<u64>,
    /// Released when the body ends or is dropped.
    open: Option<OpenStream>,
}

impl H2Body {
    fn finish(&mut self) {
        self.open = None;
    }
}

impl HttpBody for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    // Reads keep pings away while a body streams in. The frame that ends the body needs no
                    // clock read: the stream is over, and the response head touched the connection already
                    // (at worst a ping goes out a little earlier than it had to).
                    if let Some(open) = &this.open
                        && !this.recv.is_end_stream()
                    {
                        open.0.touch();
                    }
                    if let Some(r) = &mut this.remaining {
                        *r = r.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.finish();
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.data_done = true,
            }
        }
        let trailers = ready!(this.recv.poll_trailers(cx));
        this.finish();
        match trailers {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

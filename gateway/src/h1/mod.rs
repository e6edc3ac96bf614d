//! The server side of an HTTP/1.1 client connection, written for the gateway's one job: read a request head
//! into an [`http::Request`], hand it to the pipeline, write the response back, and do it again.
//!
//! Why not hyper's HTTP/1.1 server: it cost ≈ 12,000 instructions per proxied request (callgrind, its
//! dispatcher, header parsing into its own structures and then a header map, its write queue), a quarter of
//! the gateway's whole cost per request and the largest item. This parses with httparse straight into the
//! request the pipeline reads (header values are slices of the bytes read), writes each response head and a
//! small body with one system call, and keeps the connection's limits in one place: the head must arrive
//! within `header_read_timeout` (slowloris), be at most `max_header_bytes` with at most `max_headers`
//! headers (431 beyond), and an idle connection closes after `idle_timeout`. A head is parsed once its end
//! has arrived (a head dribbled a byte per read costs no more than one sent whole); a request body or
//! response body that moves no bytes for `stream_idle_timeout` ends the exchange; the listener's write
//! timeout (`write_deadline.rs`) cuts a client that does not read.
//!
//! A gateway that is leaving (not ready: SIGTERM received, the drain not begun) answers with `Connection: close`
//! and closes after the response: a client learns in an answer that the connection ends, where no request of
//! its own can be on its way, and opens a new one (through its Service, to a pod that stays). Closing the
//! connections idle at the drain instead races the client, whose next request may already be on the wire: it
//! is lost with the connection, and the client, which cannot know whether it was served, reports a failure.
//!
//! Requests are served one after another (pipelined requests wait in the read buffer). A body that did not
//! arrive with its head streams to the pipeline while the response is awaited; a connection whose request
//! body was not read to its end is closed after the response, since where the next request starts is then
//! unknown. Chunks of a request body that arrive together go to the pipeline as one piece, so a body
//! sent as one-byte chunks costs the upstream no more writes than the same bytes in one chunk. A client that opens with the HTTP/2 preface (h2c by prior knowledge) is handed back to the
//! listener with the bytes read, to be served as HTTP/2.

pub mod incoming;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::connection::{ConnInfo, ConnLimits};
use crate::error::{ErrorKind, GatewayError};
use crate::metrics as m;
use crate::proxy::{self, Body};
use crate::wake_gate::WakeGate;
use incoming::Event;
use infergate_http1::Error as WireError;
use infergate_http1::body::{Decoded, Decoder};
use infergate_http1::head::{self, Framing, RequestHead, RequestParser, ResponseFraming};
use infergate_http1::out;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Room kept free in the read buffer before each read.
const READ_RESERVE: usize = 8 << 10;

/// How long a closing connection keeps reading (and dropping) what the client still sends, so that the
/// close does not reset the connection before the client has read the response.
const LINGER: Duration = Duration::from_secs(1);

/// The most a closing connection reads and drops while lingering.
const LINGER_BYTES: usize = 256 << 10;

/// The largest piece of request body gathered from chunks that arrived together.
const COALESCE_BYTES: usize = 64 << 10;

/// How an HTTP/1.1 connection ended.
pub enum Ended<I, G> {
    /// It is closed.
    Closed,
    /// The client opened with the HTTP/2 preface: serve `io` as HTTP/2, starting with the bytes `read`.
    Http2 {
        /// The connection.
        io: I,
        /// What was read from it so far (the preface, and perhaps more).
        read: Bytes,
        /// The guard passed in, still held.
        guard: G,
    },
}

/// Serves HTTP/1.1 requests on `io` with `handler` until the client closes, the connection idles out, a
/// request asks to close, `ready` is false after a response (the gateway is leaving: the response says
/// `Connection: close`), or `shutdown` turns true (the request in flight is answered first). `guard` is
/// dropped just before the socket is closed, so that whoever it counts for sees the connection gone no
/// later than the client does.
pub async fn serve<I, G, H, F>(
    io: I,
    info: Arc<ConnInfo>,
    limits: Arc<ConnLimits>,
    handler: H,
    shutdown: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
    guard: G,
) -> Ended<I, G>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Arc<ConnInfo>, Request<Body>) -> F,
    F: Future<Output = Response<Body>>,
{
    let mut conn = Connection {
        io,
        read: BytesMut::with_capacity(READ_RESERVE),
        write: Vec::with_capacity(READ_RESERVE),
        timer: WakeGate::new(Box::pin(tokio::time::sleep(limits.header_read_timeout))),
        shutdown_signal: WakeGate::new(shutdown_signal(shutdown.clone())),
        opened: Instant::now(),
        parser: RequestParser::new(limits.max_headers, limits.max_header_bytes),
        limits,
        shutdown,
        ready,
        guard: Some(guard),
    };
    let mut first = true;
    loop {
        let head = match conn.next_head(first).await {
            Next::Head(head) => head,
            Next::Close => break,
            Next::Http2 => {
                if let Some(guard) = conn.guard.take() {
                    return Ended::Http2 {
                        io: conn.io,
                        read: conn.read.freeze(),
                        guard,
                    };
                }
                break;
            }
            Next::Refuse(e) => {
                tracing::debug!(peer = %info.peer, error = %e, "refusing a malformed request head");
                conn.refuse(&e).await;
                break;
            }
        };
        first = false;
        if !conn.exchange(head, &info, &handler).await {
            break;
        }
    }
    // The guard goes first, then the socket (with `conn`).
    conn.guard = None;
    Ended::Closed
}

/// Resolves when `shutdown` turns true, or its sender is dropped.
fn shutdown_signal(mut shutdown: watch::Receiver<bool>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move { crate::listener::signalled(&mut shutdown).await })
}

/// What waiting for the next request head gave. Not boxed: it is made once per request and taken apart at
/// once, and a box would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Next {
    Head(RequestHead),
    Close,
    Http2,
    Refuse(WireError),
}

/// How feeding a request body to the pipeline went, one step.
enum Feed {
    /// A piece was passed on; there is more.
    More,
    /// The body ended and the end was passed on.
    Finished,
    /// The pipeline dropped the body (it answered without reading it all).
    Abandoned,
    /// The body is broken or cut off; the pipeline was told.
    Failed,
}

struct Connection<I, G> {
    io: I,
    /// Bytes read and not yet consumed: the next head, or body bytes.
    read: BytesMut,
    /// Response bytes not yet written.
    write: Vec<u8>,
    /// The head-read and idle deadline, reset for each wait. It and `shutdown_signal` are gated: the wait
    /// for a head polls them beside every read, and they are ready once in a connection's life.
    timer: WakeGate<Pin<Box<Sleep>>>,
    /// Resolves when `shutdown` turns true (or its sender is gone).
    shutdown_signal: WakeGate<Pin<Box<dyn Future<Output = ()> + Send>>>,
    opened: Instant,
    limits: Arc<ConnLimits>,
    shutdown: watch::Receiver<bool>,
    /// The gateway's readiness: false while it is leaving, when each response closes its connection.
    ready: Arc<AtomicBool>,
    /// The request-head parser, kept across reads and requests.
    parser: RequestParser,
    /// Dropped just before the socket closes (see [`serve`]).
    guard: Option<G>,
}

impl<I: AsyncRead + AsyncWrite + Unpin, G> Connection<I, G> {
    /// Waits for the next request head. The first must be complete `header_read_timeout` after the
    /// connection opened (a silent or slow client is cut off); later ones may wait `idle_timeout` for their
    /// first byte, then have `header_read_timeout` for the rest.
    async fn next_head(&mut self, first: bool) -> Next {
        let limits = Arc::clone(&self.limits);
        let mut head_deadline = if first {
            Some(self.opened + limits.header_read_timeout)
        } else if !self.read.is_empty() {
            Some(Instant::now() + limits.header_read_timeout)
        } else {
            None
        };
        let idle_deadline = Instant::now() + limits.idle_timeout;
        loop {
            if !self.read.is_empty() {
                if first && H2_PREFACE.starts_with(&self.read[..self.read.len().min(H2_PREFACE.len())]) {
                    if self.read.len() >= H2_PREFACE.len() {
                        return Next::Http2;
                    }
                } else {
                    match self.parser.parse(&mut self.read) {
                        Ok(Some(head)) => return Next::Head(head),
                        Ok(None) => {}
                        Err(e) => return Next::Refuse(e),
                    }
                }
            }
            let idle = self.read.is_empty();
            if idle && *self.shutdown.borrow() {
                return Next::Close;
            }
            // The timer is only ever moved earlier: a later deadline (the next request's idle limit) is
            // taken up when the timer fires early, so a busy connection does not re-arm it per request.
            let deadline = head_deadline.unwrap_or(idle_deadline);
            if deadline < self.timer.get().deadline() {
                self.timer.get_mut().as_mut().reset(deadline);
            }
            self.read.reserve(READ_RESERVE);
            let read = tokio::select! {
                biased;
                r = self.io.read_buf(&mut self.read) => r,
                () = &mut self.timer => {
                    if Instant::now() >= deadline {
                        if head_deadline.is_some() {
                            tracing::debug!("closing a connection whose request head did not arrive in time");
                            metrics::counter!(m::REFUSED, "reason" => "header_read_timeout").increment(1);
                        }
                        return Next::Close;
                    }
                    self.timer.get_mut().as_mut().reset(deadline);
                    continue;
                }
                // Resolved once only: the connection closes.
                () = &mut self.shutdown_signal, if idle => return Next::Close,
            };
            match read {
                Ok(0) | Err(_) => return Next::Close,
                Ok(_) => {
                    head_deadline.get_or_insert_with(|| Instant::now() + limits.header_read_timeout);
                }
            }
        }
    }

    /// Serves one request; whether the connection may carry another.
    async fn exchange<H, F>(&mut self, head: RequestHead, info: &Arc<ConnInfo>, handler: &H) -> bool
    where
        H: Fn(Arc<ConnInfo>, Request<Body>) -> F,
        F: Future<Output = Response<Body>>,
    {
        let RequestHead {
            request,
            framing,
            keep_alive,
            expect_continue,
        } = head;
        let head_request = request.method() == Method::HEAD;
        let http10 = request.version() == Version::HTTP_10;
        let (body, mut feeding) = match framing {
            Framing::Empty => (proxy::empty(), None),
            Framing::Length(n) if (self.read.len() as u64) >= n => {
                // The whole body came with the head (n fits: it is at most the buffer's length).
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                (proxy::full(self.read.split_to(n).freeze()), None)
            }
            Framing::Length(n) => {
                let (tx, rx) = incoming::channel(Some(n));
                (proxy::boxed(rx), Some((tx, Decoder::length(n))))
            }
            Framing::Chunked => {
                let (tx, rx) = incoming::channel(None);
                (proxy::boxed(rx), Some((tx, Decoder::chunked())))
            }
        };
        // A body over the listener's limit is refused (413) without being asked for.
        let wanted = !matches!(framing, Framing::Length(n) if n > self.limits.max_request_body);
        if expect_continue
            && wanted
            && feeding.is_some()
            && self.write_now(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return false;
        }
        let mut response = std::pin::pin!(handler(Arc::clone(info), request.map(|()| body)));
        let response = match &mut feeding {
            None => response.await,
            Some((tx, decoder)) => {
                let mut open = true;
                loop {
                    if !open {
                        break response.await;
                    }
                    tokio::select! {
                        biased;
                        r = response.as_mut() => break r,
                        step = feed_once(&mut self.io, &mut self.read, decoder, tx, &self.limits) => {
                            open = matches!(step, Feed::More);
                        }
                    }
                }
            }
        };
        let body_complete = feeding.as_ref().is_none_or(|(_, decoder)| decoder.is_done());
        let leaving = !self.ready.load(Ordering::Acquire) || *self.shutdown.borrow();
        let keep_alive = keep_alive && body_complete && !leaving;
        match self
            .write_response(response, head_request, http10, keep_alive)
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                self.close(!body_complete).await;
                false
            }
            Err(_) => false,
        }
    }

    /// Answers a head that could not be served, and closes.
    async fn refuse(&mut self, e: &WireError) {
        let (kind, reason) = match e {
            WireError::HeadTooLarge(_) => (ErrorKind::HeadersTooLarge, "head_too_large"),
            WireError::TooManyHeaders(_) => (ErrorKind::HeadersTooLarge, "too_many_headers"),
            WireError::UnsupportedCoding(_) => (ErrorKind::Unsupported, "unsupported_transfer_coding"),
            _ => (ErrorKind::BadRequest, "malformed_head"),
        };
        metrics::counter!(m::REFUSED, "reason" => reason).increment(1);
        let response = GatewayError::new(kind, refusal_message(e)).into_response(false);
        if self.write_response(response, false, false, false).await.is_ok() {
            self.close(true).await;
        }
    }

    /// Writes `response`; whether the connection stays usable (`keep_alive` and the body went out whole).
    async fn write_response(
        &mut self,
        response: Response<Body>,
        head_request: bool,
        http10: bool,
        keep_alive: bool,
    ) -> io::Result<bool> {
        let (parts, mut body) = response.into_parts();
        let status = parts.status;
        let bodyless = head_request
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| head::parse_length(v.as_bytes()));
        let mut keep_alive = keep_alive;
        let framing = if bodyless {
            ResponseFraming::None
        } else if let Some(n) = declared.or_else(|| body.size_hint().exact()) {
            ResponseFraming::Length(n)
        } else if !http10 {
            ResponseFraming::Chunked
        } else {
            keep_alive = false;
            ResponseFraming::UntilClose
        };
        head::write_head(
            &mut self.write,
            status,
            &parts.headers,
            framing,
            keep_alive,
            http10,
        );
        if bodyless {
            self.flush().await?;
            return Ok(keep_alive);
        }
        let mut written = 0u64;
        let mut trailers = None;
        loop {
            // Gather what the body has ready; write once it has nothing more for now.
            let next = match std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await
            {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    self.flush().await?;
                    match tokio::time::timeout(self.limits.stream_idle_timeout, body.frame()).await {
                        Ok(frame) => frame,
                        Err(_) => {
                            metrics::counter!(m::REFUSED, "reason" => "stream_idle_timeout").increment(1);
                            tracing::debug!(
                                "the response body moved no bytes for stream_idle_timeout; closing"
                            );
                            return Ok(false);
                        }
                    }
                }
            };
            let frame = match next {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the response body failed while it was being written");
                    self.flush().await?;
                    return Ok(false);
                }
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    trailers = frame.into_trailers().ok();
                    continue;
                }
            };
            if let ResponseFraming::Length(n) = framing
                && written + data.len() as u64 > n
            {
                tracing::debug!(
                    declared = n,
                    "the response body is longer than its content-length; closing"
                );
                let fits = usize::try_from(n - written).unwrap_or(usize::MAX);
                self.put_data(data.slice(..fits), framing).await?;
                self.flush().await?;
                return Ok(false);
            }
            written += data.len() as u64;
            self.put_data(data, framing).await?;
        }
        match framing {
            ResponseFraming::Chunked => {
                self.write.extend_from_slice(b"0\r\n");
                write_trailers(&mut self.write, trailers.as_ref());
                self.write.extend_from_slice(b"\r\n");
            }
            ResponseFraming::Length(n) if written != n => {
                tracing::debug!(
                    declared = n,
                    written,
                    "the response body is shorter than its content-length; closing"
                );
                self.flush().await?;
                return Ok(false);
            }
            ResponseFraming::UntilClose => keep_alive = false,
            _ => {}
        }
        self.flush().await?;
        Ok(keep_alive)
    }

    /// Adds one piece of response body, framed; large pieces are written without a copy.
    async fn put_data(&mut self, data: Bytes, framing: ResponseFraming) -> io::Result<()> {
        out::put_data(
            &mut self.io,
            &mut self.write,
            data,
            framing == ResponseFraming::Chunked,
        )
        .await
    }

    /// Writes out the gathered response bytes.
    async fn flush(&mut self) -> io::Result<()> {
        out::flush(&mut self.io, &mut self.write).await
    }

    /// Writes `bytes` (and what was gathered before them) now.
    async fn write_now(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write.extend_from_slice(bytes);
        self.flush().await
    }

    /// Closes the connection after its last response. With `unread` (the client may still be sending a
    /// request the gateway did not read), the gateway first half-closes and reads what arrives for a
    /// moment: closing a socket with unread bytes resets it, and the reset can destroy the response before
    /// the client read it.
    async fn close(&mut self, unread: bool) {
        self.guard = None;
        let _ = self.io.shutdown().await;
        if !unread {
            return;
        }
        let deadline = Instant::now() + LINGER;
        let mut dropped = 0;
        let mut sink = [0u8; 4096];
        while dropped < LINGER_BYTES {
            match tokio::time::timeout_at(deadline, self.io.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => dropped += n,
                _ => return,
            }
        }
    }
}

/// Passes the next piece of a request body from the connection to the pipeline: waits until the pipeline
/// can take it, decodes it from `read`, reading from `io` when the buffer runs out. Pieces already in the
/// buffer (chunks that arrived together) go as one, up to [`COALESCE_BYTES`]. A client that sends nothing
/// for `stream_idle_timeout` while the body is awaited fails the body. Cancel-safe (it is raced against the
/// response): a piece is taken from the buffer only once it can be sent.
async fn feed_once<I: AsyncRead + Unpin>(
    io: &mut I,
    read: &mut BytesMut,
    decoder: &mut Decoder,
    tx: &incoming::Sender,
    limits: &ConnLimits,
) -> Feed {
    let Ok(permit) = tx.reserve().await else {
        return Feed::Abandoned;
    };
    loop {
        match decoder.decode(read, limits.max_header_bytes) {
            Ok(Decoded::Data(data)) => {
                permit.send(Event::Data(gather(data, read, decoder, limits.max_header_bytes)));
                return Feed::More;
            }
            Ok(Decoded::End) => {
                permit.send(Event::End);
                return Feed::Finished;
            }
            Err(e) => {
                permit.send(Event::Failed(e));
                return Feed::Failed;
            }
            Ok(Decoded::NeedMore) => {
                read.reserve(READ_RESERVE);
                match tokio::time::timeout(limits.stream_idle_timeout, io.read_buf(read)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => {
                        permit.send(Event::Failed(WireError::Truncated));
                        return Feed::Failed;
                    }
                    Err(_) => {
                        metrics::counter!(m::REFUSED, "reason" => "stream_idle_timeout").increment(1);
                        tracing::debug!("the request body moved no bytes for stream_idle_timeout");
                        permit.send(Event::Stalled(limits.stream_idle_timeout));
                        return Feed::Failed;
                    }
                }
            }
        }
    }
}

/// `first` and the body pieces that follow it in `read` now, as one piece of at most [`COALESCE_BYTES`]
/// (beyond `first`). The end of the body, an error or a piece still to arrive is left for the next call.
fn gather(first: Bytes, read: &mut BytesMut, decoder: &mut Decoder, max_trailer_bytes: usize) -> Bytes {
    if read.is_empty() || decoder.is_done() {
        return first;
    }
    let mut joined: Option<BytesMut> = None;
    while joined.as_ref().map_or(first.len(), BytesMut::len) < COALESCE_BYTES {
        // Only whole pieces already in the buffer: `NeedMore`, `End` and errors are found again next time
        // (the decoder does not move past them).
        let before = read.len();
        match decoder.decode(read, max_trailer_bytes) {
            Ok(Decoded::Data(more)) => {
                joined
                    .get_or_insert_with(|| {
                        let mut j = BytesMut::with_capacity(first.len() + more.len() + read.len());
                        j.extend_from_slice(&first);
                        j
                    })
                    .extend_from_slice(&more);
            }
            _ => {
                debug_assert!(read.len() <= before);
                break;
            }
        }
    }
    joined.map_or(first, BytesMut::freeze)
}

/// What a client whose request head is refused reads: the problem and the fix.
fn refusal_message(e: &WireError) -> String {
    match e {
        WireError::HeadTooLarge(limit) => format!(
            "the request head is larger than this listener's max_header_bytes ({limit} bytes); send fewer or smaller headers"
        ),
        WireError::TooManyHeaders(limit) => format!(
            "the request has more headers than this listener's max_headers ({limit}); send fewer headers"
        ),
        WireError::UnsupportedCoding(coding) => format!(
            "transfer-encoding '{coding}' is not supported; send the body with 'transfer-encoding: chunked' or a content-length"
        ),
        WireError::MalformedHead(what) => format!("malformed HTTP/1.1 request: {what}"),
        other => format!("malformed HTTP/1.1 request: {other}"),
    }
}

/// Writes `trailers` as chunked-body trailer lines.
fn write_trailers(out: &mut Vec<u8>, trailers: Option<&HeaderMap>) {
    for (name, value) in trailers.into_iter().flatten() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

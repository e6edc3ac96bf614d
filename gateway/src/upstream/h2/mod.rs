//! HTTP/2 to an upstream on the `h2` crate: the handshake, sending a request (head, then the body piped under
//! flow control), and the response body; the connection task with its keep-alive lives in `conn.rs`.
//!
//! The `h2` crate owns frames, HPACK, flow control and the stream state machines: it is fuzzed and kept up
//! against the protocol's known attacks (CONTINUATION floods, reset floods, header-list bombs, small-frame
//! floods), which matters because `h2-tls` upstreams may be remote and not trusted. Here sit only the
//! limits we set on it (below) and the request path's shape: a request's own task opens its stream and
//! awaits the response itself (no dispatch channel, no task per request); only a request body that cannot be
//! written at once gets a task of its own.
//!
//! Behaviour kept from the clients before: hop-by-hop headers never go out, `content-length` is set from an
//! exact body size, an abandoned request or response resets its stream (CANCEL), a failed request body
//! resets it (INTERNAL_ERROR) so no truncated request passes for a whole one, streams the upstream refused or
//! left out of a graceful GOAWAY fail as unprocessed (safe to retry), the upstream's stream limit queues
//! requests, a peer that is not HTTP/2 fails the handshake naming the fix, the pool letting go of a
//! connection closes it after its last stream, and a connection whose keep-alive PING goes unanswered fails
//! its requests as timeouts.

mod conn;
mod error;
mod preface;
mod stream;

#[cfg(test)]
mod tests;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use h2::client::SendRequest;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use http_body::Body as HttpBody;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

pub use error::H2Error;
pub(crate) use stream::H2Body;

use super::error::{FailureKind, UpstreamError};
use crate::headers::{REQUEST_ID, strip_hop_by_hop};
use crate::proxy::Body;
use conn::{ConnState, OpenStream};
use infergate_http1::head::parse_length;
use preface::{Preface, PrefaceSeen, PrefaceWatch};

/// Our receive windows: 2 MiB per stream and 5 MiB per connection (hyper's client defaults, fixed, no BDP
/// probing: the upstream is a sidecar hop away). h2 gives window back as the body is read.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 5 << 20;
/// The largest frame we accept (the protocol's default).
const MAX_FRAME_SIZE: u32 = 16 << 10;
/// The largest response header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE): a bigger one resets its
/// stream, and h2 bounds the CONTINUATION frames that may carry a header block by it.
const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;
/// Request body bytes h2 buffers per stream beyond what the upstream's windows let out.
const MAX_SEND_BUFFER: usize = 1 << 20;
/// Streams opened before the upstream's SETTINGS say how many it takes; after them, its
/// SETTINGS_MAX_CONCURRENT_STREAMS holds and h2 queues streams beyond it.
const INITIAL_MAX_SEND_STREAMS: usize = 100;
/// Streams h2 may reset for the upstream's protocol errors (zero-increment WINDOW_UPDATEs, malformed
/// headers, data beyond a window) before it closes the connection with ENHANCE_YOUR_CALM.
const MAX_LOCAL_ERROR_RESETS: usize = 32;
/// With requests in flight and nothing read for this long, the connection sends a PING...
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// ...and closes when its PONG does not come back within this.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP/2 connection, shared by the requests multiplexed on it. Dropping it lets the connection close
/// after its last stream.
pub(crate) struct H2Conn {
    send: SendRequest<Bytes>,
    state: Arc<ConnState>,
    _alive: oneshot::Sender<()>,
}

impl H2Conn {
    /// Performs the HTTP/2 handshake on `io` and spawns the connection task. The connection is ready once
    /// the upstream's own preface (its SETTINGS) has arrived; a peer that answers with anything else (an
    /// HTTP/1.1 server, say) fails here, so the pool reports a failed connect naming the cause.
    pub(crate) async fn handshake<T>(io: T) -> Result<H2Conn, H2Error>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let seen = PrefaceSeen::default();
        let (send, mut conn) = h2::client::Builder::new()
            .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME_SIZE)
            .max_header_list_size(MAX_HEADER_LIST_SIZE)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
            .enable_push(false)
            .handshake::<_, Bytes>(PrefaceWatch::new(io, seen.clone()))
            .await?;
        // Drive the connection here until the upstream's first frame header has been read.
        poll_fn(|cx| {
            let polled = Pin::new(&mut conn).poll(cx);
            match (seen.get(), polled) {
                (Preface::Other, _) => Poll::Ready(Err(H2Error::NotHttp2)),
                (Preface::Settings, Poll::Ready(Err(e))) => Poll::Ready(Err(e.into())),
                (Preface::Settings, Poll::Ready(Ok(()))) => Poll::Ready(Err(H2Error::ClosedInHandshake)),
                (Preface::Settings, Poll::Pending) => Poll::Ready(Ok(())),
                (Preface::Waiting, Poll::Ready(Err(e))) if e.is_io() => Poll::Ready(Err(e.into())),
                (Preface::Waiting, Poll::Ready(_)) => Poll::Ready(Err(H2Error::ClosedInHandshake)),
                (Preface::Waiting, Poll::Pending) => Poll::Pending,
            }
        })
        .await?;
        let state = Arc::new(ConnState::new());
        let (alive, dropped) = oneshot::channel();
        let ping = conn.ping_pong();
        tokio::spawn(conn::drive(conn, ping, Arc::clone(&state), dropped));
        Ok(H2Conn {
            send,
            state,
            _alive: alive,
        })
    }

    /// False once the connection has ended or cannot open streams (GOAWAY received, fatal error).
    pub(crate) fn is_usable(&self) -> bool {
        !self.state.is_closed()
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
        self.state.mark_closed();
        SendFailure::Unsent(Box::new(req), e.into())
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
                    state.mark_closed();
                }
                let kind = classify(&state, &e);
                return Either::Left(std::future::ready(Err(SendFailure::Failed(kind, e.into()))));
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
                stream::pipe(body, stream).await
            };
            match response.await {
                Ok(resp) => {
                    open.touch();
                    if let Some(c) = cancel {
                        c.disarm();
                    }
                    let length = resp
                        .headers()
                        .get(CONTENT_LENGTH)
                        .and_then(|v| parse_length(v.as_bytes()));
                    Ok(resp.map(|recv| H2Body::new(recv, length, open)))
                }
                Err(e) => {
                    if e.is_go_away() || e.is_io() {
                        state.mark_closed();
                    }
                    Err(SendFailure::Failed(classify(&state, &e), e.into()))
                }
            }
        })
    }
}

/// The failure kind of an error of a stream on the connection with `state`: refused, or left out of a
/// graceful GOAWAY, is unprocessed (safe to retry); a connection whose keep-alive PING went unanswered timed
/// out; anything else is a reset.
fn classify(state: &ConnState, e: &h2::Error) -> FailureKind {
    if state.timed_out() {
        return FailureKind::Timeout;
    }
    if e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        return FailureKind::RefusedStream;
    }
    if e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
        // A graceful GOAWAY fails only the streams above its last stream id: never processed.
        return FailureKind::RefusedStream;
    }
    FailureKind::Reset
}

/// Why [`H2Conn::send`] produced no response.
pub(crate) enum SendFailure {
    /// The connection could not take the request, which is handed back unsent.
    Unsent(Box<Request<Body>>, H2Error),
    /// The request was (at least partly) sent and then failed.
    Failed(FailureKind, H2Error),
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
/// evict useful entries), and h2 then writes a never-indexed literal that reuses the name in the table:
/// without it every request spells the name out and the upstream decodes and allocates it again. Once only:
/// h2 compares a never-indexed value with every entry of that name, so more seeds would cost each request
/// more. Should other headers push the entry out, the name is spelled out again, as before.
fn index_request_id_name(headers: &mut HeaderMap) {
    if let Some(v) = headers.get_mut(&REQUEST_ID) {
        v.set_sensitive(false);
    }
}

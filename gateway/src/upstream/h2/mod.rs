//! The gateway's own HTTP/2 client for upstream connections: multiplexed streams over one connection task,
//! written for the one job of proxying requests to a sidecar hop away.
//!
//! Why not the `h2` crate: its client cost ≈ 13,600 instructions per proxied request in the gateway
//! (callgrind: its stream store and state machines, HPACK encoding with Huffman and a searched table, frame
//! buffering through its codec), more than the gateway's whole HTTP/1.1 client, and was the largest item
//! left between the gateway and nginx (docs/benchmarks.md, ## gateway). Here a request encodes its HEADERS
//! (and a body that is ready and fits the windows) straight into the connection's write buffer under one
//! lock and waits on its stream's slot; the connection task (`driver.rs`) writes everything queued since its
//! last turn in one system call, reads, and hands the frames to the shared state (`state.rs`), which wakes the
//! streams they are for. HPACK (`hpack/`) never Huffman-codes what it sends (bytes are cheap on loopback) and
//! indexes a header's first value once, so repeated headers cost the upstream one byte each.
//!
//! What is kept from the `h2`-based client: hop-by-hop headers never go out, `content-length` is set from an
//! exact body size, an abandoned request or response resets its stream (CANCEL), a failed request body
//! resets it (INTERNAL_ERROR) so no truncated request passes for a whole one, streams the upstream refused or
//! left out of its GOAWAY fail as unprocessed (safe to retry), the upstream's stream limit queues requests,
//! the pool letting go of a connection closes it after its last stream, and a connection whose keep-alive
//! PING goes unanswered fails its requests as timeouts.

mod driver;
mod error;
mod frame;
mod hpack;
mod state;
mod stream;

#[cfg(test)]
mod tests;

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::Either;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use http_body::Body as HttpBody;
use tokio::io::{AsyncRead, AsyncWrite};

pub use error::{H2Error, Reason};
pub(crate) use stream::H2Body;

use super::error::{FailureKind, UpstreamError};
use crate::headers::{REQUEST_ID, strip_hop_by_hop};
use crate::proxy::Body;
use state::{Shared, State};
use stream::{BodyWriter, ResponseFuture};

/// Our receive windows: 2 MiB per stream and 5 MiB per connection (hyper's client defaults, fixed: the
/// upstream is a sidecar hop away). Half of a window read is given back in one WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 5 << 20;
/// The largest response header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE).
const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;
/// Our HPACK decoding table (the protocol's default; we do not announce another).
const HEADER_TABLE_SIZE: u32 = 4096;
/// With requests in flight and nothing read for this long, the connection sends a PING...
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// ...and closes when its PONG does not come back within this.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP/2 connection, as the pool holds it. Dropping it lets the connection close after its last stream.
pub(crate) struct H2Conn {
    shared: Arc<Shared>,
}

impl H2Conn {
    /// Starts a connection on `io`: the connection task sends the preface and our SETTINGS, and the
    /// connection is ready once the upstream's own preface (its SETTINGS) has arrived. A peer that answers
    /// with anything else (an HTTP/1.1 server, say) fails here, so the pool reports a failed connect, naming
    /// the cause.
    pub(crate) async fn handshake<T>(io: T) -> Result<H2Conn, H2Error>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let shared = Arc::new(Shared::new());
        tokio::spawn(driver::Driver::new(io, Arc::clone(&shared)));
        // Dropped on failure: the connection task then closes the connection.
        let conn = H2Conn { shared };
        poll_fn(|cx| {
            let mut st = conn.shared.lock();
            if let Some(e) = &st.failed {
                return Poll::Ready(Err(e.clone()));
            }
            if st.preface_received() {
                return Poll::Ready(Ok(()));
            }
            st.preface_waiter = Some(cx.waker().clone());
            Poll::Pending
        })
        .await?;
        Ok(conn)
    }

    /// False once the connection has ended or takes no new streams (GOAWAY received, failed).
    pub(crate) fn is_usable(&self) -> bool {
        !self.shared.is_closed()
    }

    /// Sends `req` on a new stream. When the connection takes a stream at once (the common case) the head,
    /// and a body that is ready and fits the windows, are queued before the future is made, and the future
    /// holds only the stream (see `Pool::send`).
    pub(crate) fn send(
        &self,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<H2Body>, SendFailure>> + Send + use<> {
        let shared = Arc::clone(&self.shared);
        match open(&shared, req, None) {
            Ok(id) => Either::Left(ResponseFuture::new(shared, id)),
            Err(Opening::Refused(req, e)) => {
                Either::Right(Either::Left(std::future::ready(Err(SendFailure::Unsent(req, e)))))
            }
            // Boxed: rare (the upstream's stream limit is reached).
            Err(Opening::NoSlot(req)) => Either::Right(Either::Right(Box::pin(wait_and_open(shared, req)))),
        }
    }
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.pool_gone = true;
        st.wake_driver();
    }
}

/// Why a stream could not open now.
enum Opening {
    /// The connection takes no new streams; the request comes back unsent.
    Refused(Box<Request<Body>>, H2Error),
    /// The upstream's stream limit is reached; `waker` (if given) is woken when a stream ends.
    NoSlot(Box<Request<Body>>),
}

/// Opens a stream for `req`: HEADERS queued, and the body queued too when it is ready and fits the windows;
/// a body that is not gets a task that writes it under flow control.
fn open(shared: &Arc<Shared>, req: Request<Body>, waker: Option<&Waker>) -> Result<u32, Opening> {
    let (mut parts, mut body) = req.into_parts();
    let mut st = shared.lock();
    if let Some(e) = st.refuses_streams() {
        drop(st);
        shared.mark_closed();
        return Err(Opening::Refused(Box::new(Request::from_parts(parts, body)), e));
    }
    if !st.has_stream_slot(waker) {
        return Err(Opening::NoSlot(Box::new(Request::from_parts(parts, body))));
    }
    prepare_headers(&mut parts.headers, &parts.method, &body);
    if !st.sent_any {
        index_request_id_name(&mut parts.headers);
    }
    let end_stream = body.is_end_stream();
    let id = open_stream(&mut st, &parts, end_stream);
    drop(st);
    drop(parts);
    if end_stream {
        return Ok(id);
    }
    // Most bodies are whole already (buffered for replay, or small): one look, with no waker to register, and
    // they go out with the head. Otherwise, or when the windows are short, a task writes the rest.
    let mut cx = Context::from_waker(Waker::noop());
    let pending = match std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                // Trailers without data: they end the request.
                if let Ok(trailers) = frame.into_trailers() {
                    shared.lock().send_trailers(id, &trailers);
                    return Ok(id);
                }
                bytes::Bytes::new()
            }
        },
        Poll::Ready(None) => {
            shared.lock().send_data(id, &[], true);
            return Ok(id);
        }
        Poll::Ready(Some(Err(_))) => {
            shared.lock().reset(id, Reason::INTERNAL_ERROR);
            return Ok(id);
        }
        Poll::Pending => bytes::Bytes::new(),
    };
    if body.is_end_stream() {
        let mut st = shared.lock();
        let fits = st
            .streams
            .get(&id)
            .is_some_and(|s| st.send_capacity(s) >= pending.len());
        if fits {
            st.send_data(id, &pending, true);
            return Ok(id);
        }
    }
    tokio::spawn(BodyWriter::new(Arc::clone(shared), id, body, pending));
    Ok(id)
}

/// Queues the HEADERS of a new stream for `parts`; the URI is absolute (see `bridge::to_upstream`).
fn open_stream(st: &mut State, parts: &http::request::Parts, end_stream: bool) -> u32 {
    let uri = &parts.uri;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    st.open_stream(
        &parts.method,
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map(|a| a.as_str()),
        path,
        &parts.headers,
        end_stream,
    )
}

/// Waits for the upstream's stream limit to let another stream open, then opens it.
async fn wait_and_open(
    shared: Arc<Shared>,
    req: Box<Request<Body>>,
) -> Result<Response<H2Body>, SendFailure> {
    let mut req = Some(req);
    let id = poll_fn(|cx| {
        let Some(r) = req.take() else {
            return Poll::Ready(Err(SendFailure::Failed(FailureKind::Reset, H2Error::closed())));
        };
        match open(&shared, *r, Some(cx.waker())) {
            Ok(id) => Poll::Ready(Ok(id)),
            Err(Opening::Refused(r, e)) => Poll::Ready(Err(SendFailure::Unsent(r, e))),
            Err(Opening::NoSlot(r)) => {
                req = Some(r);
                Poll::Pending
            }
        }
    })
    .await?;
    ResponseFuture::new(shared, id).await
}

/// The failure kind of a stream's error: refused or left out of a GOAWAY is unprocessed (safe to retry),
/// an unanswered keep-alive PING is a timeout, anything else a reset.
fn classify(e: &H2Error) -> FailureKind {
    if e.is_keep_alive_timeout() {
        FailureKind::Timeout
    } else if e.is_unprocessed() {
        FailureKind::RefusedStream
    } else {
        FailureKind::Reset
    }
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
fn prepare_headers(headers: &mut HeaderMap, method: &Method, body: &Body) {
    strip_hop_by_hop(headers);
    if let Some(len) = body.size_hint().exact()
        && (len != 0
            || !matches!(
                *method,
                Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
            ))
        && !headers.contains_key(CONTENT_LENGTH)
    {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
}

/// Lets the `x-request-id` of a connection's first request enter its HPACK table, so that the name is there
/// to be referred to. Request ids are otherwise sent never-indexed (a value unique to one request would only
/// crowd the table), as a literal that takes its name from the table: without the seed every request spells
/// the name out and the upstream decodes and allocates it again.
fn index_request_id_name(headers: &mut HeaderMap) {
    if let Some(v) = headers.get_mut(&REQUEST_ID) {
        v.set_sensitive(false);
    }
}

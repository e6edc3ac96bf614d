//! The HTTP/1.1 client side of upstream connections: one request at a time per connection, connections kept
//! alive in a per-worker pool of idle ones.
//!
//! Why not hyper's client: it ran every connection as a task of its own, fed through a channel, and a
//! connection went back to the pool from yet another task spawned per request; a proxied request crossed
//! three tasks and cost more CPU than the whole HTTP/2 path (15.5 against 12.1 µs per request at
//! saturation). Here the request's own task writes the request and reads the response head, the response
//! body reads from the socket as the caller's connection pulls it, and the connection goes back to the pool
//! when the body has ended cleanly.
//!
//! A pooled connection the upstream has closed meanwhile is found before use (it reads as closed) or, if it
//! closes while the request is written, by the response never starting: a request without a body, still
//! whole in the write buffer, is then sent again on a new connection; one with a body fails as
//! `refused_stream` (the upstream processed nothing), which retry policies may replay.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use infergate_http1::Error as WireError;
use infergate_http1::body::{Decoded, Decoder};
use infergate_http1::head::Framing;
use infergate_http1::out;
use infergate_http1::response::{ResponseHead, ResponseParser};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::error::{FailureKind, UpstreamError};
use super::pool::Io;
use crate::proxy::Body;

/// Room kept free in the read buffer before each read.
const READ_RESERVE: usize = 8 << 10;

/// The largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 << 10;

/// One worker's idle connections to one endpoint.
pub(crate) struct IdleConns {
    conns: Mutex<Vec<H1Conn>>,
    max: usize,
}

impl IdleConns {
    /// A pool keeping at most `max` idle connections.
    pub(crate) fn new(max: usize) -> IdleConns {
        IdleConns {
            conns: Mutex::new(Vec::new()),
            max,
        }
    }

    /// The most recently used idle connection that still looks open.
    pub(crate) fn take(&self) -> Option<H1Conn> {
        let mut conns = self.conns.lock().ok()?;
        while let Some(mut c) = conns.pop() {
            if c.looks_open() {
                return Some(c);
            }
        }
        None
    }

    fn put(&self, conn: H1Conn) {
        if let Ok(mut conns) = self.conns.lock()
            && conns.len() < self.max
        {
            conns.push(conn);
        }
    }

    /// Idle connections now.
    pub(crate) fn len(&self) -> usize {
        self.conns.lock().map(|c| c.len()).unwrap_or(0)
    }
}

/// An HTTP/1.1 connection to an upstream endpoint.
pub(crate) struct H1Conn {
    io: Box<dyn Io>,
    read: BytesMut,
    write: Vec<u8>,
    /// The response-head parser, kept across reads and responses.
    parser: ResponseParser,
}

/// What the request sent again on a new connection needs, when the pooled one turned out closed.
pub(crate) struct Replay {
    /// The whole request, encoded.
    bytes: Vec<u8>,
    head_request: bool,
}

/// Why a request failed on a connection.
pub(crate) enum SendError {
    /// The connection came from the pool and closed before any of the response arrived: the upstream
    /// processed nothing. `replay` is the request, when it can be sent again as it is.
    Stale(Option<Replay>, UpstreamError),
    /// Anything else.
    Failed(UpstreamError),
}

/// Where the upstream and endpoint are named in errors, and where a finished connection goes back to.
#[derive(Clone)]
pub(crate) struct Target<'a> {
    pub(crate) upstream: &'a str,
    pub(crate) addr: SocketAddr,
    pub(crate) idle: Arc<IdleConns>,
}

impl Target<'_> {
    fn error(&self, kind: FailureKind, detail: &str) -> UpstreamError {
        UpstreamError::new(kind, self.upstream, detail).with_endpoint(self.addr)
    }
}

impl H1Conn {
    /// A connection over `io` (TCP or TLS, connected).
    pub(crate) fn new(io: Box<dyn Io>) -> H1Conn {
        H1Conn {
            io,
            read: BytesMut::with_capacity(READ_RESERVE),
            write: Vec::with_capacity(READ_RESERVE),
            parser: ResponseParser::new(MAX_RESPONSE_HEAD),
        }
    }

    /// Whether an idle connection can carry a request: not closed by the upstream, nothing unasked-for
    /// waiting to be read.
    fn looks_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut probe = [MaybeUninit::<u8>::uninit(); 1];
        let mut buf = tokio::io::ReadBuf::uninit(&mut probe);
        matches!(Pin::new(&mut self.io).poll_read(&mut cx, &mut buf), Poll::Pending)
    }

    /// Sends `req` and reads the response head. `pooled`: the connection was idle in the pool, so a close
    /// before the response means it had gone stale. The head is encoded before the future is made, so the
    /// future holds the body, not the request (it is moved on every await of the callers').
    pub(crate) fn send<'t>(
        mut self,
        req: Request<Body>,
        pooled: bool,
        target: Target<'t>,
    ) -> impl Future<Output = Result<Response<H1Body>, SendError>> + Send + use<'t> {
        let (parts, body) = req.into_parts();
        let head_request = parts.method == Method::HEAD;
        let framing = if body.is_end_stream() {
            Framing::Empty
        } else if let Some(n) = body.size_hint().exact() {
            Framing::Length(n)
        } else {
            Framing::Chunked
        };
        self.write.clear();
        out::request_head(&mut self.write, &parts, framing);
        drop(parts);
        async move {
            if framing == Framing::Empty {
                return self.exchange(head_request, pooled, true, &target).await;
            }
            let mut body = body;
            if let Err(failure) = self.write_body(&mut body, framing).await {
                return Err(match failure {
                    BodyWrite::Body => SendError::Failed(target.error(
                        FailureKind::RequestBody,
                        "reading the request body from the caller failed",
                    )),
                    BodyWrite::Io(e) if pooled => SendError::Stale(
                        None,
                        target
                            .error(
                                FailureKind::RefusedStream,
                                "the pooled HTTP/1.1 connection was closed by the upstream before it read the request",
                            )
                            .with_source(e),
                    ),
                    BodyWrite::Io(e) => SendError::Failed(
                        target
                            .error(FailureKind::Reset, "the connection failed while the request was written")
                            .with_source(e),
                    ),
                });
            }
            self.exchange(head_request, pooled, false, &target).await
        }
    }

    /// Sends a request encoded for a connection that went stale, on this (new) one.
    pub(crate) async fn resend(
        mut self,
        replay: Replay,
        target: &Target<'_>,
    ) -> Result<Response<H1Body>, SendError> {
        self.write = replay.bytes;
        self.exchange(replay.head_request, false, false, target).await
    }

    /// Writes what is gathered in the write buffer and reads the response head. `whole`: the buffer holds
    /// the whole request (it has no body), so it can be sent again if the pooled connection was stale.
    async fn exchange(
        mut self,
        head_request: bool,
        pooled: bool,
        whole: bool,
        target: &Target<'_>,
    ) -> Result<Response<H1Body>, SendError> {
        // A request that may be sent again stays in the write buffer until its answer starts.
        let replayable = pooled && whole;
        let stale = |replay: Option<Vec<u8>>, e: Option<io::Error>| {
            let err = target.error(
                FailureKind::RefusedStream,
                "the pooled HTTP/1.1 connection was closed by the upstream before it answered",
            );
            SendError::Stale(
                replay.map(|bytes| Replay { bytes, head_request }),
                match e {
                    Some(e) => err.with_source(e),
                    None => err,
                },
            )
        };
        let written = if replayable {
            match self.io.write_all(&self.write).await {
                Ok(()) => self.io.flush().await,
                Err(e) => Err(e),
            }
        } else {
            self.flush().await
        };
        if let Err(e) = written {
            if pooled {
                return Err(stale(
                    replayable.then(|| std::mem::take(&mut self.write)),
                    Some(e),
                ));
            }
            return Err(SendError::Failed(
                target
                    .error(
                        FailureKind::Reset,
                        "the connection failed while the request was written",
                    )
                    .with_source(e),
            ));
        }
        let head = loop {
            match self.parser.parse(&mut self.read) {
                Ok(Some(head)) if head.status.is_informational() => {
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return Err(SendError::Failed(target.error(
                            FailureKind::Protocol,
                            "the upstream switched protocols, which the gateway does not proxy",
                        )));
                    }
                    continue;
                }
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(e) => {
                    return Err(SendError::Failed(
                        target.error(FailureKind::Protocol, &response_error(&e)),
                    ));
                }
            }
            let nothing_yet = self.read.is_empty();
            self.read.reserve(READ_RESERVE);
            match self.io.read_buf(&mut self.read).await {
                Ok(n) if n > 0 => {}
                outcome => {
                    let e = outcome.err();
                    if pooled && nothing_yet {
                        return Err(stale(replayable.then(|| std::mem::take(&mut self.write)), e));
                    }
                    let err = target.error(
                        FailureKind::Reset,
                        "the connection closed before a whole response head arrived",
                    );
                    return Err(SendError::Failed(match e {
                        Some(e) => err.with_source(e),
                        None => err,
                    }));
                }
            }
        };
        self.write.clear();
        let (decoder, keep_alive) = head
            .framing(head_request)
            .map_err(|e| SendError::Failed(target.error(FailureKind::Protocol, &response_error(&e))))?;
        let ResponseHead {
            status,
            version,
            headers,
            ..
        } = head;
        let remaining = match decoder {
            Decoder::Length { remaining } => Some(remaining),
            Decoder::Done => Some(0),
            _ => None,
        };
        let mut body = H1Body {
            conn: Some(self),
            decoder,
            keep_alive,
            idle: Arc::clone(&target.idle),
            remaining,
        };
        if body.decoder.is_done() {
            body.finish();
        }
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = headers;
        Ok(response)
    }

    /// Writes the request body after its head, framed.
    async fn write_body(&mut self, body: &mut Body, framing: Framing) -> Result<(), BodyWrite> {
        loop {
            let next = match std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *body).poll_frame(cx))).await
            {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    self.flush().await.map_err(BodyWrite::Io)?;
                    body.frame().await
                }
            };
            let data = match next {
                None => break,
                Some(Err(_)) => return Err(BodyWrite::Body),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    // Trailers have no place in an HTTP/1.1 request the gateway writes.
                    Err(_) => continue,
                },
            };
            out::put_data(&mut self.io, &mut self.write, data, framing == Framing::Chunked)
                .await
                .map_err(BodyWrite::Io)?;
        }
        if framing == Framing::Chunked {
            self.write.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        out::flush(&mut self.io, &mut self.write).await
    }
}

enum BodyWrite {
    /// The caller's body failed.
    Body,
    /// The connection failed.
    Io(io::Error),
}

/// A response body read from an HTTP/1.1 connection; the connection goes back to the pool when it ends
/// cleanly and may be reused.
pub(crate) struct H1Body {
    conn: Option<H1Conn>,
    decoder: Decoder,
    keep_alive: bool,
    idle: Arc<IdleConns>,
    /// Bytes still to come, when the length is known.
    remaining: Option<u64>,
}

impl H1Body {
    /// The body ended: the connection goes back to the pool if it can carry another request.
    fn finish(&mut self) {
        self.decoder = Decoder::Done;
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && conn.read.is_empty()
        {
            self.idle.put(conn);
        }
    }
}

impl HttpBody for H1Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut conn.read, MAX_RESPONSE_HEAD) {
                Ok(Decoded::Data(data)) => {
                    if let Some(r) = &mut this.remaining {
                        *r = r.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Decoded::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Decoded::NeedMore) => {
                    conn.read.reserve(READ_RESERVE);
                    let mut read = std::pin::pin!(conn.io.read_buf(&mut conn.read));
                    match read.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(n)) if n > 0 => {}
                        Poll::Ready(Ok(_)) if matches!(this.decoder, Decoder::UntilClose) => {
                            this.conn = None;
                            this.decoder = Decoder::Done;
                            return Poll::Ready(None);
                        }
                        Poll::Ready(Ok(_)) => {
                            this.conn = None;
                            return Poll::Ready(Some(Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the upstream closed the connection before the response body ended",
                            ))));
                        }
                        Poll::Ready(Err(e)) => {
                            this.conn = None;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        body_error(e),
                    ))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

fn body_error(e: WireError) -> String {
    format!("the upstream's response body: {e}")
}

/// What went wrong with an upstream's response head, for the error the caller reads.
fn response_error(e: &WireError) -> String {
    format!("the upstream's answer is not a valid HTTP/1.1 response: {e}")
}

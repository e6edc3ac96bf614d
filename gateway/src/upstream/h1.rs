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
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderMap, TRANSFER_ENCODING};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::error::{FailureKind, UpstreamError};
use super::pool::Io;
use crate::proxy::Body;
use infergate_http1::body::{BodyError, Decoded, Decoder};
use infergate_http1::head::{HeaderSpan, keeps_alive, parse_length};
use infergate_http1::out::{self, content_length, header};

/// Room kept free in the read buffer before each read.
const READ_RESERVE: usize = 8 << 10;

/// The largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 << 10;

/// The most headers accepted in a response head.
const MAX_RESPONSE_HEADERS: usize = 128;

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
    /// Header positions of the response being parsed, reused between responses.
    spans: Vec<HeaderSpan>,
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

/// How a request body is delimited on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RequestFraming {
    Empty,
    Length(u64),
    Chunked,
}

impl H1Conn {
    /// A connection over `io` (TCP or TLS, connected).
    pub(crate) fn new(io: Box<dyn Io>) -> H1Conn {
        H1Conn {
            io,
            read: BytesMut::with_capacity(READ_RESERVE),
            write: Vec::with_capacity(READ_RESERVE),
            spans: Vec::new(),
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
            RequestFraming::Empty
        } else if let Some(n) = body.size_hint().exact() {
            RequestFraming::Length(n)
        } else {
            RequestFraming::Chunked
        };
        self.write.clear();
        encode_request_head(&mut self.write, &parts, framing);
        drop(parts);
        async move {
            if framing == RequestFraming::Empty {
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
            match parse_response(&mut self.read, &mut self.spans) {
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
                Err(what) => return Err(SendError::Failed(target.error(FailureKind::Protocol, what))),
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
        let (decoder, keep_alive) = response_framing(&head, head_request)
            .map_err(|what| SendError::Failed(target.error(FailureKind::Protocol, what)))?;
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
    async fn write_body(&mut self, body: &mut Body, framing: RequestFraming) -> Result<(), BodyWrite> {
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
            out::put_data(
                &mut self.io,
                &mut self.write,
                data,
                framing == RequestFraming::Chunked,
            )
            .await
            .map_err(BodyWrite::Io)?;
        }
        if framing == RequestFraming::Chunked {
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

/// The request line and headers, with the framing the gateway chose (the caller's own `content-length`
/// and `transfer-encoding` are replaced by it).
fn encode_request_head(out: &mut Vec<u8>, parts: &http::request::Parts, framing: RequestFraming) {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match framing {
        RequestFraming::Length(n) => content_length(out, n),
        RequestFraming::Chunked => header(out, b"transfer-encoding", b"chunked"),
        RequestFraming::Empty => {
            // Methods that usually carry a body say it is empty, so the upstream does not wait for one.
            if matches!(parts.method, Method::POST | Method::PUT | Method::PATCH) {
                header(out, b"content-length", b"0");
            }
        }
    }
    out.extend_from_slice(b"\r\n");
}

struct ResponseHead {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    /// Whether `Connection` and `Transfer-Encoding` were present (noted while parsing, so that answers
    /// without them cost no lookups for them).
    has_connection: bool,
    has_transfer_encoding: bool,
}

/// Parses a complete response head at the start of `buf` and takes it out; `Ok(None)` when incomplete.
/// `spans` is scratch space, reused between responses.
fn parse_response(
    buf: &mut BytesMut,
    spans: &mut Vec<HeaderSpan>,
) -> Result<Option<ResponseHead>, &'static str> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
            return Err("the upstream's response head is larger than 64 KiB");
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err("the upstream's response has more than 128 headers");
        }
        Err(_) => return Err("the upstream's answer is not a valid HTTP/1.1 response"),
    };
    let (Some(code), Some(version)) = (resp.code, resp.version) else {
        return Err("the upstream's answer is not a valid HTTP/1.1 response");
    };
    let status = StatusCode::from_u16(code).map_err(|_| "the upstream answered an invalid status code")?;
    let base = buf.as_ptr() as usize;
    spans.clear();
    spans.extend(resp.headers.iter().map(|h| HeaderSpan::of(base, h)));
    let head: Bytes = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(spans.len() + 2);
    let (mut has_connection, mut has_transfer_encoding) = (false, false);
    for span in spans.iter() {
        let (name, value) = span.read(&head).map_err(|bad| match bad {
            None => "the upstream sent an invalid header name",
            Some(_) => "the upstream sent an invalid header value",
        })?;
        has_connection |= name == CONNECTION;
        has_transfer_encoding |= name == TRANSFER_ENCODING;
        headers.append(name, value);
    }
    let version = if version == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    Ok(Some(ResponseHead {
        status,
        version,
        headers,
        has_connection,
        has_transfer_encoding,
    }))
}

/// How the response body is delimited (RFC 9112 §6.3) and whether the connection can be reused after it.
fn response_framing(head: &ResponseHead, head_request: bool) -> Result<(Decoder, bool), &'static str> {
    let ResponseHead {
        status,
        version,
        headers,
        has_connection,
        has_transfer_encoding,
    } = head;
    let status = *status;
    let mut keep_alive = keeps_alive(*version, headers, *has_connection);
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((Decoder::Done, keep_alive));
    }
    let last_coding = if *has_transfer_encoding {
        headers.get_all(TRANSFER_ENCODING).iter().next_back()
    } else {
        None
    };
    let decoder = if let Some(last) = last_coding {
        let chunked_last = last
            .to_str()
            .ok()
            .and_then(|s| s.rsplit(',').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        if chunked_last {
            Decoder::chunked()
        } else {
            Decoder::UntilClose
        }
    } else {
        let mut length = None;
        for v in headers.get_all(CONTENT_LENGTH) {
            let n = parse_length(v.as_bytes()).ok_or("the upstream sent an invalid content-length")?;
            if length.is_some_and(|l| l != n) {
                return Err("the upstream sent conflicting content-length values");
            }
            length = Some(n);
        }
        match length {
            Some(n) => Decoder::length(n),
            None => Decoder::UntilClose,
        }
    };
    if matches!(decoder, Decoder::UntilClose) {
        keep_alive = false;
    }
    Ok((decoder, keep_alive))
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

fn body_error(e: BodyError) -> String {
    format!("the upstream's response body: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_carry_the_gateways_framing() {
        let req = Request::post("/v2/models/m/infer?x=1")
            .header("host", "models:8000")
            .header("content-length", "999")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        encode_request_head(&mut out, &parts, RequestFraming::Length(5));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v2/models/m/infer?x=1 HTTP/1.1\r\nhost: models:8000\r\ncontent-length: 5\r\n\r\n"
        );
        let mut out = Vec::new();
        encode_request_head(&mut out, &parts, RequestFraming::Empty);
        assert!(String::from_utf8(out).unwrap().contains("content-length: 0\r\n"));
        let (get, ()) = Request::get("/").body(()).unwrap().into_parts();
        let mut out = Vec::new();
        encode_request_head(&mut out, &get, RequestFraming::Empty);
        assert_eq!(String::from_utf8(out).unwrap(), "GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn responses_are_parsed_and_framed() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabcHTTP"[..]);
        let head = parse_response(&mut buf, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["x-a"], "1");
        assert_eq!(&buf[..], b"abcHTTP");
        let (decoder, keep_alive) = response_framing(&head, false).unwrap();
        assert!(matches!(decoder, Decoder::Length { remaining: 3 }));
        assert!(keep_alive);

        let framing = |text: &[u8], head_request: bool| {
            let mut buf = BytesMut::from(text);
            let h = parse_response(&mut buf, &mut Vec::new()).unwrap().unwrap();
            response_framing(&h, head_request)
        };
        let (d, ka) = framing(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", false).unwrap();
        assert!(matches!(d, Decoder::Chunked(_)) && ka);
        let (d, ka) = framing(b"HTTP/1.1 200 OK\r\n\r\n", false).unwrap();
        assert!(
            matches!(d, Decoder::UntilClose) && !ka,
            "no length: until close, not reusable"
        );
        let (d, ka) = framing(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n", false).unwrap();
        assert!(
            matches!(d, Decoder::Length { .. }) && !ka,
            "HTTP/1.0 without keep-alive"
        );
        let (d, _) = framing(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n", true).unwrap();
        assert!(d.is_done(), "a HEAD response has no body");
        let (d, _) = framing(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n", false).unwrap();
        assert!(d.is_done());
        let (d, ka) = framing(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            false,
        )
        .unwrap();
        assert!(d.is_done() && !ka);
        assert!(
            framing(
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                false
            )
            .is_err()
        );
        assert!(framing(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", false).is_err());
    }

    #[test]
    fn garbage_and_huge_heads_are_protocol_errors() {
        let parse = |b: &[u8]| parse_response(&mut BytesMut::from(b), &mut Vec::new()).map(|h| h.is_some());
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n"), Ok(false));
        let mut big = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
        big.resize(MAX_RESPONSE_HEAD + 1, b'a');
        assert!(parse(&big).is_err());
    }
}

//! Request heads in, response heads out: parsing an HTTP/1.1 request head (RFC 9112) straight into an
//! [`http::Request`], deciding how its body is framed, and writing a response head.
//!
//! Header values are slices of the received bytes (no copy); the header map is sized for the headers the
//! pipeline adds (`x-request-id`, `x-forwarded-for`) so adding them does not grow it.

use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::header::{
    CONNECTION, CONTENT_LENGTH, EXPECT, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING,
};
use http::{Method, Request, StatusCode, Uri, Version};

use crate::Error;
use crate::out::{content_length, header};

/// Headers the pipeline may add to a request; the map is allocated with room for them.
const ADDED_HEADERS: usize = 4;

/// Header slots on the stack; a listener allowing more headers than this parses into a heap buffer.
const STACK_HEADERS: usize = 128;

/// How a message's body is delimited (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    /// The request without its body.
    pub request: Request<()>,
    /// How the body that follows is delimited.
    pub framing: Framing,
    /// Whether the client lets the connection carry another request after this one.
    pub keep_alive: bool,
    /// Whether the client waits for `100 Continue` before sending the body.
    pub expect_continue: bool,
}

/// Where one header's name and value lie in the head: (start, length) of each.
#[derive(Debug, Clone, Copy)]
pub struct HeaderSpan {
    name: (usize, usize),
    value: (usize, usize),
}

impl HeaderSpan {
    /// Where `header`, parsed out of the buffer starting at address `base`, lies in it.
    pub fn of(base: usize, header: &httparse::Header<'_>) -> HeaderSpan {
        let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
        HeaderSpan {
            name: at(header.name.as_bytes()),
            value: at(header.value),
        }
    }

    /// The header's name and value in `head`, the buffer it was parsed from (the value shares its bytes).
    /// Fails with `None` when the name is not a valid header name, with the name when the value is invalid.
    pub fn read(&self, head: &Bytes) -> Result<(HeaderName, HeaderValue), Option<HeaderName>> {
        let ((n, nl), (v, vl)) = (self.name, self.value);
        let name = HeaderName::from_bytes(&head[n..n + nl]).map_err(|_| None)?;
        match HeaderValue::from_maybe_shared(head.slice(v..v + vl)) {
            Ok(value) => Ok((name, value)),
            Err(_) => Err(Some(name)),
        }
    }
}

/// The request line and header positions httparse found, as offsets into the head.
struct Spans {
    method: (usize, usize),
    target: (usize, usize),
    version: u8,
    len: usize,
}

/// Finds where a message head ends, looking at each byte once however the head arrives: a head dribbled one
/// byte per read costs as much as one read in one piece, where parsing the whole buffer on every read would
/// cost time quadratic in its length. A head ends with an empty line after a non-empty one (leading empty
/// lines are skipped, as the parser skips them); a CR not followed by LF also ends the scan, so the parser refuses
/// the head at once.
#[derive(Debug, Clone, Default)]
pub struct HeadScan {
    /// Bytes of the buffer looked at so far.
    scanned: usize,
    /// Whether a byte other than CR or LF has been seen.
    content: bool,
    /// Whether the current line has held nothing but CR so far.
    line_has_content: bool,
}

impl HeadScan {
    /// Whether `buf`, the bytes of one head read so far from its first byte, holds the head's end. Only
    /// the bytes added since the last call are looked at.
    pub fn found_end(&mut self, buf: &[u8]) -> bool {
        let mut at = self.scanned;
        while let Some(&b) = buf.get(at) {
            // A CR not followed by LF makes the head malformed: it is reported as an end, so the parser
            // runs now and refuses it rather than waiting for an end that may never come.
            if at > 0 && buf[at - 1] == b'\r' && b != b'\n' {
                self.scanned = at + 1;
                return true;
            }
            match b {
                b'\n' => {
                    if self.content && !self.line_has_content {
                        self.scanned = at + 1;
                        return true;
                    }
                    self.line_has_content = false;
                    at += 1;
                }
                b'\r' => at += 1,
                _ => {
                    // Only CR and LF decide anything, and the bytes between them only mark the line as
                    // holding content: skip to the next CR or LF (a vectorised search, not a byte loop).
                    self.content = true;
                    self.line_has_content = true;
                    at = memchr::memchr2(b'\r', b'\n', &buf[at..]).map_or(buf.len(), |i| at + i);
                }
            }
        }
        self.scanned = buf.len();
        false
    }

    /// Starts over for the next head.
    pub fn reset(&mut self) {
        *self = HeadScan::default();
    }
}

/// Reads request heads off one connection: the head scan and the header positions are kept between reads
/// and between requests, so a head is parsed once, when its end has arrived.
#[derive(Debug)]
pub struct RequestParser {
    max_headers: usize,
    max_header_bytes: usize,
    scan: HeadScan,
    spans: Vec<HeaderSpan>,
}

impl RequestParser {
    /// A parser refusing heads with more than `max_headers` headers or longer than `max_header_bytes`.
    pub fn new(max_headers: usize, max_header_bytes: usize) -> RequestParser {
        RequestParser {
            max_headers,
            max_header_bytes,
            scan: HeadScan::default(),
            spans: Vec::new(),
        }
    }

    /// Takes a complete request head off the front of `buf` (the body stays). `Ok(None)`: the head is not
    /// complete yet; call again when more bytes have been appended to `buf`.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<RequestHead>, Error> {
        if !self.scan.found_end(buf) && buf.len() < self.max_header_bytes {
            return Ok(None);
        }
        let parsed = parse(buf, self.max_headers, self.max_header_bytes, &mut self.spans);
        if !matches!(parsed, Ok(None)) {
            self.scan.reset();
        }
        parsed
    }
}

/// Parses a complete request head at the start of `buf` and takes it (not the body) out of `buf`.
/// `Ok(None)`: the head is not complete yet, read more. `scratch` is reused between requests.
pub fn parse(
    buf: &mut BytesMut,
    max_headers: usize,
    max_header_bytes: usize,
    scratch: &mut Vec<HeaderSpan>,
) -> Result<Option<RequestHead>, Error> {
    let spans = if max_headers <= STACK_HEADERS {
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
        locate(buf, &mut slots[..max_headers], max_headers, scratch)?
    } else {
        let mut slots: Vec<MaybeUninit<httparse::Header<'_>>> = Vec::with_capacity(max_headers);
        slots.resize_with(max_headers, MaybeUninit::uninit);
        locate(buf, &mut slots, max_headers, scratch)?
    };
    let Some(spans) = spans else {
        if buf.len() >= max_header_bytes {
            return Err(Error::HeadTooLarge(max_header_bytes));
        }
        return Ok(None);
    };
    if spans.len > max_header_bytes {
        return Err(Error::HeadTooLarge(max_header_bytes));
    }
    let head = buf.split_to(spans.len).freeze();
    build(&head, &spans, scratch).map(Some)
}

/// Runs httparse over `buf`, recording where each part lies.
fn locate<'b>(
    buf: &'b [u8],
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
    max_headers: usize,
    scratch: &mut Vec<HeaderSpan>,
) -> Result<Option<Spans>, Error> {
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::TooManyHeaders(max_headers)),
        Err(e) => return Err(Error::MalformedHead(e.to_string())),
    };
    let base = buf.as_ptr() as usize;
    let span = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(Error::MalformedHead("incomplete request line".into()));
    };
    scratch.clear();
    scratch.extend(req.headers.iter().map(|h| HeaderSpan::of(base, h)));
    Ok(Some(Spans {
        method: span(method.as_bytes()),
        target: span(target.as_bytes()),
        version,
        len,
    }))
}

/// Builds the request and its framing from the located parts of `head`.
fn build(head: &Bytes, spans: &Spans, scratch: &[HeaderSpan]) -> Result<RequestHead, Error> {
    let at = |(start, len): (usize, usize)| &head[start..start + len];
    let method =
        Method::from_bytes(at(spans.method)).map_err(|_| Error::MalformedHead("invalid method".into()))?;
    let (t, tl) = spans.target;
    let uri = Uri::from_maybe_shared(head.slice(t..t + tl))
        .map_err(|e| Error::MalformedHead(format!("invalid request target: {e}")))?;
    let version = if spans.version == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };

    let mut headers = HeaderMap::with_capacity(scratch.len() + ADDED_HEADERS);
    // The headers that decide framing and the connection are noted as they go by, so a request without them
    // (most) costs no lookups for them afterwards.
    let mut seen = Seen::default();
    for span in scratch {
        let (name, value) = span.read(head).map_err(|bad| match bad {
            None => Error::MalformedHead("invalid header name".into()),
            Some(name) => Error::MalformedHead(format!("invalid value in header '{name}'")),
        })?;
        seen.note(&name);
        headers.append(name, value);
    }
    let framing = if seen.framing {
        framing(&headers, version)?
    } else {
        Framing::Empty
    };
    let keep_alive = keeps_alive(version, &headers, seen.connection);
    let expect_continue = version == Version::HTTP_11
        && seen.expect
        && headers
            .get(EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));

    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    Ok(RequestHead {
        request,
        framing,
        keep_alive,
        expect_continue,
    })
}

/// Which of the headers that shape a message were present.
#[derive(Default)]
struct Seen {
    /// `Transfer-Encoding` or `Content-Length`.
    framing: bool,
    connection: bool,
    expect: bool,
}

impl Seen {
    fn note(&mut self, name: &HeaderName) {
        // Comparing with a standard header is an enum comparison, not a string one.
        if name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            self.framing = true;
        } else if name == CONNECTION {
            self.connection = true;
        } else if name == EXPECT {
            self.expect = true;
        }
    }
}

/// The request body's framing. Both `Transfer-Encoding` and `Content-Length`, conflicting lengths and
/// transfer codings on HTTP/1.0 are refused: each is a way to make two parsers disagree about where a
/// request ends (request smuggling).
fn framing(headers: &HeaderMap, version: Version) -> Result<Framing, Error> {
    let mut codings = headers.get_all(TRANSFER_ENCODING).iter().peekable();
    if codings.peek().is_some() {
        if version != Version::HTTP_11 {
            return Err(Error::MalformedHead(
                "transfer-encoding in an HTTP/1.0 request".into(),
            ));
        }
        if headers.contains_key(CONTENT_LENGTH) {
            return Err(Error::MalformedHead(
                "both transfer-encoding and content-length are set; send one".into(),
            ));
        }
        let mut all = Vec::new();
        for value in codings {
            let text = value
                .to_str()
                .map_err(|_| Error::MalformedHead("invalid transfer-encoding".into()))?;
            all.extend(text.split(',').map(str::trim).filter(|c| !c.is_empty()));
        }
        return match all.as_slice() {
            [only] if only.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
            _ => Err(Error::UnsupportedCoding(all.join(", "))),
        };
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let n = parse_length(value.as_bytes())
            .ok_or_else(|| Error::MalformedHead("content-length is not a number".into()))?;
        if length.is_some_and(|l| l != n) {
            return Err(Error::MalformedHead("conflicting content-length values".into()));
        }
        length = Some(n);
    }
    Ok(match length {
        None | Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
    })
}

/// A `Content-Length` value: decimal digits only, no sign, no list.
pub fn parse_length(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    text.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Whether a message lets its connection carry another exchange (RFC 9112 §9.3): HTTP/1.1 unless
/// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`. `has_connection`: whether the message has
/// a `Connection` header at all (noted while parsing; without one there is nothing to look up).
pub fn keeps_alive(version: Version, headers: &HeaderMap, has_connection: bool) -> bool {
    match version {
        Version::HTTP_11 => !(has_connection && has_token(headers, &CONNECTION, "close")),
        _ => has_connection && has_token(headers, &CONNECTION, "keep-alive"),
    }
}

/// Whether a comma-separated header lists `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// How a response body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// Nothing follows the head (HEAD requests, 1xx, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked (HTTP/1.1 clients, length unknown).
    Chunked,
    /// Until the connection closes (HTTP/1.0 clients, length unknown).
    UntilClose,
}

/// Writes the status line and headers of a response into `out`. `keep_alive` says whether the connection
/// stays open afterwards; `http10` whether the client spoke HTTP/1.0 (which needs keep-alive said).
/// Hop-by-hop headers are the gateway's to write: any in `headers` are skipped.
pub fn write_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    framing: ResponseFraming,
    keep_alive: bool,
    http10: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut has_date = false;
    for (name, value) in headers {
        if name == CONNECTION || name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            continue;
        }
        has_date |= name == http::header::DATE;
        header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !has_date {
        with_date(|date| header(out, b"date", date));
    }
    match framing {
        ResponseFraming::Length(n) => content_length(out, n),
        ResponseFraming::Chunked => header(out, b"transfer-encoding", b"chunked"),
        ResponseFraming::None => {
            // A HEAD response says the length the body would have had.
            if let Some(v) = headers.get(CONTENT_LENGTH) {
                header(out, b"content-length", v.as_bytes());
            }
        }
        ResponseFraming::UntilClose => {}
    }
    if !keep_alive {
        header(out, b"connection", b"close");
    } else if http10 {
        header(out, b"connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written at the end of `buf`.
pub fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

thread_local! {
    /// The `date` header value, formatted once per second per worker thread.
    static DATE: std::cell::RefCell<(u64, [u8; 29])> = const { std::cell::RefCell::new((u64::MAX, [0; 29])) };
}

/// Calls `f` with the current `date` header value (IMF-fixdate, RFC 9110 §5.6.7).
fn with_date(f: impl FnOnce(&[u8])) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = secs;
            }
        }
        f(&cached.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(text: &[u8]) -> Result<Option<RequestHead>, Error> {
        let mut buf = BytesMut::from(text);
        parse(&mut buf, 100, 16 << 10, &mut Vec::new())
    }

    #[test]
    fn a_head_becomes_a_request_and_leaves_the_body_in_the_buffer() {
        let mut buf = BytesMut::from(&b"POST /v2/models/m/infer?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello"[..]);
        let head = parse(&mut buf, 100, 16 << 10, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(&buf[..], b"hello");
        let r = &head.request;
        assert_eq!(r.method(), Method::POST);
        assert_eq!(r.uri().path(), "/v2/models/m/infer");
        assert_eq!(r.uri().query(), Some("x=1"));
        assert_eq!(r.version(), Version::HTTP_11);
        assert_eq!(r.headers()["host"], "a");
        assert_eq!(r.headers().get_all("x-a").iter().count(), 2);
        assert_eq!(head.framing, Framing::Length(5));
        assert!(head.keep_alive);
        assert!(!head.expect_continue);
    }

    #[test]
    fn an_incomplete_head_asks_for_more_until_it_is_too_large() {
        assert!(parse_all(b"GET / HTTP/1.1\r\nhost: a\r\n").unwrap().is_none());
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nx-big: "[..]);
        buf.extend_from_slice(&[b'a'; 200]);
        assert_eq!(
            parse(&mut buf, 100, 128, &mut Vec::new()).unwrap_err(),
            Error::HeadTooLarge(128)
        );
    }

    #[test]
    fn too_many_headers_are_refused_with_the_limit() {
        let mut text = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..5 {
            text.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
        }
        text.extend_from_slice(b"\r\n");
        let mut buf = BytesMut::from(&text[..]);
        assert_eq!(
            parse(&mut buf, 4, 1 << 10, &mut Vec::new()).unwrap_err(),
            Error::TooManyHeaders(4)
        );
        let mut buf = BytesMut::from(&text[..]);
        assert!(parse(&mut buf, 5, 1 << 10, &mut Vec::new()).unwrap().is_some());
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        let both = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n";
        assert!(matches!(parse_all(both), Err(Error::MalformedHead(m)) if m.contains("both")));
        let two = b"POST / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n";
        assert!(matches!(parse_all(two), Err(Error::MalformedHead(m)) if m.contains("conflicting")));
        let signed = b"POST / HTTP/1.1\r\ncontent-length: +3\r\n\r\n";
        assert!(matches!(parse_all(signed), Err(Error::MalformedHead(_))));
        let gzip = b"POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n";
        assert!(matches!(parse_all(gzip), Err(Error::UnsupportedCoding(c)) if c == "gzip, chunked"));
        let old = b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(matches!(parse_all(old), Err(Error::MalformedHead(_))));
        let same = b"POST / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n";
        assert_eq!(parse_all(same).unwrap().unwrap().framing, Framing::Length(3));
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n";
        assert_eq!(parse_all(chunked).unwrap().unwrap().framing, Framing::Chunked);
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let ka = |t: &[u8]| parse_all(t).unwrap().unwrap().keep_alive;
        assert!(ka(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.1\r\nconnection: Close\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n"));
        let head = parse_all(b"PUT / HTTP/1.1\r\nexpect: 100-Continue\r\ncontent-length: 1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(head.expect_continue);
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse_all(b"GET / HTTP/1.1\r\nbad header\r\n\r\n"),
            Err(Error::MalformedHead(_))
        ));
        assert!(matches!(
            parse_all(b"\x00\x01\x02 / HTTP/1.1\r\n\r\n"),
            Err(Error::MalformedHead(_))
        ));
        assert!(matches!(
            parse_all(b"GET / HTTP/2.0\r\n\r\n"),
            Err(Error::MalformedHead(_))
        ));
    }

    #[test]
    fn response_heads_carry_the_framing_the_gateway_chose() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("connection", HeaderValue::from_static("upgrade"));
        let mut out = Vec::new();
        write_head(
            &mut out,
            StatusCode::OK,
            &headers,
            ResponseFraming::Length(12),
            true,
            false,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("content-type: application/json\r\n"), "{text}");
        assert!(text.contains("content-length: 12\r\n"), "{text}");
        assert!(text.contains("\r\ndate: "), "{text}");
        assert!(
            !text.contains("upgrade"),
            "hop-by-hop headers are the gateway's: {text}"
        );
        assert!(text.ends_with("\r\n\r\n"));

        let mut out = Vec::new();
        write_head(
            &mut out,
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            ResponseFraming::Chunked,
            false,
            false,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{text}");
        assert!(
            text.contains("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn random_and_truncated_heads_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let valid = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, close\r\nExpect: 100-continue\r\ncontent-length: 5\r\n\r\n";
        for round in 0..20_000 {
            let mut input: Vec<u8> = if round % 2 == 0 {
                valid[..rng.random_range(0..=valid.len())].to_vec()
            } else {
                (0..rng.random_range(0..200)).map(|_| rng.random()).collect()
            };
            // Flip a few bytes of the valid head now and then.
            if round % 3 == 0 && !input.is_empty() {
                for _ in 0..3 {
                    let i = rng.random_range(0..input.len());
                    input[i] = rng.random();
                }
            }
            let mut buf = BytesMut::from(&input[..]);
            let _ = parse(&mut buf, 8, 256, &mut Vec::new());
        }
    }

    #[test]
    fn the_head_scan_finds_the_empty_line_whatever_the_split() {
        let head = b"\r\nGET / HTTP/1.1\r\nhost: a\r\nx: \r\n\r\nbody";
        let end = head.len() - 4;
        for split in 0..=head.len() {
            let mut scan = HeadScan::default();
            let first = scan.found_end(&head[..split]);
            assert_eq!(first, split >= end, "split at {split}");
            if !first {
                assert!(scan.found_end(head), "split at {split}");
            }
        }
        let mut scan = HeadScan::default();
        assert!(!scan.found_end(b"\r\n\n\r\n"), "leading empty lines are no head");
        assert!(scan.found_end(b"\r\n\n\r\nGET / HTTP/1.1\n\n"));
        assert!(
            HeadScan::default().found_end(b"GET / HTTP/1.1\rx"),
            "a bare CR is reported, so the parser refuses it at once"
        );
    }

    /// The head scan as first written, one byte at a time: the reference the scan that skips ordinary bytes
    /// must agree with.
    fn scan_bytewise(scan: &mut (usize, bool, bool), buf: &[u8]) -> bool {
        let (scanned, content, line_has_content) = scan;
        for i in *scanned..buf.len() {
            let b = buf[i];
            if i > 0 && buf[i - 1] == b'\r' && b != b'\n' {
                *scanned = i + 1;
                return true;
            }
            match b {
                b'\n' if *content && !*line_has_content => {
                    *scanned = i + 1;
                    return true;
                }
                b'\n' => *line_has_content = false,
                b'\r' => {}
                _ => (*content, *line_has_content) = (true, true),
            }
        }
        *scanned = buf.len();
        false
    }

    #[test]
    fn the_head_scan_ends_where_a_byte_by_byte_scan_does_whatever_the_reads() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let alphabet = [b'\r', b'\n', b'a', b' ', b':'];
        for _ in 0..20_000 {
            let len = rng.random_range(0..40);
            let input: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let mut scan = HeadScan::default();
            let mut reference = (0, false, false);
            let mut read = 0;
            while read < input.len() {
                read = rng.random_range(read + 1..=input.len());
                let ended = scan.found_end(&input[..read]);
                assert_eq!(
                    ended,
                    scan_bytewise(&mut reference, &input[..read]),
                    "{input:?} read to {read}"
                );
                assert_eq!(scan.scanned, reference.0, "{input:?} read to {read}");
                if ended {
                    break;
                }
            }
        }
    }

    #[test]
    fn a_dribbled_head_is_parsed_once_it_is_whole() {
        let text = b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nhiGET";
        let mut parser = RequestParser::new(100, 16 << 10);
        let mut buf = BytesMut::new();
        let mut heads = Vec::new();
        for &b in text.iter() {
            buf.extend_from_slice(&[b]);
            if let Some(head) = parser.parse(&mut buf).unwrap() {
                heads.push(head);
            }
        }
        assert_eq!(heads.len(), 1);
        assert_eq!(heads[0].framing, Framing::Length(2));
        assert_eq!(&buf[..], b"hiGET");
        // The next request on the connection starts a fresh scan.
        buf.clear();
        buf.extend_from_slice(b"GET /2 HTTP/1.1\r\n\r\n");
        assert_eq!(parser.parse(&mut buf).unwrap().unwrap().request.uri(), "/2");
        // A head with no end is refused at the size limit.
        let mut parser = RequestParser::new(100, 1024);
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nx: "[..]);
        buf.resize(1024, b'a');
        assert_eq!(parser.parse(&mut buf).unwrap_err(), Error::HeadTooLarge(1024));
    }

    #[test]
    fn lengths_are_decimal_digits_only() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"18446744073709551615"), None);
        assert_eq!(parse_length(b"1234567890123456789"), Some(1234567890123456789));
        assert_eq!(parse_length(b"1 2"), None);
        assert_eq!(parse_length(b""), None);
        let mut buf = [0; 20];
        assert_eq!(format_u64(0, &mut buf), b"0");
        assert_eq!(format_u64(u64::MAX, &mut buf), b"18446744073709551615");
    }
}

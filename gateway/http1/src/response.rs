//! Response heads in (the client side): parsing an upstream's response head into status, version and
//! headers, and deciding how its body is delimited (RFC 9112 §6.3) and whether the connection can carry
//! another request afterwards. The head is parsed once its end has arrived ([`HeadScan`]).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderMap, TRANSFER_ENCODING};
use http::{StatusCode, Version};

use crate::Error;
use crate::body::Decoder;
use crate::head::{HeadScan, HeaderSpan, keeps_alive, parse_length};

/// The most headers a response head may have; the parser's slots live on the stack.
pub const MAX_RESPONSE_HEADERS: usize = 128;

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status code.
    pub status: StatusCode,
    /// HTTP/1.1 or HTTP/1.0.
    pub version: Version,
    /// The headers as sent (values share the received bytes).
    pub headers: HeaderMap,
    /// Whether `Connection` and `Transfer-Encoding` were present (noted while parsing, so that answers
    /// without them cost no lookups for them).
    has_connection: bool,
    has_transfer_encoding: bool,
}

/// Reads response heads off one connection, keeping the head scan and header positions between reads and
/// between responses.
#[derive(Debug)]
pub struct ResponseParser {
    max_head_bytes: usize,
    scan: HeadScan,
    spans: Vec<HeaderSpan>,
}

impl ResponseParser {
    /// A parser refusing heads longer than `max_head_bytes` or with more than [`MAX_RESPONSE_HEADERS`]
    /// headers.
    pub fn new(max_head_bytes: usize) -> ResponseParser {
        ResponseParser {
            max_head_bytes,
            scan: HeadScan::default(),
            spans: Vec::new(),
        }
    }

    /// Takes a complete response head off the front of `buf` (the body stays). `Ok(None)`: the head is not
    /// complete yet; call again when more bytes have been appended to `buf`.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<ResponseHead>, Error> {
        if !self.scan.found_end(buf) && buf.len() < self.max_head_bytes {
            return Ok(None);
        }
        let parsed = parse(buf, self.max_head_bytes, &mut self.spans);
        if !matches!(parsed, Ok(None)) {
            self.scan.reset();
        }
        parsed
    }
}

/// Parses a complete response head at the start of `buf` and takes it out; `Ok(None)` when incomplete.
fn parse(
    buf: &mut BytesMut,
    max_head_bytes: usize,
    spans: &mut Vec<HeaderSpan>,
) -> Result<Option<ResponseHead>, Error> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) if len > max_head_bytes => {
            return Err(Error::HeadTooLarge(max_head_bytes));
        }
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= max_head_bytes => {
            return Err(Error::HeadTooLarge(max_head_bytes));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::TooManyHeaders(MAX_RESPONSE_HEADERS)),
        Err(e) => return Err(Error::MalformedHead(e.to_string())),
    };
    let (Some(code), Some(version)) = (resp.code, resp.version) else {
        return Err(Error::MalformedHead("incomplete status line".into()));
    };
    let status = StatusCode::from_u16(code)
        .map_err(|_| Error::MalformedHead(format!("invalid status code {code}")))?;
    let base = buf.as_ptr() as usize;
    spans.clear();
    spans.extend(resp.headers.iter().map(|h| HeaderSpan::of(base, h)));
    let head: Bytes = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(spans.len() + 2);
    let (mut has_connection, mut has_transfer_encoding) = (false, false);
    for span in spans.iter() {
        let (name, value) = span.read(&head).map_err(|bad| match bad {
            None => Error::MalformedHead("invalid header name".into()),
            Some(name) => Error::MalformedHead(format!("invalid value in header '{name}'")),
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

impl ResponseHead {
    /// How the body that follows is delimited, answering a HEAD request when `head_request`, and whether
    /// the connection can be reused after it. A response with both `Transfer-Encoding` and
    /// `Content-Length` is read by its transfer coding and its connection is not reused (RFC 9112 §6.3):
    /// a peer that sends both may mean either.
    pub fn framing(&self, head_request: bool) -> Result<(Decoder, bool), Error> {
        let status = self.status;
        let mut keep_alive = keeps_alive(self.version, &self.headers, self.has_connection);
        if head_request
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return Ok((Decoder::Done, keep_alive));
        }
        let last_coding = if self.has_transfer_encoding {
            self.headers.get_all(TRANSFER_ENCODING).iter().next_back()
        } else {
            None
        };
        let decoder = if let Some(last) = last_coding {
            if self.headers.contains_key(CONTENT_LENGTH) {
                keep_alive = false;
            }
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
            for v in self.headers.get_all(CONTENT_LENGTH) {
                let n = parse_length(v.as_bytes())
                    .ok_or_else(|| Error::MalformedHead("content-length is not a number".into()))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Error::MalformedHead("conflicting content-length values".into()));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_one(text: &[u8]) -> Result<Option<ResponseHead>, Error> {
        ResponseParser::new(64 << 10).parse(&mut BytesMut::from(text))
    }

    fn framing(text: &[u8], head_request: bool) -> Result<(Decoder, bool), Error> {
        parse_one(text).unwrap().unwrap().framing(head_request)
    }

    #[test]
    fn responses_are_parsed_and_framed() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabcHTTP"[..]);
        let head = ResponseParser::new(64 << 10).parse(&mut buf).unwrap().unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["x-a"], "1");
        assert_eq!(&buf[..], b"abcHTTP");
        let (decoder, keep_alive) = head.framing(false).unwrap();
        assert!(matches!(decoder, Decoder::Length { remaining: 3 }));
        assert!(keep_alive);

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
        let (d, ka) = framing(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap();
        assert!(
            matches!(d, Decoder::Chunked(_)) && !ka,
            "both: read as chunked, never reused"
        );
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
    fn garbage_and_huge_heads_are_errors() {
        assert!(parse_one(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_one(b"HTTP/1.1 200 OK\r\n").unwrap().is_none());
        let mut big = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
        big.resize(1 << 10, b'a');
        let mut buf = BytesMut::from(&big[..]);
        assert_eq!(
            ResponseParser::new(1 << 10).parse(&mut buf).unwrap_err(),
            Error::HeadTooLarge(1 << 10)
        );
    }
}

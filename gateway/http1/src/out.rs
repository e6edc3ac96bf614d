//! Bytes on their way out of an HTTP/1.1 connection, server or client side: small pieces are gathered into
//! one write; a body piece of at least [`WRITE_CHUNK`] bytes is written as it is, without a copy.

use std::io;

use bytes::Bytes;
use http::Method;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::head::Framing;

/// Gathered bytes are written once they reach this; a body piece this large skips the gathering.
pub const WRITE_CHUNK: usize = 16 << 10;

/// Adds a `name: value` header line to `out`.
pub fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Adds a `content-length: n` header line to `out`.
pub fn content_length(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0; 20];
    header(out, b"content-length", crate::head::format_u64(n, &mut digits));
}

/// Writes what `gathered` holds to `io`, and flushes `io` (TLS streams hold bytes until then).
pub async fn flush<I: AsyncWrite + Unpin>(io: &mut I, gathered: &mut Vec<u8>) -> io::Result<()> {
    if !gathered.is_empty() {
        io.write_all(gathered).await?;
        gathered.clear();
    }
    io.flush().await
}

/// Adds one piece of a message body, in chunked framing when `chunked`.
pub async fn put_data<I: AsyncWrite + Unpin>(
    io: &mut I,
    gathered: &mut Vec<u8>,
    data: Bytes,
    chunked: bool,
) -> io::Result<()> {
    if data.is_empty() {
        // An empty chunk would end a chunked body.
        return Ok(());
    }
    if chunked {
        gathered.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    }
    if data.len() >= WRITE_CHUNK {
        flush(io, gathered).await?;
        io.write_all(&data).await?;
    } else {
        gathered.extend_from_slice(&data);
    }
    if chunked {
        gathered.extend_from_slice(b"\r\n");
    }
    if gathered.len() >= WRITE_CHUNK {
        flush(io, gathered).await?;
    }
    Ok(())
}

/// Writes a request line and headers into `out`, with `framing` as the body's delimiting: the request's own
/// `content-length`, `transfer-encoding` and `connection` are replaced by it.
pub fn request_head(out: &mut Vec<u8>, parts: &http::request::Parts, framing: Framing) {
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
        Framing::Length(n) => content_length(out, n),
        Framing::Chunked => header(out, b"transfer-encoding", b"chunked"),
        Framing::Empty => {
            // Methods that usually carry a body say it is empty, so the peer does not wait for one.
            if matches!(parts.method, Method::POST | Method::PUT | Method::PATCH) {
                header(out, b"content-length", b"0");
            }
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    #[test]
    fn request_heads_carry_the_callers_framing() {
        let req = Request::post("/v2/models/m/infer?x=1")
            .header("host", "models:8000")
            .header("content-length", "999")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        request_head(&mut out, &parts, Framing::Length(5));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v2/models/m/infer?x=1 HTTP/1.1\r\nhost: models:8000\r\ncontent-length: 5\r\n\r\n"
        );
        let mut out = Vec::new();
        request_head(&mut out, &parts, Framing::Empty);
        assert!(String::from_utf8(out).unwrap().contains("content-length: 0\r\n"));
        let (get, ()) = Request::get("/").body(()).unwrap().into_parts();
        let mut out = Vec::new();
        request_head(&mut out, &get, Framing::Empty);
        assert_eq!(String::from_utf8(out).unwrap(), "GET / HTTP/1.1\r\n\r\n");
    }
}

//! Bytes on their way out of an HTTP/1.1 connection, server or client side: small pieces are gathered into
//! one write; a body piece of at least [`WRITE_CHUNK`] bytes is written as it is, without a copy.

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

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

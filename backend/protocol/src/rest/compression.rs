//! gzip and deflate bodies (`Content-Encoding` / `Accept-Encoding`), with a cap on decompressed size.

use std::io::{Read, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::error::ServeError;

/// A body encoding the server reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// No compression.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
    /// HTTP "deflate": zlib-wrapped deflate (RFC 1950), which is what tritonclient sends.
    Deflate,
}

impl ContentEncoding {
    /// The header spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentEncoding::Identity => "identity",
            ContentEncoding::Gzip => "gzip",
            ContentEncoding::Deflate => "deflate",
        }
    }
}

/// The encoding of a request body from its `Content-Encoding` header; anything but gzip, deflate or
/// identity is refused (Triton answers UNSUPPORTED too).
pub fn request_encoding(content_encoding: Option<&str>) -> Result<ContentEncoding, ServeError> {
    match content_encoding.map(str::trim) {
        None | Some("") | Some("identity") => Ok(ContentEncoding::Identity),
        Some(v) if v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip") => {
            Ok(ContentEncoding::Gzip)
        }
        Some(v) if v.eq_ignore_ascii_case("deflate") => Ok(ContentEncoding::Deflate),
        Some(v) => Err(ServeError::unsupported(format!(
            "unsupported Content-Encoding '{v}'; this server reads gzip, deflate or identity"
        ))),
    }
}

/// The encoding to answer with, from the request's `Accept-Encoding`: gzip or deflate when the client
/// lists one (with a non-zero q-value), in the client's order; identity otherwise.
pub fn response_encoding(accept_encoding: Option<&str>) -> ContentEncoding {
    let Some(accept) = accept_encoding else {
        return ContentEncoding::Identity;
    };
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
        });
        if refused {
            continue;
        }
        if name.eq_ignore_ascii_case("gzip") {
            return ContentEncoding::Gzip;
        }
        if name.eq_ignore_ascii_case("deflate") {
            return ContentEncoding::Deflate;
        }
    }
    ContentEncoding::Identity
}

/// Decompresses a body, refusing to produce more than `max_bytes` (a gzip bomb stops at the cap, the
/// memory it used is bounded by it).
pub fn decompress(encoding: ContentEncoding, body: Bytes, max_bytes: usize) -> Result<Bytes, ServeError> {
    let reader: Box<dyn Read + '_> = match encoding {
        ContentEncoding::Identity => return Ok(body),
        ContentEncoding::Gzip => Box::new(GzDecoder::new(&body[..])),
        ContentEncoding::Deflate => Box::new(ZlibDecoder::new(&body[..])),
    };
    let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(max_bytes));
    reader.take(limit).read_to_end(&mut out).map_err(|e| {
        ServeError::invalid_argument(format!(
            "the {} request body could not be decompressed: {e}",
            encoding.as_str()
        ))
    })?;
    if out.len() > max_bytes {
        return Err(ServeError::invalid_argument(format!(
            "the {} request body decompresses to more than the limit of {max_bytes} bytes",
            encoding.as_str()
        )));
    }
    Ok(Bytes::from(out))
}

/// Compresses body chunks into one buffer.
pub fn compress(encoding: ContentEncoding, chunks: &[Bytes]) -> Result<Bytes, ServeError> {
    let fail = |e: std::io::Error| ServeError::internal(format!("failed to compress the response: {e}"));
    let total: usize = chunks.iter().map(Bytes::len).sum();
    match encoding {
        ContentEncoding::Identity => {
            let mut out = Vec::with_capacity(total);
            for c in chunks {
                out.extend_from_slice(c);
            }
            Ok(Bytes::from(out))
        }
        ContentEncoding::Gzip => {
            let mut enc = GzEncoder::new(Vec::with_capacity(total / 2 + 64), Compression::fast());
            for c in chunks {
                enc.write_all(c).map_err(fail)?;
            }
            enc.finish().map(Bytes::from).map_err(fail)
        }
        ContentEncoding::Deflate => {
            let mut enc = ZlibEncoder::new(Vec::with_capacity(total / 2 + 64), Compression::fast());
            for c in chunks {
                enc.write_all(c).map_err(fail)?;
            }
            enc.finish().map(Bytes::from).map_err(fail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_encodings() {
        for enc in [ContentEncoding::Gzip, ContentEncoding::Deflate] {
            let data = Bytes::from(b"hello hello hello".repeat(10));
            let z = compress(enc, &[data.slice(..5), data.slice(5..)]).unwrap();
            assert_eq!(decompress(enc, z, 1 << 20).unwrap(), data);
        }
    }

    #[test]
    fn gzip_bombs_stop_at_the_cap() {
        let zeros = vec![0u8; 10 << 20];
        let z = compress(ContentEncoding::Gzip, &[Bytes::from(zeros)]).unwrap();
        assert!(z.len() < 100_000);
        let e = decompress(ContentEncoding::Gzip, z, 1 << 20).unwrap_err();
        assert!(
            e.message.contains("more than the limit of 1048576 bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn garbage_is_a_client_error() {
        let e = decompress(ContentEncoding::Gzip, Bytes::from_static(b"not gzip"), 1024).unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::InvalidArgument);
        assert!(e.message.contains("could not be decompressed"));
    }

    #[test]
    fn negotiates_encodings() {
        assert_eq!(request_encoding(None).unwrap(), ContentEncoding::Identity);
        assert_eq!(request_encoding(Some("gzip")).unwrap(), ContentEncoding::Gzip);
        assert_eq!(
            request_encoding(Some("deflate")).unwrap(),
            ContentEncoding::Deflate
        );
        assert_eq!(
            request_encoding(Some("br")).unwrap_err().code,
            crate::ErrorCode::Unsupported
        );
        assert_eq!(
            response_encoding(Some("br, deflate, gzip")),
            ContentEncoding::Deflate
        );
        assert_eq!(
            response_encoding(Some("gzip;q=0, deflate")),
            ContentEncoding::Deflate
        );
        assert_eq!(response_encoding(Some("identity")), ContentEncoding::Identity);
        assert_eq!(response_encoding(None), ContentEncoding::Identity);
    }
}

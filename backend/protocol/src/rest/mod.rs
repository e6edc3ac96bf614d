//! The REST (HTTP/JSON) side of the protocol: infer bodies with the binary tensor extension, compressed
//! bodies, the repository extension's bodies, and the JSON of every other endpoint.

mod compression;
mod json_tensor;
mod repository;
mod request;
mod response;

pub use compression::{ContentEncoding, compress, decompress, request_encoding, response_encoding};
pub(crate) use repository::check_files as check_load_files;
pub use repository::{decode_index_request, decode_load_request, decode_unload_request};
pub use request::{DecodedInfer, decode_infer_request, raw_infer_request};
pub use response::{EncodedInferResponse, OutputFormat, encode_infer_response};

use crate::error::ServeError;

/// The header giving the length of the JSON part of a body that carries binary tensors.
pub const INFER_HEADER_CONTENT_LENGTH: &str = "inference-header-content-length";

/// Checks `Inference-Header-Content-Length` against the body length: `None` when the header is absent
/// (the whole body is JSON); `Some(0)` means the body is one raw input.
pub fn parse_header_length(value: Option<&[u8]>, body_length: usize) -> Result<Option<usize>, ServeError> {
    let Some(raw) = value else { return Ok(None) };
    let text = std::str::from_utf8(raw).unwrap_or("").trim();
    let n: usize = text.parse().map_err(|_| {
        ServeError::invalid_argument(format!(
            "Unable to parse Inference-Header-Content-Length, got: '{}'; it must be the byte length of the \
             JSON part of the body",
            String::from_utf8_lossy(raw)
        ))
    })?;
    if n > body_length {
        return Err(ServeError::invalid_argument(format!(
            "Inference-Header-Content-Length is {n} but the body has only {body_length} bytes; it must be \
             between 0 and the body length"
        )));
    }
    Ok(Some(n))
}

/// `{"live": bool}`, the body of `GET /v2/health/live` (the kserve SDK reads it; tritonclient reads the status).
pub fn live_body(live: bool) -> Vec<u8> {
    format!("{{\"live\":{live}}}").into_bytes()
}

/// `{"ready": bool}`, the body of `GET /v2/health/ready` and `GET /v2/models/{m}/ready`.
pub fn ready_body(ready: bool) -> Vec<u8> {
    format!("{{\"ready\":{ready}}}").into_bytes()
}

#[cfg(test)]
mod tests;

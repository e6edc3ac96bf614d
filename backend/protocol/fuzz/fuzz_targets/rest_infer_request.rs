//! Any body through the REST infer decoder (after the body decompressor): a request, or a client error
//! that says what is wrong; never a panic, never a server error, and every decoded tensor holds exactly
//! the bytes its datatype and shape call for.
//!
//! The first byte picks the framing: bit 0 set means an `Inference-Header-Content-Length` taken from the
//! next two bytes (clamped to the body), bits 1-2 pick identity, gzip or deflate for the rest.
#![no_main]

use bytes::Bytes;
use infergate_protocol::rest::{ContentEncoding, DecodedInfer, decode_infer_request, decompress, parse_header_length};
use infergate_protocol::{ErrorCode, validate_tensor};
use libfuzzer_sys::fuzz_target;

/// The decompressed-size cap, small so a bomb in the corpus costs milliseconds.
const MAX_BODY: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (declared, rest) = if mode & 1 == 1 && rest.len() >= 2 {
        (Some(u16::from_le_bytes([rest[0], rest[1]]) as usize), &rest[2..])
    } else {
        (None, rest)
    };
    let encoding = match (mode >> 1) & 3 {
        1 => ContentEncoding::Gzip,
        2 => ContentEncoding::Deflate,
        _ => ContentEncoding::Identity,
    };
    let body = match decompress(encoding, Bytes::copy_from_slice(rest), MAX_BODY) {
        Ok(b) => {
            assert!(b.len() <= MAX_BODY, "the decompressor passed its cap");
            b
        }
        Err(e) => {
            assert_eq!(e.code, ErrorCode::InvalidArgument);
            return;
        }
    };
    let header = declared.map(|n| n.to_string());
    let header_length = match parse_header_length(header.as_deref().map(str::as_bytes), body.len()) {
        Ok(h) => h,
        Err(e) => {
            assert!(declared.is_some_and(|n| n > body.len()), "refused a length inside the body: {e:?}");
            return;
        }
    };
    match decode_infer_request("m", None, body, header_length) {
        Ok(DecodedInfer::Request(request, _)) => {
            for input in &request.inputs {
                validate_tensor(&input.name, input.datatype, &input.shape, input.data.as_bytes())
                    .unwrap_or_else(|e| panic!("decoded input '{}' disagrees with its shape: {e:?}", input.name));
            }
        }
        Ok(DecodedInfer::Raw(raw)) => assert_eq!(header_length, Some(0), "raw body of {} bytes", raw.len()),
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(e.code.http_status().is_client_error(), "{e:?} is not a client error");
        }
    }
});

//! Response heads and framing: any bytes, whole or in two reads, give the same head or error; the framing
//! chosen never reads a length body past its length, and a message with both a coding and a length is
//! never kept alive.

#![no_main]

use bytes::BytesMut;
use infergate_http1::body::{Decoded, Decoder};
use infergate_http1::response::ResponseParser;
use libfuzzer_sys::fuzz_target;

const MAX_HEAD_BYTES: usize = 4096;

/// A parse's outcome, comparable: the head and what is left, "partial", or "error" (which refusal may depend
/// on where the bytes were cut; that there is one may not).
fn describe(
    r: &Result<Option<infergate_http1::response::ResponseHead>, infergate_http1::Error>,
    rest: &[u8],
) -> String {
    match r {
        Ok(Some(h)) => format!("{h:?} {rest:?}"),
        Ok(None) => "partial".into(),
        Err(_) => "error".into(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let split = if input.is_empty() { 0 } else { usize::from(flags >> 1) * input.len() / 127 };

    let mut buf = BytesMut::from(input);
    let whole = ResponseParser::new(MAX_HEAD_BYTES).parse(&mut buf);
    let whole_text = describe(&whole, &buf);

    let mut parser = ResponseParser::new(MAX_HEAD_BYTES);
    let mut pieces_buf = BytesMut::from(&input[..split]);
    let mut pieces = parser.parse(&mut pieces_buf);
    pieces_buf.extend_from_slice(&input[split..]);
    if matches!(pieces, Ok(None)) {
        pieces = parser.parse(&mut pieces_buf);
    }
    assert_eq!(whole_text, describe(&pieces, &pieces_buf), "split at {split}");

    let Ok(Some(head)) = whole else {
        return;
    };
    let Ok((mut decoder, keep_alive)) = head.framing(head_request) else {
        return;
    };
    let te = head.headers.contains_key(http::header::TRANSFER_ENCODING);
    let cl = head.headers.contains_key(http::header::CONTENT_LENGTH);
    let bodyless = head_request
        || head.status.is_informational()
        || head.status == http::StatusCode::NO_CONTENT
        || head.status == http::StatusCode::NOT_MODIFIED;
    if te && cl && !bodyless {
        assert!(!keep_alive, "a response with both a coding and a length kept its connection");
    }
    let limit = match decoder {
        Decoder::Length { remaining } => Some(remaining),
        _ => None,
    };
    let mut body = 0u64;
    for _ in 0..4096 {
        match decoder.decode(&mut buf, 1024) {
            Ok(Decoded::Data(d)) => body += d.len() as u64,
            _ => break,
        }
    }
    if let Some(n) = limit {
        assert!(body <= n, "read {body} bytes of a {n}-byte body");
    }
});

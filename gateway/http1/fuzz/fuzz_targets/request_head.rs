//! Request heads: any bytes, whole or cut in two anywhere, parse to the same head or are refused alike; the
//! head scan never misses an end the parser finds; a parsed head's framing is one the gateway can act on.

#![no_main]

use bytes::BytesMut;
use infergate_http1::head::{Framing, HeadScan, RequestHead, RequestParser};
use libfuzzer_sys::fuzz_target;

const MAX_HEADERS: usize = 32;
const MAX_HEAD_BYTES: usize = 4096;

/// What a parse gave, comparable: the head's parts, or the error.
fn outcome(r: Result<Option<RequestHead>, infergate_http1::Error>, rest: &[u8]) -> String {
    match r {
        Ok(Some(h)) => format!(
            "{} {} {:?} {:?} {:?} ka={} ec={} rest={:?}",
            h.request.method(),
            h.request.uri(),
            h.request.version(),
            h.request.headers(),
            h.framing,
            h.keep_alive,
            h.expect_continue,
            rest
        ),
        Ok(None) => "partial".into(),
        // Which refusal may differ with where the bytes were cut (a head cut past the size limit is "too
        // large" before the parser reaches a bad byte further on); that it is refused may not.
        Err(_) => "error".into(),
    }
}

/// A head that parsed is framed one way only: chunked with no length, or one agreed length with no coding.
fn check_framing(head: &RequestHead) {
    let headers = head.request.headers();
    let te = headers.contains_key(http::header::TRANSFER_ENCODING);
    let lengths: Vec<&[u8]> = headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    match head.framing {
        Framing::Chunked => assert!(te && lengths.is_empty()),
        Framing::Length(n) => {
            assert!(!te);
            let value = |l: &[u8]| std::str::from_utf8(l).ok().and_then(|t| t.parse::<u64>().ok());
            assert!(lengths.iter().all(|l| value(l) == Some(n)), "{lengths:?} read as {n}");
        }
        Framing::Empty => assert!(!te && lengths.iter().all(|l| l.iter().all(|&b| b == b'0'))),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let whole = {
        let mut buf = BytesMut::from(input);
        let r = RequestParser::new(MAX_HEADERS, MAX_HEAD_BYTES).parse(&mut buf);
        if let Ok(Some(head)) = &r {
            check_framing(head);
        }
        outcome(r, &buf)
    };
    // The same bytes in two reads.
    let split = if input.is_empty() { 0 } else { usize::from(cut) * input.len() / 255 };
    let mut parser = RequestParser::new(MAX_HEADERS, MAX_HEAD_BYTES);
    let mut buf = BytesMut::from(&input[..split]);
    let first = parser.parse(&mut buf);
    let pieces = match first {
        Ok(None) => {
            buf.extend_from_slice(&input[split..]);
            let r = parser.parse(&mut buf);
            outcome(r, &buf)
        }
        // Done on the first piece: the whole input must agree, with the rest of the bytes after it.
        other => {
            buf.extend_from_slice(&input[split..]);
            outcome(other, &buf)
        }
    };
    assert_eq!(whole, pieces, "split at {split}");

    // httparse finding a complete head means the scan finds its end no later.
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    if let Ok(httparse::Status::Complete(len)) = httparse::Request::new(&mut headers).parse(input) {
        assert!(HeadScan::default().found_end(&input[..len]), "the scan missed the end at {len}");
    }

});

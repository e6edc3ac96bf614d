//! The chunked decoder: the same bytes cut anywhere decode to the same body, the same end and the same
//! leftover (split-point invariance), and a broken body is broken whatever the cuts.

#![no_main]

use bytes::BytesMut;
use infergate_http1::body::{Decoded, Decoder};
use libfuzzer_sys::fuzz_target;

const MAX_TRAILER_BYTES: usize = 1024;

/// Feeds `input` to a chunked decoder in pieces ending at `cuts`; returns the body, how it ended and what
/// was left in the buffer.
fn decode(input: &[u8], cuts: &[usize]) -> (Vec<u8>, String, Vec<u8>) {
    let mut decoder = Decoder::chunked();
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    let mut ends = cuts.iter().copied().chain(std::iter::once(input.len()));
    loop {
        match decoder.decode(&mut buf, MAX_TRAILER_BYTES) {
            Ok(Decoded::Data(d)) => {
                assert!(!d.is_empty(), "an empty piece of body");
                body.extend_from_slice(&d);
            }
            Ok(Decoded::End) => {
                // What follows the body, fed or not yet fed, is left for the next message.
                buf.extend_from_slice(&input[fed..]);
                return (body, "end".into(), buf.to_vec());
            }
            Err(e) => return (body, format!("error {e}"), Vec::new()),
            Ok(Decoded::NeedMore) => match ends.next() {
                Some(end) => {
                    let end = end.clamp(fed, input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                None => return (body, "needs more".into(), Vec::new()),
            },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first bytes choose where to cut, the rest is the body.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8).min(rest.len());
    let (cut_bytes, input) = rest.split_at(n);
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|&c| usize::from(c) * input.len() / 255)
        .collect();
    cuts.sort_unstable();
    let whole = decode(input, &[]);
    let pieces = decode(input, &cuts);
    let one_by_one = decode(input, &(0..input.len()).collect::<Vec<_>>());
    // A broken body keeps what was decoded before the break; where it broke may differ only in how much of
    // the good body before it had been handed out, never in the verdict.
    assert_eq!(whole.1.starts_with("error"), pieces.1.starts_with("error"), "cuts {cuts:?}");
    assert_eq!(whole.1.starts_with("error"), one_by_one.1.starts_with("error"));
    if !whole.1.starts_with("error") {
        assert_eq!(whole, pieces, "cuts {cuts:?}");
        assert_eq!(whole, one_by_one);
    }
});

//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte frame header, reading frames out of a buffer, and appending
//! the frames a client sends to a write buffer.

use bytes::{Buf, Bytes, BytesMut};

use super::error::Reason;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame header length.
pub(crate) const HEADER_LEN: usize = 9;

/// The largest frame payload before SETTINGS_MAX_FRAME_SIZE says otherwise, and what we accept.
pub(crate) const DEFAULT_MAX_FRAME_SIZE: u32 = 1 << 14;

/// Frame types (RFC 9113 §6).
pub(crate) mod kind {
    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const PRIORITY: u8 = 0x2;
    pub(crate) const RST_STREAM: u8 = 0x3;
    pub(crate) const SETTINGS: u8 = 0x4;
    pub(crate) const PUSH_PROMISE: u8 = 0x5;
    pub(crate) const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    pub(crate) const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub(crate) mod flag {
    pub(crate) const END_STREAM: u8 = 0x1;
    pub(crate) const ACK: u8 = 0x1;
    pub(crate) const END_HEADERS: u8 = 0x4;
    pub(crate) const PADDED: u8 = 0x8;
    pub(crate) const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub(crate) mod setting {
    pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
    pub(crate) const ENABLE_PUSH: u16 = 0x2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// One frame read off the connection.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
    pub(crate) payload: Bytes,
}

/// Takes the next whole frame off the front of `buf`; `Ok(None)` when it has not all arrived. A frame
/// longer than `max_payload` is a connection error (FRAME_SIZE_ERROR).
pub(crate) fn take(buf: &mut BytesMut, max_payload: u32) -> Result<Option<Frame>, Reason> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u32::from(buf[0]) << 16 | u32::from(buf[1]) << 8 | u32::from(buf[2]);
    if len > max_payload {
        return Err(Reason::FRAME_SIZE_ERROR);
    }
    let total = HEADER_LEN + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let kind = buf[3];
    let flags = buf[4];
    let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
    let mut frame = buf.split_to(total);
    frame.advance(HEADER_LEN);
    Ok(Some(Frame {
        kind,
        flags,
        stream,
        payload: frame.freeze(),
    }))
}

/// Removes the padding of a PADDED frame (RFC 9113 §6.1): what is left after the pad-length byte, minus the
/// padding. `None` when the padding is longer than the payload (a PROTOCOL_ERROR).
pub(crate) fn strip_padding(flags: u8, mut payload: Bytes) -> Option<Bytes> {
    if flags & flag::PADDED == 0 {
        return Some(payload);
    }
    let pad = usize::from(*payload.first()?);
    payload.advance(1);
    let len = payload.len().checked_sub(pad)?;
    payload.truncate(len);
    Some(payload)
}

/// Appends a frame header.
pub(crate) fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = len as u32;
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Starts a HEADERS frame: room for its frame header, to be filled in by [`finish_headers`] once the block
/// after it is encoded. Returns where the frame starts.
pub(crate) fn begin_headers(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    at
}

/// Completes the HEADERS frame begun at `at`, whose header block follows it to the end of `out`: one frame
/// when the block fits `max_frame`, else HEADERS and CONTINUATION frames.
pub(crate) fn finish_headers(out: &mut Vec<u8>, at: usize, stream: u32, end_stream: bool, max_frame: usize) {
    let block_len = out.len() - at - HEADER_LEN;
    let end = if end_stream { flag::END_STREAM } else { 0 };
    if block_len <= max_frame {
        let mut header = Vec::with_capacity(HEADER_LEN);
        head(
            &mut header,
            block_len,
            kind::HEADERS,
            end | flag::END_HEADERS,
            stream,
        );
        out[at..at + HEADER_LEN].copy_from_slice(&header);
        return;
    }
    // Rare: split the block. Copy it out and append the frames in turn.
    let block = out.split_off(at + HEADER_LEN);
    out.truncate(at);
    let mut chunks = block.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let (kind, mut flags) = if first {
            (kind::HEADERS, end)
        } else {
            (kind::CONTINUATION, 0)
        };
        if last {
            flags |= flag::END_HEADERS;
        }
        head(out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
        first = false;
    }
}

/// Appends a DATA frame.
pub(crate) fn data(out: &mut Vec<u8>, stream: u32, payload: &[u8], end_stream: bool) {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    head(out, payload.len(), kind::DATA, flags, stream);
    out.extend_from_slice(payload);
}

/// Appends a SETTINGS frame with `values`.
pub(crate) fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    head(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends an acknowledgement of the peer's SETTINGS.
pub(crate) fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a WINDOW_UPDATE frame.
pub(crate) fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a RST_STREAM frame.
pub(crate) fn rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// Appends a PING frame (`ack`: the answer to the peer's).
pub(crate) fn ping(out: &mut Vec<u8>, payload: [u8; 8], ack: bool) {
    head(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

/// Appends a GOAWAY frame.
pub(crate) fn goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// Reads a big-endian u32 at `at` (the caller checked the length).
pub(crate) fn be_u32(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([payload[at], payload[at + 1], payload[at + 2], payload[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_only_whole() {
        let mut out = Vec::new();
        data(&mut out, 3, b"hello", true);
        let mut buf = BytesMut::from(&out[..out.len() - 1]);
        assert!(take(&mut buf, 16384).unwrap().is_none(), "one byte short");
        buf.extend_from_slice(&out[out.len() - 1..]);
        let f = take(&mut buf, 16384).unwrap().unwrap();
        assert_eq!((f.kind, f.flags, f.stream), (kind::DATA, flag::END_STREAM, 3));
        assert_eq!(&f.payload[..], b"hello");
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_frame_is_a_frame_size_error() {
        let mut out = Vec::new();
        data(&mut out, 1, &[0u8; 20], false);
        let mut buf = BytesMut::from(&out[..]);
        assert_eq!(take(&mut buf, 16).unwrap_err(), Reason::FRAME_SIZE_ERROR);
    }

    #[test]
    fn padding_is_removed_and_overlong_padding_refused() {
        let padded = Bytes::from_static(&[2, b'a', b'b', 0, 0]);
        assert_eq!(&strip_padding(flag::PADDED, padded).unwrap()[..], b"ab");
        assert!(strip_padding(flag::PADDED, Bytes::from_static(&[5, b'a'])).is_none());
        assert!(strip_padding(flag::PADDED, Bytes::new()).is_none());
    }

    #[test]
    fn a_long_header_block_is_split_into_continuations() {
        let mut out = b"xx".to_vec();
        let at = begin_headers(&mut out);
        out.extend_from_slice(&[7u8; 25]);
        finish_headers(&mut out, at, 5, true, 10);
        assert_eq!(&out[..2], b"xx");
        let mut buf = BytesMut::from(&out[2..]);
        let f1 = take(&mut buf, 10).unwrap().unwrap();
        let f2 = take(&mut buf, 10).unwrap().unwrap();
        let f3 = take(&mut buf, 10).unwrap().unwrap();
        assert_eq!(
            (f1.kind, f1.flags, f1.payload.len()),
            (kind::HEADERS, flag::END_STREAM, 10)
        );
        assert_eq!((f2.kind, f2.flags, f2.payload.len()), (kind::CONTINUATION, 0, 10));
        assert_eq!(
            (f3.kind, f3.flags, f3.payload.len()),
            (kind::CONTINUATION, flag::END_HEADERS, 5)
        );
        assert!(buf.is_empty());
    }
}

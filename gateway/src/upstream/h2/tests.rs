//! What the client writes on the wire, read back frame by frame from an in-memory connection.

use std::sync::Arc;

use http::{Request, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

use super::*;
use crate::headers::ensure_request_id;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const END_STREAM_AND_HEADERS: u8 = 0x5;

/// Reads one frame: type, stream id, payload.
async fn read_frame(io: &mut DuplexStream) -> (u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.unwrap();
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await.unwrap();
    (head[3], stream, payload)
}

async fn write_frame(io: &mut DuplexStream, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    io.write_all(&frame).await.unwrap();
}

/// An HPACK integer with an `prefix`-bit prefix (RFC 7541 §5.1).
fn hpack_int(block: &[u8], pos: &mut usize, prefix: u32) -> usize {
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(block[*pos]) & max;
    *pos += 1;
    if value < max {
        return value;
    }
    let mut shift = 0;
    loop {
        let b = block[*pos];
        *pos += 1;
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return value;
        }
    }
}

fn skip_hpack_string(block: &[u8], pos: &mut usize) {
    let len = hpack_int(block, pos, 7);
    *pos += len;
}

/// How a header block represents its fields (RFC 7541 §6): `'i'` indexed, `'a'` literal added to the table,
/// `'w'` literal without indexing, `'n'` never-indexed literal; each with its name's table index (0: the name
/// is spelled out).
fn representations(block: &[u8]) -> Vec<(char, usize)> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < block.len() {
        let b = block[pos];
        if b & 0x80 != 0 {
            out.push(('i', hpack_int(block, &mut pos, 7)));
            continue;
        }
        if b & 0xe0 == 0x20 {
            hpack_int(block, &mut pos, 5); // table size update
            continue;
        }
        let (kind, prefix) = match b & 0xf0 {
            0x40..=0x70 => ('a', 6),
            0x10 => ('n', 4),
            _ => ('w', 4),
        };
        let name = hpack_int(block, &mut pos, prefix);
        if name == 0 {
            skip_hpack_string(block, &mut pos);
        }
        skip_hpack_string(block, &mut pos);
        out.push((kind, name));
    }
    out
}

fn request() -> Request<Body> {
    let mut req = Request::builder()
        .uri("http://up.test/v2/models/m/infer")
        .version(Version::HTTP_2)
        .body(crate::proxy::empty())
        .unwrap();
    ensure_request_id(req.headers_mut());
    req
}

#[tokio::test]
async fn request_ids_go_never_indexed_with_their_name_taken_from_the_table() {
    let (client, mut server) = duplex(1 << 16);
    let conn = Arc::new(H2Conn::handshake(client).await.unwrap());
    let mut preface = [0u8; 24];
    server.read_exact(&mut preface).await.unwrap();
    assert_eq!(preface, PREFACE);
    write_frame(&mut server, SETTINGS, 0, 0, &[]).await;

    let mut blocks = Vec::new();
    for _ in 0..3 {
        let c = Arc::clone(&conn);
        let sent = tokio::spawn(async move { c.send(request()).await.is_ok() });
        let (stream, block) = loop {
            match read_frame(&mut server).await {
                (HEADERS, stream, payload) => break (stream, payload),
                (SETTINGS, 0, payload) if payload.is_empty() => {}
                (SETTINGS, 0, _) => write_frame(&mut server, SETTINGS, 0x1, 0, &[]).await,
                _ => {}
            }
        };
        // `:status: 200` is entry 8 of the static table.
        write_frame(&mut server, HEADERS, END_STREAM_AND_HEADERS, stream, &[0x88]).await;
        assert!(sent.await.unwrap(), "the request got its response");
        blocks.push(representations(&block));
    }

    // The first request's id enters the table (so its name is there); no field of it is never-indexed.
    assert!(!blocks[0].iter().any(|(kind, _)| *kind == 'n'), "{:?}", blocks[0]);
    // Later ids: never-indexed (a value seen once must not crowd the table), the name a reference to it.
    for block in &blocks[1..] {
        let ids: Vec<_> = block.iter().filter(|(kind, _)| *kind == 'n').collect();
        assert_eq!(ids.len(), 1, "one never-indexed field, the request id: {block:?}");
        assert!(
            ids[0].1 > 61,
            "the name refers to the dynamic table, not spelled out: {block:?}"
        );
        assert!(
            !block.iter().any(|(kind, _)| *kind == 'a'),
            "nothing new enters the table: {block:?}"
        );
    }
}

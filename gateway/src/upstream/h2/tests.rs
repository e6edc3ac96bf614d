//! What the client writes on the wire, read back frame by frame from an in-memory connection.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

use super::*;
use crate::headers::ensure_request_id;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const END_STREAM_AND_HEADERS: u8 = 0x5;

/// Reads one frame: type, flags, stream id, payload.
async fn read_frame(io: &mut DuplexStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.unwrap();
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await.unwrap();
    (head[3], head[4], stream, payload)
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
    let (conn, mut server) = peer(&[]).await;

    let mut blocks = Vec::new();
    for _ in 0..3 {
        let c = Arc::clone(&conn);
        let sent = tokio::spawn(async move { c.send(request()).await.is_ok() });
        let (stream, block) = loop {
            match read_frame(&mut server).await {
                (HEADERS, _, stream, payload) => break (stream, payload),
                (SETTINGS, _, 0, payload) if payload.is_empty() => {}
                (SETTINGS, _, 0, _) => write_frame(&mut server, SETTINGS, 0x1, 0, &[]).await,
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

/// A scripted upstream on the other end of an in-memory connection: it has read the client's preface and
/// sent its own SETTINGS (with `settings`).
async fn peer(settings: &[(u16, u32)]) -> (Arc<H2Conn>, DuplexStream) {
    peer_over(1 << 20, settings).await
}

/// [`peer`] over a pipe that holds `pipe` bytes each way.
async fn peer_over(pipe: usize, settings: &[(u16, u32)]) -> (Arc<H2Conn>, DuplexStream) {
    let (client, mut server) = duplex(pipe);
    let handshake = tokio::spawn(H2Conn::handshake(client));
    let mut preface = [0u8; 24];
    server.read_exact(&mut preface).await.unwrap();
    assert_eq!(preface, PREFACE);
    let mut payload = Vec::new();
    for (id, value) in settings {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    write_frame(&mut server, SETTINGS, 0, 0, &payload).await;
    let conn = handshake.await.unwrap().ok().unwrap();
    (Arc::new(conn), server)
}

/// Reads frames until one of `kind` arrives, skipping the rest: its stream, flags and payload.
async fn next_of(server: &mut DuplexStream, kind: u8) -> (u32, u8, Vec<u8>) {
    loop {
        let (k, flags, stream, payload) = read_frame(server).await;
        if k == kind {
            return (stream, flags, payload);
        }
    }
}

/// A literal header field without indexing whose name is spelled out (RFC 7541 §6.2.2).
fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0x00, name.len() as u8];
    out.extend_from_slice(name.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
    out
}

fn post(body: &'static [u8]) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("http://up.test/v2/models/m/infer")
        .version(Version::HTTP_2)
        .body(crate::proxy::full(Bytes::from_static(body)))
        .unwrap()
}

type Sent = tokio::task::JoinHandle<Result<(u16, Bytes, Option<http::HeaderMap>), FailureKind>>;

/// Sends `req` on `conn` in a task that reads the whole response: status, body, trailers; or the failure.
fn spawn_send(conn: &Arc<H2Conn>, req: Request<Body>) -> Sent {
    let c = Arc::clone(conn);
    tokio::spawn(async move {
        let resp = match c.send(req).await {
            Ok(r) => r,
            Err(SendFailure::Unsent(_, _)) => return Err(FailureKind::RefusedStream),
            Err(SendFailure::Failed(kind, _)) => return Err(kind),
        };
        let status = resp.status().as_u16();
        let collected = resp.into_body().collect().await.map_err(|_| FailureKind::Reset)?;
        let trailers = collected.trailers().cloned();
        Ok((status, collected.to_bytes(), trailers))
    })
}

#[tokio::test]
async fn a_response_split_over_continuation_padding_and_trailers_arrives_whole() {
    let (conn, mut server) = peer(&[]).await;
    let sent = spawn_send(&conn, post(b"ping"));
    let (stream, flags, _) = next_of(&mut server, HEADERS).await;
    assert_eq!(flags & END_STREAM, 0, "the body follows the head");
    let (data_stream, data_flags, body) = next_of(&mut server, DATA).await;
    assert_eq!(
        (data_stream, data_flags, &body[..]),
        (stream, END_STREAM, &b"ping"[..])
    );

    // The head in two pieces: HEADERS (padded) and CONTINUATION.
    let mut block = vec![0x88];
    block.extend(literal("x-model", "m"));
    let (first, rest) = block.split_at(2);
    let mut padded = vec![3];
    padded.extend_from_slice(first);
    padded.extend_from_slice(&[0, 0, 0]);
    write_frame(&mut server, HEADERS, PADDED, stream, &padded).await;
    write_frame(&mut server, CONTINUATION, END_HEADERS, stream, rest).await;
    write_frame(&mut server, DATA, 0, stream, b"hello ").await;
    write_frame(
        &mut server,
        DATA,
        PADDED,
        stream,
        &[2, b'w', b'o', b'r', b'l', b'd', 0, 0],
    )
    .await;
    write_frame(
        &mut server,
        HEADERS,
        END_STREAM_AND_HEADERS,
        stream,
        &literal("grpc-status", "0"),
    )
    .await;

    let (status, body, trailers) = sent.await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(&body[..], b"hello world");
    assert_eq!(trailers.unwrap()["grpc-status"], "0");
}

#[tokio::test]
async fn a_body_larger_than_the_window_waits_for_window_updates() {
    // The upstream allows 10 bytes per stream until it says more.
    let (conn, mut server) = peer(&[(0x4, 10)]).await;
    let body: &'static [u8] = b"0123456789abcdefghij";
    let req = Request::builder()
        .method("POST")
        .uri("http://up.test/x")
        .body(crate::proxy::boxed(http_body_util::StreamBody::new(
            futures::stream::iter([Ok::<_, crate::proxy::BoxError>(http_body::Frame::data(
                Bytes::from_static(body),
            ))]),
        )))
        .unwrap();
    let sent = spawn_send(&conn, req);
    let (stream, _, _) = next_of(&mut server, HEADERS).await;
    let (_, flags, first) = next_of(&mut server, DATA).await;
    assert_eq!((first.len(), flags), (10, 0), "only the window's worth goes out");
    write_frame(&mut server, WINDOW_UPDATE, 0, stream, &100u32.to_be_bytes()).await;
    let mut rest = Vec::new();
    loop {
        let (_, flags, data) = next_of(&mut server, DATA).await;
        rest.extend(data);
        if flags & END_STREAM != 0 {
            break;
        }
    }
    assert_eq!(rest, &body[10..]);
    write_frame(&mut server, HEADERS, END_STREAM_AND_HEADERS, stream, &[0x88]).await;
    assert_eq!(sent.await.unwrap().unwrap().0, 200);
}

#[tokio::test]
async fn refused_and_goaway_streams_fail_as_unprocessed_and_the_connection_stops_taking_streams() {
    let (conn, mut server) = peer(&[]).await;
    let first = spawn_send(&conn, post(b"a"));
    let (s1, _, _) = next_of(&mut server, HEADERS).await;
    let second = spawn_send(&conn, post(b"b"));
    let (s2, _, _) = next_of(&mut server, HEADERS).await;
    let third = spawn_send(&conn, post(b"c"));
    next_of(&mut server, HEADERS).await;
    write_frame(&mut server, RST_STREAM, 0, s1, &7u32.to_be_bytes()).await;
    assert_eq!(first.await.unwrap().unwrap_err(), FailureKind::RefusedStream);

    // GOAWAY naming s2 as the last stream it will process: s3 was never processed.
    let mut goaway = s2.to_be_bytes().to_vec();
    goaway.extend_from_slice(&0u32.to_be_bytes());
    write_frame(&mut server, GOAWAY, 0, 0, &goaway).await;
    assert_eq!(third.await.unwrap().unwrap_err(), FailureKind::RefusedStream);
    assert!(!conn.is_usable(), "no new streams after GOAWAY");
    // s2 still completes.
    write_frame(&mut server, HEADERS, END_STREAM_AND_HEADERS, s2, &[0x88]).await;
    assert_eq!(second.await.unwrap().unwrap().0, 200);
    assert!(matches!(
        conn.send(post(b"d")).await,
        Err(SendFailure::Unsent(_, _))
    ));
}

#[tokio::test]
async fn the_upstreams_stream_limit_queues_requests() {
    let (conn, mut server) = peer(&[(0x3, 1)]).await;
    // Let the SETTINGS be read before sending.
    let (_, flags, _) = next_of(&mut server, SETTINGS).await;
    assert_eq!(flags, 0, "the client's own SETTINGS");
    let (_, ack, _) = next_of(&mut server, SETTINGS).await;
    assert_eq!(ack, 1, "our SETTINGS acknowledged");
    let first = spawn_send(&conn, post(b"a"));
    let (s1, _, _) = next_of(&mut server, HEADERS).await;
    let second = spawn_send(&conn, post(b"b"));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!second.is_finished());
    write_frame(&mut server, HEADERS, END_STREAM_AND_HEADERS, s1, &[0x88]).await;
    assert_eq!(first.await.unwrap().unwrap().0, 200);
    let (s2, _, _) = next_of(&mut server, HEADERS).await;
    assert!(s2 > s1, "the second stream opened once the first ended");
    write_frame(&mut server, HEADERS, END_STREAM_AND_HEADERS, s2, &[0x88]).await;
    assert_eq!(second.await.unwrap().unwrap().0, 200);
}

#[tokio::test]
async fn pings_are_answered_and_a_dropped_request_resets_its_stream() {
    let (conn, mut server) = peer(&[]).await;
    write_frame(&mut server, PING, 0, 0, b"12345678").await;
    let (_, flags, payload) = next_of(&mut server, PING).await;
    assert_eq!((flags, &payload[..]), (1, &b"12345678"[..]));

    let pending = conn.send(post(b"x"));
    let (stream, _, _) = next_of(&mut server, HEADERS).await;
    drop(pending);
    let (reset, _, reason) = next_of(&mut server, RST_STREAM).await;
    assert_eq!((reset, &reason[..]), (stream, &8u32.to_be_bytes()[..]), "CANCEL");
}

#[tokio::test]
async fn data_beyond_the_stream_window_resets_the_stream() {
    let (conn, mut server) = peer(&[]).await;
    let c = Arc::clone(&conn);
    let response = tokio::spawn(async move { c.send(post(b"x")).await.ok().unwrap() });
    let (stream, _, _) = next_of(&mut server, HEADERS).await;
    write_frame(&mut server, HEADERS, END_HEADERS, stream, &[0x88]).await;
    // Nobody reads the body, so no window comes back: 2 MiB fill the stream's window, the next frame
    // overflows it.
    let body = response.await.unwrap().into_body();
    let chunk = vec![0u8; 16 << 10];
    for _ in 0..129 {
        write_frame(&mut server, DATA, 0, stream, &chunk).await;
    }
    let (reset, _, reason) = next_of(&mut server, RST_STREAM).await;
    assert_eq!(
        (reset, &reason[..]),
        (stream, &3u32.to_be_bytes()[..]),
        "FLOW_CONTROL_ERROR"
    );
    assert!(
        body.collect().await.is_err(),
        "the body ends in an error, not short"
    );
}

#[tokio::test]
async fn a_peer_that_is_not_http2_fails_the_handshake_naming_it() {
    let (client, mut server) = duplex(1 << 16);
    let handshake = tokio::spawn(H2Conn::handshake(client));
    let mut preface = [0u8; 24];
    server.read_exact(&mut preface).await.unwrap();
    server
        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let Err(e) = handshake.await.unwrap() else {
        panic!("the handshake succeeded");
    };
    assert!(e.to_string().contains("is it speaking HTTP/2"), "{e}");
    assert!(matches!(e, H2Error::NotHttp2), "{e:?}");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_keep_alive_ping_fails_waiting_requests_as_timeouts() {
    let (conn, mut server) = peer(&[]).await;
    let sent = spawn_send(&conn, post(b"x"));
    next_of(&mut server, HEADERS).await;
    // The upstream goes silent: a PING after the interval, and the request fails once it goes unanswered.
    let (_, flags, _) = next_of(&mut server, PING).await;
    assert_eq!(flags, 0);
    assert_eq!(sent.await.unwrap().unwrap_err(), FailureKind::Timeout);
    assert!(!conn.is_usable());
}

#[tokio::test(start_paused = true)]
async fn an_upstream_flooding_pings_it_does_not_read_the_answers_to_stalls_only_itself_until_keep_alive() {
    // A small pipe, so the client's answers back up once the upstream stops reading them: h2 reads no
    // further frame while an answer waits, so the flood costs the gateway neither memory nor CPU, and the
    // keep-alive PING, which cannot go out either, ends the connection.
    let (conn, mut server) = peer_over(64 << 10, &[]).await;
    let sent = spawn_send(&conn, post(b"x"));
    next_of(&mut server, HEADERS).await;
    let mut flood = Vec::new();
    for _ in 0..30_000 {
        flood.extend_from_slice(&[0, 0, 8, PING, 0, 0, 0, 0, 0]);
        flood.extend_from_slice(b"flooding");
    }
    let writer = tokio::spawn(async move {
        let _ = server.write_all(&flood).await;
        server
    });
    assert_eq!(sent.await.unwrap().unwrap_err(), FailureKind::Timeout);
    assert!(!conn.is_usable());
    drop(writer);
}

#[tokio::test]
async fn bodies_dropped_unread_give_their_bytes_back_to_the_connection_window() {
    // Three streams of 2 MiB each: 6 MiB, over the 5 MiB connection window unless the first two, abandoned
    // with their data unread, are counted as read.
    let (conn, mut server) = peer(&[]).await;
    // Our SETTINGS acknowledged: the 2 MiB stream window applies from here on.
    write_frame(&mut server, SETTINGS, 0x1, 0, &[]).await;
    let chunk = vec![1u8; 16 << 10];
    for round in 0..3 {
        let pending = conn.send(post(b"x"));
        let (stream, _, _) = next_of(&mut server, HEADERS).await;
        write_frame(&mut server, HEADERS, END_HEADERS, stream, &[0x88]).await;
        for i in 0..128 {
            // The first two stay open: dropping them abandons a response still arriving.
            let flags = if i == 127 && round == 2 { END_STREAM } else { 0 };
            write_frame(&mut server, DATA, flags, stream, &chunk).await;
        }
        // The PING's answer says the client has taken in everything before it.
        write_frame(&mut server, PING, 0, 0, b"barrier!").await;
        next_of(&mut server, PING).await;
        let body = pending.await.ok().unwrap().into_body();
        if round < 2 {
            drop(body);
        } else {
            let all = body
                .collect()
                .await
                .expect("the third body arrives whole")
                .to_bytes();
            assert_eq!(all.len(), 2 << 20);
        }
    }
}

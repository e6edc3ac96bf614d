//! Hostile HTTP/2 clients, spoken to with hand-written frames where a well-behaved client library would refuse:
//! a rapid-reset burst and a CONTINUATION flood end the connection with GOAWAY and never reach the upstream,
//! the configured stream limit is what clients are told, and an oversized header list gets 431. After each, the
//! gateway keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;
/// HPACK for `GET http://a/`: `:method GET`, `:scheme http`, `:path /` from the static table, `:authority a`.
const GET_BLOCK: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b'a'];
/// HPACK for one `x: y` header, a literal that is not indexed (so the flood never grows the table).
const X_HEADER: &[u8] = &[0x00, 0x01, b'x', 0x01, b'y'];

fn limits(up: std::net::SocketAddr) -> String {
    format!(
        "listeners:\n  limits:\n    max_header_bytes: 4KiB\n    h2_max_concurrent_streams: 7\n    h2_max_pending_accept_reset_streams: 5\n{}",
        one_route(up, "", "")
    )
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Opens an h2c connection and sends the preface and an empty SETTINGS frame.
async fn raw_h2(gw: &infergate_gateway::server::Gateway) -> (TcpStream, Vec<u8>) {
    let s = TcpStream::connect(gw.data_addr()).await.unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    (s, out)
}

/// Reads the server's frames until a GOAWAY, and returns its error code; fails the test if the connection
/// closes without one or nothing comes within 5 s.
async fn goaway_code(s: &mut TcpStream) -> u32 {
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        while buf.len() >= 9 {
            let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            if buf[3] == GOAWAY {
                return u32::from_be_bytes(buf[13..17].try_into().unwrap());
            }
            buf.drain(..9 + len);
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(0)) => panic!("the gateway closed the connection without a GOAWAY"),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => panic!("reading the gateway's frames failed: {e}"),
            Err(_) => panic!("no GOAWAY from the gateway within 5 s"),
        }
    }
}

/// Drives the client connection until `resp` is answered.
async fn answer<C>(conn: &mut C, resp: h2::client::ResponseFuture) -> http::Response<h2::RecvStream>
where
    C: std::future::Future + Unpin,
    C::Output: std::fmt::Debug,
{
    tokio::pin!(resp);
    tokio::select! {
        r = &mut resp => r.expect("the gateway answers"),
        c = &mut *conn => panic!("the connection ended early: {c:?}"),
    }
}

async fn still_serves(gw: &infergate_gateway::server::Gateway) {
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&h2c_client(), req).await.0.status, 200);
}

#[tokio::test]
async fn a_rapid_reset_burst_ends_the_connection() {
    let up = named_upstream("up").await;
    let gw = gateway(&limits(up.addr)).await;
    let (mut s, mut out) = raw_h2(&gw).await;
    // CVE-2023-44487: open a stream and cancel it at once, many times, in one write.
    for i in 0..200u32 {
        let stream = 2 * i + 1;
        out.extend(frame(HEADERS, END_STREAM | END_HEADERS, stream, GET_BLOCK));
        out.extend(frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
    }
    s.write_all(&out).await.unwrap();
    assert_eq!(goaway_code(&mut s).await, ENHANCE_YOUR_CALM);
    assert!(
        up.hits() < 200,
        "the burst was cut off before all its streams reached the upstream ({} did)",
        up.hits()
    );
    still_serves(&gw).await;
}

#[tokio::test]
async fn a_continuation_flood_ends_the_connection() {
    let up = named_upstream("up").await;
    let gw = gateway(&limits(up.addr)).await;
    let (mut s, mut out) = raw_h2(&gw).await;
    // A header block that never ends: HEADERS without END_HEADERS, then CONTINUATION after CONTINUATION.
    out.extend(frame(HEADERS, END_STREAM, 1, GET_BLOCK));
    for _ in 0..1000 {
        out.extend(frame(CONTINUATION, 0, 1, X_HEADER));
    }
    // The gateway may close before reading all of it; a failed write is the point, not an error.
    let _ = s.write_all(&out).await;
    let code = goaway_code(&mut s).await;
    assert_ne!(
        code, 0,
        "a CONTINUATION flood is a connection error, not a graceful GOAWAY"
    );
    assert_eq!(up.hits(), 0, "no part of the flood reached the upstream");
    still_serves(&gw).await;
}

#[tokio::test]
async fn clients_are_told_the_stream_limit_and_oversized_header_lists_get_431() {
    let up = named_upstream("up").await;
    let gw = gateway(&limits(up.addr)).await;
    let tcp = TcpStream::connect(gw.data_addr()).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::pin!(conn);

    let ok = Request::get(format!("http://{}/", gw.data_addr()))
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(ok, true).unwrap();
    assert_eq!(answer(&mut conn, resp).await.status(), 200);
    assert_eq!(
        conn.max_concurrent_send_streams(),
        7,
        "SETTINGS_MAX_CONCURRENT_STREAMS is the configured h2_max_concurrent_streams"
    );

    let big = Request::get(format!("http://{}/", gw.data_addr()))
        .header("x-big", "v".repeat(8 << 10))
        .body(())
        .unwrap();
    let (resp, _) = client.send_request(big, true).unwrap();
    assert_eq!(
        answer(&mut conn, resp).await.status(),
        431,
        "a header list over max_header_bytes"
    );
    assert_eq!(up.hits(), 1, "only the first request reached the upstream");
    still_serves(&gw).await;
}

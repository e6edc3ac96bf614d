//! Limits against slow and abusive clients: clients that never read their answers are cut after the write
//! timeout and give their upstream slots back, connections over the cap are refused with an answer, a
//! request body that stops arriving is ended after the stream idle timeout, and a body sent as one-byte
//! chunks reaches the pipeline in a few pieces, not one per chunk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use infergate_gateway::listener::{ConnInfo, ConnLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A body far larger than what loopback socket buffers hold, so a client that does not read blocks the
/// gateway's writes.
const BIG: usize = 32 << 20;

async fn get(gw: &infergate_gateway::server::Gateway, path: &str) -> u16 {
    let req = Request::get(format!("http://{}{path}", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(&http1_client(), req).await.0.status.as_u16()
}

/// A connection with a small receive buffer that sends `request` and then reads nothing.
async fn non_reader(addr: std::net::SocketAddr, request: &[u8]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    s
}

#[tokio::test]
async fn clients_that_do_not_read_are_cut_and_free_their_upstream_slots() {
    let big = Bytes::from(vec![b'x'; BIG]);
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let body = if req.uri().path() == "/big" {
            big.clone()
        } else {
            Bytes::from_static(b"small")
        };
        async move { Response::new(Full::new(body)) }
    })
    .await;
    let yaml = format!(
        "listeners:\n  limits:\n    write_timeout: 2s\n{}",
        one_route(
            up.addr,
            "    max_concurrent_requests: 2\n    max_pending_requests: 0",
            ""
        )
    );
    let gw = gateway(&yaml).await;
    let request = b"GET /big HTTP/1.1\r\nhost: a\r\n\r\n";
    let mut stalled = Vec::new();
    for _ in 0..2 {
        stalled.push(non_reader(gw.data_addr(), request).await);
    }
    eventually("both large answers have started", || up.hits() == 2).await;
    let started = Instant::now();
    // The two clients hold both of the upstream's slots: everyone else is refused at once.
    assert_eq!(
        get(&gw, "/small").await,
        503,
        "the slots are held while the clients do not read"
    );

    // After the write timeout they are cut, their slots come back, and others are served again.
    let served = loop {
        if get(&gw, "/small").await == 200 {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the slots never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        served >= Duration::from_millis(1500),
        "served after {served:?}, before the write timeout could have passed"
    );
    for mut s in stalled {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
        assert!(
            read.is_ok(),
            "the gateway kept a non-reading client's connection open"
        );
        assert!(got.len() < BIG, "the answer was cut short: {} bytes", got.len());
    }
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_refused_total{reason="write_timeout"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_with_an_answer() {
    let up = named_upstream("up").await;
    let yaml = format!(
        "listeners:\n  limits:\n    max_connections: 2\n{}",
        one_route(up.addr, "", "")
    );
    let gw = gateway(&yaml).await;
    let request = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        open.push(s);
    }
    let mut third = TcpStream::connect(gw.data_addr()).await.unwrap();
    let _ = third.write_all(request).await;
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_connections"), "{answer}");
    assert_eq!(
        up.hits(),
        2,
        "the refused connection's request never reached the upstream"
    );

    // A closed connection makes room.
    drop(open.pop());
    eventually("the closed connection is no longer counted", || {
        gw.open_connections() == 1
    })
    .await;
    assert_eq!(get(&gw, "/").await, 200);
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_refused_total{reason="connection_limit"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_request_body_that_stops_arriving_is_ended_and_frees_its_slot() {
    let up = upstream(|req: Request<hyper::body::Incoming>| async move {
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        Response::new(Full::new(body.unwrap_or_default()))
    })
    .await;
    let yaml = format!(
        "listeners:\n  limits:\n    stream_idle_timeout: 500ms\n{}",
        one_route(
            up.addr,
            "    max_concurrent_requests: 1\n    max_pending_requests: 0",
            ""
        )
    );
    let gw = gateway(&yaml).await;
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 100\r\n\r\nonly ten..")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut s).await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "ended after {:?}",
        started.elapsed()
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // The answer names the problem, the limit and the setting to change.
    assert!(
        answer.contains(
            "the request body stopped arriving: no bytes came for 500ms, the listener's \
             listeners.limits.stream_idle_timeout; send the rest without a pause that long, or raise \
             listeners.limits.stream_idle_timeout"
        ),
        "{answer}"
    );
    // The one slot is free again.
    assert_eq!(get(&gw, "/").await, 200);
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_refused_total{reason="stream_idle_timeout"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn chunks_that_arrive_together_reach_the_pipeline_as_one_piece() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (io, peer) = listener.accept().await.unwrap();
        let info = Arc::new(ConnInfo::new(peer, addr, false, None));
        let (_tx, shutdown) = tokio::sync::watch::channel(false);
        let handler = |_info: Arc<ConnInfo>, req: Request<infergate_gateway::Body>| async move {
            let mut body = req.into_body();
            let (mut pieces, mut bytes) = (0, 0);
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    pieces += 1;
                    bytes += data.len();
                }
            }
            Response::new(infergate_gateway::proxy::full(format!("{pieces} {bytes}")))
        };
        let ready = Arc::new(std::sync::atomic::AtomicBool::new(true));
        infergate_gateway::h1::serve(
            io,
            info,
            Arc::new(ConnLimits::default()),
            handler,
            shutdown,
            ready,
            (),
        )
        .await;
    });
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut raw =
        b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..10_000 {
        raw.extend_from_slice(b"1\r\nx\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&raw).await.unwrap();
    let answer = read_until_closed(&mut s).await;
    let counts = answer.rsplit("\r\n\r\n").next().unwrap();
    let (pieces, bytes) = counts.split_once(' ').unwrap();
    assert_eq!(bytes, "10000", "{answer}");
    let pieces: usize = pieces.parse().unwrap();
    assert!(
        pieces <= 100,
        "10,000 one-byte chunks reached the pipeline as {pieces} pieces"
    );
    server.await.unwrap();
}

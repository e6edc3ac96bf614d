//! HTTP/2 answers that stop moving, over real sockets with the `h2` crate on the stalling side: an upstream
//! that sends an answer's head and first bytes and then nothing, and a client that keeps its connection
//! alive but never opens its stream's flow-control window. Either way the gateway resets the client's
//! stream (`CANCEL`) after the listener's limit (`stream_idle_timeout` for the upstream, `write_timeout` for
//! the client), resets the upstream stream, gives the upstream's concurrency slot back, and counts the cut.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use h2::client::SendRequest;
use h2::{Reason, RecvStream};
use http::{Request, Response};
use http_body_util::Full;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// An upstream limited to one request at a time and no queue: a held answer makes every other request 503.
const ONE_SLOT: &str = "    max_concurrent_requests: 1\n    max_pending_requests: 0";

/// An h2c client connection to `addr` whose streams open with a receive window of `window` bytes.
async fn h2_client(addr: SocketAddr, window: u32) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Sends `GET path` and waits for the answer's head.
async fn open(client: &SendRequest<Bytes>, path: &str) -> Response<RecvStream> {
    let mut client = client.clone().ready().await.unwrap();
    let req = Request::get(format!("http://a{path}")).body(()).unwrap();
    let (answer, _) = client.send_request(req, true).unwrap();
    answer.await.unwrap()
}

/// Reads `body` without giving any window back, until it fails; the bytes read and the error's reason. Fails
/// the test if the stream is still open after 20 s.
async fn read_until_reset(body: &mut RecvStream) -> (usize, Option<Reason>) {
    let mut read = 0;
    let outcome = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match body.data().await {
                Some(Ok(data)) => read += data.len(),
                Some(Err(e)) => return e.reason(),
                None => panic!("the answer ended whole after {read} bytes; it should have been reset"),
            }
        }
    })
    .await;
    let reason = outcome.expect("the gateway held the stalled answer's stream open");
    (read, reason)
}

/// Retries `GET path` until it is answered 200 (the slot came back); fails the test after 10 s.
async fn eventually_served(client: &SendRequest<Bytes>, path: &str) {
    for _ in 0..100 {
        if open(client, path).await.status() == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the upstream's slot never came back");
}

/// An h2c upstream: `/stall` is answered with a head and a first piece, then nothing (the stream stays open,
/// the connection alive); anything else with `ok`. How each stalled stream ended is sent on the channel.
async fn stalling_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<Result<Reason, String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (ended, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let ended = ended.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let ended = ended.clone();
                    tokio::spawn(async move {
                        let stall = req.uri().path() == "/stall";
                        let mut send = respond.send_response(Response::new(()), false).unwrap();
                        if !stall {
                            send.send_data(Bytes::from_static(b"ok"), true).unwrap();
                            return;
                        }
                        send.send_data(Bytes::from_static(b"first piece"), false).unwrap();
                        let reset = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
                        let _ = ended.send(reset.map_err(|e| e.to_string()));
                    });
                }
            });
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn an_answer_whose_upstream_goes_quiet_is_reset_and_frees_its_slot() {
    let (up, mut upstream_streams) = stalling_upstream().await;
    let yaml = format!(
        "listeners:\n  limits:\n    stream_idle_timeout: 1s\n{}",
        one_route(up, ONE_SLOT, "")
    );
    let gw = gateway(&yaml).await;
    let client = h2_client(gw.data_addr(), 65_535).await;

    let mut stalled = open(&client, "/stall").await;
    assert_eq!(stalled.status(), 200);
    // The stalled answer holds the upstream's only slot.
    assert_eq!(
        open(&client, "/ok").await.status(),
        503,
        "the slot is held while the answer stalls"
    );

    let (read, reason) = read_until_reset(stalled.body_mut()).await;
    assert_eq!(
        read,
        b"first piece".len(),
        "what the upstream sent arrived before the cut"
    );
    assert_eq!(reason, Some(Reason::CANCEL));
    let upstream_saw = tokio::time::timeout(Duration::from_secs(10), upstream_streams.recv())
        .await
        .expect("the upstream's stream was never reset")
        .unwrap();
    assert!(
        upstream_saw.is_ok(),
        "the upstream's stream ended with {upstream_saw:?}"
    );

    // The slot is free again, on the same client connection.
    eventually_served(&client, "/ok").await;
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_refused_total{reason="stream_idle_timeout"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_keeps_its_stream_window_shut_is_reset_and_frees_the_slot() {
    const BIG: usize = 1 << 20;
    let big = Bytes::from(vec![b'x'; BIG]);
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let body = if req.uri().path() == "/big" {
            big.clone()
        } else {
            Bytes::from_static(b"ok")
        };
        async move { Response::new(Full::new(body)) }
    })
    .await;
    let yaml = format!(
        "listeners:\n  limits:\n    write_timeout: 1s\n{}",
        one_route(up.addr, ONE_SLOT, "")
    );
    let gw = gateway(&yaml).await;
    // 16 KiB of window, never given back: the connection stays alive (pings are answered) and its socket
    // never blocks, so only the answer's own deadline can see the stall.
    let stingy = h2_client(gw.data_addr(), 16 << 10).await;
    let mut held = open(&stingy, "/big").await;
    assert_eq!(held.status(), 200);
    let other = h2_client(gw.data_addr(), 65_535).await;
    assert_eq!(
        open(&other, "/ok").await.status(),
        503,
        "the slot is held while the client does not read"
    );

    let (read, reason) = read_until_reset(held.body_mut()).await;
    assert!(read < BIG, "the answer was cut short: {read} bytes");
    assert_eq!(reason, Some(Reason::CANCEL));

    eventually_served(&other, "/ok").await;
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_refused_total{reason="write_timeout"}"#),
        "{metrics}"
    );
}

//! HTTP/2 towards upstreams, against an upstream written on the `h2` crate so the tests can refuse streams,
//! send GOAWAY and watch resets: refused streams are classified and retried, a GOAWAY makes the pool
//! reconnect without failing requests, bodies larger than every flow-control window go through both ways,
//! an abandoned upload resets its stream, and a connection the gateway no longer uses is closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use h2::Reason;
use h2::server::SendResponse;
use http::{Request, Response};
use http_body_util::Full;
use infergate_config::ReloadOutcome;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// What the raw upstream does with one request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Reads the body, answers 200 with `len=<body length>`.
    Answer,
    /// Answers with a body of this many bytes.
    Big(usize),
    /// Resets the stream with REFUSED_STREAM the first time a path is seen, answers afterwards.
    RefuseOnce,
    /// Answers, then tells the connection to go away (graceful GOAWAY).
    AnswerThenGoAway,
    /// Never reads nor answers; reports how the stream ended.
    Hang,
}

struct RawUpstream {
    addr: SocketAddr,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Connections open now.
    open: Arc<AtomicUsize>,
    /// Reasons of streams reset by the gateway (from `Hang` requests).
    resets: mpsc::UnboundedReceiver<Reason>,
}

async fn raw_upstream(behaviour: Behaviour) -> RawUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let (reset_tx, resets) = mpsc::unbounded_channel();
    let (acc, op) = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            acc.fetch_add(1, Ordering::SeqCst);
            op.fetch_add(1, Ordering::SeqCst);
            let (op, refused, reset_tx) = (op.clone(), refused.clone(), reset_tx.clone());
            tokio::spawn(async move {
                if let Ok(mut conn) = h2::server::handshake(tcp).await {
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        let go_away = matches!(behaviour, Behaviour::AnswerThenGoAway);
                        let (refused, reset_tx) = (refused.clone(), reset_tx.clone());
                        let served = tokio::spawn(serve(behaviour, req, respond, refused, reset_tx));
                        if go_away {
                            // The connection is kept polled meanwhile: the request's body may still be
                            // on its way (the gateway's worker threads write as they go).
                            tokio::select! {
                                _ = served => {}
                                _ = std::future::poll_fn(|cx| conn.poll_closed(cx)) => {}
                            }
                            conn.graceful_shutdown();
                        }
                    }
                }
                op.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    RawUpstream {
        addr,
        accepted,
        open,
        resets,
    }
}

async fn serve(
    behaviour: Behaviour,
    req: Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
    refused: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    resets: mpsc::UnboundedSender<Reason>,
) {
    let path = req.uri().path().to_string();
    match behaviour {
        Behaviour::RefuseOnce if refused.lock().unwrap().insert(path) => {
            respond.send_reset(Reason::REFUSED_STREAM);
        }
        Behaviour::Hang => {
            let reason = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
            let _ = resets.send(reason.unwrap_or(Reason::NO_ERROR));
            drop(req);
        }
        Behaviour::Big(n) => {
            let mut tx = respond.send_response(Response::new(()), false).unwrap();
            // Sent in pieces, as the gateway opens its window.
            let mut left = n;
            while left > 0 {
                let chunk = left.min(64 << 10);
                tx.reserve_capacity(chunk);
                let got = match std::future::poll_fn(|cx| tx.poll_capacity(cx)).await {
                    Some(Ok(c)) => c.min(left),
                    _ => return,
                };
                tx.send_data(Bytes::from(vec![7u8; got]), got == left).unwrap();
                left -= got;
            }
        }
        _ => {
            let mut body = req.into_body();
            let mut len = 0usize;
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                len += chunk.len();
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            let mut tx = respond.send_response(Response::new(()), false).unwrap();
            tx.send_data(Bytes::from(format!("len={len}")), true).unwrap();
        }
    }
}

fn routes(addr: SocketAddr, route_extra: &str) -> String {
    format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{addr}"]
    protocol: h2c
    connections_per_endpoint: 1
routes:
  - name: all
    destinations: [{{ upstream: up }}]
{route_extra}
"#
    )
}

fn post(gw: &infergate_gateway::server::Gateway, path: &str, body: Bytes) -> Request<Full<Bytes>> {
    Request::post(format!("http://{}{path}", gw.data_addr()))
        .body(Full::new(body))
        .unwrap()
}

#[tokio::test]
async fn refused_streams_are_retried_when_the_route_says_so_and_named_when_not() {
    let up = raw_upstream(Behaviour::RefuseOnce).await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}"]
    protocol: h2c
routes:
  - name: retried
    match: {{ path_prefix: /retried }}
    destinations: [{{ upstream: up }}]
    retries: {{ attempts: 1, retry_on: [refused-stream] }}
  - name: plain
    destinations: [{{ upstream: up }}]
"#,
        up.addr
    ))
    .await;
    let client = http1_client();
    let (parts, body) = send(&client, post(&gw, "/retried", Bytes::from_static(b"abc"))).await;
    assert_eq!(parts.status, 200, "{body:?}");
    assert_eq!(body, "len=3", "the retry replayed the body");

    let (parts, body) = send(&client, post(&gw, "/plain", Bytes::from_static(b"abc"))).await;
    assert_eq!(parts.status, 502);
    assert_eq!(parts.headers["x-infergate-error-origin"], "gateway");
    let msg = String::from_utf8_lossy(&body);
    assert!(msg.contains("refused the stream"), "{msg}");

    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics
            .contains(r#"infergate_gateway_upstream_tries_total{upstream="up",outcome="refused_stream"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"infergate_gateway_retries_total{route="retried",reason="refused-stream"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn after_a_goaway_the_pool_reconnects_without_failing_requests() {
    let up = raw_upstream(Behaviour::AnswerThenGoAway).await;
    let gw = gateway(&routes(up.addr, "")).await;
    let client = http1_client();
    for i in 0..5 {
        let (parts, body) = send(&client, post(&gw, "/x", Bytes::from(vec![1u8; i]))).await;
        assert_eq!(parts.status, 200, "request {i}: {body:?}");
        assert_eq!(body, format!("len={i}"));
    }
    assert!(
        up.accepted.load(Ordering::SeqCst) >= 2,
        "the upstream's GOAWAYs made the gateway open new connections"
    );
}

#[tokio::test]
async fn bodies_larger_than_every_window_go_through_both_ways() {
    // 8 MiB: more than the stream (2 MiB) and connection (5 MiB) windows, so the upload waits for the
    // upstream to open them and the download makes the gateway release its own.
    let up = raw_upstream(Behaviour::Answer).await;
    let gw = gateway(&routes(up.addr, "")).await;
    let client = http1_client();
    let (parts, body) = send(&client, post(&gw, "/up", Bytes::from(vec![3u8; 8 << 20]))).await;
    assert_eq!(parts.status, 200);
    assert_eq!(body, format!("len={}", 8 << 20));

    let down = raw_upstream(Behaviour::Big(8 << 20)).await;
    let gw = gateway(&routes(down.addr, "")).await;
    let (parts, body) = send(&client, post(&gw, "/down", Bytes::new())).await;
    assert_eq!(parts.status, 200);
    assert_eq!(body.len(), 8 << 20);
    assert!(body.iter().all(|&b| b == 7));
}

#[tokio::test]
async fn an_abandoned_upload_resets_its_upstream_stream() {
    let mut up = raw_upstream(Behaviour::Hang).await;
    let gw = gateway(&routes(up.addr, "    timeout: 300ms")).await;
    let client = http1_client();
    // The upstream reads nothing: the body fills the stream window and waits in the gateway's pipe
    // until the route timeout gives up on the request.
    let (parts, _) = send(&client, post(&gw, "/slow", Bytes::from(vec![5u8; 4 << 20]))).await;
    assert_eq!(parts.status, 504);
    let reason = tokio::time::timeout(Duration::from_secs(5), up.resets.recv())
        .await
        .expect("the upstream saw the stream end")
        .unwrap();
    assert_eq!(reason, Reason::CANCEL);
}

#[tokio::test]
async fn a_connection_the_gateway_no_longer_uses_is_closed() {
    let old = raw_upstream(Behaviour::Answer).await;
    let new = raw_upstream(Behaviour::Answer).await;
    let gw = gateway(&routes(old.addr, "")).await;
    let client = http1_client();
    assert_eq!(send(&client, post(&gw, "/", Bytes::new())).await.0.status, 200);
    assert_eq!(old.open.load(Ordering::SeqCst), 1);
    // The upstream now points elsewhere: its old connection has no users left.
    assert!(matches!(
        gw.reload_text(&routes(new.addr, "")),
        ReloadOutcome::Applied { .. }
    ));
    assert_eq!(send(&client, post(&gw, "/", Bytes::new())).await.0.status, 200);
    eventually("the old upstream's connection closing", || {
        old.open.load(Ordering::SeqCst) == 0
    })
    .await;
    assert_eq!(new.open.load(Ordering::SeqCst), 1);
}

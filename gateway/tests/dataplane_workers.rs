//! Several data workers seen from outside: client connections spread over the workers, each worker keeps
//! upstream connections of its own, a reload reaches every worker at once (requests in flight keep the rules
//! they started with), a caller's quota, canary analysis and upstream limits are one value over all
//! workers, and shutdown drains the connections of every worker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use infergate_config::ReloadOutcome;
use infergate_gateway::server::Gateway;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Client connections per test. The kernel hashes each connection to one of two workers' sockets, so
/// all 32 landing on the same one has a chance of 2^-31.
const CONNS: usize = 32;

/// Two workers, one catch-all route to `up` (`extra` goes under the upstream).
fn two_workers(up: SocketAddr, extra: &str) -> String {
    format!(
        r#"
listeners:
  worker_threads: 2
upstreams:
  - name: up
    endpoints: ["{up}"]
    protocol: h2c
{extra}
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#
    )
}

/// One client connection of its own (not pooled with others).
async fn connection(addr: SocketAddr) -> http1::SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn get(sender: &mut http1::SendRequest<Full<Bytes>>, path: &str) -> (http::response::Parts, Bytes) {
    let req = Request::get(path)
        .header("host", "gateway")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

/// Opens [`CONNS`] connections and waits until the gateway has accepted all of them.
async fn connections(gw: &Gateway) -> Vec<http1::SendRequest<Full<Bytes>>> {
    let mut senders = Vec::new();
    for _ in 0..CONNS {
        senders.push(connection(gw.data_addr()).await);
    }
    eventually("every connection accepted", || gw.open_connections() == CONNS).await;
    senders
}

/// An upstream that answers once `gate` gives a permit, and records the most requests it held at once.
async fn gated_upstream(gate: Arc<Semaphore>, most: Arc<AtomicUsize>) -> TestUpstream {
    let now = Arc::new(AtomicUsize::new(0));
    upstream(move |_req: Request<Incoming>| {
        let (gate, most, now) = (gate.clone(), most.clone(), now.clone());
        async move {
            let held = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(held, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            now.fetch_sub(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::from_static(b"done")))
        }
    })
    .await
}

#[tokio::test]
async fn connections_spread_over_workers_and_each_worker_has_its_own_upstream_connection() {
    let up = named_upstream("up").await;
    // Two connections per endpoint in all: one for each worker.
    let gw = gateway(&two_workers(up.addr, "    connections_per_endpoint: 2")).await;
    let mut senders = connections(&gw).await;
    for (i, s) in senders.iter_mut().enumerate() {
        let (parts, body) = get(s, &format!("/{i}")).await;
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"up"[..]));
    }
    let per = gw.connections_per_worker();
    assert_eq!(per.len(), 2);
    assert_eq!(per.iter().map(|w| w.accepted).sum::<u64>(), CONNS as u64);
    assert!(
        per.iter().all(|w| w.accepted > 0),
        "the kernel spreads connections over both workers' sockets: {per:?}"
    );
    assert_eq!(
        up.connections(),
        2,
        "each worker sends its requests over an upstream connection of its own"
    );
    let (_, upstreams) = admin_get(&gw, "/upstreams").await;
    assert!(upstreams.contains(r#""connections":2"#), "{upstreams}");
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    for w in ["0", "1"] {
        let series = format!("infergate_gateway_worker_connections_total{{worker=\"{w}\"}}");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }
}

#[tokio::test]
async fn upstream_limits_are_totals_over_all_workers() {
    let gate = Arc::new(Semaphore::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let up = gated_upstream(gate.clone(), most.clone()).await;
    let gw = gateway(&two_workers(
        up.addr,
        "    max_concurrent_requests: 3\n    max_pending_requests: 0",
    ))
    .await;
    let senders = connections(&gw).await;
    let per = gw.connections_per_worker();
    assert!(
        per.iter().all(|w| w.open > 0),
        "both workers have clients: {per:?}"
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, mut s) in senders.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let answer = get(&mut s, &format!("/{i}")).await;
            let _ = tx.send(answer);
        });
    }
    // Three requests hold the three slots; every other one is refused at once, whichever worker it is on.
    for _ in 0..CONNS - 3 {
        let (parts, body) = rx.recv().await.unwrap();
        assert_eq!(parts.status, 503);
        let msg = String::from_utf8_lossy(&body);
        assert!(msg.contains("3 concurrent and 0 pending"), "{msg}");
    }
    // (The admitted three may still be on their way upstream when the refusals are back.)
    eventually("the three admitted requests held upstream at once", || {
        most.load(Ordering::SeqCst) == 3
    })
    .await;
    assert_eq!(up.hits(), 3);
    gate.add_permits(CONNS);
    for _ in 0..3 {
        let (parts, body) = rx.recv().await.unwrap();
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"done"[..]));
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "never more than the limit upstream at once"
    );
}

#[tokio::test]
async fn shutdown_drains_the_connections_of_every_worker() {
    let gate = Arc::new(Semaphore::new(0));
    let up = gated_upstream(gate.clone(), Arc::new(AtomicUsize::new(0))).await;
    let gw = gateway(&two_workers(up.addr, "")).await;
    let addr = gw.data_addr();
    let senders = connections(&gw).await;
    let mut in_flight = Vec::new();
    for (i, mut s) in senders.into_iter().enumerate() {
        in_flight.push(tokio::spawn(async move { get(&mut s, &format!("/{i}")).await }));
    }
    eventually("every request reaching the upstream", || up.hits() == CONNS).await;
    let per = gw.connections_per_worker();
    assert!(
        per.iter().all(|w| w.open > 0),
        "both workers hold requests in flight: {per:?}"
    );

    let drain = tokio::spawn({
        let gw = gw.clone();
        async move { gw.shutdown().await }
    });
    // Every worker's socket stops accepting (each worker closes its own, so one refusal does not mean all;
    // connections hash to all of them, so try many in a row).
    let mut refused_in_a_row = 0;
    for _ in 0..500 {
        if TcpStream::connect(addr).await.is_err() {
            refused_in_a_row += 1;
            if refused_in_a_row == 32 {
                break;
            }
        } else {
            refused_in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(
        refused_in_a_row, 32,
        "no worker accepts new connections while draining"
    );
    assert!(!drain.is_finished(), "the drain waits for the requests in flight");
    assert_eq!(gw.open_connections(), CONNS);

    gate.add_permits(CONNS);
    for r in in_flight {
        let (parts, body) = r.await.unwrap();
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"done"[..]));
    }
    assert_eq!(
        drain.await.unwrap(),
        0,
        "every worker's connections closed in time"
    );
    assert!(gw.connections_per_worker().iter().all(|w| w.open == 0));
}

/// Two workers, upstreams `a` and `b` (one connection per worker to each), one route to `to`.
fn two_upstreams(a: SocketAddr, b: SocketAddr, to: &str) -> String {
    format!(
        r#"
listeners:
  worker_threads: 2
upstreams:
  - name: a
    endpoints: ["{a}"]
    connections_per_endpoint: 2
  - name: b
    endpoints: ["{b}"]
    connections_per_endpoint: 2
routes:
  - name: all
    destinations: [{{ upstream: {to} }}]
"#
    )
}

/// Every upstream connection that carried requests (the upstream's view of the gateway's workers: each
/// worker has one connection of its own to each upstream here).
fn connections_used(up: &TestUpstream) -> usize {
    up.requests_per_connection().iter().filter(|&&n| n > 0).count()
}

#[tokio::test]
async fn both_workers_serve_requests_and_a_reload_reaches_both_while_requests_in_flight_keep_old_rules() {
    let gate = Arc::new(Semaphore::new(0));
    let a = gated_upstream(gate.clone(), Arc::new(AtomicUsize::new(0))).await;
    let b = named_upstream("b").await;
    let gw = gateway(&two_upstreams(a.addr, b.addr, "a")).await;

    // A request in flight to `a` on every connection of the first batch, on both workers.
    let first = connections(&gw).await;
    let per = gw.connections_per_worker();
    assert!(
        per.iter().all(|w| w.open > 0),
        "both workers have clients: {per:?}"
    );
    let mut in_flight = Vec::new();
    for (i, mut s) in first.into_iter().enumerate() {
        in_flight.push(tokio::spawn(async move {
            let answer = get(&mut s, &format!("/old/{i}")).await;
            (s, answer)
        }));
    }
    eventually("every request reaching upstream a", || a.hits() == CONNS).await;
    assert_eq!(
        connections_used(&a),
        2,
        "requests were proxied by both workers: {:?}",
        a.requests_per_connection()
    );

    assert!(matches!(
        gw.reload_text(&two_upstreams(a.addr, b.addr, "b")),
        ReloadOutcome::Applied { .. }
    ));

    // New connections, on both workers, follow the new rules at once.
    let before = gw.connections_per_worker();
    let mut second = Vec::new();
    for _ in 0..CONNS {
        second.push(connection(gw.data_addr()).await);
    }
    for (i, s) in second.iter_mut().enumerate() {
        let (parts, body) = get(s, &format!("/new/{i}")).await;
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"b"[..]));
    }
    let after = gw.connections_per_worker();
    assert!(
        before.iter().zip(&after).all(|(b, a)| a.accepted > b.accepted),
        "both workers took connections of the second batch too: {before:?} then {after:?}"
    );
    assert_eq!(
        connections_used(&b),
        2,
        "both workers sent their new requests to b: {:?}",
        b.requests_per_connection()
    );
    assert_eq!(a.hits(), CONNS, "nothing new went to a after the reload");

    // The requests that started before the reload finish under the rules they started with...
    gate.add_permits(CONNS);
    let mut first = Vec::new();
    for r in in_flight {
        let (s, (parts, body)) = r.await.unwrap();
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"done"[..]));
        first.push(s);
    }
    // ...and the next request on the same connections (still on their workers) sees the new ones.
    for (i, s) in first.iter_mut().enumerate() {
        let (parts, body) = get(s, &format!("/again/{i}")).await;
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"b"[..]));
    }
    assert_eq!(b.hits(), 2 * CONNS);
    assert_eq!(a.hits(), CONNS);
}

#[tokio::test]
async fn a_callers_quota_is_one_bucket_over_all_workers() {
    let up = named_upstream("up").await;
    // 10 requests per hour: nothing refills during the test.
    let yaml = format!(
        "{}callers:\n  identify_by: {{ header: x-caller-id }}\n  default_quota: {{ rate: 10/h, burst: 10 }}\n",
        two_workers(up.addr, "")
    );
    let gw = gateway(&yaml).await;
    let mut senders = connections(&gw).await;
    let per = gw.connections_per_worker();
    assert!(
        per.iter().all(|w| w.open > 0),
        "both workers have clients: {per:?}"
    );
    let mut statuses = Vec::new();
    for s in senders.iter_mut() {
        let req = Request::get("/q")
            .header("host", "gateway")
            .header("x-caller-id", "one-caller")
            .body(Full::new(Bytes::new()))
            .unwrap();
        statuses.push(s.send_request(req).await.unwrap().status().as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        10,
        "the burst of 10 is shared by the caller's connections on every worker: {statuses:?}"
    );
    assert!(statuses[10..].iter().all(|&s| s == 429), "{statuses:?}");
    assert_eq!(up.hits(), 10);
}

/// One request on `s`, to `dest` when given (`x-infergate-destination`); the status and body.
async fn to(s: &mut http1::SendRequest<Full<Bytes>>, dest: Option<&str>) -> (u16, Bytes) {
    let mut req = Request::get("/m").header("host", "gateway");
    if let Some(d) = dest {
        req = req.header("x-infergate-destination", d);
    }
    let (parts, body) = s
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap()
        .into_parts();
    (parts.status.as_u16(), body.collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn canary_analysis_sees_the_requests_of_every_worker_and_its_rollback_applies_to_all() {
    let stable = named_upstream("stable").await;
    let broken = upstream(|_req: Request<Incoming>| async {
        Response::builder()
            .status(500)
            .body(Full::new(Bytes::from_static(b"broken")))
            .unwrap()
    })
    .await;
    let gw = gateway(&format!(
        r#"
listeners:
  worker_threads: 2
upstreams:
  - name: stable
    endpoints: ["{}"]
  - name: broken
    endpoints: ["{}"]
routes:
  - name: model
    destinations:
      - {{ name: stable, upstream: stable, weight: 50 }}
      - {{ name: canary, upstream: broken, weight: 50 }}
    canary: {{ baseline: stable, canary: canary, window: 10s, min_requests: 20 }}
"#,
        stable.addr, broken.addr
    ))
    .await;
    let mut senders = connections(&gw).await;
    let per = gw.connections_per_worker();
    assert!(
        per.iter().all(|w| w.open > 0),
        "both workers have clients: {per:?}"
    );
    for s in senders.iter_mut() {
        assert_eq!(to(s, Some("canary")).await.0, 500);
        assert_eq!(to(s, Some("stable")).await.0, 200);
    }
    let report = || async {
        let (_, body) = admin_get(&gw, "/canary").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["routes"][0].clone()
    };
    let r = report().await;
    assert_eq!(
        r["canary"]["requests"], CONNS,
        "one window over both workers: {r}"
    );
    assert_eq!(r["canary"]["errors"], CONNS, "{r}");
    assert_eq!(r["baseline"]["requests"], CONNS, "{r}");

    // The analysis runs as requests finish (at most once per window slot): keep a little traffic going
    // until it decides.
    let mut phase = String::new();
    for _ in 0..100 {
        to(&mut senders[0], Some("stable")).await;
        phase = report().await["phase"].as_str().unwrap_or_default().to_string();
        if phase == "rolled_back" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(phase, "rolled_back");
    // Both workers route by the rolled-back weights: nothing goes to the canary any more.
    let before = broken.hits();
    for s in senders.iter_mut() {
        assert_eq!(to(s, None).await, (200, Bytes::from_static(b"stable")));
    }
    assert_eq!(broken.hits(), before);
}

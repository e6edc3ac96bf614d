//! Upstream behaviour seen from outside: concurrency and queue limits refuse at once with 503, power of two
//! choices spreads load and favours the less busy endpoint, failing endpoints are ejected (those too slow for
//! the per-try timeout too, but not for a caller hanging up), a DNS name becomes the endpoints it resolves to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::sync::Semaphore;

fn get(gw: &infergate_gateway::server::Gateway, path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://{}{path}", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// An upstream that answers after 5 s.
async fn slow_upstream() -> TestUpstream {
    upstream(|_req: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Response::new(Full::new(Bytes::from_static(b"late")))
    })
    .await
}

/// The admin API's view of the first upstream's endpoint at `addr`.
async fn endpoint_state(
    gw: &infergate_gateway::server::Gateway,
    addr: std::net::SocketAddr,
) -> serde_json::Value {
    let (status, body) = admin_get(gw, "/upstreams").await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let eps = v["upstreams"][0]["endpoints"].as_array().unwrap();
    eps.iter()
        .find(|e| e["address"] == addr.to_string())
        .unwrap()
        .clone()
}

#[tokio::test]
async fn beyond_concurrent_and_pending_limits_requests_are_refused_at_once() {
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let up = upstream(move |_req: Request<Incoming>| {
        let g = g.clone();
        async move {
            g.acquire().await.unwrap().forget();
            Response::new(Full::new(Bytes::from_static(b"done")))
        }
    })
    .await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}"]
    max_concurrent_requests: 1
    max_pending_requests: 1
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#,
        up.addr
    ))
    .await;
    let client = http1_client();
    let first = tokio::spawn({
        let (c, r) = (client.clone(), get(&gw, "/1"));
        async move { send(&c, r).await }
    });
    // Wait until the first request holds the only slot.
    while up.hits() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = tokio::spawn({
        let (c, r) = (client.clone(), get(&gw, "/2"));
        async move { send(&c, r).await }
    });
    // The second waits in the queue; give it time to get there.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (parts, body) = send(&client, get(&gw, "/3")).await;
    assert_eq!(parts.status, 503, "the third request is refused at once");
    assert_eq!(parts.headers["x-infergate-error-origin"], "gateway");
    let msg = String::from_utf8_lossy(&body);
    assert!(msg.contains("1 concurrent and 1 pending"), "{msg}");
    gate.add_permits(2);
    assert_eq!(first.await.unwrap().0.status, 200);
    assert_eq!(
        second.await.unwrap().0.status,
        200,
        "the queued request is served once a slot frees"
    );
    assert_eq!(up.hits(), 2);
}

#[tokio::test]
async fn two_equal_endpoints_share_the_load() {
    let a = named_upstream("a").await;
    let b = named_upstream("b").await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}", "{}"]
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#,
        a.addr, b.addr
    ))
    .await;
    let client = http1_client();
    for _ in 0..400 {
        assert_eq!(send(&client, get(&gw, "/")).await.0.status, 200);
    }
    // Binomial(400, 0.5): standard deviation 10, so 150..250 is five deviations.
    assert!((150..=250).contains(&a.hits()), "a={} b={}", a.hits(), b.hits());
    assert_eq!(a.hits() + b.hits(), 400);
}

#[tokio::test]
async fn the_less_busy_endpoint_gets_more_requests() {
    let slow = upstream(|_req: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Response::new(Full::new(Bytes::from_static(b"slow")))
    })
    .await;
    let fast = named_upstream("fast").await;
    let gw = Arc::new(
        gateway(&format!(
            r#"
upstreams:
  - name: up
    endpoints: ["{}", "{}"]
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#,
            slow.addr, fast.addr
        ))
        .await,
    );
    let client = http1_client();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, gw) = (client.clone(), gw.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                assert_eq!(send(&c, get(&gw, "/")).await.0.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(slow.hits() + fast.hits(), 200);
    assert!(
        fast.hits() > 2 * slow.hits(),
        "fast={} slow={}",
        fast.hits(),
        slow.hits()
    );
}

#[tokio::test]
async fn an_endpoint_failing_in_a_row_is_ejected() {
    let bad = upstream(|_req: Request<Incoming>| async {
        Response::builder()
            .status(500)
            .body(Full::new(Bytes::from_static(b"broken")))
            .unwrap()
    })
    .await;
    let good = named_upstream("good").await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}", "{}"]
    outlier_detection:
      consecutive_5xx: 3
      base_ejection_time: 30s
      max_ejected_percent: 50
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#,
        bad.addr, good.addr
    ))
    .await;
    let client = http1_client();
    let mut failures = 0;
    for _ in 0..60 {
        if send(&client, get(&gw, "/")).await.0.status != 200 {
            failures += 1;
        }
    }
    assert_eq!(
        bad.hits(),
        3,
        "the failing endpoint is ejected after 3 consecutive 5xx"
    );
    assert_eq!(failures, 3, "every later request goes to the healthy endpoint");
    let bad_ep = endpoint_state(&gw, bad.addr).await;
    assert!(bad_ep["ejected_for_ms"].as_u64().unwrap() > 20_000, "{bad_ep}");
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains("infergate_gateway_upstream_ejections_total"),
        "{metrics}"
    );
}

/// An endpoint that answers too late for the per-try timeout is ejected like one that answers 5xx: each try
/// abandoned at that timeout counts as a failure of its endpoint. (Before, the abandoned try counted as
/// nothing, so a slow-but-alive endpoint kept costing a retry to every request that drew it.)
#[tokio::test]
async fn an_endpoint_too_slow_for_the_per_try_timeout_is_ejected() {
    let slow = slow_upstream().await;
    let good = named_upstream("good").await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}", "{}"]
    outlier_detection:
      consecutive_5xx: 3
      base_ejection_time: 30s
      max_ejected_percent: 50
routes:
  - name: all
    destinations: [{{ upstream: up }}]
    timeout: 10s
    retries:
      attempts: 3
      per_try_timeout: 100ms
      retry_on: [5xx]
      budget: {{ ratio: 1.0, min_per_second: 100, window: 10s }}
"#,
        slow.addr, good.addr
    ))
    .await;
    let client = http1_client();
    for _ in 0..40 {
        let answer = send(&client, get(&gw, "/")).await.0;
        assert_eq!(
            answer.status, 200,
            "a timed-out try is retried on the other endpoint"
        );
    }
    assert_eq!(
        slow.hits(),
        3,
        "the slow endpoint is ejected after 3 tries abandoned at the per-try timeout"
    );
    let slow_ep = endpoint_state(&gw, slow.addr).await;
    assert!(slow_ep["ejected_for_ms"].as_u64().unwrap() > 20_000, "{slow_ep}");
}

/// A caller that hangs up while its try waits on a slow endpoint costs that endpoint nothing: only the
/// gateway's own per-try timeout counts against it, or any client could eject endpoints by hanging up.
#[tokio::test]
async fn a_caller_hanging_up_does_not_count_against_the_endpoint() {
    let slow = slow_upstream().await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}"]
    outlier_detection:
      consecutive_5xx: 1
      base_ejection_time: 30s
      max_ejected_percent: 100
routes:
  - name: all
    destinations: [{{ upstream: up }}]
    timeout: 10s
    retries:
      attempts: 2
      per_try_timeout: 2s
      retry_on: [5xx]
"#,
        slow.addr
    ))
    .await;
    let client = http1_client();
    for _ in 0..3 {
        let gave_up = tokio::time::timeout(Duration::from_millis(200), send(&client, get(&gw, "/"))).await;
        assert!(gave_up.is_err(), "the slow endpoint cannot answer in 200 ms");
    }
    eventually("the three tries reached the endpoint", || slow.hits() == 3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ep = endpoint_state(&gw, slow.addr).await;
    assert_eq!(ep["ejected_for_ms"], serde_json::Value::Null, "{ep}");
}

/// An endpoint given as a DNS name (a Kubernetes headless Service) becomes one endpoint per address it resolves
/// to, and requests reach them.
#[tokio::test]
async fn a_dns_name_becomes_the_endpoints_it_resolves_to() {
    // Dual-stack where the machine has IPv6, so every address `localhost` resolves to reaches the upstream.
    let listener = match tokio::net::TcpListener::bind("[::]:0").await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    };
    let port = listener.local_addr().unwrap().port();
    let up = upstream_on(listener, |_req: Request<Incoming>| async {
        Response::new(Full::new(Bytes::from_static(b"ok")))
    });
    let mut expected: Vec<String> = tokio::net::lookup_host(("localhost", port))
        .await
        .unwrap()
        .map(|a| a.to_string())
        .collect();
    expected.sort();
    expected.dedup();
    let gw = gateway(&format!(
        r#"
upstreams:
  - name: up
    endpoints: ["localhost:{port}"]
    resolve_interval: 1s
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#
    ))
    .await;
    // The first lookup runs as the gateway starts; wait until it has landed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let addresses = loop {
        let (_, body) = admin_get(&gw, "/upstreams").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let mut found: Vec<String> = v["upstreams"][0]["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["address"].as_str().unwrap().to_string())
            .collect();
        found.sort();
        if !found.is_empty() || tokio::time::Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(addresses, expected, "one endpoint per address of localhost");
    let client = http1_client();
    for _ in 0..10 {
        assert_eq!(send(&client, get(&gw, "/")).await.0.status, 200);
    }
    assert_eq!(up.hits(), 10);
}

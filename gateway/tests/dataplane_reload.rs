//! Live rules: a hundred rule changes (some invalid) under continuous load fail no request; invalid files
//! are rejected with their problems and the running rules stay; in-flight requests finish on the rules they
//! started with; shutdown drains in-flight requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;

fn rules(a: std::net::SocketAddr, b: std::net::SocketAddr, wa: u32, wb: u32) -> String {
    format!(
        r#"
upstreams:
  - name: a
    endpoints: ["{a}"]
  - name: b
    endpoints: ["{b}"]
routes:
  - name: split
    destinations:
      - {{ upstream: a, weight: {wa} }}
      - {{ upstream: b, weight: {wb} }}
"#
    )
}

#[tokio::test]
async fn a_hundred_reloads_under_load_fail_no_request() {
    let a = named_upstream("a").await;
    let b = named_upstream("b").await;
    let gw = gateway(&rules(a.addr, b.addr, 1, 0)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (stop, ok, failed, addr) = (stop.clone(), ok.clone(), failed.clone(), gw.data_addr());
        load.push(tokio::spawn(async move {
            let client = http1_client();
            while !stop.load(Ordering::Relaxed) {
                let req = Request::get(format!("http://{addr}/x"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                match client.request(req).await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let file = Path::new("routes.yaml");
    let mut rejected = 0;
    for i in 0..100u32 {
        let text = match i % 5 {
            // Invalid: a route to an upstream that does not exist.
            3 => rules(a.addr, b.addr, 1, 1).replace("upstream: b,", "upstream: nowhere,"),
            // Invalid: not YAML.
            4 => "routes: [ {name: broken".to_string(),
            _ => rules(a.addr, b.addr, i % 2, 1 - i % 2),
        };
        match gw.reload_text(&text, file, format!("v{i}")) {
            Ok(_) => {}
            Err(e) => {
                rejected += 1;
                assert!(
                    e.contains("routes.yaml:"),
                    "a rejection names the file and line: {e}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(rejected, 40);
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "{} requests succeeded",
        ok.load(Ordering::Relaxed)
    );
    assert!(ok.load(Ordering::Relaxed) > 100);
    assert!(a.hits() > 0 && b.hits() > 0, "both weight settings took effect");

    // The last valid version (i = 97 → a:1, b:0) is running; the last rejection is on the admin API.
    let (_, config) = admin_get(&gw, "/config").await;
    let v: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(v["hash"], "v97");
    let (_, errors) = admin_get(&gw, "/config/errors").await;
    let v: serde_json::Value = serde_json::from_str(&errors).unwrap();
    assert_eq!(v["last_rejection"]["hash"], "v99");
    assert!(
        v["last_rejection"]["error"]
            .as_str()
            .unwrap()
            .contains("routes.yaml"),
        "{v}"
    );
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics.contains(r#"infergate_gateway_config_reloads_total{result="rejected"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn in_flight_requests_finish_on_the_rules_they_started_with() {
    let slow = upstream(|_req: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Response::new(Full::new(Bytes::from_static(b"slow")))
    })
    .await;
    let other = named_upstream("other").await;
    let gw = gateway(&one_route(slow.addr, "", "")).await;
    let client = http1_client();
    let req = Request::get(format!("http://{}/x", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let in_flight = tokio::spawn({
        let c = client.clone();
        async move { send(&c, req).await }
    });
    while slow.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The slow upstream disappears from the rules while its request is in flight.
    gw.reload_text(
        &one_route(other.addr, "", ""),
        Path::new("routes.yaml"),
        "next".into(),
    )
    .unwrap();
    let (parts, body) = in_flight.await.unwrap();
    assert_eq!(parts.status, 200);
    assert_eq!(body, "slow");
    let req = Request::get(format!("http://{}/x", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        send(&client, req).await.1,
        "other",
        "new requests use the new rules"
    );
}

#[tokio::test]
async fn restart_only_changes_are_reported_and_not_applied() {
    let up = named_upstream("up").await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let changed = format!(
        "listeners:\n  data:\n    address: 127.0.0.1:1\n{}",
        one_route(up.addr, "", "")
    );
    let warnings = gw
        .reload_text(&changed, Path::new("routes.yaml"), "x".into())
        .unwrap();
    assert!(warnings.iter().any(|w| w.contains("restart")), "{warnings:?}");
    let (_, config) = admin_get(&gw, "/config").await;
    assert!(config.contains("restart"), "{config}");
    let req = Request::get(format!("http://{}/x", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        send(&http1_client(), req).await.0.status,
        200,
        "still serving on the old address"
    );
}

#[tokio::test]
async fn shutdown_drains_in_flight_requests_and_stops_accepting() {
    let slow = upstream(|_req: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Response::new(Full::new(Bytes::from_static(b"finished")))
    })
    .await;
    let gw = gateway(&one_route(slow.addr, "", "")).await;
    let addr = gw.data_addr();
    let client = http1_client();
    let req = Request::get(format!("http://{addr}/x"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let in_flight = tokio::spawn({
        let c = client.clone();
        async move { send(&c, req).await }
    });
    while slow.hits() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = tokio::spawn({
        let gw = gw.clone();
        async move { gw.shutdown().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, _) = admin_get(&gw, "/ready").await;
    assert_eq!(status, 503, "not ready while draining");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no new connections while draining"
    );
    let (parts, body) = in_flight.await.unwrap();
    assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"finished"[..]));
    assert_eq!(
        drain.await.unwrap(),
        0,
        "every connection closed within the drain timeout"
    );
}

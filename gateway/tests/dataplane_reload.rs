//! Live rules: a hundred rule changes (some invalid) under continuous load fail no request; invalid files
//! are rejected with their problems and the running rules stay, their long-lived state included; the file
//! watcher and `reload_text` are one reload path; in-flight requests finish on the rules they started with;
//! shutdown drains in-flight requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use infergate_config::{ReloadOutcome, WatchOptions, content_hash};
use infergate_gateway::server::Gateway;

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
    let mut rejected = 0;
    for i in 0..100u32 {
        let text = match i % 5 {
            // Invalid: a route to an upstream that does not exist.
            3 => rules(a.addr, b.addr, 1, 1).replace("upstream: b,", "upstream: nowhere,"),
            // Invalid: not YAML.
            4 => "routes: [ {name: broken".to_string(),
            _ => rules(a.addr, b.addr, i % 2, 1 - i % 2),
        };
        match gw.reload_text(&text) {
            ReloadOutcome::Applied { .. } => {}
            ReloadOutcome::Rejected(r) => {
                rejected += 1;
                assert!(
                    r.error.contains("routes.yaml:"),
                    "a rejection names the file and line: {}",
                    r.error
                );
            }
            ReloadOutcome::Unchanged => panic!("version {i} is new content"),
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
    assert_eq!(v["hash"], content_hash(&rules(a.addr, b.addr, 1, 0)));
    let (_, errors) = admin_get(&gw, "/config/errors").await;
    let v: serde_json::Value = serde_json::from_str(&errors).unwrap();
    assert_eq!(
        v["last_rejection"]["hash"],
        content_hash("routes: [ {name: broken")
    );
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
    assert!(matches!(
        gw.reload_text(&one_route(other.addr, "", "")),
        ReloadOutcome::Applied { .. }
    ));
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
    let ReloadOutcome::Applied { warnings, .. } = gw.reload_text(&changed) else {
        panic!("the routes are valid and must apply")
    };
    assert!(
        warnings.iter().any(|w| w.to_string().contains("restart")),
        "{warnings:?}"
    );
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

#[tokio::test]
async fn a_leaving_gateway_serves_http1_and_closes_each_connection_after_its_answer() {
    let up = named_upstream("a").await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let get = || {
        Request::get(format!("http://{}/x", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let client = http1_client();
    let (parts, _) = send(&client, get()).await;
    assert_eq!(parts.status, 200);
    assert!(
        parts.headers.get("connection").is_none(),
        "kept alive while ready"
    );
    assert_eq!(gw.open_connections(), 1);
    // SIGTERM with a drain delay: not ready at once, serving on until the delay ends.
    let leaving = tokio::spawn({
        let gw = gw.clone();
        async move { gw.shutdown_after(Duration::from_secs(30)).await }
    });
    while admin_get(&gw, "/ready").await.0 != 503 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The kept-alive connection is answered, told to close, and closed: its client's next request goes
    // on a new connection (through its Service, to another pod) and is never caught by the drain.
    let (parts, body) = send(&client, get()).await;
    assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"a"[..]));
    assert_eq!(parts.headers.get("connection").unwrap(), "close");
    eventually("the leaving gateway closes the answered connection", || {
        gw.open_connections() == 0
    })
    .await;
    // A connection still routed here meanwhile is served the same way.
    let (parts, _) = send(&client, get()).await;
    assert_eq!(parts.status, 200);
    assert_eq!(parts.headers.get("connection").unwrap(), "close");
    leaving.abort();
}

/// Rules with a per-caller quota (burst 2) and canary analysis on a split between `a` and `b`; `extra`
/// goes into the `upstreams` list.
fn guarded(a: std::net::SocketAddr, b: std::net::SocketAddr, wa: u32, wb: u32, extra: &str) -> String {
    format!(
        r#"
upstreams:
  - name: a
    endpoints: ["{a}"]
  - name: b
    endpoints: ["{b}"]
{extra}
callers:
  identify_by: {{ header: x-caller-id }}
  default_quota: {{ rate: 1/min, burst: 2 }}
routes:
  - name: split
    destinations:
      - {{ upstream: a, weight: {wa} }}
      - {{ upstream: b, weight: {wb} }}
    canary: {{ baseline: a, canary: b, window: 10s, min_requests: 1000 }}
"#
    )
}

/// Sends one request as `caller`; returns the status and the upstream that answered.
async fn call(gw: &Gateway, caller: &str) -> (u16, String) {
    let req = Request::get(format!("http://{}/x", gw.data_addr()))
        .header("x-caller-id", caller)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, _) = send(&http1_client(), req).await;
    let upstream = parts
        .headers
        .get("x-upstream")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (parts.status.as_u16(), upstream)
}

async fn admin_json(gw: &Gateway, path: &str) -> serde_json::Value {
    serde_json::from_str(&admin_get(gw, path).await.1).unwrap()
}

#[tokio::test]
async fn invalid_edits_change_nothing_that_runs_and_the_watcher_and_reload_text_are_one_path() {
    let a = named_upstream("a").await;
    let b = named_upstream("b").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.yaml");
    let all_a = guarded(a.addr, b.addr, 1, 0, "");
    std::fs::write(&file, &all_a).unwrap();
    let gw = gateway_at(&all_a, &file).await;
    let watcher = gw
        .watch(WatchOptions {
            watch_filesystem: false,
            poll_interval: None,
            sighup: false,
            ..WatchOptions::default()
        })
        .unwrap();

    // State that lives with the running rules: alice spends her burst; the canary analysis has started.
    assert_eq!(call(&gw, "alice").await, (200, "a".into()));
    assert_eq!(call(&gw, "alice").await, (200, "a".into()));
    assert_eq!(call(&gw, "alice").await.0, 429, "alice's burst is spent");
    let canary_before = admin_json(&gw, "/canary").await;
    assert_eq!(canary_before["routes"][0]["route"], "split", "{canary_before}");

    // Invalid edits, each refused by a different stage: YAML, validation, compiling (a TLS upstream whose CA
    // file is missing). Each also changes what the running rules hold: the split, the canary analysis (new
    // weights start a fresh one) and the quota.
    let missing_ca = dir.path().join("missing-ca.pem");
    let edits = [
        "routes: [ {name: broken".to_string(),
        guarded(a.addr, b.addr, 0, 1, "").replace("upstream: b,", "upstream: nowhere,"),
        guarded(
            a.addr,
            b.addr,
            0,
            1,
            &format!(
                "  - name: remote\n    endpoints: [\"127.0.0.1:1\"]\n    protocol: h2-tls\n    tls: {{ ca: {} }}\n",
                missing_ca.display()
            ),
        )
        .replace("burst: 2", "burst: 100"),
    ];
    for (i, bad) in edits.iter().enumerate() {
        // Through the watcher (the file) and through `reload_text`, alternately: one path either way.
        let outcome = if i % 2 == 0 {
            std::fs::write(&file, bad).unwrap();
            watcher.reload_now().await
        } else {
            gw.reload_text(bad)
        };
        let ReloadOutcome::Rejected(r) = outcome else {
            panic!("edit {i} must be refused: {outcome:?}")
        };
        assert_eq!(r.content_hash.as_deref(), Some(content_hash(bad).as_str()));
        let errors = admin_json(&gw, "/config/errors").await;
        assert_eq!(errors["last_rejection"]["hash"], content_hash(bad), "{errors}");
        // Nothing that runs changed.
        assert_eq!(admin_json(&gw, "/config").await["hash"], content_hash(&all_a));
        assert_eq!(watcher.status().content_hash, content_hash(&all_a));
        assert_eq!(
            call(&gw, &format!("bob-{i}")).await,
            (200, "a".into()),
            "edit {i}: the split stays"
        );
        assert_eq!(
            call(&gw, "alice").await.0,
            429,
            "edit {i}: alice's spent bucket is neither refilled nor resized"
        );
        let canary = admin_json(&gw, "/canary").await;
        assert_eq!(
            canary["routes"][0]["phase"], canary_before["routes"][0]["phase"],
            "edit {i}: the running canary analysis stays: {canary}"
        );
        assert_eq!(
            canary["routes"][0]["configured_weights"], canary_before["routes"][0]["configured_weights"],
            "edit {i}: {canary}"
        );
    }
    // The same refused content again, by the other path, is not a second refusal: one history.
    let last = edits.last().unwrap();
    std::fs::write(&file, last).unwrap();
    assert_eq!(watcher.reload_now().await, ReloadOutcome::Unchanged);
    assert_eq!(watcher.status().rejections, 3);

    // `reload_text` applies all-b; the file still says all-a, and re-reading it brings all-a back: the
    // watcher compares the file with what runs, not with what it last read itself.
    std::fs::write(&file, &all_a).unwrap();
    let all_b = guarded(a.addr, b.addr, 0, 1, "");
    assert!(matches!(gw.reload_text(&all_b), ReloadOutcome::Applied { .. }));
    assert_eq!(call(&gw, "carol").await, (200, "b".into()));
    assert_eq!(watcher.status().content_hash, content_hash(&all_b));
    assert!(matches!(
        watcher.reload_now().await,
        ReloadOutcome::Applied { .. }
    ));
    assert_eq!(call(&gw, "dave").await, (200, "a".into()));
    assert_eq!(admin_json(&gw, "/config").await["hash"], content_hash(&all_a));
    // And what the watcher applied, `reload_text` sees as running.
    assert_eq!(gw.reload_text(&all_a), ReloadOutcome::Unchanged);
    let status = watcher.status();
    assert_eq!((status.reloads, status.rejections), (2, 3));
}

//! Mirroring and fault injection: copies never delay the caller, a slow shadow cannot pile up
//! copies beyond the limit, and injected faults hit their share of requests.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use infergate_gateway::fault::{FaultAbort, FaultPolicy, Percent};
use infergate_gateway::mirror::{MIRROR_HEADER, MirrorLimit, MirrorPolicy};
use infergate_gateway::route::CompiledRoutes;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn copies_are_fire_and_forget_and_bounded() {
    let limiter = MirrorLimit::new(4);
    let m = MirrorPolicy::new(
        "r".into(),
        "shadow".into(),
        Percent::new(100.0),
        Duration::from_secs(30),
        limiter,
    );
    let started = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = mpsc::unbounded_channel();
    // A shadow that takes 10 s to answer.
    let slow = {
        let started = started.clone();
        tower::service_fn(move |req: Request<Bytes>| {
            let started = started.clone();
            let tx = tx.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tx.send((req.headers().get(MIRROR_HEADER).cloned(), req.into_body()))
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok::<_, std::convert::Infallible>(())
            }
        })
    };
    let t0 = Instant::now();
    let accepted = (0..10)
        .filter(|_| m.spawn(slow.clone(), Request::new(Bytes::from_static(b"body"))))
        .count();
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "spawning a copy must not wait for the shadow"
    );
    assert_eq!(accepted, 4, "only 4 copies may be in flight");
    tokio::task::yield_now().await;
    let (header, body) = rx.recv().await.unwrap();
    assert_eq!(header.unwrap(), "1");
    assert_eq!(body, "body");
    // Once the shadow answers, permits come back.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(started.load(Ordering::SeqCst), 4);
    assert!(m.spawn(slow.clone(), Request::new(Bytes::new())));
    // A reload with the same limit shares the limiter: copies in flight still count.
    let again = MirrorLimit::carry_over(Some(&m), 4);
    assert_eq!(again.available_permits(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hung_shadow_is_abandoned_after_the_timeout() {
    let limiter = MirrorLimit::new(1);
    let m = MirrorPolicy::new(
        "r".into(),
        "shadow".into(),
        Percent::new(100.0),
        Duration::from_secs(1),
        limiter.clone(),
    );
    let hung = tower::service_fn(|_req: Request<Bytes>| async {
        std::future::pending::<()>().await;
        Ok::<_, std::convert::Infallible>(())
    });
    assert!(m.spawn(hung, Request::new(Bytes::new())));
    assert!(!m.spawn(hung, Request::new(Bytes::new())));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        limiter.available_permits(),
        1,
        "the permit of an abandoned copy is released"
    );
}

#[tokio::test(start_paused = true)]
async fn the_configured_limit_and_timeout_reach_the_mirror() {
    let text = "\
upstreams:
  - { name: main, endpoints: [\"127.0.0.1:9\"] }
  - { name: shadow, endpoints: [\"127.0.0.1:9\"] }
routes:
  - name: r
    timeout: 30s
    destinations: [{ upstream: main }]
    mirror: { upstream: shadow, max_concurrent: 2, timeout: 500ms }
  - name: plain
    timeout: 7s
    destinations: [{ upstream: main }]
    mirror: { upstream: shadow }
";
    let rules = infergate_config::parse_gateway_config(text, std::path::Path::new("routes.yaml"))
        .unwrap()
        .rules;
    let routes = CompiledRoutes::try_from(&rules).unwrap();
    let m = routes.get("r").unwrap().mirror.clone().unwrap();
    assert_eq!(m.timeout, Duration::from_millis(500));
    assert_eq!(
        routes.get("plain").unwrap().mirror.as_ref().unwrap().timeout,
        Duration::from_secs(7),
        "without its own timeout a copy gets the route's"
    );
    let hung = tower::service_fn(|_req: Request<Bytes>| async {
        std::future::pending::<()>().await;
        Ok::<_, std::convert::Infallible>(())
    });
    let accepted = (0..5)
        .filter(|_| m.spawn(hung, Request::new(Bytes::new())))
        .count();
    assert_eq!(accepted, 2, "max_concurrent: 2 copies in flight");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        m.spawn(hung, Request::new(Bytes::new())),
        "both copies were abandoned after 500 ms, freeing their slots"
    );
}

#[test]
fn faults_hit_their_share_within_binomial_bounds() {
    let abort = FaultAbort {
        http_status: StatusCode::SERVICE_UNAVAILABLE,
        grpc_code: Some(14),
    };
    let f = FaultPolicy {
        delay: Some((Percent::new(30.0), Duration::from_millis(50))),
        abort: Some((Percent::new(10.0), abort)),
    };
    let n = 20_000;
    let (mut delayed, mut aborted) = (0u32, 0u32);
    for _ in 0..n {
        let d = f.decide();
        delayed += u32::from(d.delay == Some(Duration::from_millis(50)));
        aborted += u32::from(d.abort == Some(abort));
    }
    // 5 standard deviations: sqrt(n p (1-p)) = 64.8 (30 %) and 42.4 (10 %).
    assert!(
        (delayed as f64 - 6000.0).abs() < 5.0 * 64.8,
        "delayed {delayed} of {n}"
    );
    assert!(
        (aborted as f64 - 2000.0).abs() < 5.0 * 42.4,
        "aborted {aborted} of {n}"
    );
    assert_eq!(FaultPolicy::default().decide(), Default::default());
}

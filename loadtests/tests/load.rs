//! The load generator against a scripted KServe V2 server on a real loopback socket: versions and failures
//! are counted per caller, an open-loop run charges a server stall to the requests scheduled behind it, and
//! an address nobody listens on is reported as a connect failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use infergate_loadtests::load::{self, CallerSpec, LoadPlan, Pace};
use infergate_loadtests::{Client, Payload, PayloadKind, Protocol, Target};
use tokio::net::TcpListener;

const METADATA: &str = r#"{"name":"m","versions":["1","2"],"platform":"onnxruntime_onnx",
  "inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1,4]}]}"#;

/// Answers metadata; answers inference with version 2 for every fourth request and 1 otherwise; refuses
/// caller `noisy` with 429; stalls every request that arrives during the window `stall` says (ms since start).
async fn serve(stall: Option<(u64, u64)>) -> Target {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            let count = count.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let count = count.clone();
                    async move {
                        let noisy = req.headers().get("x-caller-id").is_some_and(|v| v == "noisy");
                        let infer = req.uri().path().ends_with("/infer");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        if !infer {
                            return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(METADATA))));
                        }
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        assert_eq!(v["inputs"][0]["shape"], serde_json::json!([1, 4]));
                        if let Some((from, to)) = stall {
                            let now = start.elapsed().as_millis() as u64;
                            if now >= from && now < to {
                                tokio::time::sleep(Duration::from_millis(to - now)).await;
                            }
                        }
                        if noisy {
                            let mut r =
                                Response::new(Full::new(Bytes::from_static(b"{\"error\":\"quota\"}")));
                            *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                            return Ok(r);
                        }
                        let n = count.fetch_add(1, Ordering::Relaxed);
                        let version = if n % 4 == 3 { "2" } else { "1" };
                        let out = format!(r#"{{"model_name":"m","model_version":"{version}","outputs":[]}}"#);
                        Ok(Response::new(Full::new(Bytes::from(out))))
                    }
                });
                let _ = Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    Target { addr }
}

fn plan(callers: Vec<CallerSpec>, requests: Option<u64>, duration: Option<Duration>) -> LoadPlan {
    LoadPlan {
        callers,
        warmup: Duration::from_millis(50),
        duration,
        requests,
        interval: Duration::from_millis(100),
        max_in_flight: 1024,
    }
}

async fn payload(client: &Client) -> Payload {
    let meta = client.metadata("m").await.unwrap();
    Payload::from_metadata(&meta, 1, PayloadKind::Json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_versions_and_refusals_are_counted_apart() {
    for protocol in [Protocol::Http1, Protocol::H2c] {
        let target = serve(None).await;
        let client = Client::new(target, protocol, Duration::from_secs(5));
        let payload = payload(&client).await;
        let callers = vec![
            CallerSpec {
                name: "quiet".into(),
                pace: Pace::Closed { concurrency: 2 },
                models: Vec::new(),
            },
            CallerSpec {
                name: "noisy".into(),
                pace: Pace::Open {
                    rate: 200.0,
                    phase: 0.0,
                },
                models: Vec::new(),
            },
        ];
        let r = load::run(
            client,
            payload,
            &plan(callers, None, Some(Duration::from_millis(600))),
            tokio::time::Instant::now(),
            false,
        )
        .await;
        let quiet = r.callers["quiet"].summary(r.elapsed);
        let noisy = r.callers["noisy"].summary(r.elapsed);
        assert!(quiet.requests > 20, "{protocol:?}: {quiet:?}");
        assert_eq!(quiet.error_share, 0.0, "{protocol:?}");
        // Every fourth answer of the server is version 2 (the noisy caller's refusals take no number).
        let share = quiet.version_share("2");
        assert!((share - 0.25).abs() < 0.05, "{protocol:?}: share {share}");
        assert_eq!(noisy.ok, 0);
        assert_eq!(noisy.errors.get("status_429").copied(), Some(noisy.requests));
        // 200/s over 0.6 s: the open loop sends on its schedule whatever the answers.
        assert!(
            (100..=140).contains(&noisy.requests),
            "{protocol:?}: {}",
            noisy.requests
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_charges_a_stall_to_the_requests_scheduled_behind_it() {
    // Requests arriving between 300 and 600 ms after the server started are held until 600 ms.
    let target = serve(Some((300, 600))).await;
    let client = Client::new(target, Protocol::Http1, Duration::from_secs(5));
    let payload = payload(&client).await;
    let open = vec![CallerSpec {
        name: "open".into(),
        pace: Pace::Open {
            rate: 100.0,
            phase: 0.0,
        },
        models: Vec::new(),
    }];
    let r = load::run(
        client.clone(),
        payload.clone(),
        &plan(open, None, Some(Duration::from_millis(900))),
        tokio::time::Instant::now(),
        false,
    )
    .await;
    let s = r.callers["open"].summary(r.elapsed);
    // About 30 requests were meant for the stalled 300 ms; measured from their intended send times, the
    // slowest waited nearly the whole stall and more than 1 % of all waited over 100 ms.
    assert!(s.latency_ms.max >= 250.0, "{:?}", s.latency_ms);
    assert!(s.latency_ms.p90 >= 100.0, "{:?}", s.latency_ms);
    assert!(s.requests >= 80, "{}", s.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_bound_stops_the_run_and_a_closed_port_is_a_connect_failure() {
    let target = serve(None).await;
    let client = Client::new(target, Protocol::Http1, Duration::from_secs(5));
    let payload = payload(&client).await;
    let one = vec![CallerSpec {
        name: "c".into(),
        pace: Pace::Closed { concurrency: 4 },
        models: Vec::new(),
    }];
    let r = load::run(
        client,
        payload.clone(),
        &plan(one.clone(), Some(200), None),
        tokio::time::Instant::now(),
        false,
    )
    .await;
    assert_eq!(r.callers["c"].summary(r.elapsed).requests, 200);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    for protocol in [Protocol::Http1, Protocol::Grpc] {
        let client = Client::new(Target { addr }, protocol, Duration::from_secs(2));
        let mut payload = payload.clone();
        if payload.grpc.is_empty() {
            payload.grpc.push(Default::default());
        }
        let r = load::run(
            client,
            payload,
            &plan(one.clone(), Some(20), None),
            tokio::time::Instant::now(),
            false,
        )
        .await;
        let s = r.callers["c"].summary(r.elapsed);
        assert_eq!(
            s.errors.get("connect").copied(),
            Some(s.requests),
            "{protocol:?}: {:?}",
            s.errors
        );
    }
}

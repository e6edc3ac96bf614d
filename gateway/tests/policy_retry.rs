//! Retries and timeouts against a scripted tower upstream, on tokio's paused clock: every retry
//! condition, bodies too large to replay, budget exhaustion, per-try and overall deadlines, and
//! `grpc-timeout` propagation.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use infergate_gateway::retry::{
    BudgetSpec, ReplayBody, RetryBudget, RetryError, RetryInfo, RetryLayer, RetryOn, RetryPolicy,
    UpstreamError, UpstreamFailure, buffer_body, send,
};
use infergate_gateway::timeout::{GRPC_TIMEOUT, TimeoutPolicy, parse_grpc_timeout};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

type RespBody = StreamBody<stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

#[derive(Debug, thiserror::Error)]
#[error("scripted upstream failure {0:?}")]
struct UpErr(UpstreamFailure);

impl UpstreamError for UpErr {
    fn failure(&self) -> UpstreamFailure {
        self.0
    }
}

#[derive(Clone)]
enum Step {
    Status(u16),
    /// A trailers-only gRPC answer: `grpc-status` in the headers.
    GrpcHeaders(u32),
    /// A gRPC answer with a message and `grpc-status` in the trailers.
    GrpcTrailers(u32),
    Fail(UpstreamFailure),
    Hang,
}

#[derive(Default)]
struct Seen {
    tries: u32,
    grpc_timeouts: Vec<Duration>,
    bodies: Vec<Bytes>,
}

/// An upstream that answers with `steps` in order (the last one repeats) and records what it saw.
fn upstream(
    steps: Vec<Step>,
) -> (
    impl tower::Service<
        Request<ReplayBody<Full<Bytes>>>,
        Response = Response<RespBody>,
        Error = UpErr,
        Future = impl Future<Output = Result<Response<RespBody>, UpErr>> + Send,
    > + Clone
    + Send
    + 'static,
    Arc<Mutex<Seen>>,
) {
    let steps = Arc::new(Mutex::new(VecDeque::from(steps)));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    let svc = tower::service_fn(move |req: Request<ReplayBody<Full<Bytes>>>| {
        let steps = steps.clone();
        let seen = seen2.clone();
        async move {
            let step = {
                let mut s = steps.lock().unwrap();
                if s.len() > 1 {
                    s.pop_front().unwrap()
                } else {
                    s.front().cloned().unwrap()
                }
            };
            let t = req
                .headers()
                .get(GRPC_TIMEOUT)
                .map(|v| parse_grpc_timeout(v).unwrap());
            let body = req.into_body().collect().await.unwrap().to_bytes();
            {
                let mut s = seen.lock().unwrap();
                s.tries += 1;
                s.grpc_timeouts.extend(t);
                s.bodies.push(body);
            }
            let grpc = |status: u32, in_trailers: bool| {
                let mut frames = Vec::new();
                let mut b = Response::builder().header("content-type", "application/grpc");
                if in_trailers {
                    frames.push(Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x02\x08\x01"))));
                    let mut t = HeaderMap::new();
                    t.insert("grpc-status", HeaderValue::from(status));
                    frames.push(Ok(Frame::trailers(t)));
                } else {
                    b = b.header("grpc-status", status);
                }
                b.body(StreamBody::new(stream::iter(frames))).unwrap()
            };
            match step {
                Step::Status(s) => Ok(Response::builder()
                    .status(s)
                    .body(StreamBody::new(stream::iter(vec![Ok(Frame::data(Bytes::from(
                        format!("status {s}"),
                    )))])))
                    .unwrap()),
                Step::GrpcHeaders(c) => Ok(grpc(c, false)),
                Step::GrpcTrailers(c) => Ok(grpc(c, true)),
                Step::Fail(f) => Err(UpErr(f)),
                Step::Hang => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Err(UpErr(UpstreamFailure::Other))
                }
            }
        }
    });
    (svc, seen)
}

fn policy(retry_on: &[&str]) -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        retry_on: RetryOn::parse(retry_on).unwrap(),
        budget: BudgetSpec {
            ratio: 1.0,
            min_per_sec: 100,
            ttl: Duration::from_secs(10),
        },
        ..RetryPolicy::default()
    }
}

fn request(grpc: bool) -> Request<ReplayBody<Full<Bytes>>> {
    let mut b = Request::builder()
        .method("POST")
        .uri("http://backend/v2/models/m/infer");
    if grpc {
        b = b.header("content-type", "application/grpc");
    }
    b.body(ReplayBody::full(Bytes::from_static(b"payload"))).unwrap()
}

/// Runs one request; returns (final HTTP status or error, tries seen by the upstream).
async fn run(retry_on: &[&str], steps: Vec<Step>, grpc: bool) -> (Result<u16, String>, u32) {
    let (mut svc, seen) = upstream(steps);
    let p = policy(retry_on);
    let budget = RetryBudget::new(p.budget);
    let out = send(&mut svc, request(grpc), &p, &budget, None, "test").await;
    let tries = seen.lock().unwrap().tries;
    (out.map(|r| r.status().as_u16()).map_err(|e| e.to_string()), tries)
}

#[tokio::test(start_paused = true)]
async fn each_condition_retries_exactly_what_it_names() {
    use Step::*;
    use UpstreamFailure::*;
    let cases: Vec<(&[&str], Step, bool, bool)> = vec![
        // (retry_on, first answer, gRPC request, retried?)
        (&["5xx"], Status(500), false, true),
        (&["5xx"], Status(404), false, false),
        (&["5xx"], Fail(Reset), false, true),
        (&["5xx"], Fail(Overloaded), false, false),
        (&["gateway-error"], Status(502), false, true),
        (&["gateway-error"], Status(504), false, true),
        (&["gateway-error"], Status(500), false, false),
        (&["connect-failure"], Fail(ConnectFailure), false, true),
        (&["connect-failure"], Fail(Reset), false, false),
        (&["refused-stream"], Fail(RefusedStream), false, true),
        (&["refused-stream"], Status(503), false, false),
        (&["reset"], Fail(Reset), false, true),
        (&["reset"], Status(500), false, false),
        (&["503"], Status(503), false, true),
        (&["503"], Status(502), false, false),
        (&["retriable-4xx"], Status(409), false, true),
        (&["unavailable"], GrpcHeaders(14), true, true),
        (&["unavailable"], GrpcHeaders(3), true, false),
        (&["unavailable"], GrpcTrailers(14), true, true),
        (&["resource-exhausted"], GrpcTrailers(8), true, true),
        (&["unavailable"], GrpcTrailers(13), true, false),
        (&["5xx"], Hang, false, true),
        (&["connect-failure"], Hang, false, false),
    ];
    for (on, first, grpc, retried) in cases {
        let label = format!("retry_on {on:?}, first answer {}", describe(&first));
        let p = RetryPolicy {
            per_try_timeout: Some(Duration::from_millis(100)),
            ..policy(on)
        };
        let (mut svc, seen) = upstream(vec![first, Step::Status(200)]);
        let budget = RetryBudget::new(p.budget);
        let out = send(&mut svc, request(grpc), &p, &budget, None, "test").await;
        let tries = seen.lock().unwrap().tries;
        if retried {
            assert_eq!(tries, 2, "{label}: expected one retry");
            let resp = out.unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(resp.status(), StatusCode::OK, "{label}");
            let info = resp.extensions().get::<RetryInfo>().copied().unwrap();
            assert_eq!(info.tries, 2);
            assert!(info.last_reason.is_some());
        } else {
            assert_eq!(tries, 1, "{label}: expected no retry");
        }
        // The replayed body is the same bytes every try.
        assert!(
            seen.lock().unwrap().bodies.iter().all(|b| b == "payload"),
            "{label}"
        );
    }
}

fn describe(s: &Step) -> String {
    match s {
        Step::Status(c) => format!("HTTP {c}"),
        Step::GrpcHeaders(c) => format!("grpc-status {c} in headers"),
        Step::GrpcTrailers(c) => format!("grpc-status {c} in trailers"),
        Step::Fail(f) => format!("{f:?}"),
        Step::Hang => "no answer".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_attempts_and_returns_the_last_answer() {
    let (out, tries) = run(&["5xx"], vec![Step::Status(503)], false).await;
    assert_eq!((out, tries), (Ok(503), 3));
    let (out, tries) = run(&["reset"], vec![Step::Fail(UpstreamFailure::Reset)], false).await;
    assert_eq!(tries, 3);
    assert!(out.unwrap_err().contains("3 tries"));
}

#[tokio::test(start_paused = true)]
async fn trailers_buffered_for_the_decision_reach_the_caller() {
    let (mut svc, _) = upstream(vec![Step::GrpcTrailers(0)]);
    let p = policy(&["unavailable"]);
    let budget = RetryBudget::new(p.budget);
    let resp = send(&mut svc, request(true), &p, &budget, None, "test")
        .await
        .unwrap();
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(collected.to_bytes().len(), 7);
}

#[tokio::test(start_paused = true)]
async fn bodies_larger_than_the_replay_limit_are_sent_once() {
    let (mut svc, seen) = upstream(vec![Step::Status(503), Step::Status(200)]);
    let p = RetryPolicy {
        max_replay_bytes: 8,
        ..policy(&["5xx"])
    };
    let chunks: Vec<Result<Frame<Bytes>, Infallible>> = (0..4)
        .map(|_| Ok(Frame::data(Bytes::from_static(b"0123456789"))))
        .collect();
    let big = buffer_body(StreamBody::new(stream::iter(chunks)), p.max_replay_bytes)
        .await
        .unwrap();
    assert!(!big.is_replayable());
    // Bridge the body type: the scripted upstream takes ReplayBody<Full<Bytes>>.
    let all = big.collect().await.unwrap().to_bytes();
    let req = Request::post("http://backend/x")
        .body(ReplayBody::Once {
            prefix: VecDeque::new(),
            rest: Full::new(all),
        })
        .unwrap();
    let budget = RetryBudget::new(p.budget);
    let resp = send(&mut svc, req, &p, &budget, None, "test").await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a body that cannot be replayed is not retried"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.tries, 1);
    assert_eq!(seen.bodies[0].len(), 40);
}

#[tokio::test(start_paused = true)]
async fn budget_exhaustion_stops_retries_across_requests() {
    let p = RetryPolicy {
        attempts: 5,
        budget: BudgetSpec {
            ratio: 0.0,
            min_per_sec: 1,
            ttl: Duration::from_secs(2),
        },
        ..policy(&["5xx"])
    };
    let budget = RetryBudget::new(p.budget);
    let (mut svc, seen) = upstream(vec![Step::Status(503)]);
    // The floor allows 1/s × 2 s = 2 retries in the window, then none.
    let r1 = send(&mut svc.clone(), request(false), &p, &budget, None, "test")
        .await
        .unwrap();
    let i1 = *r1.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((i1.tries, i1.budget_exhausted), (3, true));
    let r2 = send(&mut svc.clone(), request(false), &p, &budget, None, "test")
        .await
        .unwrap();
    let i2 = *r2.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((i2.tries, i2.budget_exhausted), (1, true));
    assert_eq!(seen.lock().unwrap().tries, 4);
    // The window passes: retries are possible again.
    tokio::time::advance(Duration::from_secs(3)).await;
    let r3 = send(&mut svc, request(false), &p, &budget, None, "test")
        .await
        .unwrap();
    assert_eq!(r3.extensions().get::<RetryInfo>().unwrap().tries, 3);
}

#[tokio::test(start_paused = true)]
async fn overall_deadline_covers_every_try_and_back_off() {
    let (mut svc, seen) = upstream(vec![Step::Hang]);
    let p = RetryPolicy {
        attempts: 10,
        per_try_timeout: Some(Duration::from_millis(100)),
        ..policy(&["5xx"])
    };
    let budget = RetryBudget::new(p.budget);
    let start = Instant::now();
    let deadline = TimeoutPolicy {
        overall: Some(Duration::from_millis(250)),
    }
    .deadline(&HeaderMap::new(), start);
    let err = send(&mut svc, request(false), &p, &budget, deadline, "test")
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(matches!(err, RetryError::DeadlineExceeded { .. }), "{err}");
    assert!(err.is_timeout());
    // It ends at the deadline, or earlier when the next back-off would not fit before it.
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed <= Duration::from_millis(250),
        "took {elapsed:?}"
    );
    let tries = seen.lock().unwrap().tries;
    assert!(
        (2..=3).contains(&tries),
        "{tries} tries in 250 ms with 100 ms per try"
    );

    // Without an overall deadline the per-try timeout ends the last try.
    let (mut svc, _) = upstream(vec![Step::Hang]);
    let p = RetryPolicy {
        attempts: 2,
        per_try_timeout: Some(Duration::from_millis(100)),
        ..policy(&["reset"])
    };
    let err = send(&mut svc, request(false), &p, &budget, None, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RetryError::PerTryTimeout {
                info: RetryInfo { tries: 2, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn grpc_timeout_is_honoured_and_rewritten_for_the_time_left() {
    let (svc, seen) = upstream(vec![Step::GrpcHeaders(14), Step::GrpcHeaders(0)]);
    // Route timeout 5 s, caller deadline 1 s: the caller's wins; the layer computes it.
    let p = Arc::new(policy(&["unavailable"]));
    let budget = Arc::new(RetryBudget::new(p.budget));
    let layer = RetryLayer::new(
        "test".into(),
        p,
        budget,
        TimeoutPolicy {
            overall: Some(Duration::from_secs(5)),
        },
    );
    let mut req = request(true);
    req.headers_mut()
        .insert(GRPC_TIMEOUT, HeaderValue::from_static("1S"));
    let resp = layer.layer(svc).oneshot(req).await.unwrap();
    assert_eq!(resp.headers()["grpc-status"], "0");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.grpc_timeouts.len(), 2);
    assert_eq!(seen.grpc_timeouts[0], Duration::from_secs(1));
    assert!(
        seen.grpc_timeouts[1] < seen.grpc_timeouts[0],
        "second try must see less time: {:?}",
        seen.grpc_timeouts
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_retried_gets_one_try_with_the_same_limits() {
    // The policy never retries (the default): one try, bounded by the per-try timeout.
    let no_retries = RetryPolicy {
        per_try_timeout: Some(Duration::from_millis(100)),
        ..RetryPolicy::default()
    };
    let budget = RetryBudget::new(no_retries.budget);
    let (mut svc, seen) = upstream(vec![Step::Hang]);
    let start = Instant::now();
    let err = send(&mut svc, request(false), &no_retries, &budget, None, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(err, RetryError::PerTryTimeout { timeout, info: RetryInfo { tries: 1, .. } } if timeout == Duration::from_millis(100)),
        "{err}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(seen.lock().unwrap().tries, 1);

    // A deadline sooner than the per-try timeout ends it as a deadline, and a gRPC try is told the time left.
    let (mut svc, seen) = upstream(vec![Step::Hang]);
    let start = Instant::now();
    let deadline = Some(start + Duration::from_millis(40));
    let err = send(&mut svc, request(true), &no_retries, &budget, deadline, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RetryError::DeadlineExceeded {
                info: RetryInfo { tries: 1, .. }
            }
        ),
        "{err}"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    assert_eq!(
        seen.lock().unwrap().grpc_timeouts,
        vec![Duration::from_millis(40)]
    );

    // A deadline already passed: no try at all.
    let (mut svc, seen) = upstream(vec![Step::Status(200)]);
    let err = send(
        &mut svc,
        request(false),
        &no_retries,
        &budget,
        Some(Instant::now()),
        "test",
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RetryError::DeadlineExceeded { .. }), "{err}");
    assert_eq!(seen.lock().unwrap().tries, 0);

    // A retrying policy with a body that cannot be replayed: one try, its failure passed on as it is.
    let (mut svc, seen) = upstream(vec![Step::Fail(UpstreamFailure::Reset), Step::Status(200)]);
    let retrying = policy(&["reset"]);
    let once = request(false).map(|_| ReplayBody::Once {
        prefix: Default::default(),
        rest: Full::new(Bytes::from_static(b"streamed")),
    });
    let err = send(&mut svc, once, &retrying, &budget, None, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RetryError::Upstream {
                source: UpErr(UpstreamFailure::Reset),
                info: RetryInfo { tries: 1, .. }
            }
        ),
        "{err}"
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!((seen.tries, seen.bodies[0].as_ref()), (1, &b"streamed"[..]));
    }

    // And an answer passes through untouched.
    let (mut svc, _) = upstream(vec![Step::Status(503)]);
    let resp = send(&mut svc, request(false), &no_retries, &budget, None, "test")
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.extensions().get::<RetryInfo>().is_none());
}

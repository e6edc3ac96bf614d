//! Body bytes and retry outcomes, as a user reads them: requests over real sockets through a gateway to
//! upstreams written here, then a scrape of the admin port's `/metrics`.
//!
//! Every test names its own routes: the tests of this file share one process, so one metrics recorder.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use infergate_gateway::server::Gateway;

/// The value of the series `name{labels}` in the exposition `text`, if it is there.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Scrapes until `series` has `want` (the request-byte tally lands when the request body is let go, which
/// may be just after the caller has its answer); fails naming what it saw.
async fn wait_for_value(gw: &Gateway, series: &str, want: f64) {
    let mut text = String::new();
    for _ in 0..500 {
        text = admin_get(gw, "/metrics").await.1;
        if value(&text, series) == Some(want) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{series} never became {want}; last scrape:\n{text}");
}

fn post(gw: &Gateway, path: &str, body: Bytes) -> Request<Full<Bytes>> {
    Request::post(format!("http://{}{path}", gw.data_addr()))
        .body(Full::new(body))
        .unwrap()
}

#[tokio::test]
async fn request_and_response_body_bytes_are_counted_by_route_and_destination_from_zero() {
    let answer = Bytes::from(vec![b'r'; 700]);
    // Like a real backend, the upstream reads the whole request before it answers: every body byte passes
    // through the gateway, whichever side finishes first.
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let answer = answer.clone();
        async move {
            let _ = req.into_body().collect().await;
            Response::new(Full::new(answer))
        }
    })
    .await;
    let yaml = format!(
        r#"
upstreams:
  - name: bytes-up
    endpoints: ["{}"]
    protocol: h2c
routes:
  - name: bytes-route
    destinations:
      - upstream: bytes-up
"#,
        up.addr
    );
    let gw = gateway(&yaml).await;
    let request_bytes =
        r#"infergate_gateway_request_bytes_total{route="bytes-route",destination="bytes-up"}"#;
    let response_bytes =
        r#"infergate_gateway_response_bytes_total{route="bytes-route",destination="bytes-up"}"#;
    let fresh = admin_get(&gw, "/metrics").await.1;
    assert_eq!(value(&fresh, request_bytes), Some(0.0), "{fresh}");
    assert_eq!(value(&fresh, response_bytes), Some(0.0), "{fresh}");

    // Over HTTP/1.1 and over h2c: the bytes are the bodies', whatever the framing.
    for client in [http1_client(), h2c_client()] {
        for _ in 0..3 {
            let (parts, body) = send(
                &client,
                post(&gw, "/v2/models/m/infer", Bytes::from(vec![b'q'; 1234])),
            )
            .await;
            assert_eq!(parts.status, StatusCode::OK);
            assert_eq!(body.len(), 700);
        }
    }
    // A GET has no body: nothing to add.
    let get = Request::get(format!("http://{}/v2/models/m", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    send(&http1_client(), get).await;

    wait_for_value(&gw, request_bytes, 6.0 * 1234.0).await;
    wait_for_value(&gw, response_bytes, 7.0 * 700.0).await;
}

/// An h2c upstream that answers each request's head at once, reads the request body as it comes (giving
/// the window back), and ends its answer with `done` when the request ends: a bidirectional stream.
async fn streaming_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    tokio::spawn(async move {
                        let mut send = respond.send_response(Response::new(()), false).unwrap();
                        let mut body = req.into_body();
                        while let Some(Ok(data)) = body.data().await {
                            let _ = body.flow_control().release_capacity(data.len());
                        }
                        let _ = send.send_data(Bytes::from_static(b"done"), true);
                    });
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_streaming_request_counts_its_bytes_while_it_runs() {
    let up = streaming_upstream().await;
    let yaml = format!(
        r#"
upstreams:
  - name: stream-up
    endpoints: ["{up}"]
    protocol: h2c
routes:
  - name: stream-route
    destinations:
      - upstream: stream-up
"#
    );
    let gw = gateway(&yaml).await;
    let series = r#"infergate_gateway_request_bytes_total{route="stream-route",destination="stream-up"}"#;

    let tcp = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.unwrap();
    let req = Request::post("http://a/v2/models/m/infer").body(()).unwrap();
    let (answer, mut sending) = client.send_request(req, false).unwrap();
    sending.send_data(Bytes::from(vec![b'a'; 500]), false).unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);

    // The request is still open: its bytes so far are counted already, and more as they pass.
    wait_for_value(&gw, series, 500.0).await;
    sending.send_data(Bytes::from(vec![b'b'; 300]), false).unwrap();
    wait_for_value(&gw, series, 800.0).await;

    sending.send_data(Bytes::new(), true).unwrap();
    let mut body = answer.into_body();
    let mut answered = Vec::new();
    while let Some(data) = body.data().await {
        answered.extend_from_slice(&data.unwrap());
    }
    assert_eq!(answered, b"done");
    wait_for_value(&gw, series, 800.0).await;
}

#[tokio::test]
async fn bytes_of_requests_no_route_takes_are_counted_under_destination_none() {
    let up = named_upstream("unused").await;
    let yaml = format!(
        r#"
upstreams:
  - name: none-up
    endpoints: ["{}"]
    protocol: h2c
routes:
  - name: only-model-a
    match: {{ path_prefix: /v2/models/a/ }}
    destinations:
      - upstream: none-up
"#,
        up.addr
    );
    let gw = gateway(&yaml).await;
    let (parts, body) = send(
        &http1_client(),
        post(&gw, "/v2/models/b/infer", Bytes::from(vec![b'q'; 321])),
    )
    .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
    let text = admin_get(&gw, "/metrics").await.1;
    let response = value(
        &text,
        r#"infergate_gateway_response_bytes_total{route="none",destination="none"}"#,
    )
    .unwrap_or_else(|| panic!("no response bytes under route none:\n{text}"));
    assert!(
        response >= body.len() as f64,
        "the gateway's own answer ({} bytes) is counted: {response}",
        body.len()
    );
    assert_eq!(up.hits(), 0);
}

/// An upstream answering 503 to its first `failures` requests, then 200.
async fn failing_first(failures: usize) -> TestUpstream {
    let seen = Arc::new(AtomicUsize::new(0));
    upstream(move |_req| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        async move {
            let status = if n < failures { 503 } else { 200 };
            Response::builder()
                .status(status)
                .body(Full::new(Bytes::from_static(b"answer")))
                .unwrap()
        }
    })
    .await
}

#[tokio::test]
async fn retries_are_counted_by_outcome_attempted_succeeded_failed_and_budget_exhausted() {
    let saved = failing_first(1).await;
    let down = failing_first(usize::MAX).await;
    let yaml = format!(
        r#"
upstreams:
  - name: saved-up
    endpoints: ["{saved}"]
    protocol: h2c
  - name: down-up
    endpoints: ["{down}"]
    protocol: h2c
routes:
  - name: retry-saved
    match: {{ path_prefix: /v2/models/saved/ }}
    destinations: [{{ upstream: saved-up }}]
    retries: {{ attempts: 3, retry_on: [503], backoff: {{ base: 1ms, max: 2ms }} }}
  - name: retry-down
    match: {{ path_prefix: /v2/models/down/ }}
    destinations: [{{ upstream: down-up }}]
    retries: {{ attempts: 1, retry_on: [503], backoff: {{ base: 1ms, max: 2ms }} }}
  - name: retry-no-budget
    match: {{ path_prefix: /v2/models/broke/ }}
    destinations: [{{ upstream: down-up }}]
    retries:
      attempts: 3
      retry_on: [503]
      budget: {{ ratio: 0, min_per_second: 0, window: 10s }}
"#,
        saved = saved.addr,
        down = down.addr,
    );
    let gw = gateway(&yaml).await;
    let series = |route: &str, outcome: &str| {
        format!(r#"infergate_gateway_retry_outcomes_total{{route="{route}",outcome="{outcome}"}}"#)
    };
    let fresh = admin_get(&gw, "/metrics").await.1;
    for route in ["retry-saved", "retry-down", "retry-no-budget"] {
        for outcome in [
            "attempted",
            "succeeded",
            "failed",
            "budget_exhausted",
            "deadline_exceeded",
        ] {
            assert_eq!(
                value(&fresh, &series(route, outcome)),
                Some(0.0),
                "{route} {outcome} at zero from start:\n{fresh}"
            );
        }
    }

    let client = http1_client();
    let ask = |model: &str| post(&gw, &format!("/v2/models/{model}/infer"), Bytes::from("{}"));
    // One 503, then 200 on the retry: the retry saved the request.
    assert_eq!(send(&client, ask("saved")).await.0.status, StatusCode::OK);
    // 503 on both tries: retried, and still failed.
    assert_eq!(
        send(&client, ask("down")).await.0.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // 503, and a budget of zero: the retry is never sent.
    assert_eq!(
        send(&client, ask("broke")).await.0.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    let text = admin_get(&gw, "/metrics").await.1;
    for (route, outcome, want) in [
        ("retry-saved", "attempted", 1.0),
        ("retry-saved", "succeeded", 1.0),
        ("retry-saved", "failed", 0.0),
        ("retry-down", "attempted", 1.0),
        ("retry-down", "succeeded", 0.0),
        ("retry-down", "failed", 1.0),
        ("retry-no-budget", "attempted", 0.0),
        ("retry-no-budget", "budget_exhausted", 1.0),
        ("retry-no-budget", "failed", 0.0),
    ] {
        assert_eq!(
            value(&text, &series(route, outcome)),
            Some(want),
            "{route} {outcome}:\n{text}"
        );
    }
    assert_eq!(
        value(
            &text,
            r#"infergate_gateway_retry_budget_exhausted_total{route="retry-no-budget"}"#
        ),
        Some(1.0),
        "the budget alert's series agrees"
    );
    assert_eq!(saved.hits(), 2);
    assert_eq!(
        down.hits(),
        3,
        "two tries for retry-down, one for retry-no-budget"
    );
}

/// The error series the error-budget alerts count exist at zero from start, so the first failure is an
/// increase that `rate()` sees (a series born at 1 is missed); the first 503 then moves its series to 1.
#[tokio::test]
async fn server_error_series_exist_at_zero_before_the_first_failure() {
    let failing = upstream(|_req: Request<hyper::body::Incoming>| async {
        Response::builder()
            .status(503)
            .body(Full::new(Bytes::from_static(b"down")))
            .unwrap()
    })
    .await;
    let gw = gateway(&format!(
        r#"
upstreams:
  - {{ name: flaky, endpoints: ["{}"] }}
routes:
  - name: errors-from-zero
    match: {{ model: errors }}
    destinations: [{{ name: only, upstream: flaky }}]
"#,
        failing.addr
    ))
    .await;
    let series = |outcome: &str, class: &str, code: &str, grpc: Option<&str>| {
        let grpc = grpc.map_or(String::new(), |g| format!(r#",grpc_status="{g}""#));
        format!(
            r#"infergate_gateway_requests_total{{route="errors-from-zero",destination="only",upstream="flaky",outcome="{outcome}",status_class="{class}",response_code="{code}"{grpc}}}"#
        )
    };
    let fresh = admin_get(&gw, "/metrics").await.1;
    for (outcome, class, code, grpc) in [
        ("timeout", "5xx", "504", None),
        ("overloaded", "5xx", "503", None),
        ("bad_gateway", "5xx", "502", None),
        ("upstream_error", "5xx", "503", None),
        ("upstream_error", "5xx", "500", None),
        ("unavailable", "2xx", "200", Some("14")),
        ("timeout", "2xx", "200", Some("4")),
        ("upstream_error", "2xx", "200", Some("13")),
    ] {
        let s = series(outcome, class, code, grpc);
        assert_eq!(value(&fresh, &s), Some(0.0), "{s} at zero from start:\n{fresh}");
    }

    let client = http1_client();
    let answer = send(&client, post(&gw, "/v2/models/errors/infer", Bytes::from("{}"))).await;
    assert_eq!(answer.0.status, StatusCode::SERVICE_UNAVAILABLE);
    wait_for_value(&gw, &series("upstream_error", "5xx", "503", None), 1.0).await;
}

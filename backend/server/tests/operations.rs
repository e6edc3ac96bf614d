//! The binary: flags, `check`, the metrics port and the SIGTERM drain.

mod support;

use std::time::{Duration, Instant};

use support::*;

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_then_exits_0() {
    let repo = Repo::new();
    // A lone request waits 1.5 s for a batch to fill: it is in flight when SIGTERM arrives.
    repo.simple(
        "m",
        &[(1, 1)],
        Some(&simple_config(
            "dynamic_batching { max_queue_delay_microseconds: 1500000 }",
        )),
    );
    let server = Server::start(&[
        &format!("--model-repository={}", repo.path().display()),
        "--exit-timeout-secs=20",
    ])
    .await;
    let addr = server.http;
    let body = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;
    let in_flight = tokio::spawn(async move { http("POST", addr, "/v2/models/m/infer", body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.signal("TERM");
    let (status, body) = in_flight
        .await
        .unwrap()
        .expect("the in-flight request gets its answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[2.0,3.0,4.0,5.0]"), "{body}");
    // New connections are refused once shutdown began.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        http("GET", addr, "/v2/health/live", "").await.is_err(),
        "still accepting after SIGTERM"
    );
    let (code, log) = server.wait(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("in-flight requests finished"), "{log}");
}

#[tokio::test]
async fn the_exit_timeout_bounds_the_drain() {
    let repo = Repo::new();
    repo.simple(
        "m",
        &[(1, 1)],
        Some(&simple_config(
            "dynamic_batching { max_queue_delay_microseconds: 60000000 }",
        )),
    );
    let server = Server::start(&[
        &format!("--model-repository={}", repo.path().display()),
        "--exit-timeout-secs=1",
    ])
    .await;
    let addr = server.http;
    let body = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;
    let _stuck = tokio::spawn(async move { http("POST", addr, "/v2/models/m/infer", body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    server.signal("TERM");
    let (code, log) = server.wait(Duration::from_secs(15));
    assert_eq!(code, Some(0), "{log}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "exited after {:?}",
        t.elapsed()
    );
    assert!(log.contains("exit timeout reached"), "{log}");
}

#[tokio::test]
async fn the_metrics_port_serves_prometheus_text() {
    let server = Server::start(&[&format!("--model-store={}", example_models().display())]).await;
    let body = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;
    let (status, _) = http("POST", server.http, "/v2/models/simple/versions/1/infer", body)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, text) = http("GET", server.metrics, "/metrics", "").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("nv_inference_request_success{model=\"simple\",version=\"1\"} 1"),
        "{text}"
    );
    assert!(text.contains("nv_inference_request_success{model=\"heavy_mlp\",version=\"1\"} 0"));
    let (status, _) = http("GET", server.metrics, "/other", "").await.unwrap();
    assert_eq!(status, 404);
}

#[test]
fn check_exits_0_on_a_good_repository_and_1_listing_every_problem() {
    let bin = env!("CARGO_BIN_EXE_infergate-backend");
    let out = std::process::Command::new(bin)
        .arg("check")
        .arg(example_models())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 2 models, 3 versions"));

    let repo = Repo::new();
    repo.simple("good", &[(1, 1)], Some(&simple_config("")));
    repo.write("bad/1/model.onnx", b"junk");
    repo.simple(
        "wrongtype",
        &[(1, 1)],
        Some(&simple_config("").replace(
            "TYPE_FP32, dims: [ 4 ] } ]\noutput",
            "TYPE_INT32, dims: [ 4 ] } ]\noutput",
        )),
    );
    let out = std::process::Command::new(bin)
        .arg("check")
        .arg(repo.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad/1/model.onnx"), "{err}");
    assert!(
        err.contains("input 'x': the config says TYPE_INT32 but the ONNX model has TYPE_FP32"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 problems in 3 models"));
}

#[test]
fn a_missing_repository_or_a_taken_port_fails_the_start_with_a_clear_message() {
    let bin = env!("CARGO_BIN_EXE_infergate-backend");
    let out = std::process::Command::new(bin)
        .arg("--model-repository=/nonexistent/models")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--model-repository /nonexistent/models: not a folder")
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = std::process::Command::new(bin)
        .arg(format!("--model-repository={}", example_models().display()))
        .args([
            "--http-address=127.0.0.1",
            &format!("--http-port={port}"),
            "--allow-grpc=false",
            "--allow-metrics=false",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot listen for REST") && err.contains("--http-port"),
        "{err}"
    );
}

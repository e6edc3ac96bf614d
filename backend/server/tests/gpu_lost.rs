//! A GPU device lost under a served model, on the binary: the GPU model fails fast with 503 and reports not
//! ready, a CPU model beside it keeps serving, and the GPU model serves again, with no reload by anyone,
//! once the device is back.
//!
//! The loss is the fault drills' switch (`INFERGATE_FAULT_GPU_LOST=<file>`): while the file exists the
//! engine destroys its wgpu device (the state a driver reset leaves) and creates no new one.

mod support;

use std::time::{Duration, Instant};

use support::*;

const ROW: &str = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;

async fn status_of(server: &Server, method: &str, path: &str, body: &str) -> (u16, String) {
    http(method, server.http, path, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

async fn metrics(server: &Server) -> String {
    http("GET", server.metrics, "/metrics", "")
        .await
        .map(|(_, body)| body)
        .unwrap_or_else(|e| panic!("metrics: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_gpu_fails_fast_and_serves_again_when_it_is_back_while_cpu_models_serve_on() {
    let switch_dir = tempfile::tempdir().expect("temp dir");
    let switch = switch_dir.path().join("gpu-pulled");
    // Tiny shapes: lavapipe (Mesa's software Vulkan) is the adapter in CI.
    let repo = Repo::new();
    repo.simple(
        "on_gpu",
        &[(1, 1)],
        Some(&simple_config("").replace("KIND_CPU", "KIND_GPU")),
    );
    repo.simple("on_cpu", &[(1, 1)], Some(&simple_config("")));
    let server = Server::start_with_env(
        &[&format!("--model-repository={}", repo.path().display())],
        &[("INFERGATE_FAULT_GPU_LOST", switch.as_path())],
    )
    .await;
    let (status, body) = status_of(&server, "POST", "/v2/models/on_gpu/infer", ROW).await;
    assert_eq!(
        status, 200,
        "the GPU model serves before the loss (is mesa-vulkan-drivers installed?): {body}"
    );

    std::fs::write(&switch, b"").expect("pull the GPU");
    let started = Instant::now();
    let (status, body) = status_of(&server, "POST", "/v2/models/on_gpu/infer", ROW).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("lost"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a request to a lost device fails at once, not after a batch or a timeout"
    );
    assert_ne!(
        status_of(&server, "GET", "/v2/models/on_gpu/ready", "").await.0,
        200
    );
    assert_ne!(
        status_of(&server, "GET", "/v2/health/ready", "").await.0,
        200,
        "strict readiness: a model that should serve cannot"
    );
    let m = metrics(&server).await;
    assert!(m.contains("infergate_model_ready{model=\"on_gpu\"} 0"), "{m}");
    assert!(m.contains("infergate_model_ready{model=\"on_cpu\"} 1"), "{m}");
    let (_, index) = status_of(&server, "POST", "/v2/repository/index", "{}").await;
    assert!(index.contains("UNAVAILABLE") && index.contains("lost"), "{index}");

    // The CPU model beside it serves throughout.
    let (status, body) = status_of(&server, "POST", "/v2/models/on_cpu/infer", ROW).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        status_of(&server, "GET", "/v2/models/on_cpu/ready", "").await.0,
        200
    );

    // While the device stays away, rebuilds fail and are counted; the version stays unavailable.
    let failed_rebuild =
        "infergate_model_load_failures_total{model=\"on_gpu\",version=\"1\",reason=\"instance\"}";
    let end = Instant::now() + Duration::from_secs(10);
    while !metrics(&server).await.contains(failed_rebuild) {
        assert!(
            Instant::now() < end,
            "no failed rebuild counted: {}",
            metrics(&server).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(
        status_of(&server, "GET", "/v2/models/on_gpu/ready", "").await.0,
        200
    );

    std::fs::remove_file(&switch).expect("give the GPU back");
    let end = Instant::now() + Duration::from_secs(40);
    while status_of(&server, "GET", "/v2/models/on_gpu/ready", "").await.0 != 200 {
        assert!(
            Instant::now() < end,
            "the version was not rebuilt after the device came back:\n{}",
            server.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status_of(&server, "GET", "/v2/health/ready", "").await.0, 200);
    let (status, body) = status_of(&server, "POST", "/v2/models/on_gpu/infer", ROW).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("[2.0,3.0,4.0,5.0]"), "{body}");
}

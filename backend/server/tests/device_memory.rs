//! Device memory per device on the metrics port, as a user scrapes it: the binary with a KIND_GPU model on
//! wgpu (lavapipe, Mesa's software Vulkan, where there is no GPU), requests over REST, `/metrics` over HTTP.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::*;

/// `(device, bytes)` of every `infergate_gpu_memory_allocated_bytes` series in `text`.
fn per_device(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("infergate_gpu_memory_allocated_bytes{device=\""))
        .filter_map(|rest| {
            let (device, value) = rest.split_once("\"} ")?;
            Some((device.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The value of `infergate_model_gpu_memory_bytes` for model `g` version 1.
fn model_bytes(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("infergate_model_gpu_memory_bytes{model=\"g\",version=\"1\"} "))
        .and_then(|v| v.trim().parse().ok())
}

async fn scrape(server: &Server) -> String {
    let (status, text) = http("GET", server.metrics, "/metrics", "").await.unwrap();
    assert_eq!(status, 200, "{text}");
    text
}

#[tokio::test]
async fn gpu_memory_is_reported_per_device_and_given_back_when_the_model_unloads() {
    let repo = Repo::new();
    repo.simple(
        "g",
        &[(1, 1)],
        Some(&simple_config("").replace("KIND_CPU", "KIND_GPU")),
    );
    let server = Server::start(&[
        &format!("--model-repository={}", repo.path().display()),
        "--model-control-mode=explicit",
        "--load-model=g",
    ])
    .await;

    // The device is listed from the moment the model opened it, before any plan holds memory on it.
    let fresh = scrape(&server).await;
    assert!(
        fresh.contains("# TYPE infergate_gpu_memory_allocated_bytes gauge"),
        "{fresh}"
    );
    let devices = per_device(&fresh);
    assert_eq!(
        devices.len(),
        1,
        "one device, opened by model g (install Mesa's Vulkan driver if none): {fresh}"
    );
    let device = devices[0].0.clone();
    assert!(!device.is_empty());

    let body = r#"{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}"#;
    let (status, answer) = http("POST", server.http, "/v2/models/g/infer", body)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");

    // A plan now holds buffers: the device's figure is what the model's instances hold.
    let served = scrape(&server).await;
    let held = model_bytes(&served).unwrap_or_else(|| panic!("no model figure: {served}"));
    assert!(held > 0, "{served}");
    assert_eq!(
        per_device(&served),
        vec![(device.clone(), held)],
        "the device holds what model g's plans hold:\n{served}"
    );

    // Unloading the model drops its plans, and the device's memory with them; the series stays, at zero.
    let (status, answer) = http("POST", server.http, "/v2/repository/models/g/unload", "{}")
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    let mut last = String::new();
    for _ in 0..200 {
        last = scrape(&server).await;
        if per_device(&last) == vec![(device.clone(), 0)] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("memory not given back within 10 s of the unload:\n{last}");
}

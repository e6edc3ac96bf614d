//! The REST front end over a real `ServerCore` and real ONNX models (the example `simple` model: version
//! 1 computes y = x + 1, version 2 y = x * 2), on a port-0 listener.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use infergate_backend::core::{CoreOptions, ServerCore};
use infergate_backend::http::{HttpLimits, serve_http};
use infergate_backend::repository::{ControlMode, RepositoryOptions};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// A temporary repository holding the example `simple` model (both versions).
fn simple_repository() -> tempfile::TempDir {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/models/simple");
    let dir = tempfile::tempdir().unwrap();
    for rel in ["config.pbtxt", "1/model.onnx", "2/model.onnx"] {
        let to = dir.path().join("simple").join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(example.join(rel), to).unwrap();
    }
    dir
}

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    _stop: oneshot::Sender<()>,
    _repo: tempfile::TempDir,
}

async fn start() -> Server {
    let repo = simple_repository();
    let core = ServerCore::new(CoreOptions {
        repository: RepositoryOptions {
            roots: vec![repo.path().to_path_buf()],
            mode: ControlMode::Explicit,
            startup_models: vec!["*".into()],
            ..RepositoryOptions::default()
        },
        ..CoreOptions::default()
    });
    core.start().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(serve_http(listener, core, HttpLimits::default(), async {
        let _ = rx.await;
    }));
    Server {
        addr,
        client: Client::builder(TokioExecutor::new()).build_http(),
        _stop: tx,
        _repo: repo,
    }
}

impl Server {
    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: impl Into<Bytes>,
    ) -> (StatusCode, http::HeaderMap, Bytes) {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            b = b.header(*k, v);
        }
        let r = self
            .client
            .request(b.body(Full::new(body.into())).unwrap())
            .await
            .unwrap();
        let (parts, body) = r.into_parts();
        (
            parts.status,
            parts.headers,
            body.collect().await.unwrap().to_bytes(),
        )
    }

    async fn json(&self, method: Method, path: &str, body: impl Into<Bytes>) -> (StatusCode, Value) {
        let (status, _, body) = self.call(method, path, &[], body).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

fn infer_body(rows: &[[f32; 4]]) -> String {
    let data: Vec<f32> = rows.iter().flatten().copied().collect();
    json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows.len(), 4], "data": data}]}).to_string()
}

#[tokio::test]
async fn metadata_config_and_json_inference_per_version() {
    let s = start().await;
    let (status, md) = s.json(Method::GET, "/v2/models/simple", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(md["versions"], json!(["1", "2"]));
    assert_eq!(
        md["inputs"][0],
        json!({"name": "x", "datatype": "FP32", "shape": [-1, 4]})
    );
    let (_, cfg) = s.json(Method::GET, "/v2/models/simple/config", "").await;
    assert_eq!(
        (cfg["name"].clone(), cfg["max_batch_size"].clone()),
        (json!("simple"), json!(8))
    );

    let body = infer_body(&[[1.0, 2.0, 3.0, 4.0]]);
    let (status, r) = s
        .json(Method::POST, "/v2/models/simple/versions/1/infer", body.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["model_version"], "1");
    assert_eq!(r["outputs"][0]["data"], json!([2.0, 3.0, 4.0, 5.0]));
    let (_, r) = s
        .json(Method::POST, "/v2/models/simple/versions/2/infer", body.clone())
        .await;
    assert_eq!(r["outputs"][0]["data"], json!([2.0, 4.0, 6.0, 8.0]));
    // Unversioned requests go to the highest ready version.
    let (_, r) = s.json(Method::POST, "/v2/models/simple/infer", body).await;
    assert_eq!(
        (r["model_version"].clone(), r["outputs"][0]["data"][3].clone()),
        (json!("2"), json!(8.0))
    );
}

#[tokio::test]
async fn binary_inference_and_concurrent_clients() {
    let s = start().await;
    let header = r#"{"inputs":[{"name":"x","datatype":"FP32","shape":[3,4],"parameters":{"binary_data_size":48}}],"parameters":{"binary_data_output":true}}"#;
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut body = header.as_bytes().to_vec();
    x.iter().for_each(|v| body.extend_from_slice(&v.to_le_bytes()));
    let (status, headers, out) = s
        .call(
            Method::POST,
            "/v2/models/simple/versions/1/infer",
            &[("inference-header-content-length", header.len().to_string())],
            body,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out:?}");
    let n: usize = headers["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let y: Vec<f32> = out[n..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(y, x.iter().map(|v| v + 1.0).collect::<Vec<_>>());

    // Many clients at once: every one gets its own answer back (the batcher mixes them).
    let s = std::sync::Arc::new(s);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let v = i as f32;
                let (status, r) = s
                    .json(
                        Method::POST,
                        "/v2/models/simple/versions/2/infer",
                        infer_body(&[[v; 4]]),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{r}");
                assert_eq!(r["outputs"][0]["data"], json!(vec![2.0 * v; 4]));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn errors_name_the_input_the_model_and_the_version() {
    let s = start().await;
    let cases = [
        (
            "/v2/models/simple/infer",
            json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}),
            400,
            "x",
        ),
        (
            "/v2/models/simple/infer",
            json!({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}),
            400,
            "FP32",
        ),
        ("/v2/models/simple/infer", json!({"inputs": []}), 400, "x"),
        (
            "/v2/models/simple/infer",
            json!({"inputs": [{"name": "z", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}),
            400,
            "z",
        ),
        ("/v2/models/missing/infer", json!({"inputs": []}), 404, "missing"),
    ];
    for (path, body, status, words) in cases {
        let (got, r) = s.json(Method::POST, path, body.to_string()).await;
        assert_eq!(got.as_u16(), status, "{body}: {r}");
        assert!(r["error"].as_str().unwrap().contains(words), "{body}: {r}");
    }
    let (got, r) = s
        .json(
            Method::POST,
            "/v2/models/simple/versions/7/infer",
            infer_body(&[[0.0; 4]]),
        )
        .await;
    assert!(got.is_client_error() || got.is_server_error(), "{r}");
    assert!(r["error"].as_str().unwrap().contains("version 7"), "{r}");
    // The server still answers.
    let (got, _) = s
        .json(Method::POST, "/v2/models/simple/infer", infer_body(&[[0.0; 4]]))
        .await;
    assert_eq!(got, StatusCode::OK);
}

#[tokio::test]
async fn statistics_count_inferences() {
    let s = start().await;
    for _ in 0..3 {
        s.json(
            Method::POST,
            "/v2/models/simple/versions/1/infer",
            infer_body(&[[1.0; 4], [2.0; 4]]),
        )
        .await;
    }
    let (status, stats) = s
        .json(Method::GET, "/v2/models/simple/versions/1/stats", "")
        .await;
    assert_eq!(status, StatusCode::OK);
    let m = &stats["model_stats"][0];
    assert_eq!(
        (m["name"].clone(), m["version"].clone()),
        (json!("simple"), json!("1"))
    );
    assert_eq!(m["inference_count"], 6);
    assert_eq!(m["inference_stats"]["success"]["count"], 3);
    for k in [
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
        "fail",
    ] {
        assert!(m["inference_stats"][k]["ns"].is_u64(), "{k}");
    }
    let (_, all) = s.json(Method::GET, "/v2/models/stats", "").await;
    assert_eq!(all["model_stats"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn repository_unload_load_and_upload() {
    let s = start().await;
    let (_, index) = s.json(Method::POST, "/v2/repository/index", "").await;
    assert!(
        index
            .as_array()
            .unwrap()
            .contains(&json!({"name": "simple", "version": "2", "state": "READY"})),
        "{index}"
    );
    let (status, _) = s
        .json(Method::POST, "/v2/repository/models/simple/unload", "{}")
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, r) = s.json(Method::GET, "/v2/models/simple/ready", "").await;
    assert_eq!(
        (status, r["ready"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!(false))
    );
    let (status, _) = s
        .json(Method::POST, "/v2/models/simple/infer", infer_body(&[[0.0; 4]]))
        .await;
    assert!(!status.is_success());
    let (status, r) = s
        .json(Method::POST, "/v2/repository/models/simple/load", "")
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        s.json(Method::GET, "/v2/models/simple/ready", "").await.0,
        StatusCode::OK
    );

    // A model that exists only in the request: its config as JSON and its file as base64.
    let onnx = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/models/simple/1/model.onnx"),
    )
    .unwrap();
    let config = json!({"name": "uploaded", "platform": "onnxruntime_onnx", "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}]});
    let body = json!({"parameters": {"config": config.to_string(),
        "file:1/model.onnx": base64::engine::general_purpose::STANDARD.encode(&onnx)}});
    let (status, r) = s
        .json(
            Method::POST,
            "/v2/repository/models/uploaded/load",
            body.to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let (status, r) = s
        .json(
            Method::POST,
            "/v2/models/uploaded/infer",
            infer_body(&[[1.0, 2.0, 3.0, 4.0]]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["outputs"][0]["data"], json!([2.0, 3.0, 4.0, 5.0]));
}

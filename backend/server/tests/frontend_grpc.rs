//! The gRPC front end over a real `ServerCore` and real ONNX models (the example `simple` model: version
//! 1 computes y = x + 1, version 2 y = x * 2), on a port-0 listener.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use infergate_backend::core::{CoreOptions, ServerCore};
use infergate_backend::grpc::{GrpcLimits, serve_grpc};
use infergate_backend::repository::{ControlMode, RepositoryOptions};
use infergate_protocol::grpc::pb;
use infergate_protocol::grpc::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tokio::sync::oneshot;
use tonic::Code;
use tonic::transport::Channel;

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
    client: GrpcInferenceServiceClient<Channel>,
    channel: Channel,
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
    tokio::spawn(serve_grpc(listener, core, GrpcLimits::default(), async {
        let _ = rx.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Server {
        client: GrpcInferenceServiceClient::new(channel.clone()),
        channel,
        _stop: tx,
        _repo: repo,
    }
}

fn f32s(v: &[f32]) -> Bytes {
    Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

fn raw_request(version: &str, id: &str, rows: usize, value: f32) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "simple".into(),
        model_version: version.into(),
        id: id.into(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![rows as i64, 4],
            ..Default::default()
        }],
        raw_input_contents: vec![f32s(&vec![value; rows * 4])],
        ..Default::default()
    }
}

#[tokio::test]
async fn raw_and_typed_inference_per_version() {
    let mut s = start().await;
    let r = s
        .client
        .model_infer(raw_request("1", "a", 2, 3.0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.model_name.as_str(), r.model_version.as_str(), r.id.as_str()),
        ("simple", "1", "a")
    );
    assert_eq!(r.outputs[0].shape, vec![2, 4]);
    assert_eq!(r.raw_output_contents[0], f32s(&[4.0; 8]));

    let mut typed = raw_request("2", "b", 1, 0.0);
    typed.raw_input_contents.clear();
    typed.inputs[0].contents = Some(pb::InferTensorContents {
        fp32_contents: vec![1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    });
    let r = s.client.model_infer(typed).await.unwrap().into_inner();
    assert_eq!(r.raw_output_contents[0], f32s(&[2.0, 4.0, 6.0, 8.0]));

    let r = s
        .client
        .model_infer(raw_request("", "c", 1, 5.0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.model_version, "2",
        "unversioned requests go to the highest ready version"
    );
}

#[tokio::test]
async fn config_metadata_statistics_and_errors() {
    let mut s = start().await;
    let md = s
        .client
        .model_metadata(pb::ModelMetadataRequest {
            name: "simple".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.versions, vec!["1", "2"]);
    assert_eq!(md.inputs[0].shape, vec![-1, 4]);
    let cfg = s
        .client
        .model_config(pb::ModelConfigRequest {
            name: "simple".into(),
            version: "1".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!((cfg.name.as_str(), cfg.max_batch_size), ("simple", 8));
    assert_eq!(cfg.input[0].dims, vec![4]);
    assert_eq!(cfg.input[0].data_type, pb::DataType::TypeFp32 as i32);
    assert!(matches!(
        cfg.version_policy.and_then(|p| p.policy_choice),
        Some(pb::model_version_policy::PolicyChoice::All(_))
    ));
    assert!(matches!(
        cfg.scheduling_choice,
        Some(pb::model_config::SchedulingChoice::DynamicBatching(_))
    ));

    for _ in 0..2 {
        s.client.model_infer(raw_request("1", "", 3, 1.0)).await.unwrap();
    }
    let stats = s
        .client
        .model_statistics(pb::ModelStatisticsRequest {
            name: "simple".into(),
            version: "1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let m = &stats.model_stats[0];
    assert_eq!(
        (
            m.inference_count,
            m.inference_stats.as_ref().unwrap().success.unwrap().count
        ),
        (6, 2)
    );
    assert!(m.inference_stats.as_ref().unwrap().cache_hit.is_some());

    let mut wrong = raw_request("1", "", 1, 0.0);
    wrong.inputs[0].shape = vec![1, 3];
    wrong.raw_input_contents = vec![f32s(&[0.0; 3])];
    let e = s.client.model_infer(wrong).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains('x'), "{}", e.message());
    let mut unknown = raw_request("", "", 1, 0.0);
    unknown.model_name = "missing".into();
    assert_eq!(
        s.client.model_infer(unknown).await.unwrap_err().code(),
        Code::NotFound
    );
}

#[tokio::test]
async fn stream_inference_and_repository_calls() {
    let mut s = start().await;
    let requests: Vec<_> = (0..10)
        .map(|i| raw_request("1", &i.to_string(), 1, i as f32))
        .collect();
    let mut stream = s
        .client
        .model_stream_infer(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut seen = HashMap::new();
    while let Some(r) = stream.message().await.unwrap() {
        assert_eq!(r.error_message, "");
        let resp = r.infer_response.unwrap();
        seen.insert(resp.id.clone(), resp.raw_output_contents[0].clone());
    }
    assert_eq!(seen.len(), 10);
    for i in 0..10 {
        assert_eq!(seen[&i.to_string()], f32s(&[i as f32 + 1.0; 4]));
    }

    let index = |ready| pb::RepositoryIndexRequest {
        repository_name: String::new(),
        ready,
    };
    assert_eq!(
        s.client
            .repository_index(index(true))
            .await
            .unwrap()
            .into_inner()
            .models
            .len(),
        2
    );
    s.client
        .repository_model_unload(pb::RepositoryModelUnloadRequest {
            model_name: "simple".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ready = s
        .client
        .model_ready(pb::ModelReadyRequest {
            name: "simple".into(),
            version: String::new(),
        })
        .await
        .unwrap();
    assert!(!ready.into_inner().ready);
    s.client
        .repository_model_load(pb::RepositoryModelLoadRequest {
            model_name: "simple".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ready = s
        .client
        .model_ready(pb::ModelReadyRequest {
            name: "simple".into(),
            version: "2".into(),
        })
        .await
        .unwrap();
    assert!(ready.into_inner().ready);

    let mut health = tonic_health::pb::health_client::HealthClient::new(s.channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(
        status.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

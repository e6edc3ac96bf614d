//! The gRPC front end over a real socket, against the in-memory test service.

use std::collections::HashMap;

use bytes::Bytes;
use infergate_protocol::grpc::pb;
use infergate_protocol::grpc::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_protocol::{DataType, TensorData};
use tokio::sync::oneshot;
use tonic::Code;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::{GrpcLimits, serve_grpc};
use crate::http::test_service::TestService;

struct Server {
    addr: std::net::SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn start(limits: GrpcLimits) -> (Server, GrpcInferenceServiceClient<Channel>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(serve_grpc(listener, TestService::new(), limits, async {
        let _ = rx.await;
    }));
    let client = GrpcInferenceServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    (Server { addr, _stop: tx }, client)
}

fn f32s(v: &[f32]) -> Bytes {
    Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

fn input(name: &str, datatype: &str, shape: Vec<i64>) -> pb::model_infer_request::InferInputTensor {
    pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape,
        parameters: HashMap::new(),
        contents: None,
    }
}

fn add_sub_raw(id: &str) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "add_sub".into(),
        id: id.into(),
        inputs: vec![
            input("INPUT0", "FP32", vec![1, 4]),
            input("INPUT1", "FP32", vec![1, 4]),
        ],
        raw_input_contents: vec![f32s(&[1.0, 2.0, 3.0, 4.0]), f32s(&[1.0; 4])],
        ..Default::default()
    }
}

#[tokio::test]
async fn health_metadata_config_and_stats() {
    let (server, mut c) = start(GrpcLimits::default()).await;
    assert!(
        c.server_live(pb::ServerLiveRequest {})
            .await
            .unwrap()
            .into_inner()
            .live
    );
    assert!(
        c.server_ready(pb::ServerReadyRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    let ready = |name: &str, version: &str| pb::ModelReadyRequest {
        name: name.into(),
        version: version.into(),
    };
    assert!(
        c.model_ready(ready("add_sub", ""))
            .await
            .unwrap()
            .into_inner()
            .ready
    );
    assert!(!c.model_ready(ready("nope", "")).await.unwrap().into_inner().ready);
    assert_eq!(
        c.model_ready(ready("add_sub", "one")).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let md = c
        .model_metadata(pb::ModelMetadataRequest {
            name: "add_sub".into(),
            version: "1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(md.inputs[0].shape, vec![-1, 4]);
    assert_eq!(md.inputs[0].datatype, "FP32");
    let e = c
        .model_metadata(pb::ModelMetadataRequest {
            name: "nope".into(),
            version: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(e.message(), "Request for unknown model: 'nope' is not found");
    let cfg = c
        .model_config(pb::ModelConfigRequest {
            name: "add_sub".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!((cfg.name.as_str(), cfg.max_batch_size), ("add_sub", 8));
    assert_eq!(cfg.input[0].dims, vec![4]);
    assert!(matches!(
        cfg.scheduling_choice,
        Some(pb::model_config::SchedulingChoice::DynamicBatching(_))
    ));
    let stats = c
        .model_statistics(pb::ModelStatisticsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.model_stats.len(), 2);
    let s = &stats.model_stats[0];
    assert!(
        s.inference_stats.as_ref().unwrap().cache_miss.is_some(),
        "perf_analyzer reads every field"
    );

    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for name in ["", "inference.GRPCInferenceService"] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest { service: name.into() })
            .await
            .unwrap();
        assert_eq!(r.into_inner().status, ServingStatus::Serving as i32);
    }
    let e = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "other".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn inference_with_raw_and_typed_contents_answers_raw() {
    let (_server, mut c) = start(GrpcLimits::default()).await;
    let r = c.model_infer(add_sub_raw("a")).await.unwrap().into_inner();
    assert_eq!(r.id, "a");
    assert_eq!(r.model_version, "1");
    assert_eq!(r.outputs.len(), 2);
    assert_eq!(r.raw_output_contents[0], f32s(&[2.0, 3.0, 4.0, 5.0]));
    assert!(r.outputs[0].contents.is_none());

    // Typed contents (what the kserve SDK sends for Python lists), one output asked for.
    let mut req = add_sub_raw("b");
    req.raw_input_contents.clear();
    for (i, v) in [[1.0f32, 2.0, 3.0, 4.0], [0.5; 4]].into_iter().enumerate() {
        req.inputs[i].contents = Some(pb::InferTensorContents {
            fp32_contents: v.to_vec(),
            ..Default::default()
        });
    }
    req.outputs = vec![pb::model_infer_request::InferRequestedOutputTensor {
        name: "OUTPUT1".into(),
        parameters: HashMap::new(),
    }];
    let r = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.outputs[0].name, "OUTPUT1");
    assert_eq!(r.raw_output_contents[0], f32s(&[0.5, 1.5, 2.5, 3.5]));

    // BYTES larger than tonic's 4 MiB default message limit.
    let big = vec![b'x'; 6 << 20];
    let req = pb::ModelInferRequest {
        model_name: "echo".into(),
        inputs: vec![input("INPUT", "BYTES", vec![1])],
        raw_input_contents: vec![TensorData::from_byte_strings([&big]).into_bytes()],
        ..Default::default()
    };
    let r = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(r.raw_output_contents[0].len(), big.len() + 4);
    assert_eq!(r.outputs[0].datatype, DataType::Bytes.as_str());

    // gzip-compressed messages both ways.
    let mut gz = c
        .clone()
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip);
    let r = gz.model_infer(add_sub_raw("z")).await.unwrap().into_inner();
    assert_eq!(r.raw_output_contents[1], f32s(&[0.0, 1.0, 2.0, 3.0]));
}

#[tokio::test]
async fn bad_requests_get_invalid_argument_naming_the_problem() {
    let (_server, mut c) = start(GrpcLimits::default()).await;
    let mut short = add_sub_raw("x");
    short.raw_input_contents[1] = f32s(&[1.0]);
    let mut unknown = add_sub_raw("x");
    unknown.model_name = "nope".into();
    let mut version = add_sub_raw("x");
    version.model_version = "7".into();
    let mut count = add_sub_raw("x");
    count.raw_input_contents.pop();
    let mut dtype = add_sub_raw("x");
    dtype.inputs[0].datatype = "FLOAT".into();
    let cases = [
        (
            short,
            Code::InvalidArgument,
            "input 'INPUT1': shape [1,4] of FP32 needs 16 bytes",
        ),
        (unknown, Code::NotFound, "Request for unknown model: 'nope'"),
        (version, Code::Unavailable, "version 7"),
        (
            count,
            Code::InvalidArgument,
            "raw_input_contents has 1 entries but the request has 2 inputs",
        ),
        (dtype, Code::InvalidArgument, "unknown datatype 'FLOAT'"),
    ];
    for (req, code, needle) in cases {
        let e = c.model_infer(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{needle}");
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    let r = c.model_infer(add_sub_raw("still")).await.unwrap().into_inner();
    assert_eq!(r.id, "still");
}

#[tokio::test]
async fn stream_inference_answers_every_request_and_reports_errors_in_band() {
    let (_server, mut c) = start(GrpcLimits::default()).await;
    let mut bad = add_sub_raw("bad");
    bad.inputs[0].shape = vec![2, 4];
    let requests = vec![add_sub_raw("1"), bad, add_sub_raw("3")];
    let mut responses = c
        .model_stream_infer(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut seen = HashMap::new();
    while let Some(r) = responses.message().await.unwrap() {
        let resp = r.infer_response.unwrap();
        seen.insert(resp.id.clone(), (r.error_message, resp.raw_output_contents.len()));
    }
    assert_eq!(seen.len(), 3);
    assert_eq!(seen["1"], (String::new(), 2));
    assert_eq!(seen["3"], (String::new(), 2));
    assert!(seen["bad"].0.contains("needs 32 bytes"), "{}", seen["bad"].0);
}

#[tokio::test]
async fn repository_calls_and_the_concurrency_limit() {
    let (_server, mut c) = start(GrpcLimits::default()).await;
    let idx = c
        .repository_index(pb::RepositoryIndexRequest {
            repository_name: String::new(),
            ready: true,
        })
        .await
        .unwrap();
    assert_eq!(idx.into_inner().models.len(), 2);
    c.repository_model_unload(pb::RepositoryModelUnloadRequest {
        model_name: "echo".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let idx = c
        .repository_index(pb::RepositoryIndexRequest {
            repository_name: String::new(),
            ready: true,
        })
        .await
        .unwrap();
    assert_eq!(idx.into_inner().models.len(), 1);
    use pb::model_repository_parameter::ParameterChoice;
    let mut params = HashMap::new();
    params.insert(
        "config".to_owned(),
        pb::ModelRepositoryParameter {
            parameter_choice: Some(ParameterChoice::StringParam("{}".into())),
        },
    );
    c.repository_model_load(pb::RepositoryModelLoadRequest {
        model_name: "echo".into(),
        parameters: params,
        ..Default::default()
    })
    .await
    .unwrap();
    let e = c
        .repository_index(pb::RepositoryIndexRequest {
            repository_name: "other".into(),
            ready: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);

    let (_busy, mut c) = start(GrpcLimits {
        max_concurrent_requests: 0,
        ..GrpcLimits::default()
    })
    .await;
    let e = c.model_infer(add_sub_raw("x")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("the server is busy"));
    assert!(
        c.server_live(pb::ServerLiveRequest {})
            .await
            .unwrap()
            .into_inner()
            .live
    );
}

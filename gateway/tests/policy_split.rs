//! Route matching, canary split and model-version rewrite, through the public API: statistical
//! bounds on split ratios, stickiness, header forcing, and gRPC peek/rewrite on real
//! `ModelInferRequest` bytes encoded by prost.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Uri};
use infergate_gateway::caller::{Caller, ConnectionFacts};
use infergate_gateway::route::grpc::{GrpcPeek, peek_model};
use infergate_gateway::route::{CompiledRoutes, ModelRef, RequestFacts};
use infergate_gateway::split::{ChoiceReason, FORCE_HEADER, rewrite_grpc_version, rewrite_rest_path};
use prost::Message;

#[derive(Clone, PartialEq, prost::Message)]
struct InferInputTensor {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    datatype: String,
    #[prost(int64, repeated, tag = "3")]
    shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ModelInferRequest {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<InferInputTensor>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    raw_input_contents: Vec<Vec<u8>>,
}

fn infer_request(model: &str, version: &str, payload: usize) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        model_version: version.into(),
        id: "req-1".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1, payload as i64 / 4],
        }],
        raw_input_contents: vec![(0..payload).map(|i| (i % 251) as u8).collect()],
    }
}

fn grpc_frame(msg: &ModelInferRequest) -> Bytes {
    let body = msg.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.into()
}

const RULES: &str = "\
upstreams:
  - name: v1
    endpoints: [\"127.0.0.1:9\"]
  - name: v2
    endpoints: [\"127.0.0.1:9\"]
callers:
  identify_by: { header: x-caller-id }
routes:
  - name: resnet
    match: { model: resnet }
    sticky_by_caller: true
    destinations:
      - { upstream: v1, weight: 3, model_version: \"1\" }
      - { upstream: v2, weight: 1, model_version: \"2\" }
  - name: bert-gold
    match:
      model: bert
      headers: [{ name: x-tier, exact: gold }]
    destinations:
      - { upstream: v2, weight: 1 }
  - name: fallback
    match: { path_prefix: /v2/ }
    destinations:
      - { name: one, upstream: v1, weight: 7 }
      - { name: two, upstream: v2, weight: 2 }
      - { name: three, upstream: v2, weight: 1 }
";

fn compiled() -> CompiledRoutes {
    let cfg = infergate_config::parse_gateway_config(RULES, Path::new("routes.yaml")).expect("valid rules");
    CompiledRoutes::try_from(&cfg.rules).expect("compiles")
}

#[test]
fn routes_match_on_model_headers_and_path_in_config_order() {
    let routes = compiled();
    let h = HeaderMap::new();
    let uri: Uri = "/v2/models/resnet/infer".parse().unwrap();
    let f = RequestFacts::new(&Method::POST, &uri, &h);
    assert_eq!(&*routes.match_request(&f).unwrap().name, "resnet");

    let uri: Uri = "/v2/models/bert/infer".parse().unwrap();
    assert_eq!(
        &*routes
            .match_request(&RequestFacts::new(&Method::POST, &uri, &h))
            .unwrap()
            .name,
        "fallback"
    );
    let mut gold = HeaderMap::new();
    gold.insert("x-tier", HeaderValue::from_static("gold"));
    assert_eq!(
        &*routes
            .match_request(&RequestFacts::new(&Method::POST, &uri, &gold))
            .unwrap()
            .name,
        "bert-gold"
    );

    // gRPC: the model comes from the body.
    let uri: Uri = "/inference.GRPCInferenceService/ModelInfer".parse().unwrap();
    let frame = grpc_frame(&infer_request("resnet", "", 64));
    let GrpcPeek::Found { name, version } = peek_model(&frame) else {
        panic!("no model found")
    };
    let f = RequestFacts::new(&Method::POST, &uri, &h).with_model(Some(ModelRef { name, version }));
    assert_eq!(&*routes.match_request(&f).unwrap().name, "resnet");
    // Outside /v2/ and without a model nothing matches.
    let f = RequestFacts::new(&Method::POST, &uri, &h);
    assert!(routes.match_request(&f).is_none());
    assert!(routes.uses_model_match());
}

/// Pearson's chi-square statistic of observed counts against expected proportions.
fn chi_square(observed: &[u64], weights: &[u32]) -> f64 {
    let n: u64 = observed.iter().sum();
    let total: u32 = weights.iter().sum();
    observed
        .iter()
        .zip(weights)
        .map(|(&o, &w)| {
            let e = n as f64 * f64::from(w) / f64::from(total);
            (o as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn weighted_split_holds_within_statistical_bounds() {
    let routes = compiled();
    let route = routes.get("fallback").unwrap();
    let h = HeaderMap::new();
    let mut counts = [0u64; 3];
    for _ in 0..20_000 {
        let c = route.split.choose(&h, &Caller::Anonymous);
        assert_eq!(c.reason, ChoiceReason::Weighted);
        counts[c.index] += 1;
    }
    // 2 degrees of freedom: P(chi2 > 18.42) = 0.0001, so a correct splitter fails 1 run in 10,000.
    let chi2 = chi_square(&counts, &[7, 2, 1]);
    assert!(chi2 < 18.42, "split {counts:?} is off 7:2:1 (chi2 = {chi2:.2})");

    // Sticky routes spread distinct callers by the same proportions.
    let resnet = routes.get("resnet").unwrap();
    let mut counts = [0u64; 2];
    let names: Vec<String> = (0..20_000).map(|i| format!("caller-{i}")).collect();
    for n in &names {
        counts[resnet.split.choose(&h, &Caller::Header(n)).index] += 1;
    }
    let chi2 = chi_square(&counts, &[3, 1]);
    assert!(
        chi2 < 15.14,
        "sticky split {counts:?} is off 3:1 (chi2 = {chi2:.2})"
    ); // 1 dof, p = 0.0001
}

#[test]
fn sticky_callers_keep_their_destination_and_headers_force_one() {
    let routes = compiled();
    let resnet = routes.get("resnet").unwrap();
    let h = HeaderMap::new();
    for i in 0..200 {
        let name = format!("user-{i}");
        let caller = Caller::Header(&name);
        let first = resnet.split.choose(&h, &caller);
        assert_eq!(first.reason, ChoiceReason::Sticky);
        for _ in 0..20 {
            assert_eq!(
                resnet.split.choose(&h, &caller).index,
                first.index,
                "caller {name} flipped"
            );
        }
        // The mTLS identity with the same name is the same caller.
        assert_eq!(
            resnet.split.choose(&h, &Caller::Identity(&name)).index,
            first.index
        );
    }
    // The forcing header wins over stickiness, by destination name or upstream name.
    let mut forced = HeaderMap::new();
    forced.insert(FORCE_HEADER, HeaderValue::from_static("v2/v2"));
    for i in 0..50 {
        let name = format!("user-{i}");
        let c = resnet.split.choose(&forced, &Caller::Header(&name));
        assert_eq!((c.index, c.reason), (1, ChoiceReason::Forced));
    }
    forced.insert(FORCE_HEADER, HeaderValue::from_static("v1"));
    assert_eq!(resnet.split.choose(&forced, &Caller::Anonymous).index, 0);
    // Caller identity comes from the configured header.
    let mut with_id = HeaderMap::new();
    with_id.insert("x-caller-id", HeaderValue::from_static("team-a"));
    let caller = routes.callers().identify(&with_id, ConnectionFacts::default());
    assert_eq!(caller, Some(Caller::Header("team-a")));
}

#[test]
fn rest_path_gets_the_destination_version() {
    let routes = compiled();
    let d = &routes.get("resnet").unwrap().split.destinations()[1];
    let uri: Uri = "/v2/models/resnet/infer".parse().unwrap();
    let out = rewrite_rest_path(&uri, d.model_version.as_deref().unwrap()).unwrap();
    assert_eq!(out, "/v2/models/resnet/versions/2/infer");
}

#[test]
fn grpc_version_rewrite_changes_only_field_2_and_the_length() {
    // Without a version, and with a different one.
    for original_version in ["", "1", "a-much-longer-version-string-than-before"] {
        let req = infer_request("resnet", original_version, 100_000);
        let frame = grpc_frame(&req);
        let out = rewrite_grpc_version(&frame, "2").unwrap();
        // The tensor bytes are passed on as a zero-copy slice of the original buffer.
        let tail = out.chunks.last().unwrap();
        assert!(tail.len() >= 100_000, "the payload was copied into the head");
        assert_eq!(tail.as_ptr(), frame[frame.len() - tail.len()..].as_ptr());
        let bytes = out.into_bytes();
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 5, "frame length not rewritten");
        let decoded = ModelInferRequest::decode(&bytes[5..]).unwrap();
        assert_eq!(
            decoded,
            ModelInferRequest {
                model_version: "2".into(),
                ..req
            }
        );
        assert_eq!(
            peek_model(&bytes),
            GrpcPeek::Found {
                name: "resnet",
                version: Some("2")
            }
        );
    }
    // Two messages in one body (a client stream) are both rewritten.
    let mut two = grpc_frame(&infer_request("m", "1", 16)).to_vec();
    two.extend_from_slice(&grpc_frame(&infer_request("m", "1", 16)));
    let out = rewrite_grpc_version(&Bytes::from(two), "9").unwrap().into_bytes();
    let first_len = u32::from_be_bytes(out[1..5].try_into().unwrap()) as usize;
    let a = ModelInferRequest::decode(&out[5..5 + first_len]).unwrap();
    let b = ModelInferRequest::decode(&out[10 + first_len..]).unwrap();
    assert_eq!((a.model_version.as_str(), b.model_version.as_str()), ("9", "9"));
    // Compressed messages are refused, not corrupted.
    let mut compressed = grpc_frame(&infer_request("m", "1", 16)).to_vec();
    compressed[0] = 1;
    assert!(rewrite_grpc_version(&Bytes::from(compressed.clone()), "2").is_err());
    assert_eq!(peek_model(&compressed), GrpcPeek::Compressed);
}

#[test]
fn grpc_peek_reads_the_whole_first_message() {
    let frame = grpc_frame(&infer_request("resnet", "3", 1 << 20));
    // The first 64 bytes hold a name and a version, but a later occurrence would win: nothing is decided
    // until the whole message is there.
    assert_eq!(peek_model(&frame[..64]), GrpcPeek::NeedMore);
    assert_eq!(peek_model(&frame[..8]), GrpcPeek::NeedMore);
    assert_eq!(
        peek_model(&frame),
        GrpcPeek::Found {
            name: "resnet",
            version: Some("3")
        }
    );
    let anonymous = grpc_frame(&ModelInferRequest {
        model_name: String::new(),
        ..infer_request("x", "", 8)
    });
    assert_eq!(peek_model(&anonymous), GrpcPeek::Missing);
}

//! Route decision cost: matching a request against a realistic rule set (24 routes with model,
//! path, method and header conditions), peeking a gRPC `ModelInferRequest` for its model name, and
//! choosing a sticky canary destination, the last one for 100,000 distinct callers in turn. Target: under
//! 1 µs per decision.

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue, Method, Uri};
use infergate_gateway::caller::Caller;
use infergate_gateway::route::grpc::{GrpcPeek, peek_model};
use infergate_gateway::route::{CompiledRoutes, ModelRef, RequestFacts};

fn rules() -> String {
    let mut s = String::from(
        "upstreams:\n  - name: v1\n    endpoints: [\"127.0.0.1:9\"]\n  - name: v2\n    endpoints: [\"127.0.0.1:9\"]\nroutes:\n",
    );
    for i in 0..20 {
        s.push_str(&format!(
            "  - name: model-{i}\n    match:\n      model: model-{i}\n      methods: [POST]\n      headers: [{{ name: x-tier, prefix: gold }}]\n    sticky_by_caller: true\n    destinations:\n      - {{ upstream: v1, weight: 90, model_version: \"1\" }}\n      - {{ upstream: v2, weight: 10, model_version: \"2\" }}\n"
        ));
    }
    for (i, p) in ["/v2/health", "/v2/repository", "/metrics", "/v2/"]
        .iter()
        .enumerate()
    {
        s.push_str(&format!("  - name: path-{i}\n    match: {{ path_prefix: \"{p}\" }}\n    destinations: [{{ upstream: v1 }}]\n"));
    }
    s
}

fn grpc_frame(model: &str) -> Vec<u8> {
    // model_name (1), model_version (2), id (3), then 64 KiB of raw_input_contents (7).
    let mut msg = vec![0x0a, model.len() as u8];
    msg.extend_from_slice(model.as_bytes());
    msg.extend_from_slice(&[0x12, 1, b'1', 0x1a, 3, b'r', b'-', b'1', 0x3a, 0x80, 0x80, 0x04]);
    msg.extend(std::iter::repeat_n(7u8, 65_536));
    let mut out = vec![0];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

fn bench(c: &mut Criterion) {
    let cfg = infergate_config::parse_gateway_config(&rules(), Path::new("bench.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let routes = CompiledRoutes::try_from(&cfg.rules).unwrap_or_else(|e| panic!("{e}"));
    let mut headers = HeaderMap::new();
    headers.insert("x-tier", HeaderValue::from_static("gold-plus"));
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-caller-id", HeaderValue::from_static("team-17"));
    let rest: Uri = "http://gw:8080/v2/models/model-17/infer"
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let grpc: Uri = "http://gw:8080/inference.GRPCInferenceService/ModelInfer"
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let frame = grpc_frame("model-17");

    c.bench_function("route_match/rest_model_route_18_of_24", |b| {
        b.iter(|| {
            let f = RequestFacts::new(&Method::POST, black_box(&rest), &headers);
            black_box(routes.match_request(&f).map(|r| r.key))
        })
    });
    c.bench_function("route_match/grpc_peek_and_match", |b| {
        b.iter(|| {
            let model = match peek_model(black_box(&frame)) {
                GrpcPeek::Found { name, version } => Some(ModelRef { name, version }),
                _ => None,
            };
            let f = RequestFacts::new(&Method::POST, &grpc, &headers).with_model(model);
            black_box(routes.match_request(&f).map(|r| r.key))
        })
    });
    let route = routes.get("model-17").unwrap_or_else(|| panic!("route"));
    c.bench_function("route_match/rest_match_and_sticky_split", |b| {
        b.iter(|| {
            let f = RequestFacts::new(&Method::POST, black_box(&rest), &headers);
            let r = routes.match_request(&f).unwrap_or(route);
            black_box(r.split.choose(&headers, &Caller::Header("team-17")))
        })
    });
    // The caller id comes from the request (header `x-caller-id`), one of 100,000 callers in turn.
    let callers: Vec<HeaderMap> = (0..CALLERS)
        .map(|i| {
            let mut h = headers.clone();
            h.insert(
                "x-caller-id",
                HeaderValue::from_str(&format!("caller-{i}")).unwrap_or_else(|e| panic!("{e}")),
            );
            h
        })
        .collect();
    let mut i = 0usize;
    c.bench_function("route_match/100k_callers_match_and_sticky_split", |b| {
        b.iter(|| {
            i = (i + 7919) % CALLERS;
            let h = &callers[i];
            let f = RequestFacts::new(&Method::POST, black_box(&rest), h);
            let r = routes.match_request(&f).unwrap_or(route);
            let id = h
                .get("x-caller-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            black_box(r.split.choose(h, &Caller::Header(id)))
        })
    });
}

const CALLERS: usize = 100_000;

criterion_group!(benches, bench);
criterion_main!(benches);

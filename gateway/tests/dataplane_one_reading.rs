//! One reading of every request: the gateway routes on exactly what the upstream will act on. Encoded and
//! dot-segment paths match the rules of the name they decode to and go upstream in that canonical form;
//! `Host` is required once on HTTP/1.1 and must agree with the target's authority; a gRPC request is routed on
//! the last `model_name` of its message, as every protobuf parser reads it, and a version rewrite leaves one
//! version behind. The committed corpus in `tests/corpus/one_reading/` (`<status>-<case>.http`) is replayed
//! byte for byte, and a recording upstream shows that nothing refused reached it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::header::HOST;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use infergate_gateway::server::Gateway;
use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What the recording upstream saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authority: Option<String>,
    hosts: Vec<String>,
    body: Bytes,
}

struct Recorder {
    upstream: TestUpstream,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// An upstream that records every request and answers 200 (for gRPC: `grpc-status: 0`, no message).
async fn recorder() -> Recorder {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let upstream = upstream(move |req: Request<Incoming>| {
        let log = log.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let grpc = parts
                .headers
                .get("content-type")
                .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
            log.lock().unwrap().push(Seen {
                path: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                authority: parts.uri.authority().map(|a| a.to_string()),
                hosts: parts
                    .headers
                    .get_all(HOST)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .collect(),
                body,
            });
            let mut r = Response::builder().header("x-upstream", "recorder");
            if grpc {
                r = r
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "0");
            }
            r.body(Full::new(Bytes::new())).unwrap()
        }
    })
    .await;
    Recorder { upstream, seen }
}

/// Rules with a model denied, a host denied, a model pinned to version 2 and a catch-all.
fn rules(upstream: std::net::SocketAddr) -> String {
    format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{upstream}"]
    protocol: h2c
routes:
  - name: deny-secret
    match: {{ model: secret }}
    destinations: [{{ upstream: up }}]
    fault: {{ abort: {{ http_status: 403 }} }}
  - name: deny-admin-host
    match: {{ host: admin.example }}
    destinations: [{{ upstream: up }}]
    fault: {{ abort: {{ http_status: 403 }} }}
  - name: simple-v2
    match: {{ model: simple }}
    destinations: [{{ upstream: up, model_version: "2" }}]
  - name: all
    destinations: [{{ upstream: up }}]
"#
    )
}

async fn setup() -> (Recorder, Arc<Gateway>) {
    let rec = recorder().await;
    let gw = gateway(&rules(rec.upstream.addr)).await;
    (rec, gw)
}

/// Sends raw bytes and returns the response's status code and text (the corpus asks the gateway to close).
async fn raw(gw: &Gateway, bytes: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let text = read_until_closed(&mut s).await;
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

#[tokio::test]
async fn the_hostile_target_corpus_gets_its_expected_status_and_nothing_refused_reaches_the_upstream() {
    let (rec, gw) = setup().await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/one_reading");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "http"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "the corpus in {} is missing files",
        dir.display()
    );
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let expected: u16 = name[..3]
            .parse()
            .expect("corpus files are named <status>-<case>.http");
        let (status, text) = raw(&gw, &std::fs::read(file).unwrap()).await;
        let reached = rec.take();
        if status != expected {
            failures.push(format!("{name}: expected {expected}, got {status}: {text}"));
        } else if (200..300).contains(&status) != (reached.len() == 1) || reached.len() > 1 {
            failures.push(format!(
                "{name}: answered {status}, but the upstream saw {reached:?}"
            ));
        } else if status >= 400 && !text.contains("x-infergate-error-origin: gateway") {
            failures.push(format!("{name}: {status} did not come from the gateway: {text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn encoded_and_dot_segment_paths_match_the_decoded_rules_and_go_upstream_canonical() {
    let (rec, gw) = setup().await;
    let client = http1_client();
    let base = format!("http://{}", gw.data_addr());
    let cases = [
        // (sent, what the upstream must see): `simple` is pinned to version 2 by its route.
        ("/v2/models/%73imple/infer", "/v2/models/simple/versions/2/infer"),
        (
            "/v2/models/x/../simple/infer?q=%2F",
            "/v2/models/simple/versions/2/infer?q=%2F",
        ),
        (
            "/v2/models/%73imple/versions/%31/infer",
            "/v2/models/simple/versions/2/infer",
        ),
        ("/v2/models/a%20b/infer", "/v2/models/a%20b/infer"),
        ("/v2/models/a%3ab/infer", "/v2/models/a%3Ab/infer"),
        ("/v2/models/%2573imple/infer", "/v2/models/%2573imple/infer"),
    ];
    for (sent, expected) in cases {
        // hyper's client sends the path as given (the gateway's port is in the Host it sends).
        let req = Request::post(format!("{base}{sent}"))
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let (parts, _) = send(&client, req).await;
        assert_eq!(parts.status, 200, "{sent}");
        let seen = rec.take();
        assert_eq!(seen.len(), 1, "{sent}");
        assert_eq!(seen[0].path, expected, "{sent}");
        // Over h2c the one Host the client sent travels as :authority, and no Host header goes along.
        let host = gw.data_addr().to_string();
        assert_eq!(seen[0].authority.as_deref(), Some(host.as_str()), "{sent}");
        assert!(seen[0].hosts.is_empty(), "{sent}: {:?}", seen[0].hosts);
    }
    // Over h2c too: the encoded name of the denied model is denied.
    let req = Request::post(format!("{base}/v2/models/%73ecret/infer"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let (parts, body) = send(&h2c_client(), req).await;
    assert_eq!(parts.status, 403, "{}", String::from_utf8_lossy(&body));
    assert!(rec.take().is_empty());
}

/// An h2c request with `:authority` from `uri` and the given `host` headers, sent with the h2 crate (which
/// sends a `host` header as it is given).
async fn h2_status(gw: &Gateway, uri: &str, hosts: &[&str]) -> u16 {
    let tcp = TcpStream::connect(gw.data_addr()).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let mut req = Request::get(uri);
    for h in hosts {
        req = req.header(HOST, *h);
    }
    let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    resp.status().as_u16()
}

#[tokio::test]
async fn h2_host_and_authority_must_name_the_same_server() {
    let (rec, gw) = setup().await;
    let uri = "http://public.example/v2/health/ready";
    assert_eq!(h2_status(&gw, uri, &[]).await, 200);
    assert_eq!(h2_status(&gw, uri, &["PUBLIC.example.:80"]).await, 200);
    assert_eq!(rec.take().len(), 2);
    assert_eq!(h2_status(&gw, uri, &["admin.example"]).await, 400);
    assert_eq!(h2_status(&gw, uri, &["public.example:8080"]).await, 400);
    assert_eq!(
        h2_status(&gw, uri, &["public.example", "public.example"]).await,
        400
    );
    // The denied host, spelt with a trailing dot and upper case in :authority, is still denied.
    assert_eq!(
        h2_status(&gw, "http://ADMIN.example./v2/health/ready", &[]).await,
        403
    );
    assert!(rec.take().is_empty());
}

/// Protobuf field `number` with a length-delimited value.
fn field(number: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(value.len() as u64, &mut out);
    out.extend_from_slice(value);
    out
}

fn grpc_frame(msg: &[u8]) -> Bytes {
    let mut out = vec![0u8];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out.into()
}

/// The two fields of `ModelInferRequest` the gateway reads, as the backend's prost types decode them.
#[derive(Clone, PartialEq, prost::Message)]
struct InferHead {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
}

/// Sends one gRPC ModelInfer call over h2c; returns (grpc-status, grpc-message).
async fn grpc_call(gw: &Gateway, body: Bytes) -> (String, String) {
    grpc_method_call(gw, "ModelInfer", body).await
}

#[tokio::test]
async fn grpc_is_routed_on_the_last_model_name_in_the_message() {
    let (rec, gw) = setup().await;
    let tensor = vec![7u8; 1024];
    // An allowed name first, a tensor, then the denied name: the backend would serve `secret`.
    let smuggled = [field(1, b"public"), field(7, &tensor), field(1, b"secret")].concat();
    let (status, message) = grpc_call(&gw, grpc_frame(&smuggled)).await;
    assert_eq!(
        status, "7",
        "PERMISSION_DENIED from the deny-secret route: {message}"
    );
    assert!(rec.take().is_empty());
    // The same past the first 4 MiB the gateway buffers to peek: the whole first message is read.
    let big = vec![1u8; 5 << 20];
    let smuggled = [field(1, b"public"), field(7, &big), field(1, b"secret")].concat();
    let (status, message) = grpc_call(&gw, grpc_frame(&smuggled)).await;
    assert_eq!(status, "7", "{message}");
    assert!(rec.take().is_empty());
    // The other way round the request is `public`'s, and the upstream reads it so.
    let fine = [field(1, b"secret"), field(7, &tensor), field(1, b"public")].concat();
    let (status, message) = grpc_call(&gw, grpc_frame(&fine)).await;
    assert_eq!(status, "0", "{message}");
    let seen = rec.take();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        InferHead::decode(&seen[0].body[5..]).unwrap().model_name,
        "public"
    );
}

#[tokio::test]
async fn a_grpc_version_rewrite_leaves_exactly_one_version_behind() {
    let (rec, gw) = setup().await;
    let msg = [
        field(2, b"1"),
        field(1, b"simple"),
        field(7, &[3u8; 64]),
        field(2, b"3"),
    ]
    .concat();
    let (status, message) = grpc_call(&gw, grpc_frame(&msg)).await;
    assert_eq!(status, "0", "{message}");
    let seen = rec.take();
    assert_eq!(seen.len(), 1);
    let body = &seen[0].body;
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, body.len() - 5);
    let head = InferHead::decode(&body[5..]).unwrap();
    assert_eq!(
        (head.model_name.as_str(), head.model_version.as_str()),
        ("simple", "2")
    );
    // Not only the last one: no stale version is left for a first-wins reader.
    let mut versions = 0;
    let mut buf = &body[5..];
    while !buf.is_empty() {
        let (tag, wire) = prost::encoding::decode_key(&mut buf).unwrap();
        if tag == 2 {
            versions += 1;
        }
        prost::encoding::skip_field(wire, tag, &mut buf, Default::default()).unwrap();
    }
    assert_eq!(versions, 1);
}

#[tokio::test]
async fn grpc_messages_the_gateway_cannot_read_as_the_backend_would_are_refused() {
    let (rec, gw) = setup().await;
    let msg = [field(1, b"secret"), field(7, &[0u8; 16])].concat();
    let mut compressed = grpc_frame(&msg).to_vec();
    compressed[0] = 1;
    let (status, message) = grpc_call(&gw, compressed.into()).await;
    assert_eq!(status, "12", "UNIMPLEMENTED: {message}");
    assert!(message.contains("uncompressed"), "{message}");
    // A group (wire type 3) the gateway cannot skip the way a parser would, before the denied name.
    let group = [vec![0x9b, 0x06, 0x9c, 0x06], field(1, b"secret")].concat();
    let (status, message) = grpc_call(&gw, grpc_frame(&group)).await;
    assert_eq!(status, "3", "INVALID_ARGUMENT: {message}");
    // model_name as a varint: no parser accepts it.
    let (status, message) = grpc_call(&gw, grpc_frame(&[0x08, 0x01])).await;
    assert_eq!(status, "3", "{message}");
    assert!(message.contains("wire type"), "{message}");
    // A body that ends inside its message.
    let cut = grpc_frame(&msg).slice(..12);
    let (status, message) = grpc_call(&gw, cut).await;
    assert_eq!(status, "3", "{message}");
    assert!(rec.take().is_empty());
}

/// Sends one gRPC call of `method` over h2c; returns (grpc-status, grpc-message).
async fn grpc_method_call(gw: &Gateway, method: &str, body: Bytes) -> (String, String) {
    let req = Request::post(format!(
        "http://{}/inference.GRPCInferenceService/{method}",
        gw.data_addr()
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(body))
    .unwrap();
    let (parts, _) = send(&h2c_client(), req).await;
    let get = |n: &str| {
        parts
            .headers
            .get(n)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    (get("grpc-status"), get("grpc-message"))
}

#[tokio::test]
async fn repository_load_and_unload_are_matched_on_the_model_they_name() {
    let (rec, gw) = setup().await;
    // REST: the name is read from the canonical path and decoded once, as for inference.
    for path in [
        "/v2/repository/models/secret/load",
        "/v2/repository/models/%73ecret/load",
        "/v2/repository/models/secre%74/unload",
        "/v2/repository/models/public/../secret/unload",
    ] {
        let req = Request::post(format!("http://{}{path}", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (parts, body) = send(&http1_client(), req).await;
        assert_eq!(parts.status, 403, "{path}: {}", String::from_utf8_lossy(&body));
    }
    assert!(rec.take().is_empty(), "no refused load reached the upstream");
    let req = Request::post(format!(
        "http://{}/v2/repository/models/%73imple/load",
        gw.data_addr()
    ))
    .body(Full::new(Bytes::new()))
    .unwrap();
    assert_eq!(send(&http1_client(), req).await.0.status, 200);
    let seen = rec.take();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path, "/v2/repository/models/simple/load",
        "the canonical path goes upstream, without a version spliced in"
    );

    // gRPC: RepositoryModelLoadRequest { repository_name: 1, model_name: 2 }.
    for method in ["RepositoryModelLoad", "RepositoryModelUnload"] {
        let msg = [field(1, b""), field(2, b"public"), field(2, b"secret")].concat();
        let (status, message) = grpc_method_call(&gw, method, grpc_frame(&msg)).await;
        assert_eq!(status, "7", "{method}: PERMISSION_DENIED: {message}");
        // A repository_name that looks like an allowed model changes nothing.
        let msg = [field(1, b"public"), field(2, b"secret")].concat();
        let (status, message) = grpc_method_call(&gw, method, grpc_frame(&msg)).await;
        assert_eq!(status, "7", "{method}: {message}");
    }
    assert!(rec.take().is_empty(), "no refused gRPC load reached the upstream");
    // `simple` is pinned to version 2 for inference; its load request has no version, and is passed on as sent.
    let msg = [field(2, b"simple")].concat();
    let (status, message) = grpc_method_call(&gw, "RepositoryModelLoad", grpc_frame(&msg)).await;
    assert_eq!(status, "0", "{message}");
    let seen = rec.take();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, grpc_frame(&msg));
}

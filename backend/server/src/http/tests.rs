//! The REST front end over real sockets (HTTP/1.1 and h2c), against the in-memory test service.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use infergate_protocol::rest::{ContentEncoding, compress, decompress};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::test_service::TestService;
use super::{HttpLimits, serve_http};

struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(limits: HttpLimits) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_http(listener, TestService::new(), limits, async {
        let _ = rx.await;
    }));
    Server {
        addr,
        stop: Some(tx),
        task,
    }
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Reply {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    let resp = client
        .request(b.body(Full::new(body.into())).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

fn http1() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn h2c() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const JSON_INFER: &str = r#"{"id":"7","inputs":[
    {"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[[1,2,3,4]]},
    {"name":"INPUT1","datatype":"FP32","shape":[1,4],"data":[1,1,1,1]}]}"#;

#[tokio::test]
async fn health_metadata_and_json_inference_over_http1_and_h2c() {
    let server = start(HttpLimits::default()).await;
    for client in [http1(), h2c()] {
        let a = server.addr;
        let r = send(&client, a, Method::GET, "/v2/health/live", &[], "").await;
        assert_eq!((r.status, r.json()), (StatusCode::OK, json!({"live": true})));
        assert_eq!(r.headers["content-type"], "application/json");
        let r = send(&client, a, Method::GET, "/v2/health/ready", &[], "").await;
        assert_eq!((r.status, r.json()), (StatusCode::OK, json!({"ready": true})));
        let r = send(&client, a, Method::GET, "/v2", &[], "").await;
        assert_eq!(r.json()["name"], "infergate");
        let r = send(&client, a, Method::GET, "/v2/models/add_sub", &[], "").await;
        assert_eq!(
            r.json()["inputs"][0],
            json!({"name":"INPUT0","datatype":"FP32","shape":[-1,4]})
        );
        let r = send(
            &client,
            a,
            Method::GET,
            "/v2/models/add_sub/versions/1/ready",
            &[],
            "",
        )
        .await;
        assert_eq!((r.status, r.json()), (StatusCode::OK, json!({"ready": true})));
        let r = send(&client, a, Method::GET, "/v2/models/add_sub/config", &[], "").await;
        assert_eq!(r.json()["max_batch_size"], 8);

        let r = send(
            &client,
            a,
            Method::POST,
            "/v2/models/add_sub/infer",
            &[],
            JSON_INFER,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        assert_eq!(r.headers["content-type"], "application/json");
        assert!(r.headers.get("inference-header-content-length").is_none());
        let v = r.json();
        assert_eq!(v["model_name"], "add_sub");
        assert_eq!(v["model_version"], "1");
        assert_eq!(v["id"], "7");
        assert_eq!(
            v["outputs"][0],
            json!({"name":"OUTPUT0","datatype":"FP32","shape":[1,4],"data":[2.0,3.0,4.0,5.0]})
        );
        assert_eq!(v["outputs"][1]["data"], json!([0.0, 1.0, 2.0, 3.0]));

        let r = send(&client, a, Method::GET, "/v2/models/add_sub/stats", &[], "").await;
        assert!(r.json()["model_stats"][0]["inference_count"].as_u64().unwrap() >= 1);
        let r = send(&client, a, Method::GET, "/v2/models/stats", &[], "").await;
        assert_eq!(r.json()["model_stats"].as_array().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn binary_raw_and_compressed_inference() {
    let server = start(HttpLimits::default()).await;
    let c = http1();
    let a = server.addr;
    // JSON header + binary inputs, one output asked for as binary and one as JSON.
    let header = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":32}},
        {"name":"INPUT1","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":32}}],
        "outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1"}]}"#;
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let mut body = header.as_bytes().to_vec();
    body.extend(f32s(&x));
    body.extend(f32s(&[1.0; 8]));
    let hl = [("inference-header-content-length", header.len().to_string())];
    let r = send(&c, a, Method::POST, "/v2/models/add_sub/infer", &hl, body.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.headers["content-type"], "application/octet-stream");
    let json_len: usize = r.headers["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let v: Value = serde_json::from_slice(&r.body[..json_len]).unwrap();
    assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 32);
    assert_eq!(v["outputs"][1]["data"][7], 6.0);
    let sums: Vec<f32> = x.iter().map(|v| v + 1.0).collect();
    assert_eq!(&r.body[json_len..], &f32s(&sums)[..]);

    // The same request gzip-compressed, with a deflate answer.
    let gz = compress(ContentEncoding::Gzip, &[Bytes::from(body)]).unwrap();
    let h = [
        hl[0].clone(),
        ("content-encoding", "gzip".into()),
        ("accept-encoding", "deflate".into()),
    ];
    let r = send(&c, a, Method::POST, "/v2/models/add_sub/infer", &h, gz).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.headers["content-encoding"], "deflate");
    let plain = decompress(ContentEncoding::Deflate, r.body, 1 << 20).unwrap();
    assert_eq!(&plain[json_len..], &f32s(&sums)[..]);

    // Header length 0: the body is the raw data of the only input.
    let strings = infergate_protocol::TensorData::from_byte_strings(["ab", "c"]).into_bytes();
    let h0 = [("inference-header-content-length", "0".to_owned())];
    let r = send(&c, a, Method::POST, "/v2/models/echo/infer", &h0, strings.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let json_len: usize = r.headers["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let v: Value = serde_json::from_slice(&r.body[..json_len]).unwrap();
    assert_eq!(v["outputs"][0]["shape"], json!([2]));
    assert_eq!(&r.body[json_len..], &strings[..]);
}

/// Path, headers, body, expected status, expected words in the error.
type BadCase = (
    &'static str,
    Vec<(&'static str, String)>,
    Bytes,
    u16,
    &'static str,
);

const TRUNCATED_JSON: &str =
    r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}]}"#;

#[tokio::test]
async fn bad_requests_get_4xx_naming_the_problem_and_the_server_keeps_serving() {
    let limits = HttpLimits {
        max_body_bytes: 64 << 10,
        ..HttpLimits::default()
    };
    let server = start(limits).await;
    let c = http1();
    let a = server.addr;
    let bomb = compress(ContentEncoding::Gzip, &[Bytes::from(vec![0u8; 8 << 20])]).unwrap();
    let cases: Vec<BadCase> = vec![
        (
            "/v2/models/add_sub/infer",
            vec![],
            Bytes::from_static(b"{not json"),
            400,
            "malformed inference request JSON",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![],
            Bytes::from_static(
                br#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3]}]}"#,
            ),
            400,
            "the shape has 4 elements but 'data' holds 3",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![("inference-header-content-length", "100000".into())],
            Bytes::from_static(b"{}"),
            400,
            "Inference-Header-Content-Length is 100000",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![(
                "inference-header-content-length",
                TRUNCATED_JSON.len().to_string(),
            )],
            Bytes::from(format!("{TRUNCATED_JSON}1234")),
            400,
            "only 4 bytes of binary data remain",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![("content-encoding", "gzip".into())],
            bomb,
            400,
            "decompresses to more than the limit",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![("content-encoding", "br".into())],
            Bytes::from_static(b"{}"),
            501,
            "unsupported Content-Encoding 'br'",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![],
            Bytes::from(vec![b' '; 100 << 10]),
            400,
            "exceeds the server's limit of 65536 bytes",
        ),
        (
            "/v2/models/nope/infer",
            vec![],
            Bytes::from_static(br#"{"inputs":[]}"#),
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "/v2/models/add_sub/versions/9/infer",
            vec![],
            Bytes::from_static(br#"{"inputs":[]}"#),
            503,
            "version 9",
        ),
        (
            "/v2/models/add_sub/versions/x/infer",
            vec![],
            Bytes::new(),
            400,
            "version string 'x'",
        ),
        (
            "/v2/models/add_sub/infer",
            vec![("inference-header-content-length", "0".into())],
            Bytes::from_static(b"abc"),
            400,
            "exactly one input",
        ),
    ];
    for _round in 0..3 {
        for (path, headers, body, status, needle) in &cases {
            let r = send(&c, a, Method::POST, path, headers, body.clone()).await;
            assert_eq!(r.status.as_u16(), *status, "{path} {needle}: {:?}", r.body);
            assert_eq!(r.headers["content-type"], "application/json");
            assert!(r.error().contains(needle), "{needle}: {}", r.error());
        }
    }
    let r = send(&c, a, Method::GET, "/v2/models/add_sub/infer", &[], "").await;
    assert_eq!(
        (r.status.as_u16(), r.error()),
        (405, "Method Not Allowed".to_owned())
    );
    let r = send(&c, a, Method::GET, "/v2/nothing", &[], "").await;
    assert_eq!(r.status.as_u16(), 404);
    let r = send(&c, a, Method::GET, "/v2/models/nope", &[], "").await;
    assert_eq!(r.status.as_u16(), 404);
    let r = send(&c, a, Method::GET, "/v2/models/nope/ready", &[], "").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["ready"].clone()),
        (503, json!(false))
    );
    // Still serving.
    let r = send(&c, a, Method::POST, "/v2/models/add_sub/infer", &[], JSON_INFER).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn repository_unload_and_load_change_readiness() {
    let server = start(HttpLimits::default()).await;
    let (c, a) = (http1(), server.addr);
    let r = send(&c, a, Method::POST, "/v2/repository/index", &[], "").await;
    assert_eq!(
        r.json()[0],
        json!({"name":"add_sub","version":"1","state":"READY"})
    );
    let r = send(
        &c,
        a,
        Method::POST,
        "/v2/repository/models/echo/unload",
        &[],
        r#"{"parameters":{"unload_dependents":false}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(&c, a, Method::GET, "/v2/models/echo/ready", &[], "").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let r = send(
        &c,
        a,
        Method::POST,
        "/v2/repository/index",
        &[],
        r#"{"ready":true}"#,
    )
    .await;
    assert_eq!(r.json().as_array().unwrap().len(), 1);
    let r = send(
        &c,
        a,
        Method::POST,
        "/v2/repository/models/echo/load",
        &[],
        r#"{"parameters":{"config":"{}"}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = send(&c, a, Method::GET, "/v2/models/echo/ready", &[], "").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(
        &c,
        a,
        Method::POST,
        "/v2/repository/models/echo/load",
        &[],
        r#"{"parameters":{"config":"{bad"}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.error().contains("not JSON"));
}

#[tokio::test]
async fn the_concurrency_limit_answers_503_but_health_still_answers() {
    let server = start(HttpLimits {
        max_concurrent_requests: 0,
        ..HttpLimits::default()
    })
    .await;
    let (c, a) = (http1(), server.addr);
    let r = send(&c, a, Method::GET, "/v2/models/add_sub", &[], "").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.error().contains("the server is busy"), "{}", r.error());
    let r = send(&c, a, Method::GET, "/v2/health/ready", &[], "").await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn slow_headers_are_cut_off_and_shutdown_is_graceful() {
    let mut server = start(HttpLimits {
        header_read_timeout: Duration::from_millis(200),
        ..HttpLimits::default()
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The server closes the connection (possibly after a 408); the read ends instead of hanging.
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "the connection stayed open past the header read timeout"
    );

    server.stop.take().unwrap().send(()).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(10), &mut server.task).await;
    assert!(
        matches!(done, Ok(Ok(Ok(())))),
        "serve_http did not return after shutdown"
    );
    assert!(
        tokio::net::TcpStream::connect(server.addr).await.is_err(),
        "still accepting after shutdown"
    );
}

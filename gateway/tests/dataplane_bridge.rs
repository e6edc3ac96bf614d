//! HTTP/1.1 callers reach an HTTP/2 upstream through the gateway (and h2c callers too); hop-by-hop headers
//! stop at the gateway; `x-request-id` is added and passed on; upgrades and CONNECT are refused clearly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use dataplane_support::*;
use http::{HeaderMap, Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

/// What the upstream saw of each request: version, headers, body, URI.
type Seen = Arc<Mutex<Vec<(Version, HeaderMap, Bytes, String)>>>;

#[tokio::test]
async fn http1_request_goes_upstream_over_h2_with_hop_by_hop_headers_removed() {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let up = upstream(move |req: Request<Incoming>| {
        let log = log.clone();
        async move {
            let version = req.version();
            let uri = req.uri().to_string();
            let (parts, body) = req.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            log.lock()
                .unwrap()
                .push((version, parts.headers, body.clone(), uri));
            Response::builder()
                .header("connection", "x-upstream-private")
                .header("x-upstream-private", "secret")
                .header("keep-alive", "timeout=5")
                .body(Full::new(body))
                .unwrap()
        }
    })
    .await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let client = http1_client();
    let req = Request::post(format!("http://{}/v2/models/m/infer?x=1", gw.data_addr()))
        .header("host", "models.example:8080")
        .header("connection", "x-hop")
        .header("x-hop", "must not pass")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("te", "trailers, deflate")
        .header("x-end-to-end", "kept")
        .body(Full::new(Bytes::from_static(b"{\"inputs\":[]}")))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, 200);
    assert_eq!(
        body, "{\"inputs\":[]}",
        "the body reaches the upstream and comes back"
    );
    assert!(
        parts.headers.get("x-upstream-private").is_none(),
        "Connection-listed response headers are dropped"
    );
    assert!(parts.headers.get("keep-alive").is_none());
    assert_eq!(
        parts.headers.get("x-request-id").unwrap().len(),
        32,
        "a request id is added and echoed"
    );

    let seen = seen.lock().unwrap();
    let (version, headers, _, uri) = &seen[0];
    assert_eq!(*version, Version::HTTP_2, "the upstream is spoken to over HTTP/2");
    assert_eq!(
        uri, "http://models.example:8080/v2/models/m/infer?x=1",
        "authority and query are kept"
    );
    assert!(
        headers.get("x-hop").is_none(),
        "Connection-listed request headers are dropped"
    );
    assert!(headers.get("connection").is_none());
    assert!(headers.get("proxy-authorization").is_none());
    assert_eq!(headers.get("te").unwrap(), "trailers", "TE keeps only 'trailers'");
    assert_eq!(headers.get("x-end-to-end").unwrap(), "kept");
    assert_eq!(
        headers.get("x-request-id"),
        parts.headers.get("x-request-id"),
        "the id is passed upstream"
    );
    assert_eq!(headers.get("x-forwarded-for").unwrap(), "127.0.0.1");
}

#[tokio::test]
async fn a_callers_request_id_is_kept_and_chunked_bodies_stream_through() {
    let up = upstream(|req: Request<Incoming>| async move {
        let id = req.headers().get("x-request-id").cloned().unwrap();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        Response::builder()
            .header("x-got-id", id)
            .body(Full::new(Bytes::from(format!("{} bytes", body.len()))))
            .unwrap()
    })
    .await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    // A chunked HTTP/1.1 body (no content-length), written by hand.
    let mut stream = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            b"POST /x HTTP/1.1\r\nhost: a\r\nx-request-id: abc-123\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("x-got-id: abc-123"), "{out}");
    assert!(out.contains("x-request-id: abc-123"), "{out}");
    assert!(out.ends_with("11 bytes"), "{out}");
}

#[tokio::test]
async fn h2c_callers_are_served_on_the_same_port() {
    let up = named_upstream("one").await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let req = Request::get(format!("http://{}/v2/health/ready", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&h2c_client(), req).await;
    assert_eq!(parts.status, 200);
    assert_eq!(parts.version, Version::HTTP_2);
    assert_eq!(body, "one");
}

#[tokio::test]
async fn http1_upstreams_are_supported() {
    let up = named_upstream("h1").await;
    let yaml = format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}"]
    protocol: http1
routes:
  - name: all
    destinations:
      - upstream: up
"#,
        up.addr
    );
    let gw = gateway(&yaml).await;
    let client = http1_client();
    for _ in 0..3 {
        let req = Request::get(format!("http://{}/x", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (parts, body) = send(&client, req).await;
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["x-seen-version"], "HTTP/1.1");
        assert_eq!(body, "h1");
    }
}

#[tokio::test]
async fn websocket_upgrades_and_connect_are_refused_with_a_clear_error() {
    let up = named_upstream("one").await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let client = http1_client();
    let req = Request::get(format!("http://{}/ws", gw.data_addr()))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, 501);
    assert_eq!(parts.headers["x-infergate-error-origin"], "gateway");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v["error"].as_str().unwrap().contains("Upgrade: websocket"), "{v}");
    assert_eq!(up.hits(), 0, "nothing reached the upstream");

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    stream
        .write_all(b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 501"), "{text}");
    assert!(text.contains("CONNECT"), "{text}");
}

#[tokio::test]
async fn no_route_and_dead_upstream_errors_are_kserve_json_from_the_gateway() {
    let up = named_upstream("one").await;
    let dead = {
        // A port nobody listens on: bind, note it, close.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let yaml = format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{}"]
  - name: dead
    endpoints: ["{dead}"]
routes:
  - name: models
    match: {{ path_prefix: /v2/models/ }}
    destinations:
      - upstream: dead
  - name: health
    match: {{ path_exact: /v2/health/live }}
    destinations:
      - upstream: up
"#,
        up.addr
    );
    let gw = gateway(&yaml).await;
    let client = http1_client();
    let req = Request::get(format!("http://{}/nowhere", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, 404);
    assert_eq!(parts.headers["x-infergate-error-origin"], "gateway");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("/nowhere") && msg.contains("models, health"),
        "{msg}"
    );

    let req = Request::post(format!("http://{}/v2/models/m/infer", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, 503);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("upstream 'dead'") && msg.contains(&dead.to_string()),
        "{msg}"
    );
}

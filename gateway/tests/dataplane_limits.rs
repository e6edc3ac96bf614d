//! Hostile and idle clients: a slow or silent client is cut off by the header read timeout, an idle one by the
//! idle timeout (a busy one is kept), oversized headers and bodies are refused, and the admin API answers its
//! endpoints.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use bytes::Bytes;
use dataplane_support::*;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn limited(up: std::net::SocketAddr) -> String {
    format!(
        "listeners:\n  limits:\n    header_read_timeout: 300ms\n    max_request_body: 1KiB\n    max_headers: 20\n{}",
        one_route(up, "", "")
    )
}

#[tokio::test]
async fn slow_and_silent_clients_are_cut_off() {
    let up = named_upstream("up").await;
    let gw = gateway(&limited(up.addr)).await;
    // Slowloris: half a request head, then nothing.
    let mut slow = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nhost: a\r\nx-slow: ")
        .await
        .unwrap();
    read_until_closed(&mut slow).await;
    // Connected, never sent a byte.
    let mut silent = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    read_until_closed(&mut silent).await;
    assert_eq!(up.hits(), 0);
    assert_eq!(gw.open_connections(), 0);
    // A normal client is still served.
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&http1_client(), req).await.0.status, 200);
}

#[tokio::test]
async fn oversized_bodies_and_header_floods_are_refused() {
    let up = named_upstream("up").await;
    let gw = gateway(&limited(up.addr)).await;
    let client = http1_client();
    let req = Request::post(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::from(vec![b'x'; 4096])))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, 413);
    assert!(
        String::from_utf8_lossy(&body).contains("max_request_body"),
        "{body:?}"
    );
    assert_eq!(
        up.hits(),
        0,
        "a declared length over the limit never reaches the upstream"
    );

    // The same body without a length (chunked) is cut off while streaming.
    let mut s = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    let mut raw =
        b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..8 {
        raw.extend_from_slice(b"200\r\n");
        raw.extend_from_slice(&[b'y'; 512]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&raw).await.unwrap();
    let answer = read_until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let mut s = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    let mut head = b"GET / HTTP/1.1\r\nhost: a\r\n".to_vec();
    for i in 0..40 {
        head.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    s.write_all(&head).await.unwrap();
    let answer = read_until_closed(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "too many headers: {answer}");
    // The header flood never reached the upstream. The streamed body may have (and was cut off there), unless
    // its chunks arrived in one read: then they go to the pipeline as one piece, over the limit at once.
    assert!(up.hits() <= 1, "{} requests reached the upstream", up.hits());
}

#[tokio::test]
async fn admin_endpoints_answer() {
    let up = named_upstream("up").await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let req = Request::get(format!("http://{}/v2/models/m/ready", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&http1_client(), req).await.0.status, 200);

    assert_eq!(
        admin_get(&gw, "/live").await,
        (200, r#"{"live":true}"#.to_string())
    );
    assert_eq!(
        admin_get(&gw, "/ready").await,
        (200, r#"{"ready":true}"#.to_string())
    );
    let (status, metrics) = admin_get(&gw, "/metrics").await;
    assert_eq!(status, 200);
    for name in [
        r#"infergate_gateway_requests_total{route="all",destination="up",upstream="up",outcome="success",status_class="2xx",response_code="200"}"#,
        "infergate_gateway_request_duration_seconds_bucket",
        "infergate_gateway_upstream_tries_total",
        "infergate_gateway_open_connections",
    ] {
        assert!(metrics.contains(name), "missing {name} in\n{metrics}");
    }
    let (status, config) = admin_get(&gw, "/config").await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        v["hash"],
        infergate_config::content_hash(&one_route(up.addr, "", "")),
        "the SHA-256 of the text the rules came from"
    );
    assert_eq!(v["rules"]["routes"][0]["name"], "all");
    assert!(v["loaded_at_unix"].as_f64().unwrap() > 1.6e9);
    assert_eq!(
        admin_get(&gw, "/config/errors").await,
        (200, r#"{"last_rejection":null}"#.to_string())
    );
    assert_eq!(
        admin_get(&gw, "/canary").await,
        (200, r#"{"routes":[]}"#.to_string())
    );
    let (status, body) = admin_get(&gw, "/nope").await;
    assert_eq!(status, 404);
    assert!(body.contains("/config/errors"), "{body}");
}

#[tokio::test]
async fn idle_connections_are_closed_and_busy_ones_kept() {
    let up = named_upstream("up").await;
    let yaml = format!(
        "listeners:\n  limits:\n    idle_timeout: 500ms\n{}",
        one_route(up.addr, "", "")
    );
    let gw = gateway(&yaml).await;
    let request = b"GET / HTTP/1.1\r\nhost: a\r\n\r\n";

    // Busy: a request every 100 ms for a second, all on one connection, past the idle timeout twice over.
    let mut s = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..10 {
        s.write_all(request).await.unwrap();
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200 OK"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Idle after its response: closed once the idle timeout has passed, not before.
    let idle_from = std::time::Instant::now();
    let rest = read_until_closed(&mut s).await;
    let idle = idle_from.elapsed();
    assert!(rest.is_empty(), "nothing more was sent: {rest}");
    assert!(
        idle >= std::time::Duration::from_millis(150),
        "closed after {idle:?}, before the idle timeout"
    );
    assert_eq!(up.hits(), 10);
    eventually("the closed connection is no longer counted", || {
        gw.open_connections() == 0
    })
    .await;
}

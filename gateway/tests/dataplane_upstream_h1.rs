//! Upstreams spoken to over HTTP/1.1 (`protocol: http1`): keep-alive reuse, bodies both ways (and 6 MB ones
//! intact, over HTTP/1.1 and h2c upstreams alike), responses delimited by the connection's close, pooled
//! connections the upstream closed meanwhile, and answers that are not HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One catch-all route to `up` over HTTP/1.1, served by one data worker (each worker keeps connections of its
/// own, so with one the connection counts below are exact).
fn http1_route(up: SocketAddr) -> String {
    format!(
        r#"
listeners:
  worker_threads: 1
upstreams:
  - name: up
    endpoints: ["{up}"]
    protocol: http1
routes:
  - name: all
    destinations:
      - upstream: up
"#
    )
}

/// An upstream echoing what it received: method, the body's length and the body.
async fn echo_upstream() -> TestUpstream {
    upstream(|req: Request<Incoming>| async move {
        let method = req.method().clone();
        let chunked = req.headers().get("transfer-encoding").is_some();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let text = format!(
            "{method} {} bytes{}: {}",
            body.len(),
            if chunked { " chunked" } else { "" },
            String::from_utf8_lossy(&body)
        );
        Response::builder()
            .header("x-seen", "yes")
            .body(Full::new(Bytes::from(text)))
            .unwrap()
    })
    .await
}

#[tokio::test]
async fn requests_reuse_one_connection_and_bodies_go_both_ways() {
    let up = echo_upstream().await;
    let gw = gateway(&http1_route(up.addr)).await;
    let client = http1_client();
    for i in 0..5 {
        let body = format!("request {i}");
        let req = Request::post(format!("http://{}/v2/models/m/infer", gw.data_addr()))
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let (parts, got) = send(&client, req).await;
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["x-seen"], "yes");
        assert_eq!(got, format!("POST {} bytes: {body}", body.len()));
    }
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&client, req).await.1, "GET 0 bytes: ");

    // A body of unknown length (chunked from the caller) goes upstream chunked.
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(
        b"POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    s.write_all(b"2\r\nde\r\n0\r\n\r\n").await.unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.ends_with("POST 5 bytes chunked: abcde"), "{text}");

    assert_eq!(up.hits(), 7);
    assert_eq!(
        up.connections(),
        1,
        "one kept-alive connection carried every request: {:?}",
        up.requests_per_connection()
    );
}

/// A hand-written upstream: each accepted connection is answered by `answer(connection index, request head)`
/// until it returns `None`, then closed.
async fn raw_upstream<F>(answer: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(usize, &str) -> Option<(Vec<u8>, bool)> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let index = count.fetch_add(1, Ordering::SeqCst);
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let Some((bytes, close)) = answer(index, &head) else {
                        return;
                    };
                    if s.write_all(&bytes).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_response_delimited_by_the_close_arrives_whole() {
    let (up, accepted) = raw_upstream(|_, _| {
        Some((
            b"HTTP/1.1 200 OK\r\nx-up: raw\r\n\r\nall of it, until the close".to_vec(),
            true,
        ))
    })
    .await;
    let gw = gateway(&http1_route(up)).await;
    let client = http1_client();
    for _ in 0..2 {
        let req = Request::get(format!("http://{}/", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (parts, body) = send(&client, req).await;
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["x-up"], "raw");
        assert_eq!(body, "all of it, until the close");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a close-delimited connection is not reused"
    );
}

#[tokio::test]
async fn pooled_connections_the_upstream_closed_are_replaced() {
    // Keep-alive answers (no `connection: close`), but the upstream closes each connection right after its
    // first response, as an upstream whose keep-alive timeout passed does.
    let (up, accepted) =
        raw_upstream(|_, _| Some((b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(), true))).await;
    let gw = gateway(&http1_route(up)).await;
    let client = http1_client();
    // Requests with a body cannot be sent twice: the closed connection must be noticed before use.
    for _ in 0..3 {
        let req = Request::post(format!("http://{}/", gw.data_addr()))
            .body(Full::new(Bytes::from_static(b"body")))
            .unwrap();
        let (parts, body) = send(&client, req).await;
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"ok"[..]), "{body:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Back to back, the close may not have arrived yet when the next request goes out: a request without a
    // body is then sent again on a new connection.
    for _ in 0..5 {
        let req = Request::get(format!("http://{}/", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (parts, body) = send(&client, req).await;
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"ok"[..]), "{body:?}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        8,
        "each request had a connection of its own"
    );
}

#[tokio::test]
async fn an_answer_that_is_not_http_is_a_502_from_the_gateway() {
    let (up, _) = raw_upstream(|_, _| Some((b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec(), true))).await;
    let gw = gateway(&http1_route(up)).await;
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, 502);
    assert_eq!(parts.headers["x-infergate-error-origin"], "gateway");
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("not a valid HTTP/1.1 response"), "{text}");

    // A response cut short before its declared length ends the caller's response early, never padded out.
    let (up, _) = raw_upstream(|_, _| {
        Some((
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this".to_vec(),
            true,
        ))
    })
    .await;
    let gw = gateway(&http1_route(up)).await;
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("content-length: 100\r\n"), "{text}");
    assert!(
        text.ends_with("only this"),
        "the connection closes after what arrived: {text}"
    );
}

#[tokio::test]
async fn bodyless_answers_leave_the_connection_usable() {
    let (up, accepted) = raw_upstream(|_, head| {
        let answer: &[u8] = if head.starts_with("HEAD") {
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
        } else if head.starts_with("DELETE") {
            b"HTTP/1.1 204 No Content\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
        };
        Some((answer.to_vec(), false))
    })
    .await;
    let gw = gateway(&http1_route(up)).await;
    let client = http1_client();
    for method in ["HEAD", "DELETE", "GET", "HEAD", "GET"] {
        let req = Request::builder()
            .method(method)
            .uri(format!("http://{}/", gw.data_addr()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (parts, body) = send(&client, req).await;
        match method {
            "HEAD" => assert_eq!((parts.status.as_u16(), body.len()), (200, 0)),
            "DELETE" => assert_eq!((parts.status.as_u16(), body.len()), (204, 0)),
            _ => assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"hello"[..])),
        }
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "HEAD and 204 answers have no body to wait for"
    );
}

#[tokio::test]
async fn large_bodies_arrive_intact_both_ways_over_either_upstream_protocol() {
    use sha2::{Digest, Sha256};
    // The upstream answers the SHA-256 of what it received, followed by the body itself.
    let up = upstream(|req: Request<Incoming>| async move {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let mut answer = hex::encode(Sha256::digest(&body)).into_bytes();
        answer.extend_from_slice(&body);
        Response::new(Full::new(Bytes::from(answer)))
    })
    .await;
    let body: Vec<u8> = (0..6_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let digest = hex::encode(Sha256::digest(&body));
    for protocol in ["http1", "h2c"] {
        let gw =
            gateway(&http1_route(up.addr).replace("protocol: http1", &format!("protocol: {protocol}"))).await;
        // Declared length, through a client library.
        let req = Request::post(format!("http://{}/", gw.data_addr()))
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let (parts, answer) = send(&http1_client(), req).await;
        assert_eq!(parts.status, 200, "{protocol}");
        assert_eq!(
            &answer[..64],
            digest.as_bytes(),
            "{protocol}: the upstream received another body"
        );
        assert!(
            answer[64..] == body[..],
            "{protocol}: the response body came back altered"
        );

        // Chunked, by hand, in pieces of uneven size.
        let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        for piece in body.chunks(777_777) {
            s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await
                .unwrap();
            s.write_all(piece).await.unwrap();
            s.write_all(b"\r\n").await.unwrap();
        }
        s.write_all(b"0\r\n\r\n").await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
            .await
            .unwrap()
            .unwrap();
        let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(raw.starts_with(b"HTTP/1.1 200 OK\r\n"), "{protocol}");
        assert_eq!(
            &raw[head_end..head_end + 64],
            digest.as_bytes(),
            "{protocol}: chunked upload altered"
        );
    }
}

#[tokio::test]
async fn an_http1_upstream_configured_as_h2c_fails_the_connect_naming_the_fix() {
    // The HTTP/2 preface reads as a request head ("PRI * HTTP/2.0"); the upstream answers it in HTTP/1.1.
    let (up, _) = raw_upstream(|_, _| {
        Some((
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
            true,
        ))
    })
    .await;
    let gw = gateway(&http1_route(up).replace("protocol: http1", "protocol: h2c")).await;
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, 503, "a connect failure");
    let msg = String::from_utf8_lossy(&body);
    assert!(msg.contains("HTTP/2 handshake failed"), "{msg}");
    assert!(msg.contains("set its protocol to http1"), "{msg}");
    let (_, metrics) = admin_get(&gw, "/metrics").await;
    assert!(
        metrics
            .contains(r#"infergate_gateway_upstream_tries_total{upstream="up",outcome="connect_failure"} 1"#),
        "{metrics}"
    );
}

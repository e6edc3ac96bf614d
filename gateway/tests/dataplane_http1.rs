//! The HTTP/1.1 side of the data listener, spoken by hand over raw sockets: pipelining, HTTP/1.0 clients,
//! `Expect: 100-continue`, bodies that arrive in pieces or are cut short, responses of unknown length, and
//! request framing that two parsers could read differently (refused before anything reaches the upstream).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers with how many body bytes it received and what they were.
async fn echo_upstream() -> TestUpstream {
    upstream(|req: Request<Incoming>| async move {
        match req.into_body().collect().await {
            Ok(body) => {
                let body = body.to_bytes();
                let text = format!("{} bytes: {}", body.len(), String::from_utf8_lossy(&body));
                Response::new(Full::new(Bytes::from(text)))
            }
            Err(e) => Response::builder()
                .status(599)
                .body(Full::new(Bytes::from(format!("body failed: {e}"))))
                .unwrap(),
        }
    })
    .await
}

/// Reads until `out` holds `n` complete responses (each ending with its `content-length` body).
async fn read_responses(s: &mut TcpStream, n: usize) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if complete_responses(&text) >= n {
            return text;
        }
        let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("timed out waiting for responses")
            .unwrap();
        assert!(read > 0, "closed early after: {text}");
        out.extend_from_slice(&buf[..read]);
    }
}

/// How many complete content-length-framed responses `text` holds.
fn complete_responses(text: &str) -> usize {
    let mut rest = text;
    let mut count = 0;
    while let Some(end) = rest.find("\r\n\r\n") {
        let head = &rest[..end];
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |v| v.trim().parse().unwrap());
        let body_len = if head.starts_with("HTTP/1.1 100") { 0 } else { len };
        if rest.len() < end + 4 + body_len {
            break;
        }
        if !head.starts_with("HTTP/1.1 100") {
            count += 1;
        }
        rest = &rest[end + 4 + body_len..];
    }
    count
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    // Three requests in one write: a POST with a body, a HEAD, a GET.
    s.write_all(
        b"POST /a HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nfirstHEAD /b HTTP/1.1\r\nhost: a\r\n\r\nPOST /c HTTP/1.1\r\nhost: a\r\ncontent-length: 6\r\nconnection: close\r\n\r\nthird!",
    )
    .await
    .unwrap();
    let text = read_until_closed(&mut s).await;
    let statuses: Vec<&str> = text.matches("HTTP/1.1 200 OK").collect();
    assert_eq!(statuses.len(), 3, "{text}");
    let first = text.find("5 bytes: first").expect(&text);
    let third = text.find("6 bytes: third!").expect(&text);
    assert!(first < third, "answered in order: {text}");
    // The HEAD response has no body: nothing but heads lies between the first body and the third.
    let between = &text[first + "5 bytes: first".len()..third];
    assert!(between.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        !between.contains("bytes:"),
        "a HEAD response carried a body: {text}"
    );
    assert!(text.ends_with("6 bytes: third!"), "{text}");
    assert!(
        text.contains("connection: close"),
        "the last response says it closes: {text}"
    );
    assert_eq!(up.hits(), 3);
}

#[tokio::test]
async fn http10_clients_keep_the_connection_only_when_they_ask() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;

    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("connection: close\r\n"), "{text}");

    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let text = read_responses(&mut s, 1).await;
    assert!(text.contains("connection: keep-alive\r\n"), "{text}");
    s.write_all(b"POST / HTTP/1.0\r\ncontent-length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(
        text.ends_with("2 bytes: hi"),
        "the kept connection serves a second request: {text}"
    );
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"PUT /x HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 4\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"data").await.unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.ends_with("4 bytes: data"), "{text}");

    // A declared length over max_request_body is refused at once, without asking for the body.
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(
        b"PUT /x HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 999999999999\r\n\r\n",
    )
    .await
    .unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
}

#[tokio::test]
async fn a_body_sent_in_pieces_reaches_the_upstream_whole() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 11\r\n\r\nhello")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b" world").await.unwrap();
    let text = read_responses(&mut s, 1).await;
    assert!(text.ends_with("11 bytes: hello world"), "{text}");

    // The same connection then takes a chunked body, sent in pieces too.
    s.write_all(
        b"POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b"2\r\nde\r\n0\r\n\r\n").await.unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.ends_with("5 bytes: abcde"), "{text}");
}

#[tokio::test]
async fn a_body_cut_short_never_reaches_the_upstream_as_complete() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    for (head, sent) in [
        (
            &b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\n"[..],
            &b"hello"[..],
        ),
        (
            b"POST /x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
            b"5\r\nhello\r\n",
        ),
    ] {
        let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
        s.write_all(head).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.write_all(sent).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.shutdown().await.unwrap();
        let text = read_until_closed(&mut s).await;
        assert!(
            !text.contains("5 bytes: hello"),
            "a truncated body was passed on as whole: {text}"
        );
        assert!(!text.starts_with("HTTP/1.1 200"), "{text}");
    }
}

#[tokio::test]
async fn ambiguous_or_unknown_body_framing_is_refused_before_the_upstream() {
    let up = echo_upstream().await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    for (request, status, says) in [
        (
            &b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n0\r\n\r\n"[..],
            "400",
            "both transfer-encoding and content-length",
        ),
        (b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd", "400", "conflicting content-length"),
        (b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: -1\r\n\r\n", "400", "content-length is not a number"),
        (b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: gzip, chunked\r\n\r\n", "501", "transfer-encoding 'gzip, chunked'"),
        (b"GET / HTTP/1.1\r\nho st: a\r\n\r\n", "400", "malformed HTTP/1.1 request"),
    ] {
        let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
        s.write_all(request).await.unwrap();
        let text = read_until_closed(&mut s).await;
        assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{text}");
        assert!(text.contains("x-infergate-error-origin: gateway"), "{text}");
        assert!(text.contains(says), "{text}");
    }
    assert_eq!(up.hits(), 0, "no refused head reached the upstream");
    // Broken chunk framing is found while the body streams (the upstream has seen the request start): the
    // request fails instead of passing on a body cut at the break, and the connection closes.
    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXY0\r\n\r\n")
        .await
        .unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(!text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.contains("5 bytes: hello"), "{text}");
}

/// An h2c upstream answering with a body of unknown length: `a`, then `b` 20 ms later, then trailers-free end.
async fn streaming_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(|_req: Request<Incoming>| async {
                    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
                    tokio::spawn(async move {
                        let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"first-")))).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"second")))).await;
                    });
                    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn responses_of_unknown_length_are_chunked_or_end_with_the_connection() {
    let up = streaming_upstream().await;
    let gw = gateway(&one_route(up, "", "")).await;

    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n6\r\nfirst-\r\n6\r\nsecond\r\n0\r\n\r\n"),
        "{text:?}"
    );

    let mut s = TcpStream::connect(gw.data_addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let text = read_until_closed(&mut s).await;
    assert!(
        !text.contains("transfer-encoding"),
        "HTTP/1.0 has no chunked coding: {text}"
    );
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nfirst-second"), "{text:?}");
}

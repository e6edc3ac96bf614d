//! The gRPC client against a server that closes its first connection with a `GOAWAY` frame written by hand,
//! then answers on the next one: a call the server left unprocessed (above the frame's last stream id, with
//! NO_ERROR) is sent again and answered, as gRPC clients' transparent retry does; a call the server had taken
//! (at or below the last stream id), or a `GOAWAY` naming an error, is a failure that the load counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use infergate_loadtests::{Client, ErrorKind, Outcome, Payload, PayloadKind, Protocol, Target};
use infergate_protocol::ModelMetadata;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const METADATA: &str = r#"{"name":"m","versions":["1"],"platform":"onnxruntime_onnx",
  "inputs":[{"name":"x","datatype":"FP32","shape":[1,4]}],"outputs":[{"name":"y","datatype":"FP32","shape":[1,4]}]}"#;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADERS: u8 = 0x1;
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_GOAWAY: u8 = 0x7;
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;

fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
    out.extend_from_slice(payload);
    out
}

/// Plays an HTTP/2 server until the client's first HEADERS frame, answers it with `GOAWAY(last_stream_id,
/// error)` and closes the connection.
async fn go_away_on_first_request(mut sock: TcpStream, last_stream_id: u32, error: u32) {
    sock.write_all(&frame(FRAME_SETTINGS, 0, &[])).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() < PREFACE.len() {
            continue;
        }
        assert_eq!(&buf[..PREFACE.len()], PREFACE);
        let mut at = PREFACE.len();
        let mut saw_headers = false;
        while buf.len() >= at + 9 {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            saw_headers |= buf[at + 3] == FRAME_HEADERS;
            at += 9 + len;
        }
        if saw_headers {
            break;
        }
    }
    let mut payload = last_stream_id.to_be_bytes().to_vec();
    payload.extend_from_slice(&error.to_be_bytes());
    sock.write_all(&frame(FRAME_GOAWAY, 0, &payload)).await.unwrap();
    sock.shutdown().await.unwrap();
}

/// Answers every gRPC call with an empty `ModelInferResponse` and status OK.
async fn answer_grpc(sock: TcpStream) {
    let svc = service_fn(|req: Request<Incoming>| async move {
        let _ = req.into_body().collect().await;
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let frames = futures::stream::iter([
            // An uncompressed message of zero bytes: every field of the response at its default.
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
            Ok(Frame::trailers(trailers)),
        ]);
        let mut resp = Response::new(StreamBody::new(frames));
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        Ok::<_, Infallible>(resp)
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(sock), svc)
        .await;
}

/// A server whose first connection ends in `GOAWAY(last_stream_id, error)`; later ones answer. Returns its
/// target and the count of connections it accepted.
async fn serve(last_stream_id: u32, error: u32) -> (Target, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                tokio::spawn(go_away_on_first_request(sock, last_stream_id, error));
            } else {
                tokio::spawn(answer_grpc(sock));
            }
        }
    });
    (Target { addr }, accepted)
}

async fn call_once(last_stream_id: u32, error: u32) -> (Outcome, u64, u64) {
    let (target, accepted) = serve(last_stream_id, error).await;
    let client = Client::new(target, Protocol::Grpc, Duration::from_secs(5));
    let meta: ModelMetadata = serde_json::from_str(METADATA).unwrap();
    let payload = Payload::from_metadata(&meta, 1, PayloadKind::Json).unwrap();
    let outcome = client.infer(&payload, 0, &HeaderValue::from_static("c")).await;
    (outcome, client.resent(), accepted.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_servers_graceful_goaway_left_unprocessed_is_sent_again() {
    // The client's first stream is 1: a last stream id of 0 says the server did not process it.
    let (outcome, resent, accepted) = call_once(0, NO_ERROR).await;
    assert!(matches!(outcome, Outcome::Ok(_)), "{outcome:?}");
    // Sent again at least once: a resend can still meet the closing connection, and is then sent again.
    assert!(resent >= 1, "{resent}");
    assert_eq!(accepted, 2, "the call is answered on a new connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_server_had_taken_is_not_sent_again() {
    // Stream 1 is at the last stream id: the server may have acted on it, so its loss is the server's.
    let (outcome, resent, _) = call_once(1, NO_ERROR).await;
    assert!(matches!(outcome, Outcome::Err(_)), "{outcome:?}");
    assert_eq!(resent, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_naming_an_error_is_counted_not_retried() {
    let (outcome, resent, _) = call_once(0, PROTOCOL_ERROR).await;
    assert!(matches!(outcome, Outcome::Err(ErrorKind::Grpc(_))), "{outcome:?}");
    assert_eq!(resent, 0);
}

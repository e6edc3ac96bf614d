//! The client-side hostile-input corpus: every file in `tests/hostile/` is a raw HTTP/1.1 request (smuggling
//! variants, duplicate and conflicting lengths, obs-fold, bare CR and LF, NUL, bad chunk sizes, huge heads,
//! header floods) with the status the gateway must answer. A recording upstream behind the gateway asserts
//! that no refused request reached it whole, and that every accepted one reached it once, with its body.
//!
//! File format: `# status: N` and `# what: ...` lines, optionally `# body: TEXT` or `# body-len: N` (what the
//! upstream must receive), then the request. Its lines are joined without their line breaks, and `\r`,
//! `\n`, `\0`, `\\` and `\xHH` are unescaped, so every byte is visible and editors cannot change one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One case of the corpus.
struct Case {
    name: String,
    status: u16,
    body: Option<Vec<u8>>,
    raw: Vec<u8>,
}

fn unescape(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let (byte, used) = match bytes.get(i + 1) {
            Some(b'r') => (b'\r', 2),
            Some(b'n') => (b'\n', 2),
            Some(b'0') => (0, 2),
            Some(b'\\') => (b'\\', 2),
            Some(b'x') => (u8::from_str_radix(&text[i + 2..i + 4], 16).unwrap(), 4),
            other => panic!("unknown escape \\{:?}", other.map(|&b| b as char)),
        };
        out.push(byte);
        i += used;
    }
    out
}

fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "req") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let (mut status, mut body, mut request) = (None, None, String::new());
        for line in text.lines() {
            if let Some(meta) = line.strip_prefix("# ") {
                let (key, value) = meta.split_once(':').unwrap();
                let value = value.strip_prefix(' ').unwrap_or(value);
                match key {
                    "status" => status = Some(value.parse().unwrap()),
                    "body" => body = Some(value.as_bytes().to_vec()),
                    "body-len" => body = Some(vec![b'x'; value.parse().unwrap()]),
                    "what" => {}
                    other => panic!("{name}: unknown field {other}"),
                }
            } else {
                request.push_str(line);
            }
        }
        cases.push(Case {
            status: status.unwrap_or_else(|| panic!("{name}: no '# status:' line")),
            body,
            raw: unescape(&request),
            name,
        });
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// Sends `raw` on a new connection, closes the sending side, and returns the status of the first answer.
async fn status_of(gw: &infergate_gateway::server::Gateway, raw: &[u8]) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(gw.data_addr()).await.unwrap();
    let _ = s.write_all(raw).await;
    let _ = s.shutdown().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        read.is_ok(),
        "the gateway kept the connection open; it sent {answer}"
    );
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// What the upstream received whole: "METHOD path" and the body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

#[tokio::test]
async fn hostile_requests_get_their_status_and_refused_ones_never_reach_the_upstream() {
    // Requests the upstream read whole: method, path and body. A request whose body broke on the way is not
    // one (the upstream sees its stream reset and never acts on it).
    let received: Received = Arc::default();
    let record = Arc::clone(&received);
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let record = Arc::clone(&record);
        async move {
            let what = format!("{} {}", req.method(), req.uri().path());
            match req.into_body().collect().await {
                Ok(body) => {
                    record.lock().unwrap().push((what, body.to_bytes().to_vec()));
                    Response::new(Full::new(Bytes::from_static(b"ok")))
                }
                Err(_) => Response::builder().status(400).body(Full::default()).unwrap(),
            }
        }
    })
    .await;
    let gw = gateway(&one_route(up.addr, "", "")).await;
    let cases = corpus();
    assert!(cases.len() >= 25, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let before = received.lock().unwrap().len();
        let (status, answer) = status_of(&gw, &case.raw).await;
        let arrived: Vec<_> = received.lock().unwrap()[before..].to_vec();
        if status != case.status {
            failures.push(format!(
                "{}: expected {}, got {status}: {answer}",
                case.name, case.status
            ));
        }
        if case.status >= 400 && !arrived.is_empty() {
            failures.push(format!(
                "{}: refused, yet the upstream received {arrived:?}",
                case.name
            ));
        }
        if case.status < 400 {
            match (&case.body, arrived.as_slice()) {
                (Some(body), [(_, got)]) if got != body => failures.push(format!(
                    "{}: the upstream received a {}-byte body, not the {} bytes sent",
                    case.name,
                    got.len(),
                    body.len()
                )),
                (_, [_]) => {}
                _ => failures.push(format!(
                    "{}: accepted, but the upstream received {} requests",
                    case.name,
                    arrived.len()
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

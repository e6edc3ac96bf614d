//! Differential test against hyper's HTTP/1.1 server: over a generated corpus of request heads and bodies
//! (framing headers alone and combined, odd spellings, bad bytes, broken chunks), this codec and hyper must
//! agree on whether a request is accepted and, when both accept it, on its method, target and body. Where
//! this codec refuses what hyper accepts, the case must be one of the deliberate stricter refusals listed in
//! `STRICTER` (and in docs/security.md); accepting what hyper refuses always fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use infergate_http1::body::{Decoded, Decoder};
use infergate_http1::head::{Framing, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How one side read one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reading {
    /// Refused at the head.
    Refused,
    /// Accepted: method, target, and the body (or that it was broken).
    Accepted {
        method: String,
        target: String,
        body: Result<Vec<u8>, ()>,
    },
}

/// Framing headers whose refusal by this codec, where hyper accepts, is deliberate: each is a way for two
/// parsers on a request's path to disagree on where it ends.
const STRICTER: &[&str] = &[
    // A transfer coding on an HTTP/1.0 request: 1.0 has no chunked framing, so a 1.0 peer reads the length.
    "te-on-http10",
    // Codings other than a lone `chunked` (`gzip, chunked`, `chunked, chunked`): the gateway forwards bodies
    // as they are and does not decode codings; refused with 501.
    "te-other-codings",
    // Both a transfer coding and a length: RFC 9112 §6.1 lets a server read it as chunked (hyper does), but
    // a proxy in front that reads the length would end the request elsewhere: the classic CL.TE / TE.CL.
    "te-and-cl",
    // A length written as a list (`5, 5`): RFC 9110 §8.6 lets a recipient accept identical values; a
    // parser that takes the first of a list (or fails) would disagree on other lists, so none are read.
    "cl-list",
];

/// This codec's reading: the head through [`RequestParser`], then the body with the framing it chose.
fn ours(raw: &[u8]) -> Reading {
    let mut buf = BytesMut::from(raw);
    let head = match RequestParser::new(100, 16 << 10).parse(&mut buf) {
        Ok(Some(head)) => head,
        Ok(None) | Err(_) => return Reading::Refused,
    };
    let mut decoder = match head.framing {
        Framing::Empty => Decoder::Done,
        Framing::Length(n) => Decoder::length(n),
        Framing::Chunked => Decoder::chunked(),
    };
    let mut body = Vec::new();
    let body = loop {
        match decoder.decode(&mut buf, 16 << 10) {
            Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
            Ok(Decoded::End) => break Ok(body),
            // The test sends every byte at once: a body still wanting more is cut short.
            Ok(Decoded::NeedMore) | Err(_) => break Err(()),
        }
    };
    Reading::Accepted {
        method: head.request.method().to_string(),
        target: head.request.uri().to_string(),
        body,
    }
}

/// hyper's reading: a real hyper HTTP/1.1 server connection fed `raw`, then closed for writing.
async fn hypers(raw: &[u8]) -> Reading {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let seen: Arc<Mutex<Option<Reading>>> = Arc::default();
    let record = Arc::clone(&seen);
    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
        let record = Arc::clone(&record);
        async move {
            let method = req.method().to_string();
            let target = req.uri().to_string();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes().to_vec())
                .map_err(|_| ());
            *record.lock().unwrap() = Some(Reading::Accepted { method, target, body });
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        }
    });
    let conn = tokio::spawn(
        http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), svc),
    );
    client.write_all(raw).await.unwrap();
    client.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client.read_to_end(&mut answer)).await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
    seen.lock().unwrap().take().unwrap_or(Reading::Refused)
}

/// One generated request: a name saying what it tries, the bytes, and the stricter-refusal class it
/// belongs to, if any.
struct Case {
    name: String,
    raw: Vec<u8>,
    class: Option<&'static str>,
}

/// The corpus: request lines × framing headers × bodies, plus malformed heads.
fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let framings: &[(&str, &str, Option<&'static str>)] = &[
        ("none", "", None),
        ("cl5", "content-length: 5\r\n", None),
        ("cl0", "content-length: 0\r\n", None),
        ("cl5-cl5", "content-length: 5\r\ncontent-length: 5\r\n", None),
        ("cl5-cl6", "content-length: 5\r\ncontent-length: 6\r\n", None),
        ("cl-list", "content-length: 5, 5\r\n", Some("cl-list")),
        ("cl-plus", "content-length: +5\r\n", None),
        ("cl-neg", "content-length: -5\r\n", None),
        ("cl-hex", "content-length: 0x5\r\n", None),
        ("cl-space-inside", "content-length: 5 5\r\n", None),
        ("cl-huge", "content-length: 99999999999999999999\r\n", None),
        ("te", "transfer-encoding: chunked\r\n", None),
        ("te-case", "Transfer-Encoding: ChUnKeD\r\n", None),
        (
            "te-twice",
            "transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n",
            Some("te-other-codings"),
        ),
        (
            "te-gzip-chunked",
            "transfer-encoding: gzip, chunked\r\n",
            Some("te-other-codings"),
        ),
        ("te-chunked-gzip", "transfer-encoding: chunked, gzip\r\n", None),
        ("te-identity", "transfer-encoding: identity\r\n", None),
        (
            "te-cl",
            "transfer-encoding: chunked\r\ncontent-length: 5\r\n",
            Some("te-and-cl"),
        ),
        (
            "cl-te",
            "content-length: 5\r\ntransfer-encoding: chunked\r\n",
            Some("te-and-cl"),
        ),
        ("te-space-before-colon", "transfer-encoding : chunked\r\n", None),
        ("te-tab-value", "transfer-encoding:\tchunked\r\n", None),
        ("te-vertical-tab", "transfer-encoding: \x0bchunked\r\n", None),
        ("te-obs-fold", "transfer-encoding:\r\n chunked\r\n", None),
        ("x-obs-fold", "x-a: 1\r\n folded\r\n", None),
        ("nul-in-value", "x-a: a\0b\r\n", None),
        ("bare-cr-in-value", "x-a: a\rb\r\n", None),
        ("space-in-name", "x a: 1\r\n", None),
        ("empty-name", ": 1\r\n", None),
    ];
    let bodies: &[(&str, &[u8])] = &[
        ("none", b""),
        ("hello", b"hello"),
        ("chunked", b"5\r\nhello\r\n0\r\n\r\n"),
        ("chunked-ext", b"5;a=b\r\nhello\r\n0\r\n\r\n"),
        ("chunked-trailer", b"5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n"),
        ("chunked-bad-size", b"zz\r\nhello\r\n0\r\n\r\n"),
        ("chunked-bare-lf", b"5\nhello\n0\n\n"),
        ("chunked-short", b"5\r\nhel"),
        ("chunked-overflow", b"10000000000000000\r\nhello\r\n0\r\n\r\n"),
        ("chunked-no-crlf-after-data", b"5\r\nhelloXX0\r\n\r\n"),
    ];
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        for (fname, fheaders, fclass) in framings {
            for (bname, body) in bodies {
                let mut raw = format!("POST /v2/models/m/infer?x=1 {version}\r\nhost: a\r\n{fheaders}\r\n")
                    .into_bytes();
                raw.extend_from_slice(body);
                let te = fheaders.to_ascii_lowercase().contains("transfer-encoding");
                let class = if version == "HTTP/1.0" && te {
                    Some("te-on-http10")
                } else {
                    *fclass
                };
                cases.push(Case {
                    name: format!("{version} {fname} {bname}"),
                    raw,
                    class,
                });
            }
        }
    }
    let heads: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.1\nhost: a\n\n",
        b"\r\nGET / HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.1\rhost: a\r\n\r\n",
        b"GET  / HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.1 \r\nhost: a\r\n\r\n",
        b"GET / HTTP/2.0\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.2\r\nhost: a\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET /a b HTTP/1.1\r\nhost: a\r\n\r\n",
        b"G@T / HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET http://a/b?c HTTP/1.1\r\nhost: a\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nhost: a\r\n\r\n",
        b"CONNECT a:443 HTTP/1.1\r\nhost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\n\x00\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-\xff: 1\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-a: \xff\xfe\r\n\r\n",
    ];
    for (i, head) in heads.iter().enumerate() {
        cases.push(Case {
            name: format!("head {i}: {:?}", String::from_utf8_lossy(head)),
            raw: head.to_vec(),
            class: None,
        });
    }
    cases
}

#[tokio::test]
async fn the_codec_reads_requests_as_hyper_does_or_refuses_them_deliberately() {
    let cases = corpus();
    assert!(cases.len() > 500, "the corpus has {} cases", cases.len());
    let mut disagreements = Vec::new();
    let mut stricter = 0;
    for case in &cases {
        let (mine, theirs) = (ours(&case.raw), hypers(&case.raw).await);
        if mine == theirs {
            continue;
        }
        match (&mine, &theirs) {
            (Reading::Refused, Reading::Accepted { .. })
                if case.class.is_some_and(|c| STRICTER.contains(&c)) =>
            {
                stricter += 1;
            }
            // A body both accept but hyper could not read whole while ours could not either: same verdict.
            (Reading::Accepted { body: Err(()), .. }, Reading::Accepted { body: Err(()), .. }) => {}
            _ => disagreements.push(format!("{}: ours {mine:?}, hyper {theirs:?}", case.name)),
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} cases read differently:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
    assert!(stricter > 0, "the stricter refusals listed were never exercised");
}

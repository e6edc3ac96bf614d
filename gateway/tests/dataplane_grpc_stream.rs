//! `ModelStreamInfer` through the gateway, with tonic as the client and a recording upstream: every message of
//! a stream is held to the policy a unary `ModelInfer` is (model access rules, version pin, quota), because the
//! backend acts on each message's own `model_name`. A refused message never reaches the upstream, and the
//! caller's stream ends with the refusal's gRPC status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Buf, Bytes, BytesMut};
use dataplane_support::*;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use infergate_gateway::server::Gateway;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::Code;
use tonic::transport::Channel;
use tonic_prost::ProstCodec;

/// The fields of `ModelInferRequest` and `ModelInferResponse` the gateway and this test read.
#[derive(Clone, PartialEq, prost::Message)]
struct Infer {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
}

/// `ModelStreamInferResponse`: error_message 1, infer_response 2.
#[derive(Clone, PartialEq, prost::Message)]
struct StreamAnswer {
    #[prost(string, tag = "1")]
    error_message: String,
    #[prost(message, optional, tag = "2")]
    infer_response: Option<Infer>,
}

/// An h2c upstream that answers every `ModelStreamInfer` message at once with one response naming the model
/// and version it read, and records them.
async fn recording_upstream() -> (SocketAddr, Arc<Mutex<Vec<Infer>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let log = log.clone();
                    async move { Ok::<_, Infallible>(answer_each_message(req, log)) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

type Answer = Response<StreamBody<UnboundedReceiverStream<Result<Frame<Bytes>, Infallible>>>>;

fn answer_each_message(req: Request<Incoming>, log: Arc<Mutex<Vec<Infer>>>) -> Answer {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = req.into_body();
        let mut buf = BytesMut::new();
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else { break };
            buf.extend_from_slice(&data);
            while buf.len() >= 5 {
                let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
                if buf.len() < 5 + len {
                    break;
                }
                buf.advance(5);
                let message = Infer::decode(buf.split_to(len).freeze()).unwrap();
                log.lock().unwrap().push(message.clone());
                let answer = StreamAnswer {
                    error_message: String::new(),
                    infer_response: Some(message),
                }
                .encode_to_vec();
                let mut framed = vec![0u8];
                framed.extend_from_slice(&(answer.len() as u32).to_be_bytes());
                framed.extend_from_slice(&answer);
                let _ = tx.send(Ok(Frame::data(Bytes::from(framed))));
            }
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let _ = tx.send(Ok(Frame::trailers(trailers)));
    });
    Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(UnboundedReceiverStream::new(rx)))
        .unwrap()
}

/// A denied model, a model pinned to version 2, and a catch-all; every caller may send 3 messages a minute.
fn rules(upstream: SocketAddr) -> String {
    format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{upstream}"]
    protocol: h2c
callers:
  identify_by: {{ header: x-caller-id }}
  default_quota: {{ rate: 1/min, burst: 3 }}
routes:
  - name: deny-secret
    match: {{ model: secret }}
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

fn infer(model: &str, version: &str) -> Infer {
    Infer {
        model_name: model.into(),
        model_version: version.into(),
    }
}

/// An open `ModelStreamInfer` call: messages go in one at a time, answers come back one at a time.
struct Call {
    send: mpsc::Sender<Infer>,
    answers: tonic::Streaming<StreamAnswer>,
}

impl Call {
    async fn open(gw: &Gateway, caller: &str, first: Infer) -> Result<Call, tonic::Status> {
        let channel = Channel::from_shared(format!("http://{}", gw.data_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let (send, rx) = mpsc::channel(4);
        send.send(first).await.unwrap();
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        request
            .metadata_mut()
            .insert("x-caller-id", caller.parse().unwrap());
        let path = "/inference.GRPCInferenceService/ModelStreamInfer"
            .parse()
            .unwrap();
        let answers = grpc
            .streaming(request, path, ProstCodec::<Infer, StreamAnswer>::default())
            .await?
            .into_inner();
        Ok(Call { send, answers })
    }

    /// The next answer: the model and version the upstream read, or the status the stream ended with.
    async fn answer(&mut self) -> Result<(String, String), tonic::Status> {
        let answer = self.answers.message().await?.expect("an answer per message");
        let head = answer.infer_response.unwrap();
        Ok((head.model_name, head.model_version))
    }

    async fn send(&mut self, message: Infer) -> Result<(String, String), tonic::Status> {
        // The gateway may have ended the stream already; the answer says how.
        let _ = self.send.send(message).await;
        self.answer().await
    }
}

fn names(seen: &Arc<Mutex<Vec<Infer>>>) -> Vec<(String, String)> {
    std::mem::take(&mut *seen.lock().unwrap())
        .into_iter()
        .map(|m| (m.model_name, m.model_version))
        .collect()
}

fn pair(model: &str, version: &str) -> (String, String) {
    (model.to_string(), version.to_string())
}

#[tokio::test]
async fn a_later_message_naming_a_denied_model_is_refused_and_never_reaches_the_upstream() {
    let (addr, seen) = recording_upstream().await;
    let gw = gateway(&rules(addr)).await;
    let mut call = Call::open(&gw, "alice", infer("public", "")).await.unwrap();
    assert_eq!(call.answer().await.unwrap(), pair("public", ""));
    let refused = call.send(infer("secret", "")).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("deny-secret") && refused.message().contains("own"),
        "the message names the route and the fix: {}",
        refused.message()
    );
    assert_eq!(
        names(&seen),
        vec![pair("public", "")],
        "`secret` never reached the upstream"
    );

    // The same with `secret` smuggled as a repeated model_name after an allowed one: the last one counts.
    let mut call = Call::open(&gw, "bob", infer("public", "")).await.unwrap();
    call.answer().await.unwrap();
    let mut smuggled = infer("public", "").encode_to_vec();
    smuggled.extend(infer("secret", "").encode_to_vec());
    let smuggled = Infer::decode(&smuggled[..]).unwrap();
    assert_eq!(smuggled.model_name, "secret", "what the backend reads");
    let refused = call.send(smuggled).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(names(&seen), vec![pair("public", "")]);

    // A stream that starts with the denied model is refused as a unary call is.
    let refused = match Call::open(&gw, "carol", infer("secret", "")).await {
        Err(status) => status,
        Ok(mut call) => call.answer().await.unwrap_err(),
    };
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(names(&seen).is_empty());
}

#[tokio::test]
async fn every_message_of_a_pinned_stream_gets_the_pinned_version_and_cannot_leave_its_route() {
    let (addr, seen) = recording_upstream().await;
    let gw = gateway(&rules(addr)).await;
    let mut call = Call::open(&gw, "dave", infer("simple", "1")).await.unwrap();
    assert_eq!(call.answer().await.unwrap(), pair("simple", "2"));
    assert_eq!(
        call.send(infer("simple", "3")).await.unwrap(),
        pair("simple", "2")
    );
    // Another model on the pinned stream would escape the pin's route.
    let refused = call.send(infer("other", "1")).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("names model 'other', which route 'all' governs")
            && refused
                .message()
                .contains("bound to route 'simple-v2' by its first message")
            && refused
                .message()
                .contains("send other models on a stream of their own"),
        "the message names the model, both routes and the fix: {}",
        refused.message()
    );
    assert_eq!(
        names(&seen),
        vec![pair("simple", "2"), pair("simple", "2")],
        "both messages pinned; `other` never sent"
    );
}

#[tokio::test]
async fn the_quota_is_charged_for_every_message() {
    let (addr, seen) = recording_upstream().await;
    let gw = gateway(&rules(addr)).await;
    let mut call = Call::open(&gw, "erin", infer("public", "")).await.unwrap();
    call.answer().await.unwrap();
    call.send(infer("public", "")).await.unwrap();
    call.send(infer("public", "")).await.unwrap();
    let refused = call.send(infer("public", "")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("quota"), "{}", refused.message());
    assert_eq!(
        names(&seen).len(),
        3,
        "the fourth message never reached the upstream"
    );
    // Another caller is unaffected.
    let mut call = Call::open(&gw, "frank", infer("public", "")).await.unwrap();
    assert_eq!(call.answer().await.unwrap(), pair("public", ""));
}

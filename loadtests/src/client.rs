//! The protocols the load speaks: HTTP/1.1 and h2c (hyper's pooled client), h2 over TLS (one multiplexed
//! connection, [`crate::tls`]) and gRPC (tonic, the `inference.GRPCInferenceService` client of
//! `infergate-protocol`). Each call returns an [`Outcome`]: the model version that answered, or the kind of failure.
//!
//! A request is sent again only when the server never saw it, as real clients do: hyper's pool retries a
//! request it had put on a kept-alive connection found closed before the request was written
//! (`retry_canceled_requests`, on by default), and a gRPC call that hyper had queued on a connection that
//! closed before sending it, or that the server's graceful `GOAWAY` left unprocessed, is retried as gRPC
//! clients retry it ("transparent retry", gRFC A6; tonic does not). Nothing the server may have seen is
//! retried: a failure after that is the server's, and is counted.

use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use infergate_protocol::grpc::pb;
use infergate_protocol::grpc::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use infergate_protocol::{DataType, ModelMetadata, TensorMetadata};
use serde::Deserialize;
use thiserror::Error;
use tonic::transport::{Channel, Endpoint};

use crate::payload::Payload;
use crate::record::{ErrorKind, Outcome};
use crate::target::Target;
use crate::tls::{TlsConnection, TlsError, TlsOptions};

/// The wire protocol of the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// KServe V2 REST over HTTP/1.1 (a pool of connections).
    Http1,
    /// KServe V2 REST over HTTP/2 with prior knowledge (one multiplexed connection).
    H2c,
    /// KServe V2 REST over HTTP/2 over TLS, ALPN `h2` (one multiplexed connection; `--ca` or `--insecure`).
    /// Not for scenario files, which carry no CA: `bench` only.
    #[serde(skip_deserializing)]
    H2,
    /// KServe V2 gRPC over h2c.
    Grpc,
}

/// How many times a gRPC call that never left the client is sent again.
const TRANSPARENT_RETRIES: u32 = 3;

/// Why a client could not start or fetch metadata.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The metadata request failed.
    #[error("GET {uri}: {reason} (is the server up, and does it serve model '{model}'?)")]
    Metadata {
        /// What was asked.
        uri: String,
        /// Model.
        model: String,
        /// What went wrong.
        reason: String,
    },
}

/// A client for one target and protocol; cheap to clone (connections are shared).
#[derive(Clone)]
pub struct Client {
    inner: Inner,
    target: Target,
    timeout: Duration,
    /// gRPC calls sent again because they never left the client (shared by clones).
    resent: Arc<AtomicU64>,
}

#[derive(Clone)]
enum Inner {
    Rest(HyperClient<HttpConnector, Full<Bytes>>),
    /// h2 over TLS, or why it could not be set up (every request then fails to connect, saying why).
    RestTls(Result<TlsConnection, Arc<TlsError>>),
    Grpc(GrpcInferenceServiceClient<Channel>),
}

/// Why a REST request got no response.
enum SendFailure {
    /// No connection could be made (refused, unreachable, TLS handshake).
    Connect(String),
    /// The connection failed during the exchange.
    Io(String),
}

impl SendFailure {
    fn reason(self) -> String {
        match self {
            SendFailure::Connect(r) | SendFailure::Io(r) => r,
        }
    }
}

#[derive(Deserialize)]
struct VersionOnly {
    #[serde(default)]
    model_version: Option<String>,
}

impl Client {
    /// A client that connects lazily to `target`; each request gives up after `timeout`. For
    /// [`Protocol::H2`], which needs to know how to check the server, use [`Client::with_tls`]; here it trusts
    /// no server and says so on every request.
    pub fn new(target: Target, protocol: Protocol, timeout: Duration) -> Self {
        let inner = match protocol {
            Protocol::H2 => Inner::RestTls(
                TlsConnection::new(target.addr, &TlsOptions::default(), timeout).map_err(Arc::new),
            ),
            Protocol::Http1 | Protocol::H2c => {
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                connector.set_connect_timeout(Some(timeout));
                let mut builder = HyperClient::builder(TokioExecutor::new());
                builder.pool_idle_timeout(Duration::from_secs(30));
                if protocol == Protocol::H2c {
                    builder.http2_only(true);
                }
                Inner::Rest(builder.build(connector))
            }
            Protocol::Grpc => {
                let channel = Endpoint::from(
                    http::Uri::builder()
                        .scheme("http")
                        .authority(target.addr.to_string())
                        .path_and_query("/")
                        .build()
                        // A SocketAddr always forms a valid authority.
                        .unwrap_or_default(),
                )
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .connect_lazy();
                Inner::Grpc(
                    GrpcInferenceServiceClient::new(channel)
                        .max_decoding_message_size(usize::MAX)
                        .max_encoding_message_size(usize::MAX),
                )
            }
        };
        Self {
            inner,
            target,
            timeout,
            resent: Arc::default(),
        }
    }

    /// A client for h2 over TLS to `target`, checking the server as `tls` says; connects on first use.
    pub fn with_tls(target: Target, timeout: Duration, tls: &TlsOptions) -> Result<Self, TlsError> {
        Ok(Self {
            inner: Inner::RestTls(Ok(TlsConnection::new(target.addr, tls, timeout)?)),
            target,
            timeout,
            resent: Arc::default(),
        })
    }

    /// gRPC calls this client (and its clones) sent again because the server never saw them (transparent
    /// retries).
    pub fn resent(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
    }

    /// `http://ADDR`, or `https://ADDR` over TLS.
    fn base_uri(&self) -> String {
        match self.inner {
            Inner::RestTls(_) => format!("https://{}", self.target.addr),
            _ => self.target.base_uri(),
        }
    }

    /// Sends a REST request on the client's connection(s).
    async fn send_rest(&self, req: Request<Full<Bytes>>) -> Result<http::Response<Incoming>, SendFailure> {
        match &self.inner {
            Inner::Rest(client) => client.request(req).await.map_err(|e| {
                if e.is_connect() || refused(&e) {
                    SendFailure::Connect(chain(&e))
                } else {
                    SendFailure::Io(chain(&e))
                }
            }),
            Inner::RestTls(Ok(connection)) => {
                let mut sender = connection
                    .sender()
                    .await
                    .map_err(|e| SendFailure::Connect(e.to_string()))?;
                sender
                    .send_request(req)
                    .await
                    .map_err(|e| SendFailure::Io(chain(&e)))
            }
            Inner::RestTls(Err(e)) => Err(SendFailure::Connect(e.to_string())),
            Inner::Grpc(_) => Err(SendFailure::Io("a gRPC client sends no REST requests".into())),
        }
    }

    /// The model's metadata, over the client's own protocol.
    pub async fn metadata(&self, model: &str) -> Result<ModelMetadata, ClientError> {
        let uri = format!("{}/v2/models/{model}", self.base_uri());
        let fail = |reason: String| ClientError::Metadata {
            uri: uri.clone(),
            model: model.to_owned(),
            reason,
        };
        match &self.inner {
            Inner::Rest(_) | Inner::RestTls(_) => {
                let req = Request::get(&uri)
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| fail(e.to_string()))?;
                let resp = tokio::time::timeout(self.timeout, self.send_rest(req))
                    .await
                    .map_err(|_| fail("timed out".into()))?
                    .map_err(|e| fail(e.reason()))?;
                let status = resp.status();
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| fail(e.to_string()))?
                    .to_bytes();
                if status != StatusCode::OK {
                    return Err(fail(format!(
                        "status {status}: {}",
                        String::from_utf8_lossy(&body)
                    )));
                }
                serde_json::from_slice(&body).map_err(|e| fail(format!("not model metadata: {e}")))
            }
            Inner::Grpc(client) => {
                let mut client = client.clone();
                let resp = tokio::time::timeout(
                    self.timeout,
                    client.model_metadata(pb::ModelMetadataRequest {
                        name: model.to_owned(),
                        version: String::new(),
                    }),
                )
                .await
                .map_err(|_| fail("timed out".into()))?
                .map_err(|s| fail(format!("gRPC {:?}: {}", s.code(), s.message())))?
                .into_inner();
                let tensors = |ts: Vec<pb::model_metadata_response::TensorMetadata>| {
                    ts.into_iter()
                        .map(|t| {
                            Ok(TensorMetadata {
                                datatype: t.datatype.parse::<DataType>().map_err(|e| fail(e.to_string()))?,
                                name: t.name,
                                shape: t.shape,
                            })
                        })
                        .collect::<Result<Vec<_>, ClientError>>()
                };
                Ok(ModelMetadata {
                    name: resp.name,
                    versions: resp.versions,
                    platform: resp.platform,
                    inputs: tensors(resp.inputs)?,
                    outputs: tensors(resp.outputs)?,
                })
            }
        }
    }

    /// Sends the `i`-th request of `payload` as `caller`.
    pub async fn infer(&self, payload: &Payload, i: u64, caller: &HeaderValue) -> Outcome {
        match tokio::time::timeout(self.timeout, self.infer_inner(payload, i, caller)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Err(ErrorKind::Timeout),
        }
    }

    async fn infer_inner(&self, payload: &Payload, i: u64, caller: &HeaderValue) -> Outcome {
        match &self.inner {
            Inner::Rest(_) | Inner::RestTls(_) => {
                let body = payload.rest(i);
                let uri = format!("{}/v2/models/{}/infer", self.base_uri(), payload.model);
                let mut req = Request::builder().method(Method::POST).uri(uri);
                req = req.header("x-caller-id", caller.clone());
                req = match body.header_len {
                    Some(n) => req
                        .header("content-type", "application/octet-stream")
                        .header("inference-header-content-length", n),
                    None => req.header("content-type", "application/json"),
                };
                let Ok(req) = req.body(Full::new(body.bytes.clone())) else {
                    return Outcome::Err(ErrorKind::Io);
                };
                let resp = match self.send_rest(req).await {
                    Ok(r) => r,
                    Err(SendFailure::Connect(_)) => return Outcome::Err(ErrorKind::Connect),
                    Err(SendFailure::Io(_)) => return Outcome::Err(ErrorKind::Io),
                };
                let status = resp.status();
                let header_len = resp
                    .headers()
                    .get("inference-header-content-length")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<usize>().ok());
                let Ok(collected) = resp.into_body().collect().await else {
                    return Outcome::Err(ErrorKind::Io);
                };
                if status != StatusCode::OK {
                    return Outcome::Err(ErrorKind::Status(status.as_u16()));
                }
                let bytes = collected.to_bytes();
                let head = &bytes[..header_len.unwrap_or(bytes.len()).min(bytes.len())];
                Outcome::Ok(
                    serde_json::from_slice::<VersionOnly>(head)
                        .ok()
                        .and_then(|v| v.model_version),
                )
            }
            Inner::Grpc(client) => {
                let Some(msg) = payload.grpc(i) else {
                    return Outcome::Err(ErrorKind::Io);
                };
                let mut retries = 0;
                loop {
                    let mut client = client.clone();
                    let mut req = tonic::Request::new(msg.clone());
                    if let Some(v) = caller
                        .to_str()
                        .ok()
                        .and_then(|s| tonic::metadata::AsciiMetadataValue::try_from(s).ok())
                    {
                        req.metadata_mut().insert("x-caller-id", v);
                    }
                    return match client.model_infer(req).await {
                        Ok(resp) => {
                            let v = resp.into_inner().model_version;
                            Outcome::Ok((!v.is_empty()).then_some(v))
                        }
                        Err(status) if never_sent(&status) && retries < TRANSPARENT_RETRIES => {
                            retries += 1;
                            self.resent.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(status) if refused(&status) => Outcome::Err(ErrorKind::Connect),
                        Err(status) => Outcome::Err(ErrorKind::Grpc(status.code() as i32)),
                    };
                }
            }
        }
    }
}

/// Whether the error's causes include a refused connection.
fn refused(e: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether the error says the server never saw the request: hyper canceled it before sending it (it was
/// queued on a connection that closed), or h2 failed it with the server's graceful `GOAWAY` (NO_ERROR), which
/// h2 does only for a stream above the frame's last stream id or one opened after the frame arrived: a stream
/// the server did not process and that may be sent again (RFC 9113 §6.8). A `GOAWAY` naming an error is not
/// retried here, so a server that sends one shows in the counts.
fn never_sent(e: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        if err
            .downcast_ref::<h2::Error>()
            .is_some_and(|h2| h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR))
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        out.push_str(": ");
        out.push_str(&err.to_string());
        cur = err.source();
    }
    out
}

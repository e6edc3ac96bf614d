//! The gRPC front end: `inference.GRPCInferenceService` and `grpc.health.v1.Health` (tonic), as Triton
//! serves them. Errors become statuses in one place ([`service::reply`]).

mod health;
mod message_limit;
mod service;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use infergate_protocol::InferenceService;
use infergate_protocol::grpc::TRITONCLIENT_MAX_MESSAGE_BYTES;
use infergate_protocol::grpc::pb::grpc_inference_service_server::GrpcInferenceServiceServer;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_server::HealthServer;
use tower::util::MapResponseLayer;

pub use health::HealthService;
pub use service::Frontend;

/// Limits of the gRPC front end; each, when hit, gives the client a status that names it.
#[derive(Debug, Clone)]
pub struct GrpcLimits {
    /// Largest message received or sent, bytes (`--grpc-max-message-size`). Default: what Triton and
    /// tritonclient allow (2 GiB − 1). A larger request is refused with `RESOURCE_EXHAUSTED` from its
    /// length prefix, before its body is read; a compressed one is refused once its decompressed size
    /// passes the limit.
    pub max_message_bytes: usize,
    /// Calls handled at once (health checks are not counted); more get `UNAVAILABLE` at once.
    pub max_concurrent_requests: usize,
    /// Concurrent HTTP/2 streams per connection.
    pub max_h2_streams: u32,
    /// Requests of one `ModelStreamInfer` stream executed at once.
    pub max_stream_in_flight: usize,
    /// HTTP/2 keep-alive ping interval (`None`: no pings).
    pub keepalive_interval: Option<Duration>,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            max_message_bytes: TRITONCLIENT_MAX_MESSAGE_BYTES,
            max_concurrent_requests: 4096,
            max_h2_streams: 1024,
            max_stream_in_flight: 128,
            keepalive_interval: None,
        }
    }
}

/// Serves the gRPC API (and `grpc.health.v1.Health`) on `listener` until `shutdown` completes, then
/// lets in-flight calls finish and returns.
pub async fn serve_grpc<S, F>(
    listener: TcpListener,
    service: S,
    limits: GrpcLimits,
    shutdown: F,
) -> Result<(), tonic::transport::Error>
where
    S: InferenceService,
    F: Future<Output = ()> + Send,
{
    let inference = GrpcInferenceServiceServer::new(Frontend::new(service.clone(), limits.clone()))
        .max_decoding_message_size(limits.max_message_bytes)
        .max_encoding_message_size(limits.max_message_bytes)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    // Responses go out uncompressed, as Triton sends them: gRPC clients advertise gzip in
    // grpc-accept-encoding by default, and compressing every small response costs more than it saves.
    let health = HealthServer::new(HealthService::new(Arc::new(service)));
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(limits.max_h2_streams)
        .http2_keepalive_interval(limits.keepalive_interval)
        .http2_max_pending_accept_reset_streams(Some(64))
        .layer(MapResponseLayer::new(
            message_limit::over_limit_is_resource_exhausted,
        ))
        .add_service(inference)
        .add_service(health)
        // With a listener of our own, tonic's `tcp_nodelay` does not apply: set it on the incoming
        // stream, or Nagle's algorithm holds small responses back (milliseconds per call).
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await
}

#[cfg(test)]
mod tests;

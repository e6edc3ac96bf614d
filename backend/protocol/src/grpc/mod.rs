//! The gRPC side of the protocol: `inference.GRPCInferenceService` messages and service (generated from
//! `proto/` at build time) and conversions to and from the transport-neutral types.

mod convert;
mod model_config;

pub use convert::{
    index_to_proto, infer_request_from_proto, infer_request_to_proto, infer_response_from_proto,
    infer_response_to_proto, load_parameters_from_proto, metadata_to_proto, server_metadata_to_proto,
    statistics_to_proto, unload_dependents_from_proto,
};
pub use model_config::model_config_to_proto;

/// The generated protobuf messages, the server trait (`grpc_inference_service_server`) and the client
/// (`grpc_inference_service_client`) of package `inference`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("inference");
}

/// The full gRPC service name, as clients and health checks spell it.
pub const SERVICE_NAME: &str = "inference.GRPCInferenceService";

/// The message size tritonclient allows (2 GiB − 1), the default limit of our gRPC server.
pub const TRITONCLIENT_MAX_MESSAGE_BYTES: usize = i32::MAX as usize;

#[cfg(test)]
mod tests;

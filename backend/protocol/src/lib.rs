//! The KServe V2 / Open Inference Protocol as Triton speaks it: REST JSON, binary tensors and gRPC messages.
//!
//! Transport-neutral types ([`InferRequest`], [`InferResponse`], [`ModelMetadata`], …) carry tensors as
//! little-endian row-major bytes ([`TensorData`]) so that they reach the engine without copies. The
//! [`rest`] and [`grpc`] modules convert between these types and the wire, and [`ServeError`] is the one
//! error type, with the one mapping to HTTP status codes and gRPC codes. See `docs/protocol.md`.

mod datatype;
mod error;
pub mod grpc;
mod infer;
mod metadata;
mod repository;
pub mod rest;
mod service;
mod statistics;
mod tensor;

pub use datatype::DataType;
pub use error::{ErrorCode, ServeError};
pub use infer::{
    InferInput, InferOutput, InferRequest, InferResponse, Parameter, Parameters, RequestedOutput,
    parse_model_version,
};
pub use metadata::{ModelMetadata, ServerMetadata, TensorMetadata};
pub use repository::{LoadParameters, ModelState, RepositoryIndexEntry};
pub use service::InferenceService;
pub use statistics::{
    InferBatchStatistics, InferResponseStatistics, InferStatistics, MemoryUsage, ModelStatistics,
    ModelStatisticsResponse, StatisticDuration,
};
pub use tensor::{
    BytesElements, TensorData, element_count, put_bytes_element, shape_string, validate_tensor,
};

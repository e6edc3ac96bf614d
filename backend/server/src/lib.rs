//! The infergate inference server: Triton-compatible REST and gRPC front ends, model repository and dynamic batcher.

pub mod batcher;
pub mod grpc;
pub mod http;
pub mod convert;
pub mod instance;
pub mod manifest;
pub mod spec;
pub mod stats;
pub mod tensor_ops;
pub mod version;
pub mod warmup;

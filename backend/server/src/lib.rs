//! The infergate inference server: Triton-compatible REST and gRPC front ends, model repository and dynamic batcher.

pub mod batcher;

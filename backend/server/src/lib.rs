//! The infergate inference server: Triton-compatible REST and gRPC front ends, model repository and dynamic batcher.

pub mod batcher;
pub mod check;
pub mod cli;
pub mod confine;
pub mod convert;
pub mod core;
pub mod grpc;
pub mod http;
pub mod instance;
pub mod load_failure;
pub mod manifest;
pub mod memory_budget;
pub mod metrics;
pub mod metrics_server;
pub mod model_config;
pub mod process;
pub mod repository;
pub mod spec;
pub mod stats;
pub mod tensor_ops;
pub mod version;
pub mod warmup;

//! Helpers shared by the engine's integration tests (ONNX conformance suite, reference models).
#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod build;
pub mod conformance;
pub mod python;
pub mod zoo;

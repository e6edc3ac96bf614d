//! Helpers shared by the engine's integration tests (ONNX conformance suite, reference models).
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod conformance;
pub mod python;

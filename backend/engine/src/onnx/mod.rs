//! ONNX protobuf decoding and conversion into the IR.

pub mod proto;

use std::path::Path;

use crate::error::{EngineError, Result};
use crate::ir::Graph;

/// Decode an ONNX model and convert it into an IR graph (constants folded, `If`s with known
/// conditions inlined). Every unsupported node is reported in one error.
pub fn load_graph(bytes: &[u8], external_data_dir: Option<&Path>) -> Result<Graph> {
    let _ = (bytes, external_data_dir);
    Err(EngineError::unsupported("ONNX loading is being written"))
}

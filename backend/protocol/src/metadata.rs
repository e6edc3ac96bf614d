//! Server and model metadata (`GET /v2`, `GET /v2/models/{m}`, `ServerMetadata`, `ModelMetadata`).

use serde::{Deserialize, Serialize};

use crate::datatype::DataType;

/// What `GET /v2` and `ServerMetadata` return.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerMetadata {
    /// Server name (`"infergate"`).
    pub name: String,
    /// Server version.
    pub version: String,
    /// Protocol extensions that work on this server (`"binary_tensor_data"`, `"statistics"`, …).
    pub extensions: Vec<String>,
}

/// What `GET /v2/models/{m}[/versions/{v}]` and `ModelMetadata` return.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelMetadata {
    /// Model name.
    pub name: String,
    /// The versions available (as strings, as the protocol reports them).
    pub versions: Vec<String>,
    /// Platform (`"onnxruntime_onnx"`), or the backend name when the config gives no platform.
    pub platform: String,
    /// Inputs, in model order.
    pub inputs: Vec<TensorMetadata>,
    /// Outputs, in model order.
    pub outputs: Vec<TensorMetadata>,
}

/// A tensor in model metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMetadata {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Shape; `-1` marks a variable dimension (always the leading one when `max_batch_size > 0`).
    pub shape: Vec<i64>,
}

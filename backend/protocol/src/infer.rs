//! Inference requests and responses, independent of the transport they came over.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::datatype::DataType;
use crate::tensor::TensorData;

/// A request, input or output parameter (`InferParameter` on gRPC, any JSON scalar on REST).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Parameter {
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int64(i64),
    /// An unsigned integer too large for `i64`.
    Uint64(u64),
    /// A floating-point number.
    Double(f64),
    /// A string.
    String(String),
}

/// Named parameters, sorted by name.
pub type Parameters = BTreeMap<String, Parameter>;

/// One inference request, as decoded from REST (JSON and binary tensors) or gRPC.
///
/// Every input's `data` matches its `datatype` and `shape` (the codecs check it); whether the inputs
/// fit the model is for the server to check.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InferRequest {
    /// The model to run.
    pub model_name: String,
    /// A specific version, or `None` for the highest ready version. Versions are numeric (as in Triton).
    pub model_version: Option<u64>,
    /// The client's request id, echoed in the response; empty when none was given.
    pub id: String,
    /// Request parameters other than the ones the codecs consume (`binary_data_output`, `priority`, `timeout`).
    pub parameters: Parameters,
    /// Scheduling priority from the `priority` parameter; 0 means the model's default level.
    pub priority: u64,
    /// Queue timeout from the `timeout` parameter (microseconds on the wire); `None` = the model's default.
    pub timeout: Option<Duration>,
    /// The input tensors, in request order.
    pub inputs: Vec<InferInput>,
    /// The outputs asked for; empty means every output of the model.
    pub outputs: Vec<RequestedOutput>,
}

/// One input tensor of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct InferInput {
    /// Input name, as in the model's metadata.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Shape, every dimension ≥ 0 (the batch dimension included when the model batches).
    pub shape: Vec<i64>,
    /// Input parameters left after the codec consumed its own (`binary_data_size`).
    pub parameters: Parameters,
    /// The tensor contents (little-endian, row-major; see [`TensorData`]).
    pub data: TensorData,
}

/// An output the client asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestedOutput {
    /// Output name, as in the model's metadata.
    pub name: String,
    /// Output parameters left after the codec consumed its own (`binary_data`).
    pub parameters: Parameters,
}

/// The result of one inference request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InferResponse {
    /// The model that ran.
    pub model_name: String,
    /// The version that ran (as a string, as the protocol reports it).
    pub model_version: String,
    /// The request's id (empty when the request had none).
    pub id: String,
    /// Response parameters.
    pub parameters: Parameters,
    /// Output tensors: those requested, in request order, or all outputs in model order.
    pub outputs: Vec<InferOutput>,
}

/// One output tensor of a response.
#[derive(Debug, Clone, PartialEq)]
pub struct InferOutput {
    /// Output name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Shape.
    pub shape: Vec<i64>,
    /// Output parameters.
    pub parameters: Parameters,
    /// The tensor contents (little-endian, row-major; see [`TensorData`]).
    pub data: TensorData,
}

impl InferRequest {
    /// The input with this name, if the request has one.
    pub fn input(&self, name: &str) -> Option<&InferInput> {
        self.inputs.iter().find(|i| i.name == name)
    }
}

impl InferResponse {
    /// The output with this name, if the response has one.
    pub fn output(&self, name: &str) -> Option<&InferOutput> {
        self.outputs.iter().find(|o| o.name == name)
    }
}

/// Parses a model version as it arrives in a URL or a gRPC field: empty means "the server's choice";
/// otherwise a non-negative integer, as Triton requires.
pub fn parse_model_version(version: &str) -> Result<Option<u64>, crate::ServeError> {
    if version.is_empty() {
        return Ok(None);
    }
    version.parse::<u64>().map(Some).map_err(|_| {
        crate::ServeError::invalid_argument(format!(
            "failed to get model version from specified version string '{version}': versions are \
             non-negative integers (e.g. '1')"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_numeric_or_empty() {
        assert_eq!(parse_model_version("").unwrap(), None);
        assert_eq!(parse_model_version("3").unwrap(), Some(3));
        let e = parse_model_version("latest").unwrap_err();
        assert!(e.message.contains("'latest'"));
        assert!(parse_model_version("-1").is_err());
    }

    #[test]
    fn json_parameters_pick_the_narrowest_variant() {
        let p: Parameters =
            serde_json::from_str(r#"{"a":true,"b":-3,"c":18446744073709551615,"d":0.5,"e":"s"}"#).unwrap();
        assert_eq!(p["a"], Parameter::Bool(true));
        assert_eq!(p["b"], Parameter::Int64(-3));
        assert_eq!(p["c"], Parameter::Uint64(u64::MAX));
        assert_eq!(p["d"], Parameter::Double(0.5));
        assert_eq!(p["e"], Parameter::String("s".into()));
    }
}

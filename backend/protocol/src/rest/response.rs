//! Encoding infer responses: JSON outputs, binary outputs after the JSON header, or both.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::datatype::DataType;
use crate::error::ServeError;
use crate::infer::{InferResponse, Parameters};
use crate::rest::json_tensor::JsonTensorData;

/// How the client asked for outputs: binary data (after the JSON header) or JSON `data`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputFormat {
    /// `binary_data_output` of the request: the default for outputs without their own `binary_data`.
    pub binary_by_default: bool,
    /// `binary_data` of each named output.
    pub per_output: BTreeMap<String, bool>,
}

impl OutputFormat {
    /// Whether this output goes back as binary data.
    pub fn is_binary(&self, output: &str) -> bool {
        self.per_output
            .get(output)
            .copied()
            .unwrap_or(self.binary_by_default)
    }
}

/// An encoded infer response: the JSON header, then the binary outputs, in order. Send the chunks one
/// after another (no copy); set `Inference-Header-Content-Length: json_length` and
/// `content-type: application/octet-stream` when `has_binary`, `application/json` otherwise.
#[derive(Debug, Clone)]
pub struct EncodedInferResponse {
    /// The JSON header first, then each binary output's bytes.
    pub chunks: Vec<Bytes>,
    /// Length of the JSON header.
    pub json_length: usize,
    /// Whether binary outputs follow the JSON.
    pub has_binary: bool,
}

impl EncodedInferResponse {
    /// Total body length.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// Whether the body is empty (never, for a well-formed response).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Encodes a response the way the client asked (see [`OutputFormat`]). FP16/BF16 outputs asked for as
/// JSON are refused, as Triton does.
pub fn encode_infer_response(
    response: &InferResponse,
    format: &OutputFormat,
) -> Result<EncodedInferResponse, ServeError> {
    let mut binary = Vec::new();
    let mut outputs = Vec::with_capacity(response.outputs.len());
    for o in &response.outputs {
        let as_binary = format.is_binary(&o.name);
        if !as_binary && matches!(o.datatype, DataType::Fp16 | DataType::Bf16) {
            return Err(ServeError::invalid_argument(format!(
                "output '{}': {} data cannot be sent as JSON; ask for it as binary data \
                 ('binary_data': true in the output's parameters)",
                o.name, o.datatype
            )));
        }
        if as_binary {
            binary.push(o.data.as_bytes().clone());
        }
        outputs.push(JsonOutput {
            name: &o.name,
            datatype: o.datatype,
            shape: &o.shape,
            parameters: OutputParameters {
                own: &o.parameters,
                binary_data_size: as_binary.then_some(o.data.len()),
            },
            data: (!as_binary).then_some(JsonTensorData {
                datatype: o.datatype,
                data: o.data.as_bytes(),
            }),
        });
    }
    let header = JsonResponse {
        model_name: &response.model_name,
        model_version: &response.model_version,
        id: &response.id,
        parameters: &response.parameters,
        outputs,
    };
    let json = serde_json::to_vec(&header)
        .map_err(|e| ServeError::internal(format!("failed to write the response JSON: {e}")))?;
    let json_length = json.len();
    let has_binary = !binary.is_empty();
    let mut chunks = Vec::with_capacity(1 + binary.len());
    chunks.push(Bytes::from(json));
    chunks.extend(binary);
    Ok(EncodedInferResponse {
        chunks,
        json_length,
        has_binary,
    })
}

#[derive(Serialize)]
struct JsonResponse<'a> {
    model_name: &'a str,
    model_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    parameters: &'a Parameters,
    outputs: Vec<JsonOutput<'a>>,
}

#[derive(Serialize)]
struct JsonOutput<'a> {
    name: &'a str,
    datatype: DataType,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "OutputParameters::is_empty")]
    parameters: OutputParameters<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonTensorData<'a>>,
}

/// An output's own parameters plus `binary_data_size` when its data is binary.
struct OutputParameters<'a> {
    own: &'a Parameters,
    binary_data_size: Option<usize>,
}

impl OutputParameters<'_> {
    fn is_empty(&self) -> bool {
        self.own.is_empty() && self.binary_data_size.is_none()
    }
}

impl Serialize for OutputParameters<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.own {
            if k != "binary_data_size" {
                map.serialize_entry(k, v)?;
            }
        }
        if let Some(n) = self.binary_data_size {
            map.serialize_entry("binary_data_size", &n)?;
        }
        map.end()
    }
}

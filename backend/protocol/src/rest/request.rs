//! Decoding `POST /v2/models/{m}[/versions/{v}]/infer` bodies: JSON, JSON + binary tensors, or one raw
//! tensor.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::datatype::DataType;
use crate::error::ServeError;
use crate::infer::{InferInput, InferRequest, Parameter, Parameters, RequestedOutput};
use crate::metadata::ModelMetadata;
use crate::rest::json_tensor::read_json_tensor;
use crate::rest::response::OutputFormat;
use crate::tensor::{TensorData, element_count, shape_string, validate_tensor};

/// An infer body, decoded.
#[derive(Debug)]
pub enum DecodedInfer {
    /// A JSON request (possibly with binary tensors after it) and how the client wants the outputs.
    Request(InferRequest, OutputFormat),
    /// `Inference-Header-Content-Length: 0`: the whole body is the raw data of the model's only input.
    /// Complete it with [`raw_infer_request`] once the model's metadata is known.
    Raw(Bytes),
}

/// Decodes an infer body. `header_length` is the value of `Inference-Header-Content-Length` (already
/// checked with [`crate::rest::parse_header_length`]); `None` means the whole body is JSON.
pub fn decode_infer_request(
    model_name: &str,
    model_version: Option<u64>,
    body: Bytes,
    header_length: Option<usize>,
) -> Result<DecodedInfer, ServeError> {
    let json_len = match header_length {
        Some(0) => return Ok(DecodedInfer::Raw(body)),
        Some(n) => n,
        None => body.len(),
    };
    let Some(json) = body.get(..json_len) else {
        return Err(ServeError::invalid_argument(format!(
            "Inference-Header-Content-Length is {json_len} but the body has only {} bytes",
            body.len()
        )));
    };
    let parsed: JsonRequest<'_> = serde_json::from_slice(json)
        .map_err(|e| ServeError::invalid_argument(format!("malformed inference request JSON: {e}")))?;

    let mut request = InferRequest {
        model_name: model_name.to_owned(),
        model_version,
        id: parsed.id.unwrap_or_default(),
        ..InferRequest::default()
    };
    let mut format = OutputFormat::default();
    if let Some(params) = parsed.parameters {
        for (key, value) in params {
            match key.as_str() {
                "binary_data_output" => {
                    format.binary_by_default = value.as_bool().ok_or_else(|| {
                        ServeError::invalid_argument(
                            "Unable to parse 'binary_data_output': expected a boolean",
                        )
                    })?;
                }
                "priority" => {
                    request.priority = value.as_u64().ok_or_else(|| {
                        ServeError::invalid_argument(
                            "Unable to parse 'priority': expected an unsigned integer",
                        )
                    })?;
                }
                "timeout" => {
                    let us = value.as_u64().ok_or_else(|| {
                        ServeError::invalid_argument(
                            "Unable to parse 'timeout': expected an unsigned integer (microseconds)",
                        )
                    })?;
                    request.timeout = Some(Duration::from_micros(us));
                }
                // Only meaningful for decoupled models (none here); clients may send it anyway.
                "triton_enable_empty_final_response" => {}
                _ if key.starts_with("triton_") => {
                    return Err(ServeError::invalid_argument(format!(
                        "parameter '{key}': keys starting with 'triton_' are reserved for the server"
                    )));
                }
                _ => {
                    let p = json_parameter(&key, value)?;
                    request.parameters.insert(key, p);
                }
            }
        }
    }

    let mut binary = body.slice(json_len..);
    let binary_total = binary.len();
    request.inputs.reserve(parsed.inputs.len());
    for input in parsed.inputs {
        let what = format!("input '{}'", input.name);
        let datatype: DataType = input.datatype.parse().map_err(|e: ServeError| e.context(&what))?;
        let count = element_count(&what, &input.shape)?;
        let mut binary_size = None;
        let mut parameters = Parameters::new();
        for (key, value) in input.parameters.unwrap_or_default() {
            match key.as_str() {
                "binary_data_size" => {
                    binary_size = Some(value.as_u64().ok_or_else(|| {
                        ServeError::invalid_argument(format!(
                            "{what}: Unable to parse 'binary_data_size': expected an unsigned integer"
                        ))
                    })?);
                }
                "shared_memory_region" | "shared_memory_offset" | "shared_memory_byte_size" => {
                    return Err(ServeError::unsupported(format!(
                        "{what}: shared memory is not supported by this server; send the tensor as JSON \
                         'data' or as binary data"
                    )));
                }
                _ => {
                    let p = json_parameter(&key, value)?;
                    parameters.insert(key, p);
                }
            }
        }
        let data = match (input.data, binary_size) {
            (Some(_), Some(_)) => {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: set either 'data' or 'binary_data_size' in 'parameters', not both"
                )));
            }
            (None, None) => {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: no data; set 'data' or 'binary_data_size' in 'parameters'"
                )));
            }
            (Some(raw), None) => read_json_tensor(&what, datatype, count, raw)?,
            (None, Some(size)) => {
                if header_length.is_none() {
                    return Err(ServeError::invalid_argument(format!(
                        "{what} has 'binary_data_size' but the request has no Inference-Header-Content-Length \
                         header; set it to the length of the JSON part of the body"
                    )));
                }
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > binary.len() {
                    return Err(ServeError::invalid_argument(format!(
                        "{what}: 'binary_data_size' is {size} bytes but only {} bytes of binary data remain \
                         in the body (truncated request?)",
                        binary.len()
                    )));
                }
                let data = binary.split_to(size);
                validate_tensor(&what, datatype, &input.shape, &data)?;
                data
            }
        };
        request.inputs.push(InferInput {
            name: input.name,
            datatype,
            shape: input.shape,
            parameters,
            data: TensorData::new(data),
        });
    }
    if !binary.is_empty() {
        return Err(ServeError::invalid_argument(format!(
            "{} bytes of binary data follow the JSON header but the inputs' 'binary_data_size' add up to {} \
             (is Inference-Header-Content-Length right?)",
            binary_total,
            binary_total - binary.len()
        )));
    }

    for output in parsed.outputs.unwrap_or_default() {
        let what = format!("output '{}'", output.name);
        let mut parameters = Parameters::new();
        for (key, value) in output.parameters.unwrap_or_default() {
            match key.as_str() {
                "binary_data" => {
                    let b = value.as_bool().ok_or_else(|| {
                        ServeError::invalid_argument(format!(
                            "{what}: Unable to parse 'binary_data': expected a boolean"
                        ))
                    })?;
                    format.per_output.insert(output.name.clone(), b);
                }
                "classification" => {
                    return Err(ServeError::unsupported(format!(
                        "{what}: the classification extension is not supported by this server; ask for the raw \
                         output and rank it on the client"
                    )));
                }
                "shared_memory_region" | "shared_memory_offset" | "shared_memory_byte_size" => {
                    return Err(ServeError::unsupported(format!(
                        "{what}: shared memory is not supported by this server"
                    )));
                }
                _ => {
                    let p = json_parameter(&key, value)?;
                    parameters.insert(key, p);
                }
            }
        }
        request.outputs.push(RequestedOutput {
            name: output.name,
            parameters,
        });
    }
    Ok(DecodedInfer::Request(request, format))
}

/// Builds the request for a raw body (`Inference-Header-Content-Length: 0`): the model must have exactly
/// one input; its datatype comes from the metadata and its shape from the metadata with the one variable
/// dimension (if any) worked out from the body's size. All outputs come back as binary data.
pub fn raw_infer_request(
    model_version: Option<u64>,
    metadata: &ModelMetadata,
    body: Bytes,
) -> Result<(InferRequest, OutputFormat), ServeError> {
    let [input] = metadata.inputs.as_slice() else {
        return Err(ServeError::invalid_argument(format!(
            "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one input; \
             model '{}' has {}",
            metadata.name,
            metadata.inputs.len()
        )));
    };
    let what = format!("raw input for '{}' of model '{}'", input.name, metadata.name);
    let elements = match input.datatype.element_size() {
        Some(size) => {
            if !body.len().is_multiple_of(size) {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: {} bytes is not a whole number of {} elements ({size} bytes each)",
                    body.len(),
                    input.datatype
                )));
            }
            body.len() / size
        }
        None => TensorData::new(body.clone())
            .byte_strings()
            .try_fold(0usize, |n, e| e.map(|_| n + 1))?,
    };
    let variable: Vec<usize> = (0..input.shape.len()).filter(|&i| input.shape[i] < 0).collect();
    let mut shape = input.shape.clone();
    match variable.as_slice() {
        [] => {}
        [i] => {
            // The model's dims multiply to `None` when they overflow: no body can fill that shape.
            let fixed = input
                .shape
                .iter()
                .filter(|d| **d >= 0)
                .try_fold(1i64, |n, d| n.checked_mul(*d))
                .unwrap_or(0);
            let elements = i64::try_from(elements).unwrap_or(i64::MAX);
            if fixed == 0 || elements % fixed != 0 {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: {elements} elements do not fill the shape {} (the model's dims)",
                    shape_string(&input.shape)
                )));
            }
            shape[*i] = elements / fixed;
        }
        _ => {
            return Err(ServeError::invalid_argument(format!(
                "{what}: the model's shape {} has more than one variable dimension, so a raw body's shape \
                 cannot be worked out; send a JSON header with the shape",
                shape_string(&input.shape)
            )));
        }
    }
    validate_tensor(&what, input.datatype, &shape, &body)?;
    let request = InferRequest {
        model_name: metadata.name.clone(),
        model_version,
        inputs: vec![InferInput {
            name: input.name.clone(),
            datatype: input.datatype,
            shape,
            parameters: Parameters::new(),
            data: TensorData::new(body),
        }],
        ..InferRequest::default()
    };
    Ok((
        request,
        OutputFormat {
            binary_by_default: true,
            per_output: BTreeMap::new(),
        },
    ))
}

/// Converts a JSON parameter value (bool, number or string) into a [`Parameter`].
pub(crate) fn json_parameter(key: &str, value: Value) -> Result<Parameter, ServeError> {
    Ok(match value {
        Value::Bool(b) => Parameter::Bool(b),
        Value::String(s) => Parameter::String(s),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Parameter::Int64(i)
            } else if let Some(u) = n.as_u64() {
                Parameter::Uint64(u)
            } else {
                Parameter::Double(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => {
            return Err(ServeError::invalid_argument(format!(
                "parameter '{key}' has invalid type; it should be a bool, a number or a string"
            )));
        }
    })
}

#[derive(Deserialize)]
struct JsonRequest<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow)]
    inputs: Vec<JsonInput<'a>>,
    #[serde(default)]
    outputs: Option<Vec<JsonOutput>>,
}

#[derive(Deserialize)]
struct JsonInput<'a> {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct JsonOutput {
    name: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

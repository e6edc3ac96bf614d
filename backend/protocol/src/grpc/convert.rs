//! Conversions between the generated gRPC messages and the transport-neutral types.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::pb;
use super::pb::infer_parameter::ParameterChoice;
use super::pb::model_repository_parameter::ParameterChoice as RepoChoice;
use crate::datatype::DataType;
use crate::error::ServeError;
use crate::infer::{
    InferInput, InferOutput, InferRequest, InferResponse, Parameter, Parameters, RequestedOutput,
    parse_model_version,
};
use crate::metadata::{ModelMetadata, ServerMetadata, TensorMetadata};
use crate::repository::{LoadParameters, RepositoryIndexEntry};
use crate::rest::check_load_files as check_files;
use crate::statistics::{InferStatistics, ModelStatistics, StatisticDuration};
use crate::tensor::{TensorData, element_count, put_bytes_element, validate_tensor};

/// Decodes a `ModelInferRequest`. Inputs may carry typed `contents` or `raw_input_contents` (one entry
/// per input, as tritonclient sends them), not both; raw entries are used without copying.
pub fn infer_request_from_proto(req: pb::ModelInferRequest) -> Result<InferRequest, ServeError> {
    let pb::ModelInferRequest {
        model_name,
        model_version,
        id,
        parameters,
        inputs,
        outputs,
        raw_input_contents,
    } = req;
    if model_name.is_empty() {
        return Err(ServeError::invalid_argument(
            "ModelInferRequest has no model_name",
        ));
    }
    let mut request = InferRequest {
        model_version: parse_model_version(&model_version)?,
        model_name,
        id,
        ..InferRequest::default()
    };
    for (key, value) in parameters {
        match key.as_str() {
            "priority" => {
                request.priority = unsigned_param(&key, &value)?;
            }
            "timeout" => {
                request.timeout = Some(Duration::from_micros(unsigned_param(&key, &value)?));
            }
            // A REST-only switch some clients set on every transport; meaningless here.
            "binary_data_output" => {}
            // perf_analyzer sends it on every gRPC request; it only matters for decoupled models,
            // which this server does not have.
            "triton_enable_empty_final_response" => {}
            _ if key.starts_with("triton_") => {
                return Err(ServeError::invalid_argument(format!(
                    "parameter '{key}': keys starting with 'triton_' are reserved for the server"
                )));
            }
            _ => {
                request.parameters.insert(key, parameter_from_proto(value));
            }
        }
    }
    let use_raw = !raw_input_contents.is_empty();
    if use_raw && raw_input_contents.len() != inputs.len() {
        return Err(ServeError::invalid_argument(format!(
            "raw_input_contents has {} entries but the request has {} inputs; send one entry per input, in \
             input order",
            raw_input_contents.len(),
            inputs.len()
        )));
    }
    let mut raw = raw_input_contents.into_iter();
    request.inputs.reserve(inputs.len());
    for input in inputs {
        let what = format!("input '{}'", input.name);
        let datatype: DataType = input.datatype.parse().map_err(|e: ServeError| e.context(&what))?;
        let count = element_count(&what, &input.shape)?;
        let data = match (raw.next(), input.contents) {
            (Some(_), Some(c)) if !contents_empty(&c) => {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: has typed contents while the request also uses raw_input_contents; use one or \
                     the other for all inputs"
                )));
            }
            (Some(bytes), _) => {
                validate_tensor(&what, datatype, &input.shape, &bytes)?;
                bytes
            }
            (None, Some(c)) => typed_contents_to_bytes(&what, datatype, count, c)?,
            (None, None) if count == 0 => Bytes::new(),
            (None, None) => {
                return Err(ServeError::invalid_argument(format!(
                    "{what} has no data: set its typed contents or send raw_input_contents"
                )));
            }
        };
        request.inputs.push(InferInput {
            name: input.name,
            datatype,
            shape: input.shape,
            parameters: parameters_from_proto(input.parameters),
            data: TensorData::new(data),
        });
    }
    for output in outputs {
        for key in output.parameters.keys() {
            if key == "classification" || key.starts_with("shared_memory") {
                return Err(ServeError::unsupported(format!(
                    "output '{}': the '{key}' parameter (classification / shared memory) is not supported by \
                     this server",
                    output.name
                )));
            }
        }
        request.outputs.push(RequestedOutput {
            name: output.name,
            parameters: parameters_from_proto(output.parameters),
        });
    }
    Ok(request)
}

/// Encodes a response as Triton does: every output's data in `raw_output_contents` (shared, not copied).
pub fn infer_response_to_proto(resp: InferResponse) -> pb::ModelInferResponse {
    let mut outputs = Vec::with_capacity(resp.outputs.len());
    let mut raw = Vec::with_capacity(resp.outputs.len());
    for o in resp.outputs {
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name: o.name,
            datatype: o.datatype.as_str().to_owned(),
            shape: o.shape,
            parameters: parameters_to_proto(o.parameters),
            contents: None,
        });
        raw.push(o.data.into_bytes());
    }
    pb::ModelInferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version,
        id: resp.id,
        parameters: parameters_to_proto(resp.parameters),
        outputs,
        raw_output_contents: raw,
    }
}

/// Encodes a request with raw contents (what a client, the gateway or a load test sends).
pub fn infer_request_to_proto(req: InferRequest) -> pb::ModelInferRequest {
    let mut parameters = parameters_to_proto(req.parameters);
    if req.priority != 0 {
        parameters.insert(
            "priority".into(),
            pb::InferParameter {
                parameter_choice: Some(ParameterChoice::Uint64Param(req.priority)),
            },
        );
    }
    if let Some(t) = req.timeout {
        let us = u64::try_from(t.as_micros()).unwrap_or(u64::MAX);
        parameters.insert(
            "timeout".into(),
            pb::InferParameter {
                parameter_choice: Some(ParameterChoice::Uint64Param(us)),
            },
        );
    }
    let mut inputs = Vec::with_capacity(req.inputs.len());
    let mut raw = Vec::with_capacity(req.inputs.len());
    for i in req.inputs {
        inputs.push(pb::model_infer_request::InferInputTensor {
            name: i.name,
            datatype: i.datatype.as_str().to_owned(),
            shape: i.shape,
            parameters: parameters_to_proto(i.parameters),
            contents: None,
        });
        raw.push(i.data.into_bytes());
    }
    pb::ModelInferRequest {
        model_name: req.model_name,
        model_version: req.model_version.map(|v| v.to_string()).unwrap_or_default(),
        id: req.id,
        parameters,
        inputs,
        outputs: req
            .outputs
            .into_iter()
            .map(|o| pb::model_infer_request::InferRequestedOutputTensor {
                name: o.name,
                parameters: parameters_to_proto(o.parameters),
            })
            .collect(),
        raw_input_contents: raw,
    }
}

/// Decodes a response with raw or typed output contents.
pub fn infer_response_from_proto(resp: pb::ModelInferResponse) -> Result<InferResponse, ServeError> {
    let use_raw = !resp.raw_output_contents.is_empty();
    if use_raw && resp.raw_output_contents.len() != resp.outputs.len() {
        return Err(ServeError::invalid_argument(format!(
            "raw_output_contents has {} entries for {} outputs",
            resp.raw_output_contents.len(),
            resp.outputs.len()
        )));
    }
    let mut raw = resp.raw_output_contents.into_iter();
    let mut outputs = Vec::with_capacity(resp.outputs.len());
    for o in resp.outputs {
        let what = format!("output '{}'", o.name);
        let datatype: DataType = o.datatype.parse().map_err(|e: ServeError| e.context(&what))?;
        let count = element_count(&what, &o.shape)?;
        let data = match (raw.next(), o.contents) {
            (Some(b), _) => b,
            (None, Some(c)) => typed_contents_to_bytes(&what, datatype, count, c)?,
            (None, None) => Bytes::new(),
        };
        validate_tensor(&what, datatype, &o.shape, &data)?;
        outputs.push(InferOutput {
            name: o.name,
            datatype,
            shape: o.shape,
            parameters: parameters_from_proto(o.parameters),
            data: TensorData::new(data),
        });
    }
    Ok(InferResponse {
        model_name: resp.model_name,
        model_version: resp.model_version,
        id: resp.id,
        parameters: parameters_from_proto(resp.parameters),
        outputs,
    })
}

/// `ServerMetadataResponse` from [`ServerMetadata`].
pub fn server_metadata_to_proto(m: ServerMetadata) -> pb::ServerMetadataResponse {
    pb::ServerMetadataResponse {
        name: m.name,
        version: m.version,
        extensions: m.extensions,
    }
}

/// `ModelMetadataResponse` from [`ModelMetadata`].
pub fn metadata_to_proto(m: ModelMetadata) -> pb::ModelMetadataResponse {
    let t = |t: TensorMetadata| pb::model_metadata_response::TensorMetadata {
        name: t.name,
        datatype: t.datatype.as_str().to_owned(),
        shape: t.shape,
    };
    pb::ModelMetadataResponse {
        name: m.name,
        versions: m.versions,
        platform: m.platform,
        inputs: m.inputs.into_iter().map(t).collect(),
        outputs: m.outputs.into_iter().map(t).collect(),
    }
}

/// `ModelStatisticsResponse` from [`ModelStatistics`] (every duration present, as perf_analyzer needs).
pub fn statistics_to_proto(stats: Vec<ModelStatistics>) -> pb::ModelStatisticsResponse {
    let d = |d: StatisticDuration| {
        Some(pb::StatisticDuration {
            count: d.count,
            ns: d.ns,
        })
    };
    let infer = |s: InferStatistics| pb::InferStatistics {
        success: d(s.success),
        fail: d(s.fail),
        queue: d(s.queue),
        compute_input: d(s.compute_input),
        compute_infer: d(s.compute_infer),
        compute_output: d(s.compute_output),
        cache_hit: d(s.cache_hit),
        cache_miss: d(s.cache_miss),
    };
    pb::ModelStatisticsResponse {
        model_stats: stats
            .into_iter()
            .map(|s| pb::ModelStatistics {
                name: s.name,
                version: s.version,
                last_inference: s.last_inference,
                inference_count: s.inference_count,
                execution_count: s.execution_count,
                inference_stats: Some(infer(s.inference_stats)),
                batch_stats: s
                    .batch_stats
                    .into_iter()
                    .map(|b| pb::InferBatchStatistics {
                        batch_size: b.batch_size,
                        compute_input: d(b.compute_input),
                        compute_infer: d(b.compute_infer),
                        compute_output: d(b.compute_output),
                    })
                    .collect(),
                memory_usage: s
                    .memory_usage
                    .into_iter()
                    .map(|m| pb::MemoryUsage {
                        r#type: m.kind,
                        id: m.id,
                        byte_size: m.byte_size,
                    })
                    .collect(),
                response_stats: s
                    .response_stats
                    .into_iter()
                    .map(|(k, r)| {
                        (
                            k,
                            pb::InferResponseStatistics {
                                compute_infer: d(r.compute_infer),
                                compute_output: d(r.compute_output),
                                success: d(r.success),
                                fail: d(r.fail),
                                empty_response: d(r.empty_response),
                                cancel: d(r.cancel),
                            },
                        )
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// `RepositoryIndexResponse` from index entries.
pub fn index_to_proto(entries: Vec<RepositoryIndexEntry>) -> pb::RepositoryIndexResponse {
    pb::RepositoryIndexResponse {
        models: entries
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version.unwrap_or_default(),
                state: e.state.map(|s| s.as_str().to_owned()).unwrap_or_default(),
                reason: e.reason,
            })
            .collect(),
    }
}

/// Load parameters from a `RepositoryModelLoadRequest`: `config` (string) and `file:<path>` (bytes).
pub fn load_parameters_from_proto(
    params: HashMap<String, pb::ModelRepositoryParameter>,
) -> Result<LoadParameters, ServeError> {
    let mut out = LoadParameters::default();
    for (key, value) in params {
        match (key.as_str(), value.parameter_choice) {
            ("config", Some(RepoChoice::StringParam(s))) => out.config = Some(s),
            ("config", _) => {
                return Err(ServeError::invalid_argument(
                    "load parameter 'config' must be a string_param holding the config as JSON",
                ));
            }
            (k, Some(RepoChoice::BytesParam(b))) if k.starts_with("file:") => {
                out.files.insert(k["file:".len()..].to_owned(), b.to_vec());
            }
            (k, _) if k.starts_with("file:") => {
                return Err(ServeError::invalid_argument(format!(
                    "load parameter '{k}' must be a bytes_param holding the file's contents"
                )));
            }
            (k, _) => {
                return Err(ServeError::invalid_argument(format!(
                    "unknown load parameter '{k}' (expected 'config' or 'file:<path in the model folder>')"
                )));
            }
        }
    }
    check_files(&out)?;
    Ok(out)
}

/// The `unload_dependents` flag of a `RepositoryModelUnloadRequest`.
pub fn unload_dependents_from_proto(
    params: &HashMap<String, pb::ModelRepositoryParameter>,
) -> Result<bool, ServeError> {
    match params
        .get("unload_dependents")
        .and_then(|p| p.parameter_choice.as_ref())
    {
        None => Ok(false),
        Some(RepoChoice::BoolParam(b)) => Ok(*b),
        Some(_) => Err(ServeError::invalid_argument(
            "Unable to parse 'unload_dependents': expected a bool_param",
        )),
    }
}

fn parameter_from_proto(p: pb::InferParameter) -> Parameter {
    match p.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Parameter::Bool(b),
        Some(ParameterChoice::Int64Param(i)) => Parameter::Int64(i),
        Some(ParameterChoice::StringParam(s)) => Parameter::String(s),
        Some(ParameterChoice::DoubleParam(d)) => Parameter::Double(d),
        Some(ParameterChoice::Uint64Param(u)) => Parameter::Uint64(u),
        None => Parameter::String(String::new()),
    }
}

fn parameters_from_proto(p: HashMap<String, pb::InferParameter>) -> Parameters {
    p.into_iter().map(|(k, v)| (k, parameter_from_proto(v))).collect()
}

fn parameters_to_proto(p: Parameters) -> HashMap<String, pb::InferParameter> {
    p.into_iter()
        .map(|(k, v)| {
            let choice = match v {
                Parameter::Bool(b) => ParameterChoice::BoolParam(b),
                Parameter::Int64(i) => ParameterChoice::Int64Param(i),
                Parameter::Uint64(u) => ParameterChoice::Uint64Param(u),
                Parameter::Double(d) => ParameterChoice::DoubleParam(d),
                Parameter::String(s) => ParameterChoice::StringParam(s),
            };
            (
                k,
                pb::InferParameter {
                    parameter_choice: Some(choice),
                },
            )
        })
        .collect()
}

fn unsigned_param(key: &str, p: &pb::InferParameter) -> Result<u64, ServeError> {
    match p.parameter_choice {
        Some(ParameterChoice::Uint64Param(u)) => Ok(u),
        Some(ParameterChoice::Int64Param(i)) if i >= 0 => Ok(i as u64),
        _ => Err(ServeError::invalid_argument(format!(
            "Unable to parse '{key}': expected a non-negative int64_param or uint64_param"
        ))),
    }
}

fn contents_empty(c: &pb::InferTensorContents) -> bool {
    c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty()
}

/// Which typed field holds which datatype (named in errors).
fn field_for(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bool => "bool_contents",
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "int_contents",
        DataType::Int64 => "int64_contents",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "uint_contents",
        DataType::Uint64 => "uint64_contents",
        DataType::Fp32 => "fp32_contents",
        DataType::Fp64 => "fp64_contents",
        DataType::Bytes => "bytes_contents",
        DataType::Fp16 | DataType::Bf16 => "raw_input_contents",
    }
}

fn field_lengths(c: &pb::InferTensorContents) -> [(&'static str, usize); 8] {
    [
        ("bool_contents", c.bool_contents.len()),
        ("int_contents", c.int_contents.len()),
        ("int64_contents", c.int64_contents.len()),
        ("uint_contents", c.uint_contents.len()),
        ("uint64_contents", c.uint64_contents.len()),
        ("fp32_contents", c.fp32_contents.len()),
        ("fp64_contents", c.fp64_contents.len()),
        ("bytes_contents", c.bytes_contents.len()),
    ]
}

/// Converts typed contents into little-endian bytes, checking the field, the count and value ranges.
fn typed_contents_to_bytes(
    what: &str,
    datatype: DataType,
    count: usize,
    c: pb::InferTensorContents,
) -> Result<Bytes, ServeError> {
    let field = field_for(datatype);
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return Err(ServeError::invalid_argument(format!(
            "{what}: {datatype} has no typed contents field; send it in raw_input_contents"
        )));
    }
    if let Some((other, n)) = field_lengths(&c).into_iter().find(|(f, n)| *f != field && *n > 0) {
        return Err(ServeError::invalid_argument(format!(
            "{what} is {datatype} but its data is in {other} ({n} values); {datatype} values go in {field}"
        )));
    }
    let got = field_lengths(&c)
        .into_iter()
        .find(|(f, _)| *f == field)
        .map_or(0, |(_, n)| n);
    if got != count {
        return Err(ServeError::invalid_argument(format!(
            "{what}: the shape has {count} elements but {field} holds {got}"
        )));
    }
    let range = |v: String| {
        ServeError::invalid_argument(format!("{what}: value {v} in {field} does not fit {datatype}"))
    };
    let mut out = BytesMut::with_capacity(count * datatype.element_size().unwrap_or(8));
    match datatype {
        DataType::Bool => c.bool_contents.iter().for_each(|b| out.put_u8(u8::from(*b))),
        DataType::Int8 => {
            for v in c.int_contents {
                out.put_i8(i8::try_from(v).map_err(|_| range(v.to_string()))?);
            }
        }
        DataType::Int16 => {
            for v in c.int_contents {
                out.put_i16_le(i16::try_from(v).map_err(|_| range(v.to_string()))?);
            }
        }
        DataType::Int32 => c.int_contents.iter().for_each(|v| out.put_i32_le(*v)),
        DataType::Int64 => c.int64_contents.iter().for_each(|v| out.put_i64_le(*v)),
        DataType::Uint8 => {
            for v in c.uint_contents {
                out.put_u8(u8::try_from(v).map_err(|_| range(v.to_string()))?);
            }
        }
        DataType::Uint16 => {
            for v in c.uint_contents {
                out.put_u16_le(u16::try_from(v).map_err(|_| range(v.to_string()))?);
            }
        }
        DataType::Uint32 => c.uint_contents.iter().for_each(|v| out.put_u32_le(*v)),
        DataType::Uint64 => c.uint64_contents.iter().for_each(|v| out.put_u64_le(*v)),
        DataType::Fp32 => c.fp32_contents.iter().for_each(|v| out.put_f32_le(*v)),
        DataType::Fp64 => c.fp64_contents.iter().for_each(|v| out.put_f64_le(*v)),
        DataType::Bytes => c
            .bytes_contents
            .iter()
            .for_each(|b| put_bytes_element(&mut out, b)),
        DataType::Fp16 | DataType::Bf16 => {}
    }
    Ok(out.freeze())
}

//! Request bodies: built from a model's metadata (`GET /v2/models/<m>`) with deterministic values, or replayed
//! from recorded request files. One payload yields the REST form (JSON or binary tensors) and the gRPC form.

use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};
use infergate_protocol::grpc::pb;
use infergate_protocol::{DataType, ModelMetadata};
use serde_json::{Value, json};
use thiserror::Error;

/// How REST request bodies are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PayloadKind {
    /// `{"inputs":[{"name":..,"data":[..]}]}`.
    #[default]
    Json,
    /// The binary-tensor extension: a JSON header, then the raw tensor bytes.
    Binary,
}

/// A REST body with the length of its JSON header when it carries binary tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct RestBody {
    /// The body.
    pub bytes: Bytes,
    /// `inference-header-content-length`, for binary bodies.
    pub header_len: Option<usize>,
}

/// What the load sends for one model: REST bodies and gRPC requests, used in turn.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The model the requests name.
    pub model: String,
    /// REST bodies.
    pub rest: Vec<RestBody>,
    /// gRPC requests (empty when replaying REST files).
    pub grpc: Vec<pb::ModelInferRequest>,
}

/// Why a payload could not be made.
#[derive(Debug, Error)]
pub enum PayloadError {
    /// An input's type has no JSON form.
    #[error(
        "model '{model}' input '{input}': {datatype} tensors cannot travel as JSON; use --payload binary (or `payload: binary` in the case)"
    )]
    NoJson {
        /// Model.
        model: String,
        /// Input.
        input: String,
        /// Its type.
        datatype: DataType,
    },
    /// A shape with a variable dimension other than the batch one.
    #[error(
        "model '{model}' input '{input}': shape {shape:?} has a variable dimension past the first; record a request and replay it (--replay DIR)"
    )]
    VariableShape {
        /// Model.
        model: String,
        /// Input.
        input: String,
        /// Its shape.
        shape: Vec<i64>,
    },
    /// A replay folder could not be read.
    #[error("replay folder {path}: {source} (it should hold *.json and *.bin request bodies)")]
    Read {
        /// Folder or file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A replay file is not a KServe request.
    #[error("replay file {path}: {reason}")]
    Replay {
        /// File.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Payload {
    /// The `i`-th REST body (requests cycle through them).
    pub fn rest(&self, i: u64) -> &RestBody {
        &self.rest[(i % self.rest.len() as u64) as usize]
    }

    /// The `i`-th gRPC request, when there are any.
    pub fn grpc(&self, i: u64) -> Option<&pb::ModelInferRequest> {
        if self.grpc.is_empty() {
            None
        } else {
            Some(&self.grpc[(i % self.grpc.len() as u64) as usize])
        }
    }

    /// Builds one request per the model's metadata, `batch` samples deep when the first dimension is variable.
    pub fn from_metadata(
        meta: &ModelMetadata,
        batch: usize,
        kind: PayloadKind,
    ) -> Result<Self, PayloadError> {
        let mut json_inputs = Vec::new();
        let mut header_inputs = Vec::new();
        let mut raw = BytesMut::new();
        let mut grpc_inputs = Vec::new();
        let mut grpc_raw = Vec::new();
        for input in &meta.inputs {
            let shape: Vec<i64> = input
                .shape
                .iter()
                .enumerate()
                .map(|(i, d)| match (*d, i) {
                    (-1, 0) => Ok(batch as i64),
                    (d, _) if d >= 0 => Ok(d),
                    _ => Err(PayloadError::VariableShape {
                        model: meta.name.clone(),
                        input: input.name.clone(),
                        shape: input.shape.clone(),
                    }),
                })
                .collect::<Result<_, _>>()?;
            let count: usize = shape.iter().map(|d| *d as usize).product();
            let bytes = tensor_bytes(input.datatype, count);
            if kind == PayloadKind::Json {
                let data = json_values(input.datatype, count).ok_or_else(|| PayloadError::NoJson {
                    model: meta.name.clone(),
                    input: input.name.clone(),
                    datatype: input.datatype,
                })?;
                json_inputs.push(json!({
                    "name": input.name, "shape": shape, "datatype": input.datatype.as_str(), "data": data,
                }));
            } else {
                header_inputs.push(json!({
                    "name": input.name, "shape": shape, "datatype": input.datatype.as_str(),
                    "parameters": { "binary_data_size": bytes.len() },
                }));
                raw.put_slice(&bytes);
            }
            grpc_inputs.push(pb::model_infer_request::InferInputTensor {
                name: input.name.clone(),
                datatype: input.datatype.as_str().to_owned(),
                shape: shape.clone(),
                ..Default::default()
            });
            grpc_raw.push(Bytes::from(bytes));
        }
        let rest = match kind {
            PayloadKind::Json => RestBody {
                bytes: Bytes::from(json!({ "inputs": json_inputs }).to_string()),
                header_len: None,
            },
            PayloadKind::Binary => {
                let header = json!({ "inputs": header_inputs }).to_string();
                let mut body = BytesMut::with_capacity(header.len() + raw.len());
                body.put_slice(header.as_bytes());
                body.put_slice(&raw);
                RestBody {
                    header_len: Some(header.len()),
                    bytes: body.freeze(),
                }
            }
        };
        let grpc = pb::ModelInferRequest {
            model_name: meta.name.clone(),
            inputs: grpc_inputs,
            raw_input_contents: grpc_raw,
            ..Default::default()
        };
        Ok(Self {
            model: meta.name.clone(),
            rest: vec![rest],
            grpc: vec![grpc],
        })
    }

    /// Reads recorded REST bodies from `dir`: `*.json` files are sent as they are; `*.bin` files are a JSON
    /// header followed by binary tensors (the header's length is found by parsing it).
    pub fn replay(model: &str, dir: &Path) -> Result<Self, PayloadError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| PayloadError::Read {
                path: p.to_owned(),
                source,
            })
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| PayloadError::Read {
                path: dir.to_owned(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "bin")))
            .collect();
        files.sort();
        let mut rest = Vec::new();
        for path in files {
            let bytes = read(&path)?;
            let mut stream = serde_json::Deserializer::from_slice(&bytes).into_iter::<Value>();
            let header = match stream.next() {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    return Err(PayloadError::Replay {
                        path,
                        reason: format!("the body does not start with a JSON object: {e}"),
                    });
                }
                None => {
                    return Err(PayloadError::Replay {
                        path,
                        reason: "the file is empty".into(),
                    });
                }
            };
            if header.get("inputs").and_then(Value::as_array).is_none() {
                return Err(PayloadError::Replay {
                    path,
                    reason: "the JSON has no \"inputs\" array: is this a KServe V2 infer request?".into(),
                });
            }
            let end = stream.byte_offset();
            let binary = path.extension().and_then(|e| e.to_str()) == Some("bin");
            rest.push(RestBody {
                header_len: binary.then_some(end),
                bytes: Bytes::from(bytes),
            });
        }
        if rest.is_empty() {
            return Err(PayloadError::Replay {
                path: dir.to_owned(),
                reason: "no *.json or *.bin request files in the folder".into(),
            });
        }
        Ok(Self {
            model: model.to_owned(),
            rest,
            grpc: Vec::new(),
        })
    }
}

/// Element `i`'s value: small, varied and exactly representable in every type.
fn value(i: usize) -> u8 {
    (i % 7) as u8
}

fn tensor_bytes(dt: DataType, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dt.element_size().unwrap_or(5));
    for i in 0..count {
        let v = value(i);
        match dt {
            DataType::Bool => out.push(v % 2),
            DataType::Uint8 | DataType::Int8 => out.push(v),
            DataType::Uint16 | DataType::Int16 => out.extend_from_slice(&u16::from(v).to_le_bytes()),
            DataType::Uint32 | DataType::Int32 => out.extend_from_slice(&u32::from(v).to_le_bytes()),
            DataType::Uint64 | DataType::Int64 => out.extend_from_slice(&u64::from(v).to_le_bytes()),
            // Half and bfloat16 of small integers: exact bit patterns computed from f32.
            DataType::Fp16 => out.extend_from_slice(&f32_to_f16_bits(f32::from(v)).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&((f32::from(v).to_bits() >> 16) as u16).to_le_bytes()),
            DataType::Fp32 => out.extend_from_slice(&(f32::from(v) * 0.25).to_le_bytes()),
            DataType::Fp64 => out.extend_from_slice(&(f64::from(v) * 0.25).to_le_bytes()),
            DataType::Bytes => {
                out.extend_from_slice(&1u32.to_le_bytes());
                out.push(b'a' + v);
            }
        }
    }
    out
}

/// f32 → IEEE half for the small non-negative integers [`value`] yields (no rounding needed).
fn f32_to_f16_bits(x: f32) -> u16 {
    if x == 0.0 {
        return 0;
    }
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = (bits >> 13) & 0x3ff;
    ((exp as u32) << 10 | mant) as u16
}

fn json_values(dt: DataType, count: usize) -> Option<Vec<Value>> {
    let v = |i: usize| -> Option<Value> {
        let x = value(i);
        Some(match dt {
            DataType::Bool => json!(x % 2 == 1),
            DataType::Fp32 | DataType::Fp64 => json!(f64::from(x) * 0.25),
            DataType::Bytes => json!(((b'a' + x) as char).to_string()),
            DataType::Fp16 | DataType::Bf16 => return None,
            _ => json!(x),
        })
    };
    (0..count).map(v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_protocol::TensorMetadata;

    fn meta() -> ModelMetadata {
        ModelMetadata {
            name: "m".into(),
            versions: vec!["1".into()],
            platform: "onnxruntime_onnx".into(),
            inputs: vec![TensorMetadata {
                name: "x".into(),
                datatype: DataType::Fp32,
                shape: vec![-1, 4],
            }],
            outputs: vec![],
        }
    }

    #[test]
    fn json_and_binary_bodies_carry_the_batch_and_the_same_values() {
        let j = Payload::from_metadata(&meta(), 2, PayloadKind::Json).unwrap();
        let v: Value = serde_json::from_slice(&j.rest[0].bytes).unwrap();
        assert_eq!(v["inputs"][0]["shape"], json!([2, 4]));
        assert_eq!(v["inputs"][0]["data"].as_array().unwrap().len(), 8);
        let b = Payload::from_metadata(&meta(), 2, PayloadKind::Binary).unwrap();
        let hl = b.rest[0].header_len.unwrap();
        let h: Value = serde_json::from_slice(&b.rest[0].bytes[..hl]).unwrap();
        assert_eq!(h["inputs"][0]["parameters"]["binary_data_size"], json!(32));
        assert_eq!(b.rest[0].bytes.len() - hl, 32);
        let third = f32::from_le_bytes(b.rest[0].bytes[hl + 8..hl + 12].try_into().unwrap());
        assert_eq!(json!(third), v["inputs"][0]["data"][2]);
        assert_eq!(b.grpc[0].raw_input_contents[0].len(), 32);
    }

    #[test]
    fn half_precision_refuses_json_naming_the_fix() {
        let mut m = meta();
        m.inputs[0].datatype = DataType::Fp16;
        let err = Payload::from_metadata(&m, 1, PayloadKind::Json).unwrap_err();
        assert!(err.to_string().contains("--payload binary"), "{err}");
        let b = Payload::from_metadata(&m, 1, PayloadKind::Binary).unwrap();
        // 3.0 as IEEE half is 0x4200.
        let hl = b.rest[0].header_len.unwrap();
        assert_eq!(&b.rest[0].bytes[hl + 6..hl + 8], &0x4200u16.to_le_bytes());
    }

    #[test]
    fn replayed_binary_files_get_their_header_length() {
        let dir = tempfile::tempdir().unwrap();
        let header = r#"{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#;
        let mut body = header.as_bytes().to_vec();
        body.extend_from_slice(&1.5f32.to_le_bytes());
        std::fs::write(dir.path().join("a.bin"), &body).unwrap();
        std::fs::write(dir.path().join("b.json"), r#"{"inputs":[]}"#).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let p = Payload::replay("m", dir.path()).unwrap();
        assert_eq!(p.rest.len(), 2);
        assert_eq!(p.rest[0].header_len, Some(header.len()));
        assert_eq!(p.rest[1].header_len, None);
        std::fs::write(dir.path().join("c.json"), r#"{"outputs":[]}"#).unwrap();
        let err = Payload::replay("m", dir.path()).unwrap_err();
        assert!(err.to_string().contains("c.json"), "{err}");
    }
}

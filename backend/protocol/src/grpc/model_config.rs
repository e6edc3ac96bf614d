//! Triton's model configuration, from its JSON form (what `/v2/models/{m}/config` returns) to the
//! `ModelConfig` protobuf message of the `ModelConfig` gRPC call.

use serde_json::{Map, Value};

use super::pb;
use crate::datatype::DataType;
use crate::error::ServeError;

/// Converts a model configuration in Triton's JSON form (proto field names; 64-bit integers as numbers
/// or strings) into the protobuf message. Fields outside infergate's subset are ignored; a field of the
/// wrong type is an internal error naming it (the config came from the server itself).
pub fn model_config_to_proto(config: &Value) -> Result<pb::ModelConfig, ServeError> {
    let c = object(config, "config")?;
    let mut out = pb::ModelConfig {
        name: string(c, "name")?,
        platform: string(c, "platform")?,
        backend: string(c, "backend")?,
        runtime: string(c, "runtime")?,
        max_batch_size: int(c, "max_batch_size")? as i32,
        default_model_filename: string(c, "default_model_filename")?,
        ..pb::ModelConfig::default()
    };
    if let Some(v) = c.get("version_policy") {
        let v = object(v, "version_policy")?;
        let choice = if let Some(l) = v.get("latest") {
            pb::model_version_policy::PolicyChoice::Latest(pb::model_version_policy::Latest {
                num_versions: int(object(l, "version_policy.latest")?, "num_versions")? as u32,
            })
        } else if v.contains_key("all") {
            pb::model_version_policy::PolicyChoice::All(pb::model_version_policy::All {})
        } else if let Some(s) = v.get("specific") {
            pb::model_version_policy::PolicyChoice::Specific(pb::model_version_policy::Specific {
                versions: ints(object(s, "version_policy.specific")?, "versions")?,
            })
        } else {
            return Err(bad("version_policy", "one of latest, all, specific"));
        };
        out.version_policy = Some(pb::ModelVersionPolicy {
            policy_choice: Some(choice),
        });
    }
    for (i, v) in array(c, "input")?.iter().enumerate() {
        let what = format!("input[{i}]");
        let o = object(v, &what)?;
        out.input.push(pb::ModelInput {
            name: string(o, "name")?,
            data_type: data_type(o, "data_type")?,
            format: match string(o, "format")?.as_str() {
                "FORMAT_NHWC" => pb::model_input::Format::Nhwc as i32,
                "FORMAT_NCHW" => pb::model_input::Format::Nchw as i32,
                _ => pb::model_input::Format::None as i32,
            },
            dims: ints(o, "dims")?,
            reshape: reshape(o)?,
            is_shape_tensor: boolean(o, "is_shape_tensor")?,
            allow_ragged_batch: boolean(o, "allow_ragged_batch")?,
            optional: boolean(o, "optional")?,
        });
    }
    for (i, v) in array(c, "output")?.iter().enumerate() {
        let o = object(v, &format!("output[{i}]"))?;
        out.output.push(pb::ModelOutput {
            name: string(o, "name")?,
            data_type: data_type(o, "data_type")?,
            dims: ints(o, "dims")?,
            label_filename: string(o, "label_filename")?,
            reshape: reshape(o)?,
            is_shape_tensor: boolean(o, "is_shape_tensor")?,
        });
    }
    for (i, v) in array(c, "instance_group")?.iter().enumerate() {
        let o = object(v, &format!("instance_group[{i}]"))?;
        use pb::model_instance_group::Kind;
        out.instance_group.push(pb::ModelInstanceGroup {
            name: string(o, "name")?,
            count: int(o, "count")? as i32,
            gpus: ints(o, "gpus")?.into_iter().map(|g| g as i32).collect(),
            kind: match string(o, "kind")?.as_str() {
                "KIND_GPU" => Kind::Gpu as i32,
                "KIND_CPU" => Kind::Cpu as i32,
                "KIND_MODEL" => Kind::Model as i32,
                _ => Kind::Auto as i32,
            },
            profile: strings(o, "profile")?,
            passive: boolean(o, "passive")?,
            host_policy: string(o, "host_policy")?,
        });
    }
    if let Some(d) = c.get("dynamic_batching") {
        let d = object(d, "dynamic_batching")?;
        let mut priority_queue_policy = std::collections::HashMap::new();
        if let Some(p) = d.get("priority_queue_policy") {
            for (k, v) in object(p, "dynamic_batching.priority_queue_policy")? {
                let level: u64 = k
                    .parse()
                    .map_err(|_| bad("dynamic_batching.priority_queue_policy", "numeric keys"))?;
                priority_queue_policy.insert(level, queue_policy(v)?);
            }
        }
        out.scheduling_choice = Some(pb::model_config::SchedulingChoice::DynamicBatching(
            pb::ModelDynamicBatching {
                preferred_batch_size: ints(d, "preferred_batch_size")?
                    .into_iter()
                    .map(|b| b as i32)
                    .collect(),
                max_queue_delay_microseconds: int(d, "max_queue_delay_microseconds")? as u64,
                preserve_ordering: boolean(d, "preserve_ordering")?,
                priority_levels: int(d, "priority_levels")? as u64,
                default_priority_level: int(d, "default_priority_level")? as u64,
                default_queue_policy: d.get("default_queue_policy").map(queue_policy).transpose()?,
                priority_queue_policy,
            },
        ));
    } else if let Some(s) = c.get("sequence_batching") {
        let s = object(s, "sequence_batching")?;
        out.scheduling_choice = Some(pb::model_config::SchedulingChoice::SequenceBatching(
            pb::ModelSequenceBatching {
                max_sequence_idle_microseconds: int(s, "max_sequence_idle_microseconds")? as u64,
            },
        ));
    }
    if let Some(p) = c.get("parameters") {
        for (k, v) in object(p, "parameters")? {
            let string_value = match v {
                Value::String(s) => s.clone(),
                Value::Object(o) => string(o, "string_value")?,
                _ => return Err(bad("parameters", "objects with a string_value")),
            };
            out.parameters
                .insert(k.clone(), pb::ModelParameter { string_value });
        }
    }
    for (i, v) in array(c, "model_warmup")?.iter().enumerate() {
        let w = object(v, &format!("model_warmup[{i}]"))?;
        let mut inputs = std::collections::HashMap::new();
        if let Some(ins) = w.get("inputs") {
            for (name, input) in object(ins, "model_warmup.inputs")? {
                let o = object(input, "model_warmup.inputs")?;
                use pb::model_warmup::input::InputDataType;
                let data = if boolean(o, "zero_data")? {
                    Some(InputDataType::ZeroData(true))
                } else if boolean(o, "random_data")? {
                    Some(InputDataType::RandomData(true))
                } else {
                    Some(string(o, "input_data_file")?)
                        .filter(|f| !f.is_empty())
                        .map(InputDataType::InputDataFile)
                };
                inputs.insert(
                    name.clone(),
                    pb::model_warmup::Input {
                        data_type: data_type(o, "data_type")?,
                        dims: ints(o, "dims")?,
                        input_data_type: data,
                    },
                );
            }
        }
        out.model_warmup.push(pb::ModelWarmup {
            name: string(w, "name")?,
            batch_size: int(w, "batch_size")? as u32,
            inputs,
            count: int(w, "count")? as u32,
        });
    }
    if let Some(t) = c.get("model_transaction_policy") {
        out.model_transaction_policy = Some(pb::ModelTransactionPolicy {
            decoupled: boolean(object(t, "model_transaction_policy")?, "decoupled")?,
        });
    }
    if let Some(r) = c.get("response_cache") {
        out.response_cache = Some(pb::ModelResponseCache {
            enable: boolean(object(r, "response_cache")?, "enable")?,
        });
    }
    for (field, map) in [
        ("cc_model_filenames", &mut out.cc_model_filenames),
        ("metric_tags", &mut out.metric_tags),
    ] {
        if let Some(m) = c.get(field) {
            for (k, v) in object(m, field)? {
                map.insert(
                    k.clone(),
                    v.as_str().ok_or_else(|| bad(field, "string values"))?.to_owned(),
                );
            }
        }
    }
    Ok(out)
}

fn queue_policy(v: &Value) -> Result<pb::ModelQueuePolicy, ServeError> {
    let q = object(v, "queue_policy")?;
    Ok(pb::ModelQueuePolicy {
        timeout_action: match string(q, "timeout_action")?.as_str() {
            "DELAY" => pb::model_queue_policy::TimeoutAction::Delay as i32,
            _ => pb::model_queue_policy::TimeoutAction::Reject as i32,
        },
        default_timeout_microseconds: int(q, "default_timeout_microseconds")? as u64,
        allow_timeout_override: boolean(q, "allow_timeout_override")?,
        max_queue_size: int(q, "max_queue_size")? as u32,
    })
}

fn reshape(o: &Map<String, Value>) -> Result<Option<pb::ModelTensorReshape>, ServeError> {
    o.get("reshape")
        .map(|r| {
            Ok(pb::ModelTensorReshape {
                shape: ints(object(r, "reshape")?, "shape")?,
            })
        })
        .transpose()
}

fn bad(field: &str, expected: &str) -> ServeError {
    ServeError::internal(format!("model config field '{field}' is not {expected}"))
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, ServeError> {
    v.as_object().ok_or_else(|| bad(field, "an object"))
}

fn array<'a>(o: &'a Map<String, Value>, field: &str) -> Result<&'a [Value], ServeError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(bad(field, "an array")),
    }
}

fn string(o: &Map<String, Value>, field: &str) -> Result<String, ServeError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(bad(field, "a string")),
    }
}

fn strings(o: &Map<String, Value>, field: &str) -> Result<Vec<String>, ServeError> {
    array(o, field)?
        .iter()
        .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(field, "strings")))
        .collect()
}

fn boolean(o: &Map<String, Value>, field: &str) -> Result<bool, ServeError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(field, "a boolean")),
    }
}

/// An integer given as a JSON number or, as protobuf's JSON mapping writes 64-bit values, a string.
fn int_value(v: &Value, field: &str) -> Result<i64, ServeError> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u as i64))
            .ok_or_else(|| bad(field, "an integer")),
        Value::String(s) => s.parse().map_err(|_| bad(field, "an integer")),
        _ => Err(bad(field, "an integer")),
    }
}

fn int(o: &Map<String, Value>, field: &str) -> Result<i64, ServeError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => int_value(v, field),
    }
}

fn ints(o: &Map<String, Value>, field: &str) -> Result<Vec<i64>, ServeError> {
    array(o, field)?.iter().map(|v| int_value(v, field)).collect()
}

fn data_type(o: &Map<String, Value>, field: &str) -> Result<i32, ServeError> {
    let s = string(o, field)?;
    if s.is_empty() || s == "TYPE_INVALID" {
        return Ok(pb::DataType::TypeInvalid as i32);
    }
    let d = DataType::from_config_str(&s).ok_or_else(|| bad(field, "a TYPE_* data type"))?;
    Ok(match d {
        DataType::Bool => pb::DataType::TypeBool,
        DataType::Uint8 => pb::DataType::TypeUint8,
        DataType::Uint16 => pb::DataType::TypeUint16,
        DataType::Uint32 => pb::DataType::TypeUint32,
        DataType::Uint64 => pb::DataType::TypeUint64,
        DataType::Int8 => pb::DataType::TypeInt8,
        DataType::Int16 => pb::DataType::TypeInt16,
        DataType::Int32 => pb::DataType::TypeInt32,
        DataType::Int64 => pb::DataType::TypeInt64,
        DataType::Fp16 => pb::DataType::TypeFp16,
        DataType::Bf16 => pb::DataType::TypeBf16,
        DataType::Fp32 => pb::DataType::TypeFp32,
        DataType::Fp64 => pb::DataType::TypeFp64,
        DataType::Bytes => pb::DataType::TypeString,
    } as i32)
}

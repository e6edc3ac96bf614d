//! Where a model's config comes from (file, load-request override, or auto-complete from the ONNX
//! signature) and its conversion into the typed [`ModelSpec`] the server runs with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use infergate_config::{
    DataType as ConfigType, DynamicBatching, InstanceKind as ConfigKind, ModelConfig, ModelInput,
    ModelOutput, QueuePolicy as ConfigQueuePolicy, TimeoutAction as ConfigTimeoutAction,
    VersionPolicy as ConfigPolicy, load_model_config, load_model_yaml,
};
use infergate_engine::{Dim, Signature};
use infergate_protocol::DataType;

use crate::batcher::{AdaptiveConfig, BatcherConfig, QueuePolicy, TimeoutAction};
use crate::convert::protocol_dtype;
use crate::spec::{
    INTRA_OP_THREADS_PARAMETER, InstanceGroup, InstanceKind, IoSpec, ModelSpec, VersionPolicy, WarmupData,
    WarmupInput, WarmupSample,
};
use crate::{confine, warmup};

/// The model parameter that turns on adaptive batching: the p99 latency target in microseconds.
pub const ADAPTIVE_P99_PARAMETER: &str = "infergate.adaptive_p99_us";

/// `max_batch_size` given to auto-completed models whose tensors all start with a dynamic dimension
/// (Triton's ONNX Runtime backend default, `default-max-batch-size=4`).
pub const AUTOCOMPLETE_MAX_BATCH_SIZE: i32 = 4;

/// Config file names, in the order they are looked for.
pub const CONFIG_FILES: [&str; 3] = ["config.pbtxt", "config.yaml", "config.yml"];

/// Server-wide settings that shape every model's spec.
#[derive(Debug, Clone, Default)]
pub struct SpecDefaults {
    /// Cap on every priority level's queue (0 = as configured). A config's own non-zero
    /// `max_queue_size` wins when it is smaller.
    pub max_queue_size: usize,
}

/// A config file found in a model folder.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Its path.
    pub path: PathBuf,
    /// The parsed config.
    pub config: ModelConfig,
    /// Warnings (each `file:line:column: message`).
    pub warnings: Vec<String>,
}

/// Reads `config.pbtxt` (or `config.yaml`) from a model folder; `Ok(None)` when there is none. The
/// error lists every problem with its position.
pub fn read_config_file(model_dir: &Path, name: &str) -> Result<Option<ConfigFile>, String> {
    let Some(path) = CONFIG_FILES
        .iter()
        .map(|f| model_dir.join(f))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut loaded = load_model_config(&text, &path).map_err(|d| d.to_string().trim_end().to_string())?;
    loaded.check_folder_name(name, &path).map_err(|d| d.to_string())?;
    check_support(&loaded.config, &path)?;
    let warnings = loaded.warnings.iter().map(|w| w.to_string()).collect();
    Ok(Some(ConfigFile {
        path,
        config: loaded.config,
        warnings,
    }))
}

/// Parses the `config` parameter of a repository load request (Triton's config as JSON).
pub fn parse_override(text: &str, name: &str) -> Result<ModelConfig, String> {
    // JSON is YAML: the YAML reader gives positions and the same validation as config files.
    let file = Path::new("<load request config>");
    let mut loaded = load_model_yaml(text, file).map_err(|d| d.to_string().trim_end().to_string())?;
    loaded.check_folder_name(name, file).map_err(|d| d.to_string())?;
    check_support(&loaded.config, file)?;
    Ok(loaded.config)
}

fn check_support(c: &ModelConfig, file: &Path) -> Result<(), String> {
    let d = c.support_diagnostics(file, None);
    let mut errors: Vec<String> = d.errors().map(|e| e.to_string()).collect();
    errors.extend(
        file_paths(c)
            .filter_map(|(what, rel)| confine::check_relative(rel, &what).err())
            .map(|e| format!("{}: model '{}': {e}", file.display(), c.name)),
    );
    for w in d.warnings() {
        tracing::warn!(model = %c.name, "{w}");
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The files a config names, each with the setting that names it: they must stay inside the model
/// folder whoever wrote the config (a load request's override included).
fn file_paths(c: &ModelConfig) -> impl Iterator<Item = (String, &str)> {
    let model_file = (!c.default_model_filename.is_empty()).then(|| {
        (
            "default_model_filename".to_string(),
            c.default_model_filename.as_str(),
        )
    });
    let warmup_files = c.model_warmup.iter().flat_map(|w| {
        w.inputs
            .iter()
            .filter(|(_, i)| !i.input_data_file.is_empty())
            .map(move |(n, i)| {
                (
                    format!("warmup '{}' input '{n}' input_data_file", w.name),
                    i.input_data_file.as_str(),
                )
            })
    });
    model_file.into_iter().chain(warmup_files)
}

/// Whether a config needs the ONNX signature to be complete (no inputs or no outputs).
pub fn needs_autocomplete(config: Option<&ModelConfig>) -> bool {
    config.is_none_or(|c| c.input.is_empty() || c.output.is_empty())
}

/// Completes a config from the ONNX signature, as Triton's auto-complete does: with no config at all,
/// the model batches (`max_batch_size` 4, `dynamic_batching` on) when every input and output starts with a
/// dynamic dimension, else `max_batch_size` is 0 and dims are exact; missing inputs/outputs are filled in.
pub fn autocomplete(config: Option<ModelConfig>, name: &str, sig: &Signature) -> Result<ModelConfig, String> {
    let fresh = config.is_none();
    let mut c = config.unwrap_or_else(|| ModelConfig {
        name: name.to_string(),
        platform: "onnxruntime_onnx".to_string(),
        ..ModelConfig::default()
    });
    if fresh {
        let all_batched = sig
            .inputs
            .iter()
            .chain(&sig.outputs)
            .all(|t| matches!(t.dims.first(), Some(Dim::Dynamic(_))));
        if all_batched && !sig.inputs.is_empty() {
            c.max_batch_size = AUTOCOMPLETE_MAX_BATCH_SIZE;
            c.dynamic_batching = Some(DynamicBatching::default());
        }
    }
    let batched = c.max_batch_size > 0;
    let dims_of = |t: &infergate_engine::TensorSpec| -> Result<Vec<i64>, String> {
        let d = t.dims_i64();
        if !batched {
            return Ok(d);
        }
        match t.dims.first() {
            Some(Dim::Dynamic(_)) | Some(Dim::Fixed(1)) => Ok(d[1..].to_vec()),
            _ => Err(format!(
                "cannot auto-complete tensor '{}': max_batch_size is {} but its first dimension is not a \
                 batch dimension ({:?}); write the inputs and outputs in config.pbtxt",
                t.name,
                c.max_batch_size,
                t.dims_i64()
            )),
        }
    };
    let config_type = |t: &infergate_engine::TensorSpec| -> Result<ConfigType, String> {
        let d = protocol_dtype(t.dtype);
        config_type_of(d).ok_or_else(|| {
            format!(
                "tensor '{}' has type {d}, which a model config cannot express",
                t.name
            )
        })
    };
    if c.input.is_empty() {
        for t in &sig.inputs {
            c.input.push(ModelInput {
                name: t.name.clone(),
                data_type: config_type(t)?,
                dims: dims_of(t)?,
                ..ModelInput::default()
            });
        }
    }
    if c.output.is_empty() {
        for t in &sig.outputs {
            c.output.push(ModelOutput {
                name: t.name.clone(),
                data_type: config_type(t)?,
                dims: dims_of(t)?,
                ..ModelOutput::default()
            });
        }
    }
    Ok(c)
}

fn config_type_of(d: DataType) -> Option<ConfigType> {
    Some(match d {
        DataType::Bool => ConfigType::TYPE_BOOL,
        DataType::Uint8 => ConfigType::TYPE_UINT8,
        DataType::Uint16 => ConfigType::TYPE_UINT16,
        DataType::Uint32 => ConfigType::TYPE_UINT32,
        DataType::Uint64 => ConfigType::TYPE_UINT64,
        DataType::Int8 => ConfigType::TYPE_INT8,
        DataType::Int16 => ConfigType::TYPE_INT16,
        DataType::Int32 => ConfigType::TYPE_INT32,
        DataType::Int64 => ConfigType::TYPE_INT64,
        DataType::Fp16 => ConfigType::TYPE_FP16,
        DataType::Bf16 => ConfigType::TYPE_BF16,
        DataType::Fp32 => ConfigType::TYPE_FP32,
        DataType::Fp64 => ConfigType::TYPE_FP64,
        DataType::Bytes => ConfigType::TYPE_STRING,
    })
}

fn datatype(t: ConfigType, what: &str) -> Result<DataType, String> {
    t.kserve_name()
        .and_then(|n| n.parse::<DataType>().ok())
        .ok_or_else(|| format!("{what}: data_type {} is not a tensor type", t.as_str()))
}

fn queue_policy(p: Option<&ConfigQueuePolicy>, defaults: &SpecDefaults) -> QueuePolicy {
    let p = p.cloned().unwrap_or_default();
    let configured = p.max_queue_size as usize;
    let max_queue_size = match (configured, defaults.max_queue_size) {
        (0, cap) => cap,
        (c, 0) => c,
        (c, cap) => c.min(cap),
    };
    QueuePolicy {
        timeout_action: match p.timeout_action {
            ConfigTimeoutAction::REJECT => TimeoutAction::Reject,
            ConfigTimeoutAction::DELAY => TimeoutAction::Delay,
        },
        default_timeout: (p.default_timeout_microseconds > 0)
            .then(|| Duration::from_micros(p.default_timeout_microseconds)),
        allow_timeout_override: p.allow_timeout_override,
        max_queue_size,
    }
}

/// Converts a complete config into the spec the server runs; the error lists every problem.
pub fn to_spec(c: &ModelConfig, defaults: &SpecDefaults) -> Result<ModelSpec, String> {
    let mut problems = Vec::new();
    let name = c.name.clone();
    let max_batch_size = usize::try_from(c.max_batch_size.max(0)).unwrap_or(0);
    let mut io = |what: &str,
                  n: &str,
                  t: ConfigType,
                  dims: &[i64],
                  reshape: bool,
                  optional: bool|
     -> Option<IoSpec> {
        let label = format!("model '{name}' {what} '{n}'");
        if reshape {
            problems.push(format!("{label}: reshape is not supported by infergate (remove it and export the model with the shape clients send)"));
            return None;
        }
        match datatype(t, &label) {
            Ok(datatype) => Some(IoSpec {
                name: n.to_string(),
                datatype,
                dims: dims.to_vec(),
                optional,
            }),
            Err(e) => {
                problems.push(e);
                None
            }
        }
    };
    let inputs: Vec<IoSpec> = c
        .input
        .iter()
        .filter_map(|i| {
            io(
                "input",
                &i.name,
                i.data_type,
                &i.dims,
                i.reshape.is_some(),
                i.optional,
            )
        })
        .collect();
    let outputs: Vec<IoSpec> = c
        .output
        .iter()
        .filter_map(|o| {
            io(
                "output",
                &o.name,
                o.data_type,
                &o.dims,
                o.reshape.is_some(),
                false,
            )
        })
        .collect();

    let version_policy = match c.effective_version_policy() {
        ConfigPolicy::Latest { num_versions } => VersionPolicy::Latest(num_versions.max(1)),
        ConfigPolicy::All {} => VersionPolicy::All,
        ConfigPolicy::Specific { versions } => {
            VersionPolicy::Specific(versions.iter().filter_map(|&v| u64::try_from(v).ok()).collect())
        }
    };

    let mut instance_groups = Vec::new();
    for (i, g) in c.instance_group.iter().enumerate() {
        let kind = match g.kind {
            ConfigKind::KIND_AUTO => InstanceKind::Auto,
            ConfigKind::KIND_CPU => InstanceKind::Cpu,
            ConfigKind::KIND_GPU => InstanceKind::Gpu,
            ConfigKind::KIND_MODEL => {
                problems.push(format!(
                    "model '{name}' instance_group[{i}]: KIND_MODEL is not supported by infergate (use KIND_GPU or KIND_CPU)"
                ));
                continue;
            }
        };
        instance_groups.push(InstanceGroup {
            count: usize::try_from(g.count.max(1)).unwrap_or(1),
            kind,
        });
    }

    let adaptive = match c.parameters.get(ADAPTIVE_P99_PARAMETER) {
        None => None,
        Some(p) => match p.string_value.trim().parse::<u64>() {
            Ok(us) if us > 0 => Some(AdaptiveConfig::new(Duration::from_micros(us))),
            _ => {
                problems.push(format!(
                    "model '{name}' parameter '{ADAPTIVE_P99_PARAMETER}': '{}' is not a positive number of \
                     microseconds (e.g. string_value: \"20000\" for a 20 ms p99 target)",
                    p.string_value
                ));
                None
            }
        },
    };
    if c.parameters.contains_key(ADAPTIVE_P99_PARAMETER)
        && (c.dynamic_batching.is_none() || max_batch_size == 0)
    {
        problems.push(format!(
            "model '{name}': '{ADAPTIVE_P99_PARAMETER}' needs dynamic_batching and max_batch_size > 0"
        ));
    }
    if let Some(p) = c.parameters.get(INTRA_OP_THREADS_PARAMETER)
        && p.string_value.trim().parse::<usize>().is_err()
    {
        problems.push(format!(
            "model '{name}' parameter '{INTRA_OP_THREADS_PARAMETER}': '{}' is not a number of threads \
             (e.g. string_value: \"1\"; 0 = the server's default)",
            p.string_value
        ));
    }
    let batcher = match &c.dynamic_batching {
        Some(d) if max_batch_size > 0 => BatcherConfig {
            enabled: true,
            max_batch_size,
            preferred_batch_sizes: d
                .preferred_batch_size
                .iter()
                .filter_map(|&p| usize::try_from(p).ok())
                .collect(),
            max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
            preserve_ordering: d.preserve_ordering,
            priority_levels: u32::try_from(d.priority_levels).unwrap_or(u32::MAX),
            default_priority_level: u32::try_from(d.default_priority_level).unwrap_or(0),
            default_queue_policy: queue_policy(d.default_queue_policy.as_ref(), defaults),
            priority_queue_policy: d
                .priority_queue_policy
                .iter()
                .filter_map(|(&l, p)| Some((u32::try_from(l).ok()?, queue_policy(Some(p), defaults))))
                .collect(),
            adaptive,
            precise_timer: true,
        },
        _ => BatcherConfig {
            enabled: false,
            max_batch_size: max_batch_size.max(1),
            default_queue_policy: queue_policy(None, defaults),
            ..BatcherConfig::default()
        },
    };

    let mut warmup = Vec::new();
    for (i, w) in c.model_warmup.iter().enumerate() {
        let sample_name = if w.name.is_empty() {
            format!("#{i}")
        } else {
            w.name.clone()
        };
        let mut inputs = Vec::new();
        for (input_name, wi) in &w.inputs {
            let data = if wi.zero_data {
                WarmupData::Zero
            } else if wi.random_data {
                WarmupData::Random
            } else if !wi.input_data_file.is_empty() {
                WarmupData::File(PathBuf::from(&wi.input_data_file))
            } else {
                problems.push(format!(
                    "model '{name}' warmup '{sample_name}' input '{input_name}': set one of zero_data, random_data or input_data_file"
                ));
                continue;
            };
            match datatype(
                wi.data_type,
                &format!("model '{name}' warmup '{sample_name}' input '{input_name}'"),
            ) {
                Ok(datatype) => inputs.push(WarmupInput {
                    name: input_name.clone(),
                    datatype,
                    dims: wi.dims.clone(),
                    data,
                }),
                Err(e) => problems.push(e),
            }
        }
        warmup.push(WarmupSample {
            name: sample_name,
            batch_size: w.batch_size as usize,
            inputs,
            count: (w.count.max(1)) as usize,
        });
    }

    let platform = if !c.platform.is_empty() {
        c.platform.clone()
    } else if !c.backend.is_empty() {
        c.backend.clone()
    } else {
        "onnxruntime_onnx".to_string()
    };
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let spec = ModelSpec {
        name,
        platform,
        model_filename: c.model_filename().to_string(),
        max_batch_size,
        inputs,
        outputs,
        version_policy,
        instance_groups,
        batcher,
        warmup,
        parameters: c
            .parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.string_value.clone()))
            .collect::<BTreeMap<_, _>>(),
    };
    warmup::check_size(&spec).map_err(|e| format!("model '{}': {e}", spec.name))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_engine::{DataType as EngineType, TensorSpec};

    fn sig(first: Dim) -> Signature {
        let t = |n: &str| TensorSpec {
            name: n.into(),
            dtype: EngineType::F32,
            dims: vec![first.clone(), Dim::Fixed(4)],
        };
        Signature {
            inputs: vec![t("x")],
            outputs: vec![t("y")],
        }
    }

    #[test]
    fn autocomplete_batches_when_every_tensor_starts_with_a_dynamic_dimension() {
        let c = autocomplete(None, "m", &sig(Dim::Dynamic(Some("batch".into())))).unwrap();
        assert_eq!(c.max_batch_size, 4);
        assert!(c.dynamic_batching.is_some());
        assert_eq!(c.input[0].dims, vec![4]);
        assert_eq!(c.output[0].data_type, ConfigType::TYPE_FP32);
        let c = autocomplete(None, "m", &sig(Dim::Fixed(2))).unwrap();
        assert_eq!(c.max_batch_size, 0);
        assert_eq!(c.input[0].dims, vec![2, 4]);
    }

    #[test]
    fn a_partial_config_keeps_its_settings_and_gains_tensors() {
        let partial = ModelConfig {
            name: "m".into(),
            max_batch_size: 16,
            ..ModelConfig::default()
        };
        let c = autocomplete(Some(partial), "m", &sig(Dim::Dynamic(None))).unwrap();
        assert_eq!(c.max_batch_size, 16);
        assert_eq!(c.input[0].dims, vec![4]);
        let partial = ModelConfig {
            name: "m".into(),
            max_batch_size: 16,
            ..ModelConfig::default()
        };
        let err = autocomplete(Some(partial), "m", &sig(Dim::Fixed(2))).unwrap_err();
        assert!(err.contains("not a batch dimension"), "{err}");
    }

    #[test]
    fn a_config_becomes_a_spec_with_its_batcher_and_queue_policy() {
        let text = r#"
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { count: 2, kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 500
  default_queue_policy { max_queue_size: 10, default_timeout_microseconds: 2000, timeout_action: DELAY }
}
parameters { key: "infergate.adaptive_p99_us" value: { string_value: "20000" } }
"#;
        let c = infergate_config::parse_pbtxt(text, Path::new("config.pbtxt")).unwrap();
        let s = to_spec(&c, &SpecDefaults { max_queue_size: 5 }).unwrap();
        assert!(s.batcher.enabled);
        assert_eq!(s.batcher.max_batch_size, 8);
        assert_eq!(s.batcher.preferred_batch_sizes, vec![4]);
        assert_eq!(s.batcher.max_queue_delay, Duration::from_micros(500));
        assert_eq!(
            s.batcher.default_queue_policy.max_queue_size, 5,
            "the server cap is smaller"
        );
        assert_eq!(
            s.batcher.default_queue_policy.timeout_action,
            TimeoutAction::Delay
        );
        assert_eq!(
            s.batcher.default_queue_policy.default_timeout,
            Some(Duration::from_millis(2))
        );
        assert_eq!(
            s.batcher.adaptive,
            Some(AdaptiveConfig::new(Duration::from_millis(20)))
        );
        assert_eq!(
            s.instance_groups,
            vec![InstanceGroup {
                count: 2,
                kind: InstanceKind::Cpu
            }]
        );
        assert_eq!(s.version_policy, VersionPolicy::Latest(1));
    }

    #[test]
    fn a_bad_adaptive_target_is_reported() {
        let text = r#"
name: "m"
max_batch_size: 8
platform: "onnxruntime_onnx"
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
parameters { key: "infergate.adaptive_p99_us" value: { string_value: "fast" } }
"#;
        let c = infergate_config::parse_pbtxt(text, Path::new("config.pbtxt")).unwrap();
        let err = to_spec(&c, &SpecDefaults::default()).unwrap_err();
        assert!(
            err.contains("'fast' is not a positive number") && err.contains("needs dynamic_batching"),
            "{err}"
        );
    }

    #[test]
    fn intra_op_thread_count_sets_the_threads_of_cpu_instances() {
        let config = |value: &str| {
            format!(
                r#"
name: "m"
max_batch_size: 8
platform: "onnxruntime_onnx"
input [ {{ name: "x", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "y", data_type: TYPE_FP32, dims: [ 4 ] }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{value}" }} }}
"#
            )
        };
        let spec = |value: &str| {
            let c = infergate_config::parse_pbtxt(&config(value), Path::new("config.pbtxt")).unwrap();
            to_spec(&c, &SpecDefaults::default())
        };
        assert_eq!(spec("1").unwrap().cpu_threads(), Some(1));
        assert_eq!(
            spec("0").unwrap().cpu_threads(),
            None,
            "0 keeps the server's default"
        );
        let err = spec("many").unwrap_err();
        assert!(err.contains("'many' is not a number of threads"), "{err}");
    }

    #[test]
    fn override_json_goes_through_the_same_validation() {
        let json = r#"{"name":"m","platform":"onnxruntime_onnx","max_batch_size":2,
            "input":[{"name":"x","data_type":"TYPE_FP32","dims":[4]}],
            "output":[{"name":"y","data_type":"TYPE_FP32","dims":[4]}]}"#;
        let c = parse_override(json, "m").unwrap();
        assert_eq!(c.max_batch_size, 2);
        let err = parse_override(&json.replace("\"m\"", "\"other\""), "m").unwrap_err();
        assert!(err.contains("differs from its folder name"), "{err}");
    }
}

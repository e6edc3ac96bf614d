//! Triton's `ModelConfig` (the subset infergate acts on, plus the rest of the schema parsed so it can be
//! reported), read from `config.pbtxt` or `config.yaml` and written as Triton's `/v2/models/{m}/config` JSON.
//!
//! Field names are Triton's proto names, in both file formats. Sections infergate does not act on are
//! kept as generic values ([`serde_json::Value`]) so they round-trip and can be reported by
//! [`ModelConfig::support_diagnostics`].

mod json;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::node::{Origin, SpanIndex, from_node};
use crate::{MAX_CONFIG_BYTES, pbtxt, yaml};

/// A Triton model configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Model name; must equal the model's folder name (empty: taken from the folder).
    pub name: String,
    /// Platform, e.g. `onnxruntime_onnx` or `ensemble`.
    pub platform: String,
    /// Backend, e.g. `onnxruntime` or `python`.
    pub backend: String,
    /// Backend runtime library (Triton-specific; not used by infergate).
    pub runtime: String,
    /// Which version folders are served; absent means the latest one.
    pub version_policy: Option<VersionPolicy>,
    /// Largest batch; 0 disables batching (shapes are then exact), > 0 adds an implicit leading batch dim.
    pub max_batch_size: i32,
    /// Model inputs.
    pub input: Vec<ModelInput>,
    /// Model outputs.
    pub output: Vec<ModelOutput>,
    /// Batch inputs (ragged batching; not supported by infergate).
    pub batch_input: Vec<Json>,
    /// Batch outputs (ragged batching; not supported by infergate).
    pub batch_output: Vec<Json>,
    /// Backend optimisation settings (not used by infergate; kept for the JSON view).
    pub optimization: Option<Json>,
    /// Dynamic batcher settings; absent means requests run one by one.
    pub dynamic_batching: Option<DynamicBatching>,
    /// Sequence batcher (stateful models; not supported by infergate).
    pub sequence_batching: Option<SequenceBatching>,
    /// Ensemble pipeline (not supported by infergate).
    pub ensemble_scheduling: Option<EnsembleScheduling>,
    /// Execution instances.
    pub instance_group: Vec<InstanceGroup>,
    /// Model file inside a version folder; empty means `model.onnx`.
    pub default_model_filename: String,
    /// Per-compute-capability model files (TensorRT; not used by infergate).
    pub cc_model_filenames: BTreeMap<String, String>,
    /// Extra metric labels (not used by infergate).
    pub metric_tags: BTreeMap<String, String>,
    /// Free-form parameters: `{ key: { string_value: "..." } }`.
    pub parameters: BTreeMap<String, Parameter>,
    /// Requests run before a version is reported ready.
    pub model_warmup: Vec<ModelWarmup>,
    /// Operations such as op libraries to load (not supported by infergate).
    pub model_operations: Option<Json>,
    /// Transaction policy: `decoupled` models (not supported by infergate).
    pub model_transaction_policy: Option<ModelTransactionPolicy>,
    /// Repository agents (not supported by infergate).
    pub model_repository_agents: Option<Json>,
    /// Response cache (not supported by infergate).
    pub response_cache: Option<Json>,
}

/// Tensor element types, with Triton's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum DataType {
    #[default]
    TYPE_INVALID,
    TYPE_BOOL,
    TYPE_UINT8,
    TYPE_UINT16,
    TYPE_UINT32,
    TYPE_UINT64,
    TYPE_INT8,
    TYPE_INT16,
    TYPE_INT32,
    TYPE_INT64,
    TYPE_FP16,
    TYPE_FP32,
    TYPE_FP64,
    TYPE_STRING,
    TYPE_BF16,
}

/// Tensor layout hint of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Format {
    #[default]
    FORMAT_NONE,
    FORMAT_NHWC,
    FORMAT_NCHW,
}

/// A model input.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelInput {
    /// Input name, as the model declares it.
    pub name: String,
    /// Element type.
    pub data_type: DataType,
    /// Layout hint (informational).
    pub format: Format,
    /// Shape without the batch dimension when `max_batch_size > 0`; `-1` marks a variable dimension.
    pub dims: Vec<i64>,
    /// Shape the model actually receives, when it differs from `dims`.
    pub reshape: Option<Reshape>,
    /// Whether the input is a shape tensor (TensorRT; not supported by infergate).
    pub is_shape_tensor: bool,
    /// Accept ragged batches (not supported by infergate).
    pub allow_ragged_batch: bool,
    /// Requests may leave this input out.
    pub optional: bool,
    /// Non-linear format I/O (TensorRT; not supported by infergate).
    pub is_non_linear_format_io: bool,
}

/// A model output.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelOutput {
    /// Output name, as the model declares it.
    pub name: String,
    /// Element type.
    pub data_type: DataType,
    /// Shape without the batch dimension when `max_batch_size > 0`.
    pub dims: Vec<i64>,
    /// Shape the model actually produces, when it differs from `dims`.
    pub reshape: Option<Reshape>,
    /// Labels file for the classification extension (not supported by infergate).
    pub label_filename: String,
    /// Whether the output is a shape tensor (TensorRT; not supported by infergate).
    pub is_shape_tensor: bool,
    /// Non-linear format I/O (TensorRT; not supported by infergate).
    pub is_non_linear_format_io: bool,
}

/// A reshape between the declared and the model's shape.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reshape {
    /// The model's shape (may be empty for a scalar).
    pub shape: Vec<i64>,
}

/// Which version folders are served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionPolicy {
    /// The highest `num_versions` versions.
    Latest {
        /// How many of the highest versions to serve (at least 1).
        #[serde(default)]
        num_versions: u32,
    },
    /// Every version folder.
    All {},
    /// Exactly these versions.
    Specific {
        /// Version numbers.
        #[serde(default)]
        versions: Vec<i64>,
    },
}

/// Kind of an instance group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum InstanceKind {
    #[default]
    KIND_AUTO,
    KIND_GPU,
    KIND_CPU,
    KIND_MODEL,
}

/// A group of execution instances.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceGroup {
    /// Group name; empty means `{model}_{index}`.
    pub name: String,
    /// Where instances run: `KIND_GPU` (wgpu), `KIND_CPU` (CPU executor) or `KIND_AUTO` (GPU when available).
    pub kind: InstanceKind,
    /// Instances in the group (0 means 1).
    pub count: i32,
    /// GPU indices for `KIND_GPU`; empty means all.
    pub gpus: Vec<i32>,
    /// Secondary devices (not supported by infergate).
    pub secondary_devices: Vec<Json>,
    /// Profiles (TensorRT; not supported by infergate).
    pub profile: Vec<String>,
    /// Passive instances (not supported by infergate).
    pub passive: bool,
    /// Host policy name (not supported by infergate).
    pub host_policy: String,
    /// Rate limiter resources (not supported by infergate).
    pub rate_limiter: Option<Json>,
}

/// What happens to a request that waited too long in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum TimeoutAction {
    #[default]
    REJECT,
    DELAY,
}

/// Queue policy of the dynamic batcher.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueuePolicy {
    /// `REJECT` (fail with UNAVAILABLE "Request timeout expired") or `DELAY` (run later, after fresher requests).
    pub timeout_action: TimeoutAction,
    /// Queue timeout in microseconds; 0 means none.
    pub default_timeout_microseconds: u64,
    /// Requests may set a shorter timeout of their own.
    pub allow_timeout_override: bool,
    /// Queue capacity; 0 means unbounded. Full: UNAVAILABLE "Exceeds maximum queue size".
    pub max_queue_size: u32,
}

/// Dynamic batcher settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DynamicBatching {
    /// Batch sizes to aim for; empty means `max_batch_size`.
    pub preferred_batch_size: Vec<i32>,
    /// How long the oldest request may wait for a fuller batch, in microseconds.
    pub max_queue_delay_microseconds: u64,
    /// Responses leave in request order.
    pub preserve_ordering: bool,
    /// Number of priority levels (0: no priorities).
    pub priority_levels: u64,
    /// Priority of requests that do not set one (1..=priority_levels).
    pub default_priority_level: u64,
    /// Queue policy for priorities without their own.
    pub default_queue_policy: Option<QueuePolicy>,
    /// Queue policy per priority level.
    pub priority_queue_policy: BTreeMap<u64, QueuePolicy>,
}

/// Sequence batcher (parsed and reported; infergate does not run stateful models).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceBatching {
    /// Direct scheduling strategy.
    pub direct: Option<Json>,
    /// Oldest-first scheduling strategy.
    pub oldest: Option<SequenceOldest>,
    /// Idle time after which a sequence is ended.
    pub max_sequence_idle_microseconds: u64,
    /// Control inputs (START, END, READY, CORRID).
    pub control_input: Vec<SequenceControlInput>,
    /// Implicit state tensors.
    pub state: Vec<Json>,
    /// Iterative sequences.
    pub iterative_sequence: bool,
}

/// The "oldest" sequence strategy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceOldest {
    /// Sequences batched at once.
    pub max_candidate_sequences: i32,
    /// Preferred batch sizes.
    pub preferred_batch_size: Vec<i32>,
    /// Longest wait for a fuller batch.
    pub max_queue_delay_microseconds: u64,
    /// Keep response order.
    pub preserve_ordering: bool,
}

/// A sequence control input.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceControlInput {
    /// Input tensor name.
    pub name: String,
    /// Controls carried by the tensor.
    pub control: Vec<SequenceControl>,
}

/// One sequence control.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceControl {
    /// `CONTROL_SEQUENCE_START`, `_READY`, `_END` or `_CORRID`.
    pub kind: String,
    /// False/true values for an INT32 tensor.
    pub int32_false_true: Vec<i32>,
    /// False/true values for an FP32 tensor.
    pub fp32_false_true: Vec<f32>,
    /// False/true values for a BOOL tensor.
    pub bool_false_true: Vec<bool>,
    /// Data type of a CORRID tensor.
    pub data_type: DataType,
}

/// Ensemble pipeline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsembleScheduling {
    /// The steps, each calling a model.
    pub step: Vec<EnsembleStep>,
}

/// One ensemble step.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsembleStep {
    /// Model called by this step.
    pub model_name: String,
    /// Its version; -1 means the latest.
    pub model_version: i64,
    /// Step model input name → ensemble tensor name.
    pub input_map: BTreeMap<String, String>,
    /// Step model output name → ensemble tensor name.
    pub output_map: BTreeMap<String, String>,
    /// Model namespace.
    pub model_namespace: String,
}

/// Transaction policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelTransactionPolicy {
    /// Decoupled models send any number of responses per request (not supported by infergate).
    pub decoupled: bool,
}

/// A model parameter value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Parameter {
    /// The value.
    pub string_value: String,
}

/// A warmup request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelWarmup {
    /// Name used in logs.
    pub name: String,
    /// Batch size of the request (must be ≤ max_batch_size; 0 or 1 when batching is off).
    pub batch_size: u32,
    /// Input name → how to fill it.
    pub inputs: BTreeMap<String, WarmupInput>,
    /// How many times to run it (0 means once).
    pub count: u32,
}

/// How a warmup input is filled: exactly one of `zero_data`, `random_data`, `input_data_file`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WarmupInput {
    /// Element type.
    pub data_type: DataType,
    /// Full shape without the batch dimension (no -1).
    pub dims: Vec<i64>,
    /// Fill with zeros.
    pub zero_data: bool,
    /// Fill with random values.
    pub random_data: bool,
    /// Read raw little-endian bytes from `warmup/<file>` in the model folder.
    pub input_data_file: String,
}

impl DataType {
    /// The KServe V2 datatype name (`FP32`, `BYTES`, ...); `None` for `TYPE_INVALID`.
    pub fn kserve_name(self) -> Option<&'static str> {
        Some(match self {
            DataType::TYPE_INVALID => return None,
            DataType::TYPE_BOOL => "BOOL",
            DataType::TYPE_UINT8 => "UINT8",
            DataType::TYPE_UINT16 => "UINT16",
            DataType::TYPE_UINT32 => "UINT32",
            DataType::TYPE_UINT64 => "UINT64",
            DataType::TYPE_INT8 => "INT8",
            DataType::TYPE_INT16 => "INT16",
            DataType::TYPE_INT32 => "INT32",
            DataType::TYPE_INT64 => "INT64",
            DataType::TYPE_FP16 => "FP16",
            DataType::TYPE_FP32 => "FP32",
            DataType::TYPE_FP64 => "FP64",
            DataType::TYPE_STRING => "BYTES",
            DataType::TYPE_BF16 => "BF16",
        })
    }

    /// Bytes per element; `None` for strings (variable) and `TYPE_INVALID`.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DataType::TYPE_BOOL | DataType::TYPE_UINT8 | DataType::TYPE_INT8 => 1,
            DataType::TYPE_UINT16 | DataType::TYPE_INT16 | DataType::TYPE_FP16 | DataType::TYPE_BF16 => 2,
            DataType::TYPE_UINT32 | DataType::TYPE_INT32 | DataType::TYPE_FP32 => 4,
            DataType::TYPE_UINT64 | DataType::TYPE_INT64 | DataType::TYPE_FP64 => 8,
            DataType::TYPE_STRING | DataType::TYPE_INVALID => return None,
        })
    }

    /// The Triton name (`TYPE_FP32`).
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::TYPE_INVALID => "TYPE_INVALID",
            DataType::TYPE_BOOL => "TYPE_BOOL",
            DataType::TYPE_UINT8 => "TYPE_UINT8",
            DataType::TYPE_UINT16 => "TYPE_UINT16",
            DataType::TYPE_UINT32 => "TYPE_UINT32",
            DataType::TYPE_UINT64 => "TYPE_UINT64",
            DataType::TYPE_INT8 => "TYPE_INT8",
            DataType::TYPE_INT16 => "TYPE_INT16",
            DataType::TYPE_INT32 => "TYPE_INT32",
            DataType::TYPE_INT64 => "TYPE_INT64",
            DataType::TYPE_FP16 => "TYPE_FP16",
            DataType::TYPE_FP32 => "TYPE_FP32",
            DataType::TYPE_FP64 => "TYPE_FP64",
            DataType::TYPE_STRING => "TYPE_STRING",
            DataType::TYPE_BF16 => "TYPE_BF16",
        }
    }
}

impl ModelConfig {
    /// The version policy in force (`latest: 1` when none is written).
    pub fn effective_version_policy(&self) -> VersionPolicy {
        self.version_policy
            .clone()
            .unwrap_or(VersionPolicy::Latest { num_versions: 1 })
    }

    /// Whether the model batches (an implicit leading batch dimension).
    pub fn batching(&self) -> bool {
        self.max_batch_size > 0
    }

    /// The model file name inside a version folder.
    pub fn model_filename(&self) -> &str {
        if !self.default_model_filename.is_empty() {
            &self.default_model_filename
        } else if self.backend == "python" {
            "model.py"
        } else {
            "model.onnx"
        }
    }

    /// Preferred batch sizes in force (`[max_batch_size]` when none are written, as Triton does).
    pub fn preferred_batch_sizes(&self) -> Vec<i32> {
        match &self.dynamic_batching {
            Some(d) if !d.preferred_batch_size.is_empty() => d.preferred_batch_size.clone(),
            Some(_) if self.max_batch_size > 0 => vec![self.max_batch_size],
            _ => Vec::new(),
        }
    }

    /// Which of the given version numbers the policy selects, highest first.
    pub fn select_versions(&self, available: &[u64]) -> Vec<u64> {
        let mut sorted: Vec<u64> = available.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        match self.effective_version_policy() {
            VersionPolicy::Latest { num_versions } => {
                sorted.into_iter().take(num_versions.max(1) as usize).collect()
            }
            VersionPolicy::All {} => sorted,
            VersionPolicy::Specific { versions } => sorted
                .into_iter()
                .filter(|v| versions.iter().any(|w| u64::try_from(*w).ok() == Some(*v)))
                .collect(),
        }
    }

    /// Triton's `/v2/models/{m}/config` JSON for this config (defaults filled in as Triton does).
    pub fn to_triton_json(&self) -> Json {
        json::to_triton_json(self)
    }

    /// Like [`ModelConfig::to_triton_json`], resolving `KIND_AUTO` instance groups to `auto_kind`
    /// (`KIND_GPU` when the backend found a GPU adapter).
    pub fn to_triton_json_for(&self, auto_kind: InstanceKind) -> Json {
        json::to_triton_json_with(self, auto_kind)
    }

    /// Features of this config that infergate does not act on: errors for those that make the model
    /// unservable here (another platform, ensembles, sequence batching, decoupled), warnings for
    /// settings that are ignored. Positions are those of `spans` when given.
    pub fn support_diagnostics(&self, file: &Path, spans: Option<&SpanIndex>) -> Diagnostics {
        validate::support(self, file, spans)
    }
}

/// A parsed model config with the positions of its fields (for later checks such as the folder name).
#[derive(Debug, Clone)]
pub struct LoadedModelConfig {
    /// The config.
    pub config: ModelConfig,
    /// Positions of every field in the file.
    pub spans: SpanIndex,
    /// Warnings found while validating (heuristics such as a batch dimension in `dims`).
    pub warnings: Diagnostics,
}

/// Parses and validates a `config.pbtxt`. Checks Triton's own rules; see
/// [`ModelConfig::support_diagnostics`] for what infergate does not support.
pub fn parse_pbtxt(text: &str, file: &Path) -> Result<ModelConfig, Diagnostics> {
    load_pbtxt(text, file).map(|l| l.config)
}

/// Parses and validates a `config.yaml` (the same field names as `config.pbtxt`; maps as YAML mappings).
pub fn parse_model_yaml(text: &str, file: &Path) -> Result<ModelConfig, Diagnostics> {
    load_model_yaml(text, file).map(|l| l.config)
}

/// Like [`parse_pbtxt`], keeping positions and warnings.
pub fn load_pbtxt(text: &str, file: &Path) -> Result<LoadedModelConfig, Diagnostics> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Diagnostics::single(crate::too_large(file, text.len() as u64)));
    }
    let root = pbtxt::parse_pbtxt_tree(text, file)?;
    finish(&root, file, Origin::Pbtxt)
}

/// Like [`parse_model_yaml`], keeping positions and warnings.
pub fn load_model_yaml(text: &str, file: &Path) -> Result<LoadedModelConfig, Diagnostics> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Diagnostics::single(crate::too_large(file, text.len() as u64)));
    }
    let root = yaml::parse_yaml(text, file)?;
    if matches!(root.value, crate::node::Value::Null) {
        return Err(Diagnostics::single(
            Diagnostic::error(file, Pos::default(), "the file is empty")
                .with_hint("a model config needs at least 'input' and 'output'"),
        ));
    }
    finish(&root, file, Origin::Yaml)
}

/// Parses a model config by file name: `*.yaml`/`*.yml` as YAML, anything else as protobuf text.
pub fn load_model_config(text: &str, file: &Path) -> Result<LoadedModelConfig, Diagnostics> {
    match file.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => load_model_yaml(text, file),
        _ => load_pbtxt(text, file),
    }
}

fn finish(root: &crate::node::Node, file: &Path, origin: Origin) -> Result<LoadedModelConfig, Diagnostics> {
    let config: ModelConfig = from_node(root, file, origin)?;
    let spans = SpanIndex::build(root, origin);
    let diags = validate::validate(&config, &spans, file);
    if diags.has_errors() {
        return Err(diags);
    }
    Ok(LoadedModelConfig {
        config,
        spans,
        warnings: diags,
    })
}

impl LoadedModelConfig {
    /// Checks the config against its folder name: fills an empty `name`, refuses a different one
    /// (Triton silently skips such a model; infergate refuses it loudly).
    pub fn check_folder_name(&mut self, folder: &str, file: &Path) -> Result<(), Diagnostic> {
        if self.config.name.is_empty() {
            self.config.name = folder.to_string();
            return Ok(());
        }
        if self.config.name != folder {
            return Err(Diagnostic::error(
                file,
                self.spans.at("name"),
                format!(
                    "model name '{}' differs from its folder name '{folder}'",
                    self.config.name
                ),
            )
            .with_hint(format!(
                "rename the folder to '{}' or set name: \"{folder}\" (Triton would skip this model silently)",
                self.config.name
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! One loaded model version: its instances behind a batcher, its statistics, and the request path
//! (check the request against the config, batch, execute, answer).
//!
//! A `LoadedVersion` is shared as `Arc<LoadedVersion>`: a request holds one for its whole life, so a
//! version removed from the serving set keeps answering the requests it already took and frees its
//! sessions (and GPU memory) when the last of them finishes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use infergate_engine::{AdapterChoice, Dim, ExecutorKind, Model, Session, SessionOptions, Signature, Tensor};
use infergate_protocol::{
    InferOutput, InferRequest, InferResponse, MemoryUsage, ModelMetadata, ServeError, TensorData,
    TensorMetadata, shape_string, validate_tensor,
};

use crate::batcher::{Batcher, Rejected, SubmitError, SubmitOptions};
use crate::confine;
use crate::convert::{engine_dtype, protocol_dtype};
use crate::instance::{InferItem, Instance, engine_error};
use crate::load_failure::{LoadFailure, LoadFailureKind};
use crate::manifest::{self, ManifestOutcome};
use crate::memory_budget::{self, MemoryBudget, Reservation};
use crate::spec::{InstanceKind, IoSpec, ModelSpec};
use crate::stats::{FailureReason, VersionStats};
use crate::warmup;

/// How GPU instance groups behave on a machine without a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuFallback {
    /// `KIND_GPU` fails to load when no wgpu adapter exists (the default: a config that asks for a GPU
    /// should not silently run 10× slower).
    #[default]
    Fail,
    /// `KIND_GPU` runs on the CPU executor when no wgpu adapter exists (`--gpu-fallback=cpu`).
    Cpu,
}

/// Settings that apply to every load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// What `KIND_GPU` does without an adapter.
    pub gpu_fallback: GpuFallback,
    /// Refuse versions without an integrity manifest.
    pub require_manifest: bool,
    /// CPU threads per CPU-executor session (`None` = the engine's default).
    pub cpu_threads: Option<usize>,
    /// `--model-memory-limit`: what the loaded versions' files may add up to.
    pub memory: Arc<MemoryBudget>,
}

/// Where a version's files are.
pub struct VersionSource {
    /// The model folder (holding `<version>/`).
    pub model_dir: std::path::PathBuf,
    /// The version number.
    pub version: u64,
    /// Kept alive with the version (a temporary folder of files sent with a load request).
    pub files: Option<Arc<dyn Send + Sync>>,
    /// The parsed ONNX model when auto-complete already read it (its manifest was checked and its
    /// memory reserved first).
    pub parsed: Option<(Arc<Model>, Reservation)>,
}

/// Reserves a version folder's bytes under `--model-memory-limit`, before anything in it is read.
pub fn reserve_memory(
    version_dir: &Path,
    options: &LoadOptions,
    what: &str,
) -> Result<Reservation, LoadFailure> {
    let bytes =
        memory_budget::folder_bytes(version_dir).map_err(LoadFailure::of(LoadFailureKind::Unreadable))?;
    options
        .memory
        .reserve(bytes, what)
        .map_err(LoadFailure::of(LoadFailureKind::MemoryLimit))
}

/// Verifies a version folder's integrity manifest off the async runtime (see [`crate::manifest`]).
pub async fn check_manifest(version_dir: &Path, require: bool) -> Result<(), LoadFailure> {
    let integrity = LoadFailure::of(LoadFailureKind::Integrity);
    let dir = version_dir.to_path_buf();
    let checked = match tokio::task::spawn_blocking(move || manifest::verify(&dir)).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(problems)) => {
            return Err(integrity(format!(
                "integrity manifest check failed: {}",
                problems.join("; ")
            )));
        }
        Err(e) => return Err(integrity(format!("manifest check stopped: {e}"))),
    };
    match checked {
        ManifestOutcome::Verified(n) => {
            tracing::info!(dir = %version_dir.display(), files = n, "integrity manifest verified");
            Ok(())
        }
        ManifestOutcome::Absent if require => Err(integrity(format!(
            "{} has no {} and --require-model-manifest is set",
            version_dir.display(),
            manifest::MANIFEST_FILE
        ))),
        ManifestOutcome::Absent => Ok(()),
    }
}

/// Parses an ONNX file off the async runtime; the error names the file.
pub async fn parse_model(path: &Path) -> Result<Model, LoadFailure> {
    let invalid = LoadFailure::of(LoadFailureKind::InvalidModel);
    let p = path.to_path_buf();
    match tokio::task::spawn_blocking(move || Model::load(&p)).await {
        Ok(Ok(model)) => Ok(model),
        Ok(Err(e)) => Err(invalid(format!("{}: {e}", path.display()))),
        Err(e) => Err(invalid(format!("model parse stopped: {e}"))),
    }
}

/// A version that is loaded, warmed up and ready.
pub struct LoadedVersion {
    /// Model name.
    pub name: String,
    /// Version number.
    pub version: u64,
    /// The config in force.
    pub spec: Arc<ModelSpec>,
    /// The config as `/v2/models/{m}/config` returns it.
    pub config_json: Arc<serde_json::Value>,
    /// Counters.
    pub stats: Arc<VersionStats>,
    batcher: Batcher<Instance>,
    input_names: Vec<String>,
    output_names: Vec<String>,
    sessions: Vec<Arc<Session>>,
    instance_kinds: Vec<&'static str>,
    /// What the version was built from, kept to rebuild its instances on a new GPU device.
    read: Arc<ReadVersion>,
}

/// A version's files once read: the parsed model and what must live as long as any build of it.
struct ReadVersion {
    model: Arc<Model>,
    /// The model folder (warmup samples are read from it).
    model_dir: PathBuf,
    _files: Option<Arc<dyn Send + Sync>>,
    /// Released when the last build of the version is dropped, once it has drained.
    _memory: Reservation,
}

/// A checked request: the batcher item, its rows, and the wanted outputs as (name, engine output index).
type Prepared = (InferItem, usize, Vec<(String, usize)>);

/// Drops with a failure count unless the request finished (the caller went away mid-request).
struct CancelGuard<'a> {
    stats: &'a VersionStats,
    start: Instant,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.stats
                .record_failure(FailureReason::Canceled, self.start.elapsed());
        }
    }
}

impl LoadedVersion {
    /// Loads version `version` of `spec` from `model_dir/<version>`: manifest, ONNX parse (unless
    /// `parsed` already holds it, after an auto-complete), signature check, instances, warmup. The error
    /// names the step and the problem. `files` is kept alive as long as the version (a temporary folder
    /// of files sent with a load request).
    pub async fn load(
        spec: Arc<ModelSpec>,
        config_json: Arc<serde_json::Value>,
        source: VersionSource,
        options: &LoadOptions,
    ) -> Result<LoadedVersion, LoadFailure> {
        let VersionSource {
            model_dir,
            version,
            files,
            parsed,
        } = source;
        let model_dir = model_dir.as_path();
        let started = Instant::now();
        let name = spec.name.clone();
        let version_dir = model_dir.join(version.to_string());
        let model_path = version_dir.join(&spec.model_filename);
        let size = std::fs::metadata(&model_path)
            .map_err(|e| {
                LoadFailure::of(LoadFailureKind::Unreadable)(format!(
                    "cannot read {}: {e} (each version folder needs a {})",
                    model_path.display(),
                    spec.model_filename
                ))
            })?
            .len();
        let model_path = confine::resolve_inside(model_dir, &model_path)
            .map_err(LoadFailure::of(LoadFailureKind::Integrity))?;
        tracing::info!(model = %name, version, bytes = size, "loading model version");

        let (model, memory) = match parsed {
            Some(parsed) => parsed,
            None => {
                let memory = reserve_memory(
                    &version_dir,
                    options,
                    &format!("model '{name}' version {version}"),
                )?;
                check_manifest(&version_dir, options.require_manifest).await?;
                (Arc::new(parse_model(&model_path).await?), memory)
            }
        };
        tracing::info!(model = %name, version, ms = started.elapsed().as_millis() as u64, "model parsed and optimised");
        check_signature(&spec, model.signature()).map_err(LoadFailure::of(LoadFailureKind::Config))?;
        let read = Arc::new(ReadVersion {
            model,
            model_dir: model_dir.to_path_buf(),
            _files: files,
            _memory: memory,
        });
        Self::build(
            spec,
            config_json,
            version,
            read,
            Arc::new(VersionStats::default()),
            options,
            started,
        )
        .await
    }

    /// The same version with new instances (new sessions, so a new GPU device once the lost one is back),
    /// built from the model already read, under the same memory reservation and with the same statistics.
    /// The caller puts it in this one's place.
    pub async fn rebuild(&self, options: &LoadOptions) -> Result<LoadedVersion, LoadFailure> {
        Self::build(
            self.spec.clone(),
            self.config_json.clone(),
            self.version,
            self.read.clone(),
            self.stats.clone(),
            options,
            Instant::now(),
        )
        .await
    }

    /// Instances, warmup and batcher over a read version.
    async fn build(
        spec: Arc<ModelSpec>,
        config_json: Arc<serde_json::Value>,
        version: u64,
        read: Arc<ReadVersion>,
        stats: Arc<VersionStats>,
        options: &LoadOptions,
        started: Instant,
    ) -> Result<LoadedVersion, LoadFailure> {
        let name = spec.name.clone();
        let model = &read.model;
        let model_dir = read.model_dir.as_path();
        let input_names: Vec<String> = model.signature().inputs.iter().map(|s| s.name.clone()).collect();
        let output_names: Vec<String> = model.signature().outputs.iter().map(|s| s.name.clone()).collect();

        let names: Arc<[String]> = input_names.clone().into();
        let mut instances = Vec::new();
        let mut sessions = Vec::new();
        let mut instance_kinds = Vec::new();
        let groups = if spec.instance_groups.is_empty() {
            vec![crate::spec::InstanceGroup {
                count: 1,
                kind: InstanceKind::Auto,
            }]
        } else {
            spec.instance_groups.clone()
        };
        for (g, group) in groups.iter().enumerate() {
            for i in 0..group.count.max(1) {
                let (session, kind) = new_session(model.clone(), group.kind, options, session_sizing(&spec))
                    .await
                    .map_err(|e| {
                        LoadFailure::of(LoadFailureKind::Instance)(format!(
                            "instance_group[{g}] instance {i}: {e}"
                        ))
                    })?;
                let session = Arc::new(session);
                sessions.push(session.clone());
                instances.push(Instance::new(
                    session,
                    names.clone(),
                    spec.max_batch_size > 0,
                    stats.clone(),
                ));
                instance_kinds.push(kind);
            }
        }

        for sample in &spec.warmup {
            let inputs = warmup::sample_inputs(&spec, sample, model_dir, &input_names)
                .map_err(LoadFailure::of(LoadFailureKind::Warmup))?;
            for (i, instance) in instances.iter().enumerate() {
                for _ in 0..sample.count.max(1) {
                    instance.run_once(inputs.clone()).await.map_err(|e| {
                        LoadFailure::of(LoadFailureKind::Warmup)(format!(
                            "warmup sample '{}' failed on instance {i}: {}",
                            sample.name, e.message
                        ))
                    })?;
                }
            }
            tracing::info!(model = %name, version, sample = %sample.name, "warmup done");
        }

        let batcher = Batcher::new(spec.batcher.clone(), instances);
        stats.set_load_duration(started.elapsed());
        tracing::info!(
            model = %name, version, ms = started.elapsed().as_millis() as u64, instances = instance_kinds.len(),
            "model version ready"
        );
        Ok(LoadedVersion {
            name,
            version,
            spec,
            config_json,
            stats,
            batcher,
            input_names,
            output_names,
            sessions,
            instance_kinds,
            read,
        })
    }

    /// Why the version cannot run any more because an instance's GPU device was lost; `None` while every
    /// instance can. The server then rebuilds the version ([`LoadedVersion::rebuild`]).
    pub fn device_lost(&self) -> Option<String> {
        self.sessions.iter().find_map(|s| s.device_lost())
    }

    /// The version left the serving set: queued requests run now, without waiting for batches to fill.
    pub fn retire(&self) {
        self.batcher.drain_now();
    }

    /// Requests queued (`nv_inference_pending_request_count`).
    pub fn pending(&self) -> usize {
        self.batcher.pending()
    }

    /// Device memory held by the instances.
    pub fn device_memory_bytes(&self) -> u64 {
        // Plans (and their buffers) are compiled per batch-size bucket as traffic arrives: ask each time.
        self.sessions.iter().map(|s| s.device_memory_bytes()).sum()
    }

    /// Executor of each instance (`"CPU"` or `"GPU"`).
    pub fn instance_kinds(&self) -> &[&'static str] {
        &self.instance_kinds
    }

    /// The batcher's adaptive choice, when the adaptive mode is on.
    pub fn adaptive(&self) -> Option<crate::batcher::AdaptiveSnapshot> {
        self.batcher.adaptive_snapshot()
    }

    /// Memory usage as the statistics extension reports it.
    pub fn memory_usage(&self) -> Vec<MemoryUsage> {
        let bytes = self.device_memory_bytes();
        if bytes == 0 {
            return Vec::new();
        }
        vec![MemoryUsage {
            kind: "GPU".into(),
            id: 0,
            byte_size: bytes,
        }]
    }

    /// Model metadata for this version.
    pub fn metadata(&self, versions: Vec<String>) -> ModelMetadata {
        let m = self.spec.max_batch_size;
        let meta = |io: &IoSpec| TensorMetadata {
            name: io.name.clone(),
            datatype: io.datatype,
            shape: io.metadata_shape(m),
        };
        ModelMetadata {
            name: self.name.clone(),
            versions,
            platform: self.spec.platform.clone(),
            inputs: self.spec.inputs.iter().map(meta).collect(),
            outputs: self.spec.outputs.iter().map(meta).collect(),
        }
    }

    /// Runs one request through the batcher. `start` is when the server received it.
    pub async fn infer(&self, request: InferRequest, start: Instant) -> Result<InferResponse, ServeError> {
        let mut guard = CancelGuard {
            stats: &self.stats,
            start,
            armed: true,
        };
        if let Some(why) = self.device_lost() {
            // Fail fast: queued, the request would wait for a batch only to fail on the lost device.
            guard.armed = false;
            self.stats.record_failure(FailureReason::Backend, start.elapsed());
            return Err(ServeError::unavailable(format!(
                "model '{}' version {}: {why}; the server rebuilds the version once the device is back",
                self.name, self.version
            )));
        }
        let prepared = match self.prepare(&request) {
            Ok(p) => p,
            Err(e) => {
                guard.armed = false;
                self.stats.record_failure(FailureReason::Other, start.elapsed());
                return Err(e);
            }
        };
        let (item, rows, wanted) = prepared;
        let options = SubmitOptions {
            priority: u32::try_from(request.priority).unwrap_or(u32::MAX),
            timeout: request.timeout,
        };
        let ticket = match self.batcher.submit(item, options) {
            Ok(t) => t,
            Err(e) => {
                guard.armed = false;
                let (reason, err) = match e {
                    SubmitError::QueueFull => (
                        FailureReason::Rejected,
                        ServeError::unavailable(format!(
                            "Exceeds maximum queue size: model '{}' version {} has {} requests waiting \
                         (raise dynamic_batching.default_queue_policy.max_queue_size, or add instances)",
                            self.name,
                            self.version,
                            self.batcher.pending()
                        )),
                    ),
                    SubmitError::InvalidPriority { .. } => (
                        FailureReason::Other,
                        ServeError::invalid_argument(format!("model '{}': {e}", self.name)),
                    ),
                    SubmitError::Closed => (
                        FailureReason::Rejected,
                        ServeError::unavailable(format!(
                            "model '{}' version {} is unloading; retry to reach the version that replaces it",
                            self.name, self.version
                        )),
                    ),
                };
                self.stats.record_failure(reason, start.elapsed());
                return Err(err);
            }
        };
        let completion = ticket.await;
        guard.armed = false;
        let output = match completion.result {
            Ok(o) => o,
            Err(Rejected::Timeout) => {
                self.stats
                    .record_failure(FailureReason::Rejected, start.elapsed());
                return Err(ServeError::unavailable("Request timeout expired"));
            }
            Err(Rejected::Execution(e)) => {
                self.stats.record_failure(FailureReason::Backend, start.elapsed());
                return Err(ServeError::new(
                    e.code,
                    format!("model '{}' version {}: {}", self.name, self.version, e.message),
                ));
            }
            Err(Rejected::Dropped) => {
                self.stats.record_failure(FailureReason::Backend, start.elapsed());
                return Err(ServeError::internal(format!(
                    "model '{}' version {}: the model instance stopped while running this request",
                    self.name, self.version
                )));
            }
        };
        let mut outputs = Vec::with_capacity(wanted.len());
        for (name, idx) in wanted {
            let t: &Tensor = &output.outputs[idx];
            outputs.push(InferOutput {
                name,
                datatype: protocol_dtype(t.dtype),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                parameters: Default::default(),
                data: TensorData::new(t.data.clone()),
            });
        }
        self.stats
            .record_success(rows, start.elapsed(), completion.queue_time, output.phases);
        Ok(InferResponse {
            model_name: self.name.clone(),
            model_version: self.version.to_string(),
            id: request.id,
            parameters: Default::default(),
            outputs,
        })
    }

    /// Checks a request against the config and builds the batcher item: inputs in engine order, batch
    /// rows, and the requested outputs as (name, index into the engine's outputs).
    fn prepare(&self, request: &InferRequest) -> Result<Prepared, ServeError> {
        let spec = &self.spec;
        let model = &self.name;
        let batched = spec.max_batch_size > 0;
        let mut slots: Vec<Option<Tensor>> = vec![None; self.input_names.len()];
        let mut rows: Option<usize> = None;
        for input in &request.inputs {
            let Some(io) = spec.inputs.iter().find(|i| i.name == input.name) else {
                let known: Vec<&str> = spec.inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(ServeError::invalid_argument(format!(
                    "unexpected inference input '{}' for model '{model}' (its inputs are: {})",
                    input.name,
                    known.join(", ")
                )));
            };
            if input.datatype != io.datatype {
                return Err(ServeError::invalid_argument(format!(
                    "model '{model}' input '{}': expected datatype {}, got {}",
                    io.name, io.datatype, input.datatype
                )));
            }
            let shape_err = |hint: &str| {
                ServeError::invalid_argument(format!(
                    "model '{model}' input '{}': expected shape {}, got {}{hint}",
                    io.name,
                    io.shape_text(spec.max_batch_size),
                    shape_string(&input.shape)
                ))
            };
            let inner = if batched {
                let Some((&b, inner)) = input.shape.split_first() else {
                    return Err(shape_err(" (the batch dimension is missing)"));
                };
                if inner.len() != io.dims.len() {
                    let hint = if input.shape.len() == io.dims.len() {
                        " (is the batch dimension missing?)"
                    } else {
                        ""
                    };
                    return Err(shape_err(hint));
                }
                if b < 1 || b as usize > spec.max_batch_size {
                    return Err(ServeError::invalid_argument(format!(
                        "model '{model}' input '{}': batch size {b} is outside 1..={} (the model's max_batch_size)",
                        io.name, spec.max_batch_size
                    )));
                }
                match rows {
                    Some(r) if r != b as usize => {
                        return Err(ServeError::invalid_argument(format!(
                            "model '{model}': inputs disagree on the batch size ({r} and {b} for input '{}')",
                            io.name
                        )));
                    }
                    _ => rows = Some(b as usize),
                }
                inner
            } else {
                &input.shape[..]
            };
            if !io.accepts(inner) {
                return Err(shape_err(""));
            }
            validate_tensor(
                &format!("model '{model}' input '{}'", io.name),
                input.datatype,
                &input.shape,
                input.data.as_bytes(),
            )?;
            let Some(slot) = self.input_names.iter().position(|n| n == &io.name) else {
                return Err(ServeError::internal(format!(
                    "model '{model}': config input '{}' is not in the loaded model",
                    io.name
                )));
            };
            if slots[slot].is_some() {
                return Err(ServeError::invalid_argument(format!(
                    "model '{model}': input '{}' is given more than once",
                    io.name
                )));
            }
            slots[slot] = Some(Tensor {
                dtype: engine_dtype(input.datatype),
                shape: input.shape.iter().map(|&d| d as usize).collect(),
                data: input.data.as_bytes().clone(),
            });
        }
        let mut inputs = Vec::with_capacity(slots.len());
        let mut missing = Vec::new();
        for (slot, name) in slots.into_iter().zip(&self.input_names) {
            match slot {
                Some(t) => inputs.push(t),
                None => missing.push(name.as_str()),
            }
        }
        if !missing.is_empty() {
            return Err(ServeError::invalid_argument(format!(
                "model '{model}' expects {} inputs but the request is missing: {}",
                self.input_names.len(),
                missing.join(", ")
            )));
        }
        let mut wanted = Vec::new();
        if request.outputs.is_empty() {
            for io in &spec.outputs {
                if let Some(i) = self.output_names.iter().position(|n| n == &io.name) {
                    wanted.push((io.name.clone(), i));
                }
            }
        } else {
            for out in &request.outputs {
                let Some(i) = self.output_names.iter().position(|n| n == &out.name) else {
                    let known: Vec<&str> = spec.outputs.iter().map(|o| o.name.as_str()).collect();
                    return Err(ServeError::invalid_argument(format!(
                        "unexpected inference output '{}' for model '{model}' (its outputs are: {})",
                        out.name,
                        known.join(", ")
                    )));
                };
                if out.parameters.contains_key("classification") {
                    return Err(ServeError::unsupported(format!(
                        "model '{model}' output '{}': the classification extension is not supported",
                        out.name
                    )));
                }
                wanted.push((out.name.clone(), i));
            }
        }
        let rows = if batched { rows.unwrap_or(1) } else { 1 };
        Ok((InferItem { inputs, rows }, rows, wanted))
    }
}

/// What a model's config says about its sessions.
#[derive(Debug, Clone, Copy)]
struct SessionSizing {
    /// Threads of a CPU instance asked for by the model (`intra_op_thread_count`).
    threads: Option<usize>,
    /// Plans (one per distinct input shape) each session keeps.
    plan_cache_size: usize,
}

/// The dynamic batcher forms batches of every size from 1 to `max_batch_size`, and the engine compiles
/// one plan per input shape: a plan cache smaller than that evicts and recompiles plans all the time
/// under load (tens of milliseconds each on a model like heavy_mlp), so it holds one plan per batch size.
fn session_sizing(spec: &ModelSpec) -> SessionSizing {
    SessionSizing {
        threads: spec.cpu_threads(),
        plan_cache_size: SessionOptions::default().plan_cache_size.max(spec.max_batch_size),
    }
}

/// Creates one session for an instance group kind; returns it with its kind label.
async fn new_session(
    model: Arc<Model>,
    kind: InstanceKind,
    options: &LoadOptions,
    sizing: SessionSizing,
) -> Result<(Session, &'static str), String> {
    // The model's `intra_op_thread_count` wins over the server-wide --cpu-threads.
    let threads = sizing.threads.or(options.cpu_threads);
    let make = move |model: Arc<Model>, executor: ExecutorKind| {
        tokio::task::spawn_blocking(move || {
            Session::new(
                model,
                SessionOptions {
                    executor,
                    threads,
                    plan_cache_size: sizing.plan_cache_size,
                },
            )
        })
    };
    let cpu = |model: Arc<Model>| async move {
        make(model, ExecutorKind::Cpu)
            .await
            .map_err(|e| format!("session start stopped: {e}"))?
            .map_err(|e| format!("CPU executor: {}", engine_error(e).message))
            .map(|s| (s, "CPU"))
    };
    match kind {
        InstanceKind::Cpu => cpu(model).await,
        InstanceKind::Auto => match make(model.clone(), ExecutorKind::Wgpu(AdapterChoice::Hardware)).await {
            Ok(Ok(s)) => Ok((s, "GPU")),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "KIND_AUTO: no hardware GPU, using the CPU executor");
                cpu(model).await
            }
            Err(e) => Err(format!("session start stopped: {e}")),
        },
        InstanceKind::Gpu => match make(model.clone(), ExecutorKind::Wgpu(AdapterChoice::Auto)).await {
            Ok(Ok(s)) => Ok((s, "GPU")),
            Ok(Err(e)) if options.gpu_fallback == GpuFallback::Cpu => {
                tracing::warn!(error = %e, "KIND_GPU: no usable wgpu adapter, running on the CPU executor (--gpu-fallback=cpu)");
                cpu(model).await
            }
            Ok(Err(e)) => Err(format!(
                "KIND_GPU needs a wgpu adapter: {e} (install a Vulkan/Metal/DX12 driver, e.g. Debian's \
                 mesa-vulkan-drivers, use KIND_CPU, or start with --gpu-fallback=cpu)"
            )),
            Err(e) => Err(format!("session start stopped: {e}")),
        },
    }
}

/// Checks the config's inputs and outputs against the ONNX signature; lists every mismatch.
pub fn check_signature(spec: &ModelSpec, sig: &Signature) -> Result<(), String> {
    let mut problems = Vec::new();
    let batched = spec.max_batch_size > 0;
    for (what, config, model) in [
        ("input", &spec.inputs, &sig.inputs),
        ("output", &spec.outputs, &sig.outputs),
    ] {
        for io in config.iter() {
            let Some(m) = model.iter().find(|m| m.name == io.name) else {
                let known: Vec<&str> = model.iter().map(|m| m.name.as_str()).collect();
                problems.push(format!(
                    "config {what} '{}' is not in the ONNX model (its {what}s are: {})",
                    io.name,
                    known.join(", ")
                ));
                continue;
            };
            if engine_dtype(io.datatype) != m.dtype {
                problems.push(format!(
                    "{what} '{}': the config says {} but the ONNX model has {}",
                    io.name,
                    io.datatype.as_config_str(),
                    protocol_dtype(m.dtype).as_config_str()
                ));
            }
            let dims: &[Dim] = if batched {
                match m.dims.split_first() {
                    Some((Dim::Fixed(1), rest)) | Some((Dim::Dynamic(_), rest)) => rest,
                    Some((Dim::Fixed(n), _)) => {
                        problems.push(format!(
                            "{what} '{}': max_batch_size is {} but the ONNX model fixes the first dimension to {n} \
                             (export it with a dynamic batch dimension, or set max_batch_size: 0)",
                            io.name, spec.max_batch_size
                        ));
                        continue;
                    }
                    None => {
                        problems.push(format!(
                            "{what} '{}': max_batch_size is {} but the ONNX tensor is a scalar (set max_batch_size: 0)",
                            io.name, spec.max_batch_size
                        ));
                        continue;
                    }
                }
            } else {
                &m.dims
            };
            let fits = dims.len() == io.dims.len()
                && dims.iter().zip(&io.dims).all(|(m, &c)| match m {
                    Dim::Fixed(n) => c < 0 || c as usize == *n,
                    Dim::Dynamic(_) => true,
                });
            if !fits {
                let onnx: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                problems.push(format!(
                    "{what} '{}': config dims {} do not match the ONNX model's [{}]{}",
                    io.name,
                    shape_string(&io.dims),
                    onnx.join(","),
                    if batched {
                        " (after its batch dimension)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    for m in &sig.inputs {
        if !spec.inputs.iter().any(|i| i.name == m.name) {
            problems.push(format!(
                "ONNX input '{}' is missing from the config's inputs",
                m.name
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

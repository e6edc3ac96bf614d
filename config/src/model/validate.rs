//! Checks of a model config: Triton's own rules (errors), likely mistakes (warnings), and what infergate
//! does not support.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::{DataType, InstanceKind, ModelConfig, VersionPolicy};
use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::node::SpanIndex;

struct Checker<'a> {
    spans: Option<&'a SpanIndex>,
    file: &'a Path,
    out: Diagnostics,
}

impl Checker<'_> {
    fn at(&self, path: &str) -> Pos {
        self.spans.map(|s| s.at(path)).unwrap_or_default()
    }

    fn error(&mut self, path: &str, message: String) -> &mut Diagnostic {
        let pos = self.at(path);
        self.out.push(Diagnostic::error(self.file, pos, message));
        let last = self.out.len() - 1;
        &mut self.out.0[last]
    }

    fn warn(&mut self, path: &str, message: String) -> &mut Diagnostic {
        let pos = self.at(path);
        self.out.push(Diagnostic::warning(self.file, pos, message));
        let last = self.out.len() - 1;
        &mut self.out.0[last]
    }
}

fn element_count(dims: &[i64]) -> Option<i64> {
    dims.iter()
        .try_fold(1i64, |acc, d| if *d < 0 { None } else { acc.checked_mul(*d) })
}

/// Triton's rules and likely mistakes.
pub(super) fn validate(c: &ModelConfig, spans: &SpanIndex, file: &Path) -> Diagnostics {
    let mut k = Checker {
        spans: Some(spans),
        file,
        out: Diagnostics::new(),
    };
    let model = if c.name.is_empty() {
        "(unnamed)".to_string()
    } else {
        c.name.clone()
    };
    if c.max_batch_size < 0 {
        k.error(
            "max_batch_size",
            format!(
                "model '{model}': max_batch_size {} must be 0 (no batching) or positive",
                c.max_batch_size
            ),
        );
    }
    let is_ensemble = c.platform == "ensemble";
    // A model's inputs and outputs may be left to auto-complete (the backend's default, as Triton's): it
    // takes them from the model file, and --strict-model-config refuses the config instead. An ensemble
    // has no model file to take them from.
    if c.input.is_empty() && !is_ensemble {
        k.warn("input", format!("model '{model}' declares no inputs"));
    }
    if c.output.is_empty() && is_ensemble {
        k.error("output", format!("ensemble '{model}' declares no outputs"))
            .hint = Some("add output [ { name: \"...\", data_type: TYPE_FP32, dims: [ ... ] } ]".into());
    } else if c.output.is_empty() {
        k.warn(
            "output",
            format!(
                "model '{model}' declares no outputs: auto-complete takes them from the model file \
                 (--strict-model-config refuses this)"
            ),
        );
    }
    let mut names: HashSet<&str> = HashSet::new();
    let ios = c
        .input
        .iter()
        .map(|i| ("input", &i.name, i.data_type, &i.dims, i.reshape.as_ref()))
        .chain(
            c.output
                .iter()
                .map(|o| ("output", &o.name, o.data_type, &o.dims, o.reshape.as_ref())),
        );
    let mut counters: HashMap<&str, usize> = HashMap::new();
    for (kind, name, dt, dims, reshape) in ios {
        let idx = counters.entry(kind).or_insert(0);
        let p = format!("{kind}[{idx}]");
        *idx += 1;
        if name.is_empty() {
            k.error(&p, format!("model '{model}': an {kind} has no name"));
        } else if kind == "input" && !names.insert(name) {
            k.error(
                &format!("{p}.name"),
                format!("model '{model}': input '{name}' is declared twice"),
            );
        }
        if dt == DataType::TYPE_INVALID {
            k.error(&p, format!("model '{model}': {kind} '{name}' has no data_type"))
                .hint = Some("set data_type, e.g. TYPE_FP32".into());
        }
        if dims.is_empty() && reshape.is_none() {
            k.error(&p, format!("model '{model}': {kind} '{name}' has no dims"))
                .hint = Some(
                "give its shape, e.g. dims: [ 3, 224, 224 ] (use reshape: { shape: [ ] } for a scalar)"
                    .into(),
            );
        }
        for (j, d) in dims.iter().enumerate() {
            if *d == 0 || *d < -1 {
                k.error(
                    &format!("{p}.dims[{j}]"),
                    format!("model '{model}': {kind} '{name}' has dimension {d}; dimensions are positive, or -1 for a variable size"),
                );
            }
        }
        if let Some(r) = reshape
            && let (Some(a), Some(b)) = (element_count(dims), element_count(&r.shape))
            && a != b
        {
            k.error(
                &format!("{p}.reshape"),
                format!("model '{model}': {kind} '{name}' reshapes {dims:?} ({a} elements) to {:?} ({b} elements)", r.shape),
            );
        }
        if c.max_batch_size > 0 && dims.first() == Some(&-1) && reshape.is_none() {
            k.warn(
                &format!("{p}.dims"),
                format!("model '{model}': {kind} '{name}' dims start with -1 while max_batch_size is {}", c.max_batch_size),
            )
            .hint = Some(
                "with max_batch_size > 0 the batch dimension is implicit: leave it out of dims (a leading -1 here is \
                 a second, variable dimension)"
                    .into(),
            );
        }
    }
    let mut out_names: HashSet<&str> = HashSet::new();
    for (i, o) in c.output.iter().enumerate() {
        if !o.name.is_empty() && !out_names.insert(&o.name) {
            k.error(
                &format!("output[{i}].name"),
                format!("model '{model}': output '{}' is declared twice", o.name),
            );
        }
    }
    match &c.version_policy {
        Some(VersionPolicy::Latest { num_versions: 0 }) => {
            k.error(
                "version_policy",
                format!("model '{model}': version_policy latest needs num_versions of at least 1"),
            );
        }
        Some(VersionPolicy::Specific { versions }) if versions.is_empty() => {
            k.error(
                "version_policy",
                format!("model '{model}': version_policy specific lists no versions"),
            );
        }
        Some(VersionPolicy::Specific { versions }) => {
            for (i, v) in versions.iter().enumerate() {
                if *v < 0 {
                    k.error(
                        &format!("version_policy.specific.versions[{i}]"),
                        format!("model '{model}': version {v} is negative"),
                    );
                }
            }
        }
        _ => {}
    }
    if let Some(d) = &c.dynamic_batching {
        if c.max_batch_size == 0 {
            k.error(
                "dynamic_batching",
                format!("model '{model}': dynamic_batching needs max_batch_size > 0"),
            )
            .hint = Some(
                "set max_batch_size to the largest batch the model accepts, or remove dynamic_batching"
                    .into(),
            );
        }
        for (i, p) in d.preferred_batch_size.iter().enumerate() {
            if *p <= 0 {
                k.error(
                    &format!("dynamic_batching.preferred_batch_size[{i}]"),
                    format!("model '{model}': preferred batch size {p} must be positive"),
                );
            } else if c.max_batch_size > 0 && *p > c.max_batch_size {
                k.error(
                    &format!("dynamic_batching.preferred_batch_size[{i}]"),
                    format!(
                        "model '{model}': preferred batch size {p} is larger than max_batch_size {}",
                        c.max_batch_size
                    ),
                );
            }
        }
        if d.priority_levels > 0
            && (d.default_priority_level == 0 || d.default_priority_level > d.priority_levels)
        {
            k.error(
                "dynamic_batching.default_priority_level",
                format!(
                    "model '{model}': default_priority_level {} must be between 1 and priority_levels {}",
                    d.default_priority_level, d.priority_levels
                ),
            );
        }
        if d.priority_levels == 0 && d.default_priority_level != 0 {
            k.error(
                "dynamic_batching.default_priority_level",
                format!("model '{model}': default_priority_level is set but priority_levels is 0"),
            );
        }
        if d.preserve_ordering && d.priority_levels > 1 {
            k.error(
                "dynamic_batching.preserve_ordering",
                format!("model '{model}': preserve_ordering allows only one priority level, but priority_levels is {}", d.priority_levels),
            );
        }
        for level in d.priority_queue_policy.keys() {
            if *level == 0 || *level > d.priority_levels {
                k.error(
                    "dynamic_batching.priority_queue_policy",
                    format!(
                        "model '{model}': priority_queue_policy for level {level}, but levels are 1..={}",
                        d.priority_levels
                    ),
                );
            }
        }
    }
    let mut group_names: HashSet<&str> = HashSet::new();
    for (i, g) in c.instance_group.iter().enumerate() {
        let p = format!("instance_group[{i}]");
        if g.count < 0 {
            k.error(
                &format!("{p}.count"),
                format!(
                    "model '{model}': instance group count {} must be positive",
                    g.count
                ),
            );
        }
        if !g.name.is_empty() && !group_names.insert(&g.name) {
            k.error(
                &format!("{p}.name"),
                format!("model '{model}': instance group '{}' is declared twice", g.name),
            );
        }
        if g.kind == InstanceKind::KIND_CPU && !g.gpus.is_empty() {
            k.error(
                &format!("{p}.gpus"),
                format!("model '{model}': instance group {i} is KIND_CPU but lists gpus"),
            );
        }
        if g.gpus.iter().any(|d| *d < 0) {
            k.error(
                &format!("{p}.gpus"),
                format!("model '{model}': GPU indices cannot be negative"),
            );
        }
    }
    let input_names: HashSet<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
    for (i, w) in c.model_warmup.iter().enumerate() {
        let p = format!("model_warmup[{i}]");
        let wname = if w.name.is_empty() {
            format!("#{i}")
        } else {
            format!("'{}'", w.name)
        };
        if c.max_batch_size > 0 && w.batch_size as i64 > c.max_batch_size as i64 {
            k.error(
                &format!("{p}.batch_size"),
                format!(
                    "model '{model}': warmup {wname} has batch_size {} over max_batch_size {}",
                    w.batch_size, c.max_batch_size
                ),
            );
        }
        if c.max_batch_size == 0 && w.batch_size > 1 {
            k.error(
                &format!("{p}.batch_size"),
                format!(
                    "model '{model}': warmup {wname} has batch_size {} but the model does not batch",
                    w.batch_size
                ),
            );
        }
        if w.inputs.is_empty() && !c.input.is_empty() {
            k.error(&p, format!("model '{model}': warmup {wname} gives no inputs"));
        }
        for (name, input) in &w.inputs {
            let ip = format!("{p}.inputs");
            if !input_names.contains(name.as_str()) {
                let known: Vec<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
                k.error(
                    &ip,
                    format!(
                        "model '{model}': warmup {wname} fills unknown input '{name}' (known: {})",
                        known.join(", ")
                    ),
                );
            }
            let fills = [
                input.zero_data,
                input.random_data,
                !input.input_data_file.is_empty(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if fills != 1 {
                k.error(&ip, format!("model '{model}': warmup {wname} input '{name}' must set exactly one of zero_data, random_data, input_data_file"));
            }
            if input.dims.iter().any(|d| *d < 1) {
                k.error(&ip, format!("model '{model}': warmup {wname} input '{name}' has dims {:?}; warmup shapes must be fully specified", input.dims));
            }
            if input.data_type == DataType::TYPE_INVALID {
                k.error(
                    &ip,
                    format!("model '{model}': warmup {wname} input '{name}' has no data_type"),
                );
            }
        }
    }
    if let Some(s) = &c.sequence_batching
        && s.direct.is_some()
        && s.oldest.is_some()
    {
        k.error(
            "sequence_batching",
            format!("model '{model}': sequence_batching sets both direct and oldest; keep one"),
        );
    }
    let schedulers = [
        c.dynamic_batching.is_some(),
        c.sequence_batching.is_some(),
        c.ensemble_scheduling.is_some(),
    ];
    if schedulers.iter().filter(|b| **b).count() > 1 {
        k.error(
            "name",
            format!("model '{model}': dynamic_batching, sequence_batching and ensemble_scheduling exclude each other; keep one"),
        );
    }
    if let Some(e) = &c.ensemble_scheduling {
        ensemble_checks(&mut k, c, e, &model);
    } else if is_ensemble {
        k.error(
            "platform",
            format!("model '{model}': platform is ensemble but there is no ensemble_scheduling"),
        );
    }
    k.out.sort();
    k.out
}

fn ensemble_checks(k: &mut Checker<'_>, c: &ModelConfig, e: &super::EnsembleScheduling, model: &str) {
    if e.step.is_empty() {
        k.error("ensemble_scheduling", format!("ensemble '{model}' has no steps"));
        return;
    }
    let mut available: HashSet<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
    let produced: HashSet<&str> = e
        .step
        .iter()
        .flat_map(|s| s.output_map.values().map(String::as_str))
        .collect();
    available.extend(produced.iter().copied());
    for (i, s) in e.step.iter().enumerate() {
        let p = format!("ensemble_scheduling.step[{i}]");
        if s.model_name.is_empty() {
            k.error(&p, format!("ensemble '{model}': step {i} names no model"));
        }
        for tensor in s.input_map.values() {
            if !available.contains(tensor.as_str()) {
                k.error(
                    &format!("{p}.input_map"),
                    format!("ensemble '{model}': step {i} reads tensor '{tensor}', which is neither an ensemble input nor produced by a step"),
                );
            }
        }
    }
    for (i, o) in c.output.iter().enumerate() {
        if !produced.contains(o.name.as_str()) {
            k.error(
                &format!("output[{i}]"),
                format!(
                    "ensemble '{model}': output '{}' is not produced by any step",
                    o.name
                ),
            );
        }
    }
}

/// What infergate does not act on.
pub(super) fn support(c: &ModelConfig, file: &Path, spans: Option<&SpanIndex>) -> Diagnostics {
    let mut k = Checker {
        spans,
        file,
        out: Diagnostics::new(),
    };
    let model = &c.name;
    let onnx = matches!(
        (c.platform.as_str(), c.backend.as_str()),
        ("onnxruntime_onnx", "" | "onnxruntime") | ("", "onnxruntime")
    );
    if c.platform == "ensemble" {
        k.error(
            "platform",
            format!("model '{model}': ensembles are not supported by infergate"),
        )
        .hint = Some("serve the step models directly and chain them in the client".into());
    } else if !onnx {
        let what = match (c.platform.as_str(), c.backend.as_str()) {
            ("", "") => "no platform or backend".to_string(),
            (p, "") => format!("platform '{p}'"),
            ("", b) => format!("backend '{b}'"),
            (p, b) => format!("platform '{p}' with backend '{b}'"),
        };
        let at = if c.backend.is_empty() {
            "platform"
        } else {
            "backend"
        };
        k.error(
            at,
            format!("model '{model}': {what} is not supported by infergate"),
        )
        .hint = Some(
            "infergate serves ONNX models: set platform: \"onnxruntime_onnx\" (or backend: \"onnxruntime\")"
                .into(),
        );
    }
    if c.sequence_batching.is_some() {
        k.error(
            "sequence_batching",
            format!("model '{model}': sequence_batching (stateful models) is not supported by infergate"),
        );
    }
    if c.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled) {
        k.error(
            "model_transaction_policy",
            format!("model '{model}': decoupled models are not supported by infergate"),
        );
    }
    let mut ignored = |path: &str, what: &str| {
        k.warn(
            path,
            format!("model '{model}': {what} is not supported by infergate and is ignored"),
        );
    };
    if !c.batch_input.is_empty() {
        ignored("batch_input", "batch_input");
    }
    if !c.batch_output.is_empty() {
        ignored("batch_output", "batch_output");
    }
    if c.optimization.is_some() {
        ignored("optimization", "optimization");
    }
    if c.model_operations.is_some() {
        ignored("model_operations", "model_operations");
    }
    if c.model_repository_agents.is_some() {
        ignored("model_repository_agents", "model_repository_agents");
    }
    if c.response_cache.is_some() {
        ignored("response_cache", "response_cache");
    }
    if !c.cc_model_filenames.is_empty() {
        ignored("cc_model_filenames", "cc_model_filenames");
    }
    if !c.metric_tags.is_empty() {
        ignored("metric_tags", "metric_tags");
    }
    if !c.runtime.is_empty() {
        ignored("runtime", "runtime");
    }
    for (i, input) in c.input.iter().enumerate() {
        if input.is_shape_tensor {
            ignored(
                &format!("input[{i}].is_shape_tensor"),
                &format!("input '{}': is_shape_tensor", input.name),
            );
        }
        if input.allow_ragged_batch {
            ignored(
                &format!("input[{i}].allow_ragged_batch"),
                &format!("input '{}': allow_ragged_batch", input.name),
            );
        }
        if input.is_non_linear_format_io {
            ignored(
                &format!("input[{i}].is_non_linear_format_io"),
                &format!("input '{}': is_non_linear_format_io", input.name),
            );
        }
    }
    for (i, output) in c.output.iter().enumerate() {
        if !output.label_filename.is_empty() {
            ignored(
                &format!("output[{i}].label_filename"),
                &format!("output '{}': label_filename (classification)", output.name),
            );
        }
        if output.is_shape_tensor {
            ignored(
                &format!("output[{i}].is_shape_tensor"),
                &format!("output '{}': is_shape_tensor", output.name),
            );
        }
    }
    for (i, g) in c.instance_group.iter().enumerate() {
        let p = format!("instance_group[{i}]");
        if g.kind == InstanceKind::KIND_MODEL {
            ignored(
                &format!("{p}.kind"),
                "instance kind KIND_MODEL (treated as KIND_AUTO)",
            );
        }
        if g.rate_limiter.is_some() {
            ignored(&format!("{p}.rate_limiter"), "instance rate_limiter");
        }
        if !g.secondary_devices.is_empty() {
            ignored(&format!("{p}.secondary_devices"), "instance secondary_devices");
        }
        if !g.profile.is_empty() {
            ignored(&format!("{p}.profile"), "instance profile");
        }
        if g.passive {
            ignored(&format!("{p}.passive"), "passive instances");
        }
        if !g.host_policy.is_empty() {
            ignored(&format!("{p}.host_policy"), "instance host_policy");
        }
    }
    k.out.sort();
    k.out
}

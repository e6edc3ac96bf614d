//! Triton's `/v2/models/{m}/config` JSON: proto field names, default fields printed, 64-bit integers as
//! numbers, and the normalisation Triton applies when it loads a config (checked field for field against
//! a real Triton 2.51 in `tests/fixtures/triton/`).

use serde_json::{Map, Value as Json, json};

use super::{
    DataType, DynamicBatching, EnsembleScheduling, InstanceKind, ModelConfig, ModelInput, ModelOutput,
    QueuePolicy, SequenceBatching, VersionPolicy, WarmupInput,
};

/// Triton's normalised `optimization` when a config gives none.
fn default_optimization() -> Json {
    json!({
        "priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": { "enable": true },
        "output_pinned_memory": { "enable": true },
        "gather_kernel_buffer_threshold": 0,
        "eager_batching": false
    })
}

/// Recursively lays `over` on top of `base`.
fn merge(base: &mut Json, over: &Json) {
    match (base, over) {
        (Json::Object(b), Json::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// A float as protobuf's JSON printer writes it: shortest form, whole numbers without a fraction.
fn float(f: f32) -> Json {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 {
        json!(f as i64)
    } else if f.is_finite() {
        // Shortest decimal that reads back as the same f32, as protobuf prints it.
        format!("{f}")
            .parse::<f64>()
            .map(|v| json!(v))
            .unwrap_or(Json::Null)
    } else if f.is_nan() {
        json!("NaN")
    } else if f > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    }
}

fn dtype(d: DataType) -> Json {
    json!(d.as_str())
}

fn input(i: &ModelInput) -> Json {
    let mut m = Map::new();
    m.insert("name".into(), json!(i.name));
    m.insert("data_type".into(), dtype(i.data_type));
    m.insert(
        "format".into(),
        serde_json::to_value(i.format).unwrap_or(Json::Null),
    );
    m.insert("dims".into(), json!(i.dims));
    if let Some(r) = &i.reshape {
        m.insert("reshape".into(), json!({ "shape": r.shape }));
    }
    m.insert("is_shape_tensor".into(), json!(i.is_shape_tensor));
    m.insert("allow_ragged_batch".into(), json!(i.allow_ragged_batch));
    m.insert("optional".into(), json!(i.optional));
    m.insert("is_non_linear_format_io".into(), json!(i.is_non_linear_format_io));
    Json::Object(m)
}

fn output(o: &ModelOutput) -> Json {
    let mut m = Map::new();
    m.insert("name".into(), json!(o.name));
    m.insert("data_type".into(), dtype(o.data_type));
    m.insert("dims".into(), json!(o.dims));
    if let Some(r) = &o.reshape {
        m.insert("reshape".into(), json!({ "shape": r.shape }));
    }
    m.insert("label_filename".into(), json!(o.label_filename));
    m.insert("is_shape_tensor".into(), json!(o.is_shape_tensor));
    m.insert("is_non_linear_format_io".into(), json!(o.is_non_linear_format_io));
    Json::Object(m)
}

fn version_policy(p: &VersionPolicy) -> Json {
    match p {
        VersionPolicy::Latest { num_versions } => json!({ "latest": { "num_versions": num_versions } }),
        VersionPolicy::All {} => json!({ "all": {} }),
        VersionPolicy::Specific { versions } => json!({ "specific": { "versions": versions } }),
    }
}

fn queue_policy(q: &QueuePolicy) -> Json {
    json!({
        "timeout_action": serde_json::to_value(q.timeout_action).unwrap_or(Json::Null),
        "default_timeout_microseconds": q.default_timeout_microseconds,
        "allow_timeout_override": q.allow_timeout_override,
        "max_queue_size": q.max_queue_size,
    })
}

fn dynamic_batching(d: &DynamicBatching, preferred: Vec<i32>) -> Json {
    let mut m = Map::new();
    m.insert("preferred_batch_size".into(), json!(preferred));
    m.insert(
        "max_queue_delay_microseconds".into(),
        json!(d.max_queue_delay_microseconds),
    );
    m.insert("preserve_ordering".into(), json!(d.preserve_ordering));
    m.insert("priority_levels".into(), json!(d.priority_levels));
    m.insert("default_priority_level".into(), json!(d.default_priority_level));
    if let Some(q) = &d.default_queue_policy {
        m.insert("default_queue_policy".into(), queue_policy(q));
    }
    let per: Map<String, Json> = d
        .priority_queue_policy
        .iter()
        .map(|(k, q)| (k.to_string(), queue_policy(q)))
        .collect();
    m.insert("priority_queue_policy".into(), Json::Object(per));
    Json::Object(m)
}

fn sequence_batching(s: &SequenceBatching) -> Json {
    let mut m = Map::new();
    if let Some(d) = &s.direct {
        m.insert("direct".into(), d.clone());
    }
    if let Some(o) = &s.oldest {
        m.insert(
            "oldest".into(),
            json!({
                "max_candidate_sequences": o.max_candidate_sequences,
                "preferred_batch_size": o.preferred_batch_size,
                "max_queue_delay_microseconds": o.max_queue_delay_microseconds,
                "preserve_ordering": o.preserve_ordering,
            }),
        );
    }
    let idle = if s.max_sequence_idle_microseconds == 0 {
        1_000_000
    } else {
        s.max_sequence_idle_microseconds
    };
    m.insert("max_sequence_idle_microseconds".into(), json!(idle));
    let controls: Vec<Json> = s
        .control_input
        .iter()
        .map(|c| {
            let control: Vec<Json> = c
                .control
                .iter()
                .map(|k| {
                    json!({
                        "kind": k.kind,
                        "int32_false_true": k.int32_false_true,
                        "fp32_false_true": k.fp32_false_true.iter().map(|f| float(*f)).collect::<Vec<_>>(),
                        "bool_false_true": k.bool_false_true,
                        "data_type": dtype(k.data_type),
                    })
                })
                .collect();
            json!({ "name": c.name, "control": control })
        })
        .collect();
    m.insert("control_input".into(), json!(controls));
    m.insert("state".into(), json!(s.state));
    m.insert("iterative_sequence".into(), json!(s.iterative_sequence));
    Json::Object(m)
}

fn ensemble(e: &EnsembleScheduling) -> Json {
    let steps: Vec<Json> = e
        .step
        .iter()
        .map(|s| {
            json!({
                "model_name": s.model_name,
                "model_version": s.model_version,
                "input_map": s.input_map,
                "output_map": s.output_map,
                "model_namespace": s.model_namespace,
            })
        })
        .collect();
    json!({ "step": steps })
}

fn warmup_input(w: &WarmupInput) -> Json {
    let mut m = Map::new();
    m.insert("data_type".into(), dtype(w.data_type));
    m.insert("dims".into(), json!(w.dims));
    // `input_data_type` is a oneof: only the member that is set is printed.
    if w.zero_data {
        m.insert("zero_data".into(), json!(true));
    } else if w.random_data {
        m.insert("random_data".into(), json!(true));
    } else if !w.input_data_file.is_empty() {
        m.insert("input_data_file".into(), json!(w.input_data_file));
    }
    Json::Object(m)
}

/// Builds the JSON, resolving `KIND_AUTO` instance groups to `auto_kind`.
pub(super) fn to_triton_json_with(c: &ModelConfig, auto_kind: InstanceKind) -> Json {
    let is_ensemble = c.platform == "ensemble";
    let (platform, backend) = match (c.platform.as_str(), c.backend.as_str()) {
        ("onnxruntime_onnx", "") => ("onnxruntime_onnx", "onnxruntime"),
        ("", "onnxruntime") => ("onnxruntime_onnx", "onnxruntime"),
        (p, b) => (p, b),
    };
    let mut m = Map::new();
    m.insert("name".into(), json!(c.name));
    m.insert("platform".into(), json!(platform));
    m.insert("backend".into(), json!(backend));
    m.insert("runtime".into(), json!(c.runtime));
    m.insert(
        "version_policy".into(),
        version_policy(&c.effective_version_policy()),
    );
    m.insert("max_batch_size".into(), json!(c.max_batch_size));
    m.insert("input".into(), Json::Array(c.input.iter().map(input).collect()));
    m.insert(
        "output".into(),
        Json::Array(c.output.iter().map(output).collect()),
    );
    m.insert("batch_input".into(), json!(c.batch_input));
    m.insert("batch_output".into(), json!(c.batch_output));
    if !is_ensemble {
        let mut opt = default_optimization();
        if let Some(user) = &c.optimization {
            merge(&mut opt, user);
        }
        m.insert("optimization".into(), opt);
    }
    if let Some(d) = &c.dynamic_batching {
        m.insert(
            "dynamic_batching".into(),
            dynamic_batching(d, c.preferred_batch_sizes()),
        );
    }
    if let Some(s) = &c.sequence_batching {
        m.insert("sequence_batching".into(), sequence_batching(s));
    }
    if let Some(e) = &c.ensemble_scheduling {
        m.insert("ensemble_scheduling".into(), ensemble(e));
    }
    let groups: Vec<Json> = if is_ensemble {
        Vec::new()
    } else if c.instance_group.is_empty() {
        vec![json!({
            "name": format!("{}_0", c.name), "kind": serde_json::to_value(auto_kind).unwrap_or(Json::Null),
            "count": 1, "gpus": [], "secondary_devices": [], "profile": [], "passive": false, "host_policy": ""
        })]
    } else {
        c.instance_group
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let kind = if g.kind == InstanceKind::KIND_AUTO {
                    auto_kind
                } else {
                    g.kind
                };
                let mut o = Map::new();
                let name = if g.name.is_empty() {
                    format!("{}_{i}", c.name)
                } else {
                    g.name.clone()
                };
                o.insert("name".into(), json!(name));
                o.insert("kind".into(), serde_json::to_value(kind).unwrap_or(Json::Null));
                o.insert("count".into(), json!(g.count.max(1)));
                o.insert("gpus".into(), json!(g.gpus));
                o.insert("secondary_devices".into(), json!(g.secondary_devices));
                o.insert("profile".into(), json!(g.profile));
                o.insert("passive".into(), json!(g.passive));
                o.insert("host_policy".into(), json!(g.host_policy));
                if let Some(r) = &g.rate_limiter {
                    o.insert("rate_limiter".into(), r.clone());
                }
                Json::Object(o)
            })
            .collect()
    };
    m.insert("instance_group".into(), Json::Array(groups));
    let filename = if !c.default_model_filename.is_empty() || is_ensemble {
        c.default_model_filename.clone()
    } else {
        c.model_filename().to_string()
    };
    m.insert("default_model_filename".into(), json!(filename));
    m.insert("cc_model_filenames".into(), json!(c.cc_model_filenames));
    m.insert("metric_tags".into(), json!(c.metric_tags));
    let params: Map<String, Json> = c
        .parameters
        .iter()
        .map(|(k, v)| (k.clone(), json!({ "string_value": v.string_value })))
        .collect();
    m.insert("parameters".into(), Json::Object(params));
    let warmups: Vec<Json> = c
        .model_warmup
        .iter()
        .map(|w| {
            let inputs: Map<String, Json> = w
                .inputs
                .iter()
                .map(|(k, v)| (k.clone(), warmup_input(v)))
                .collect();
            json!({ "name": w.name, "batch_size": w.batch_size, "inputs": inputs, "count": w.count })
        })
        .collect();
    m.insert("model_warmup".into(), Json::Array(warmups));
    if let Some(ops) = &c.model_operations {
        m.insert("model_operations".into(), ops.clone());
    }
    match (&c.model_transaction_policy, is_ensemble) {
        (Some(p), _) => {
            m.insert(
                "model_transaction_policy".into(),
                json!({ "decoupled": p.decoupled }),
            );
        }
        (None, true) => {
            m.insert("model_transaction_policy".into(), json!({ "decoupled": false }));
        }
        (None, false) => {}
    }
    if let Some(a) = &c.model_repository_agents {
        m.insert("model_repository_agents".into(), a.clone());
    }
    if let Some(r) = &c.response_cache {
        let mut cache = json!({ "enable": false });
        merge(&mut cache, r);
        m.insert("response_cache".into(), cache);
    }
    Json::Object(m)
}

/// The JSON as a Triton without GPUs prints it (`KIND_AUTO` becomes `KIND_CPU`).
pub(super) fn to_triton_json(c: &ModelConfig) -> Json {
    to_triton_json_with(c, InstanceKind::KIND_CPU)
}

use std::path::{Path, PathBuf};

use super::*;

const FILE: &str = "config.pbtxt";

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triton")
}

fn pb(text: &str) -> Result<ModelConfig, Diagnostics> {
    parse_pbtxt(text, Path::new(FILE))
}

fn problems(text: &str) -> Vec<String> {
    match load_pbtxt(text, Path::new(FILE)) {
        Ok(l) => l.warnings.iter().map(ToString::to_string).collect(),
        Err(d) => d.iter().map(ToString::to_string).collect(),
    }
}

fn assert_problem(text: &str, expected: &str) {
    let all = problems(text);
    assert!(
        all.iter().any(|p| p == expected),
        "expected\n  {expected}\namong\n  {}",
        all.join("\n  ")
    );
}

/// Every fixture was served by a real Triton 2.51 (`tools/triton-peer`) and its
/// `/v2/models/{m}/config` answer saved as `triton.json`; ours must match field for field.
#[test]
fn json_matches_real_triton_for_every_fixture() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture_dir()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(dir.join("config.pbtxt")).unwrap();
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("triton.json")).unwrap()).unwrap();
        let config = parse_pbtxt(&text, &dir.join("config.pbtxt")).unwrap_or_else(|e| panic!("{e}"));
        let ours = config.to_triton_json();
        assert_eq!(
            ours,
            expected,
            "{}:\nours:   {}\ntriton: {}",
            dir.display(),
            serde_json::to_string(&ours).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
        checked += 1;
    }
    assert_eq!(checked, 5, "fixtures: simple, nobatch, ens, seq, dyn");
}

#[test]
fn realistic_config_is_typed() {
    let text = std::fs::read_to_string(fixture_dir().join("simple/config.pbtxt")).unwrap();
    let c = pb(&text).unwrap();
    assert_eq!(c.name, "simple");
    assert_eq!(c.max_batch_size, 8);
    assert_eq!(
        c.version_policy,
        Some(VersionPolicy::Specific { versions: vec![1, 2] })
    );
    assert_eq!(c.input[1].dims, vec![-1]);
    assert_eq!(c.input[1].reshape, Some(Reshape { shape: vec![1, -1] }));
    assert_eq!(c.instance_group[0].count, 2);
    assert_eq!(c.instance_group[0].kind, InstanceKind::KIND_CPU);
    let d = c.dynamic_batching.as_ref().unwrap();
    assert_eq!(d.preferred_batch_size, vec![4, 8]);
    let q = d.default_queue_policy.as_ref().unwrap();
    assert_eq!(
        (q.timeout_action, q.default_timeout_microseconds, q.max_queue_size),
        (TimeoutAction::REJECT, 5_000_000, 16)
    );
    assert_eq!(d.priority_queue_policy[&2].timeout_action, TimeoutAction::DELAY);
    assert_eq!(c.parameters["mode"].string_value, "fast");
    assert_eq!(c.parameters["threads"].string_value, "2");
    assert_eq!(c.model_warmup[0].inputs["INPUT0"].dims, vec![4]);
    assert!(c.model_warmup[0].inputs["INPUT1"].random_data);
    assert_eq!(c.select_versions(&[1, 2, 3]), vec![2, 1]);
    let ens = pb(&std::fs::read_to_string(fixture_dir().join("ens/config.pbtxt")).unwrap()).unwrap();
    let step = &ens.ensemble_scheduling.as_ref().unwrap().step[0];
    assert_eq!(step.model_version, -1);
    assert_eq!(step.input_map["INPUT1"], "IN1");
}

#[test]
fn yaml_with_the_same_field_names_gives_the_same_config() {
    let pbtxt = std::fs::read_to_string(fixture_dir().join("simple/config.pbtxt")).unwrap();
    let yaml = r#"
# The same model as tests/fixtures/triton/simple/config.pbtxt, in YAML.
name: simple
backend: python
max_batch_size: 8
version_policy: { specific: { versions: [1, 2] } }
input:
  - { name: INPUT0, data_type: TYPE_FP32, dims: [4] }
  - { name: INPUT1, data_type: TYPE_INT32, dims: [-1], optional: false, reshape: { shape: [1, -1] } }
output:
  - { name: OUTPUT0, data_type: TYPE_FP32, dims: [4], label_filename: labels.txt }
  - { name: OUTPUT1, data_type: TYPE_INT32, dims: [-1] }
instance_group: [{ count: 2, kind: KIND_CPU }]
dynamic_batching:
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 100
  preserve_ordering: false
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy:
    timeout_action: REJECT
    default_timeout_microseconds: 5000000
    allow_timeout_override: true
    max_queue_size: 16
  priority_queue_policy:
    2: { timeout_action: DELAY, default_timeout_microseconds: 100, max_queue_size: 4 }
parameters:
  mode: { string_value: fast }
  threads: { string_value: "2" }
model_warmup:
  - name: zeros
    batch_size: 2
    inputs:
      INPUT0: { data_type: TYPE_FP32, dims: [4], zero_data: true }
      INPUT1: { data_type: TYPE_INT32, dims: [3], random_data: true }
"#;
    let from_yaml = parse_model_yaml(yaml, Path::new("config.yaml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_yaml, pb(&pbtxt).unwrap());
    let e = parse_model_yaml(
        "name: x\ninput: [{ name: a, data_typ: TYPE_FP32 }]\n",
        Path::new("config.yaml"),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config.yaml:2:20: unknown field 'data_typ' in 'input[0]' (hint: did you mean 'data_type'?)"
    );
}

#[test]
fn pbtxt_type_errors_point_at_the_value() {
    assert_eq!(
        problems("name: \"m\"\nmax_batch_size: \"eight\"\n"),
        vec![
            "config.pbtxt:2:17: max_batch_size: expected an integer, found string \"eight\" (remove the quotes)"
        ]
    );
    assert_eq!(
        problems("name: \"m\"\ninput { name: \"x\" data_type: TYPE_FP23 dims: [1] }\n"),
        vec![
            "config.pbtxt:2:30: input[0].data_type: unknown value 'TYPE_FP23' (expected one of: TYPE_INVALID, \
             TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, \
             TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING, TYPE_BF16) (hint: did you mean 'TYPE_FP32'?)"
        ]
    );
    assert_eq!(
        problems("name: \"m\"\nmax_batch_size: 1\nmax_batch_size: 2\n"),
        vec![
            "config.pbtxt:2:17: max_batch_size: expected an integer, but the field is given more than once (it is not a repeated field)"
        ]
    );
    assert_eq!(
        problems("name: \"m\"\nmax_batch_sise: 1\noutput { name: \"y\" data_type: TYPE_FP32 dims: [1] }\n"),
        vec![
            "config.pbtxt:2:1: unknown field 'max_batch_sise' at the top level (hint: did you mean 'max_batch_size'?)"
        ]
    );
    assert_eq!(
        problems("instance_group [ { count: 99999999999 } ]"),
        vec![
            "config.pbtxt:1:27: instance_group[0].count: value 99999999999 is out of range for i32 (-2147483648..=2147483647)"
        ]
    );
}

const OK: &str = "name: \"m\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n\
input { name: \"x\" data_type: TYPE_FP32 dims: [ 3 ] }\noutput { name: \"y\" data_type: TYPE_FP32 dims: [ 3 ] }\n";

#[test]
fn io_rules() {
    assert!(problems(OK).is_empty(), "{:?}", problems(OK));
    assert_problem(
        &OK.replace("dims: [ 3 ] }\noutput", "dims: [ -1, 3 ] }\noutput"),
        "config.pbtxt:4:46: warning: model 'm': input 'x' dims start with -1 while max_batch_size is 8 (hint: with \
         max_batch_size > 0 the batch dimension is implicit: leave it out of dims (a leading -1 here is a second, \
         variable dimension))",
    );
    assert_problem(
        &OK.replace("dims: [ 3 ] }\noutput", "dims: [ 0 ] }\noutput"),
        "config.pbtxt:4:48: model 'm': input 'x' has dimension 0; dimensions are positive, or -1 for a variable size",
    );
    assert_problem(
        &OK.replace(
            "data_type: TYPE_FP32 dims: [ 3 ] }\noutput",
            "dims: [ 3 ] }\noutput",
        ),
        "config.pbtxt:4:7: model 'm': input 'x' has no data_type (hint: set data_type, e.g. TYPE_FP32)",
    );
    assert_problem(
        &OK.replace("dims: [ 3 ] }\noutput", "}\noutput"),
        "config.pbtxt:4:7: model 'm': input 'x' has no dims (hint: give its shape, e.g. dims: [ 3, 224, 224 ] (use reshape: { shape: [ ] } for a scalar))",
    );
    assert_problem(
        &OK.replace(
            "dims: [ 3 ] }\noutput",
            "dims: [ 3 ] reshape { shape: [ 2, 2 ] } }\noutput",
        ),
        "config.pbtxt:4:60: model 'm': input 'x' reshapes [3] (3 elements) to [2, 2] (4 elements)",
    );
    assert_problem(
        &format!("{OK}input {{ name: \"x\" data_type: TYPE_FP32 dims: [ 1 ] }}\n"),
        "config.pbtxt:6:15: model 'm': input 'x' is declared twice",
    );
    assert_problem(
        "name: \"m\"\nmax_batch_size: -2\n",
        "config.pbtxt:2:17: model 'm': max_batch_size -2 must be 0 (no batching) or positive",
    );
    // Left to auto-complete: a warning, not an error (the backend refuses it under --strict-model-config).
    assert_problem(
        "name: \"m\"\n",
        "config.pbtxt:1:1: warning: model 'm' declares no outputs: auto-complete takes them from the model file (--strict-model-config refuses this)",
    );
}

#[test]
fn batching_rules() {
    assert_problem(
        &format!("{OK}dynamic_batching {{ preferred_batch_size: [ 4, 16 ] }}\n"),
        "config.pbtxt:6:47: model 'm': preferred batch size 16 is larger than max_batch_size 8",
    );
    assert_problem(
        &format!(
            "{}dynamic_batching {{ }}\n",
            OK.replace("max_batch_size: 8", "max_batch_size: 0")
        ),
        "config.pbtxt:6:18: model 'm': dynamic_batching needs max_batch_size > 0 (hint: set max_batch_size to the largest batch the model accepts, or remove dynamic_batching)",
    );
    let prio = format!(
        "{OK}dynamic_batching {{\n  priority_levels: 2\n  default_priority_level: 3\n  preserve_ordering: true\n  priority_queue_policy {{ key: 5 value {{ max_queue_size: 1 }} }}\n}}\n"
    );
    let all = problems(&prio);
    for e in [
        "config.pbtxt:8:27: model 'm': default_priority_level 3 must be between 1 and priority_levels 2",
        "config.pbtxt:9:22: model 'm': preserve_ordering allows only one priority level, but priority_levels is 2",
        "config.pbtxt:10:25: model 'm': priority_queue_policy for level 5, but levels are 1..=2",
    ] {
        assert!(all.contains(&e.to_string()), "missing {e} in {all:#?}");
    }
}

#[test]
fn version_instance_and_warmup_rules() {
    assert_problem(
        &format!("{OK}version_policy {{ latest {{ num_versions: 0 }} }}\n"),
        "config.pbtxt:6:16: model 'm': version_policy latest needs num_versions of at least 1",
    );
    assert_problem(
        &format!("{OK}version_policy: {{ specific {{ }} }}\n"),
        "config.pbtxt:6:17: model 'm': version_policy specific lists no versions",
    );
    assert_problem(
        &format!("{OK}instance_group [ {{ kind: KIND_CPU gpus: [ 0 ] }}, {{ count: -1 }} ]\n"),
        "config.pbtxt:6:41: model 'm': instance group 0 is KIND_CPU but lists gpus",
    );
    assert_problem(
        &format!("{OK}instance_group [ {{ kind: KIND_CPU gpus: [ 0 ] }}, {{ count: -1 }} ]\n"),
        "config.pbtxt:6:59: model 'm': instance group count -1 must be positive",
    );
    let warm = format!(
        "{OK}model_warmup [ {{ name: \"w\" batch_size: 9 inputs {{ key: \"z\" value {{ data_type: TYPE_FP32 dims: [ -1 ] }} }} }} ]\n"
    );
    let all = problems(&warm);
    for e in [
        "config.pbtxt:6:40: model 'm': warmup 'w' has batch_size 9 over max_batch_size 8",
        "config.pbtxt:6:49: model 'm': warmup 'w' fills unknown input 'z' (known: x)",
        "config.pbtxt:6:49: model 'm': warmup 'w' input 'z' must set exactly one of zero_data, random_data, input_data_file",
        "config.pbtxt:6:49: model 'm': warmup 'w' input 'z' has dims [-1]; warmup shapes must be fully specified",
    ] {
        assert!(all.contains(&e.to_string()), "missing {e} in {all:#?}");
    }
}

#[test]
fn ensemble_rules() {
    let text = "name: \"e\"\nplatform: \"ensemble\"\ninput { name: \"IN\" data_type: TYPE_FP32 dims: [1] }\n\
output { name: \"OUT\" data_type: TYPE_FP32 dims: [1] }\noutput { name: \"LOST\" data_type: TYPE_FP32 dims: [1] }\n\
ensemble_scheduling { step { model_name: \"a\" input_map { key: \"x\" value: \"NOPE\" } output_map { key: \"y\" value: \"OUT\" } } }\n";
    let all = problems(text);
    for e in [
        "config.pbtxt:5:8: ensemble 'e': output 'LOST' is not produced by any step",
        "config.pbtxt:6:56: ensemble 'e': step 0 reads tensor 'NOPE', which is neither an ensemble input nor produced by a step",
    ] {
        assert!(all.contains(&e.to_string()), "missing {e} in {all:#?}");
    }
}

#[test]
fn folder_name_must_match() {
    let mut loaded = load_pbtxt(OK, Path::new("repo/other/config.pbtxt")).unwrap();
    let e = loaded
        .check_folder_name("other", Path::new("repo/other/config.pbtxt"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "repo/other/config.pbtxt:1:7: model name 'm' differs from its folder name 'other' (hint: rename the folder to \
         'm' or set name: \"other\" (Triton would skip this model silently))"
    );
    let mut unnamed = load_pbtxt(&OK.replace("name: \"m\"\n", ""), Path::new("x")).unwrap();
    unnamed.check_folder_name("resnet", Path::new("x")).unwrap();
    assert_eq!(unnamed.config.name, "resnet");
}

#[test]
fn unsupported_features_are_reported() {
    let text = std::fs::read_to_string(fixture_dir().join("seq/config.pbtxt")).unwrap();
    let loaded = load_pbtxt(&text, Path::new("seq/config.pbtxt")).unwrap();
    let support = loaded
        .config
        .support_diagnostics(Path::new("seq/config.pbtxt"), Some(&loaded.spans));
    let all: Vec<String> = support.iter().map(ToString::to_string).collect();
    assert_eq!(
        all,
        vec![
            "seq/config.pbtxt:2:10: model 'seq': backend 'python' is not supported by infergate (hint: infergate serves \
             ONNX models: set platform: \"onnxruntime_onnx\" (or backend: \"onnxruntime\"))",
            "seq/config.pbtxt:6:19: model 'seq': sequence_batching (stateful models) is not supported by infergate",
        ]
    );
    let ens = pb(&std::fs::read_to_string(fixture_dir().join("ens/config.pbtxt")).unwrap()).unwrap();
    assert!(
        ens.support_diagnostics(Path::new("e"), None)
            .to_string()
            .contains("ensembles are not supported by infergate")
    );
    let fine = pb(&format!(
        "{OK}optimization {{ priority: PRIORITY_MAX }}\nresponse_cache {{ enable: true }}\n"
    ))
    .unwrap();
    let d = fine.support_diagnostics(Path::new("c"), None);
    assert!(!d.has_errors(), "{d}");
    assert_eq!(d.warnings().count(), 2, "{d}");
    assert!(
        d.to_string()
            .contains("optimization is not supported by infergate and is ignored"),
        "{d}"
    );
}

#[test]
fn onnx_defaults_in_json() {
    let c = pb(OK).unwrap();
    let j = c.to_triton_json();
    assert_eq!(j["backend"], "onnxruntime");
    assert_eq!(j["default_model_filename"], "model.onnx");
    assert_eq!(
        j["version_policy"],
        serde_json::json!({ "latest": { "num_versions": 1 } })
    );
    assert_eq!(j["instance_group"][0]["name"], "m_0");
    assert_eq!(j["instance_group"][0]["count"], 1);
    assert_eq!(c.model_filename(), "model.onnx");
    assert_eq!(DataType::TYPE_STRING.kserve_name(), Some("BYTES"));
    assert_eq!(DataType::TYPE_FP16.size(), Some(2));
}

#[test]
fn scheduler_rules() {
    assert_problem(
        &format!("{OK}dynamic_batching {{ }}\nsequence_batching {{ oldest {{ }} }}\n"),
        "config.pbtxt:1:7: model 'm': dynamic_batching, sequence_batching and ensemble_scheduling exclude each other; keep one",
    );
    assert_problem(
        &format!("{OK}sequence_batching {{ direct {{ }} oldest {{ }} }}\n"),
        "config.pbtxt:6:19: model 'm': sequence_batching sets both direct and oldest; keep one",
    );
    let empty_maps = pb(&format!("{OK}parameters {{}}\nmetric_tags {{ }}\n")).unwrap();
    assert!(empty_maps.parameters.is_empty() && empty_maps.metric_tags.is_empty());
}

/// Asserts a diagnostic with exactly this message (after its `file:line:column: ` prefix) exists.
fn assert_message(text: &str, message: &str) {
    let all = problems(text);
    assert!(
        all.iter()
            .any(|p| p.split_once(": ").is_some_and(|(_, m)| m == message)),
        "expected message\n  {message}\namong\n  {}",
        all.join("\n  ")
    );
}

#[test]
fn remaining_rules_have_exact_messages() {
    let io = "name: \"m\"\nmax_batch_size: 0\ninput { data_type: TYPE_FP32 dims: [ 1 ] }\n\
output { name: \"y\" data_type: TYPE_FP32 dims: [ 1 ] }\noutput { name: \"y\" data_type: TYPE_FP32 dims: [ 1 ] }\n\
version_policy { specific { versions: [ -1 ] } }\ninstance_group { kind: KIND_GPU gpus: [ -2 ] }\n\
model_warmup { name: \"w\" batch_size: 4 }\nmodel_warmup { batch_size: 1 inputs { key: \"\" value { zero_data: true dims: [ 1 ] } } }\n";
    assert_message(io, "model 'm': an input has no name");
    assert_message(io, "model 'm': output 'y' is declared twice");
    assert_message(io, "model 'm': version -1 is negative");
    assert_message(io, "model 'm': GPU indices cannot be negative");
    assert_message(
        io,
        "model 'm': warmup 'w' has batch_size 4 but the model does not batch",
    );
    assert_message(io, "model 'm': warmup 'w' gives no inputs");
    assert_message(io, "model 'm': warmup #1 input '' has no data_type");
    let prio = format!("{OK}dynamic_batching {{ default_priority_level: 1 preferred_batch_size: [ 0 ] }}\n");
    assert_message(
        &prio,
        "model 'm': default_priority_level is set but priority_levels is 0",
    );
    assert_message(&prio, "model 'm': preferred batch size 0 must be positive");
    let ens =
        "name: \"e\"\nplatform: \"ensemble\"\noutput { name: \"o\" data_type: TYPE_FP32 dims: [ 1 ] }\n";
    assert_message(
        ens,
        "model 'e': platform is ensemble but there is no ensemble_scheduling",
    );
    let ens2 = format!("{ens}ensemble_scheduling {{ }}\n");
    assert_message(&ens2, "ensemble 'e' has no steps");
    let ens3 =
        format!("{ens}ensemble_scheduling {{ step {{ output_map {{ key: \"a\" value: \"o\" }} }} }}\n");
    assert_message(&ens3, "ensemble 'e': step 0 names no model");
    assert_message(
        "name: \"m\"\noutput { name: \"y\" data_type: TYPE_FP32 dims: [ 1 ] }\n",
        "warning: model 'm' declares no inputs",
    );
    let trt = pb(&OK.replace("onnxruntime_onnx", "tensorrt_plan")).unwrap();
    let d: Vec<String> = trt
        .support_diagnostics(Path::new("c"), None)
        .iter()
        .map(|d| d.message.clone())
        .collect();
    assert_eq!(
        d,
        vec!["model 'm': platform 'tensorrt_plan' is not supported by infergate"]
    );
    let decoupled = pb(&format!("{OK}model_transaction_policy {{ decoupled: true }}\n")).unwrap();
    assert!(decoupled.support_diagnostics(Path::new("c"), None).has_errors());
}

//! Real-model tests: the networks of `models/export_models.py` (MobileNetV3-style, ResNet-style,
//! detection, transformer encoder, LSTM speech) against onnxruntime at batch 1, 3 and 16, and the
//! benchmark-size networks (224² images, 128 tokens, 100 frames) at batch 1 and 16.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use infergate_engine::{Dim, ExecutorKind, Model, Session, SessionOptions, Tensor};

use support::conformance::read_pb;

const BATCHES: [usize; 3] = [1, 3, 16];
const BENCH_BATCHES: [usize; 2] = [1, 16];

/// Generate the models and onnxruntime's outputs once per test binary.
fn models_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| support::python::export_models("engine-models", "ci", "1,3,16"))
}

/// The benchmark-size models (`--size bench`, as `scripts/bench-engine.sh` runs them).
fn bench_models_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| support::python::export_models("engine-models-bench", "bench", "1,16"))
}

fn check_model(name: &str, dynamic_inputs: &[(&str, &[bool])]) {
    check_model_in(models_dir(), &BATCHES, name, dynamic_inputs);
}

fn check_model_in(dir: &Path, batches: &[usize], name: &str, dynamic_inputs: &[(&str, &[bool])]) {
    let model = Arc::new(Model::load(dir.join(format!("{name}.onnx"))).unwrap());
    for (input, dyn_mask) in dynamic_inputs {
        let spec = model
            .signature()
            .inputs
            .iter()
            .find(|s| s.name == *input)
            .unwrap();
        let got: Vec<bool> = spec.dims.iter().map(|d| matches!(d, Dim::Dynamic(_))).collect();
        assert_eq!(&got, dyn_mask, "{name}: dynamic dims of input '{input}'");
    }
    for out in &model.signature().outputs {
        assert!(
            matches!(out.dims[0], Dim::Dynamic(_)),
            "{name}: output '{}' should have a dynamic batch dim: {:?}",
            out.name,
            out.dims
        );
    }
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor: ExecutorKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    for &b in batches {
        let set = dir.join(name).join(format!("b{b}"));
        let inputs: Vec<(String, Tensor)> = model
            .signature()
            .inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.name.clone(),
                    read_pb(&set.join(format!("input_{i}.pb"))).unwrap(),
                )
            })
            .collect();
        // Twice: a batch that can run as one-sample runs times each way on its first runs (whole,
        // then split; the serial way runs the same one-sample plan as split), so both plans are checked.
        for run in 1..=2 {
            let outputs = session
                .run_blocking(inputs.clone())
                .unwrap_or_else(|e| panic!("{name} batch {b} run {run}: {e}"));
            for (i, (oname, got)) in outputs.iter().enumerate() {
                let want = read_pb(&set.join(format!("output_{i}.pb"))).unwrap();
                support::conformance::compare(oname, got, &want, 1e-3, 1e-4)
                    .unwrap_or_else(|e| panic!("{name} batch {b} run {run}: {e}"));
            }
        }
    }
}

#[test]
fn mobilenet_v3_matches_onnxruntime() {
    check_model("mobilenet_v3", &[("input", &[true, false, false, false])]);
}

#[test]
fn resnet_matches_onnxruntime() {
    check_model("resnet", &[("input", &[true, false, false, false])]);
}

#[test]
fn detection_matches_onnxruntime() {
    check_model("detection", &[("image", &[true, false, false, false])]);
}

#[test]
fn transformer_matches_onnxruntime() {
    check_model("transformer", &[("input_ids", &[true, true])]);
}

#[test]
fn lstm_speech_matches_onnxruntime() {
    check_model("lstm_speech", &[("features", &[true, true, false])]);
}

/// The bench-size networks: other spatial sizes and strides than the CI ones, and batch 16 runs
/// whole and as one-sample runs (the CPU executor's batch splitting) for all but the LSTM.
#[test]
fn bench_size_networks_match_onnxruntime() {
    let image = [true, false, false, false];
    for (name, input, dynamic) in [
        ("mobilenet_v3", "input", &image[..]),
        ("resnet", "input", &image[..]),
        ("detection", "image", &image[..]),
        ("transformer", "input_ids", &[true, true][..]),
        ("lstm_speech", "features", &[true, true, false][..]),
    ] {
        check_model_in(bench_models_dir(), &BENCH_BATCHES, name, &[(input, dynamic)]);
    }
}

#[test]
fn async_run_matches_blocking_run() {
    let dir = models_dir();
    let model = Arc::new(Model::load(dir.join("resnet.onnx")).unwrap());
    let session = Session::new(model, SessionOptions::default()).unwrap();
    let input = read_pb(&dir.join("resnet/b3/input_0.pb")).unwrap();
    let a = session
        .run_blocking(vec![("input".into(), input.clone())])
        .unwrap();
    let b = futures::executor::block_on(session.run(vec![("input".into(), input)])).unwrap();
    assert_eq!(a, b);
}

#[test]
fn passes_recognise_layernorm_gelu_and_fold_batchnorm() {
    use infergate_engine::ir::{Op, UnaryOp};
    let dir = models_dir();
    let t = Model::load(dir.join("transformer.onnx")).unwrap();
    let ops: Vec<&Op> = t.graph().nodes.iter().map(|n| &n.op).collect();
    let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    assert_eq!(
        count(&|o| matches!(o, Op::LayerNormalization { .. })),
        4,
        "{ops:?}"
    );
    assert_eq!(count(&|o| matches!(o, Op::Unary(UnaryOp::Erf))), 0);
    let gelus = count(&|o| matches!(o, Op::Unary(UnaryOp::Gelu { .. })))
        + ops
            .iter()
            .filter_map(|o| match o {
                Op::MatMul { epilogue, .. } => Some(
                    epilogue
                        .steps
                        .iter()
                        .filter(|s| {
                            matches!(s, infergate_engine::ir::EpilogueStep::Unary(UnaryOp::Gelu { .. }))
                        })
                        .count(),
                ),
                _ => None,
            })
            .sum::<usize>();
    assert_eq!(gelus, 2, "{ops:?}");
    let m = Model::load(dir.join("mobilenet_v3.onnx")).unwrap();
    assert!(
        !m.graph()
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::BatchNormalization { .. }))
    );
    assert!(
        m.graph()
            .nodes
            .iter()
            .any(|n| matches!(&n.op, Op::Conv { activation, .. } if !activation.is_empty()))
    );
}

//! Real models on the wgpu executor: the networks of `models/export_models.py` (MobileNetV3-style,
//! ResNet-style, detection, transformer encoder, LSTM speech) against onnxruntime at batch 1, 3 and 16,
//! plus the executor's own guarantees on a whole model (one plan per batch bucket, device memory reported).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use infergate_engine::{AdapterChoice, ExecutorKind, Model, Session, SessionOptions, Tensor};

use support::conformance::read_pb;

const BATCHES: [usize; 3] = [1, 3, 16];

/// The models and onnxruntime's outputs, generated once per test binary.
fn models_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| support::python::export_models("engine-models-wgpu", "ci", "1,3,16"))
}

fn wgpu_session(model: Arc<Model>) -> Session {
    Session::new(
        model,
        SessionOptions {
            executor: ExecutorKind::Wgpu(AdapterChoice::Auto),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("wgpu session (is mesa-vulkan-drivers installed?): {e}"))
}

fn inputs_for(model: &Model, set: &Path) -> Vec<(String, Tensor)> {
    model
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
        .collect()
}

fn check_model(name: &str) {
    let dir = models_dir();
    let model = Arc::new(Model::load(dir.join(format!("{name}.onnx"))).unwrap());
    let session = wgpu_session(model.clone());
    for b in BATCHES {
        let set = dir.join(name).join(format!("b{b}"));
        let outputs = futures::executor::block_on(session.run(inputs_for(&model, &set)))
            .unwrap_or_else(|e| panic!("{name} batch {b}: {e}"));
        for (i, (oname, got)) in outputs.iter().enumerate() {
            let want = read_pb(&set.join(format!("output_{i}.pb"))).unwrap();
            support::conformance::compare(oname, got, &want, 1e-3, 1e-4)
                .unwrap_or_else(|e| panic!("{name} batch {b} on wgpu: {e}"));
        }
    }
    assert!(
        session.device_memory_bytes() > 0,
        "{name}: plans hold device memory"
    );
}

#[test]
fn mobilenet_v3_matches_onnxruntime_on_wgpu() {
    check_model("mobilenet_v3");
}

#[test]
fn resnet_matches_onnxruntime_on_wgpu() {
    check_model("resnet");
}

#[test]
fn detection_matches_onnxruntime_on_wgpu() {
    check_model("detection");
}

#[test]
fn transformer_matches_onnxruntime_on_wgpu() {
    check_model("transformer");
}

#[test]
fn lstm_speech_matches_onnxruntime_on_wgpu() {
    check_model("lstm_speech");
}

#[test]
fn wrong_input_is_an_invalid_input_error_and_the_session_keeps_serving() {
    let dir = models_dir();
    let model = Arc::new(Model::load(dir.join("resnet.onnx")).unwrap());
    let session = wgpu_session(model.clone());
    let set = dir.join("resnet").join("b1");
    let mut bad = inputs_for(&model, &set);
    bad[0].1.shape.remove(0);
    let err = futures::executor::block_on(session.run(bad)).unwrap_err();
    assert_eq!(err.kind(), infergate_engine::ErrorKind::InvalidInput, "{err}");
    let ok = futures::executor::block_on(session.run(inputs_for(&model, &set)));
    assert!(ok.is_ok(), "the session still serves after a bad request: {ok:?}");
}

//! The zoo of real exporter output (`zoo/export_zoo.py`: PaddleOCR's det/rec/cls as shipped in a PyPI wheel,
//! torchvision ResNet-50, MobileNetV3, EfficientNet-B0, ViT-B/16 and SSDlite, and BERT-base, ViT-S and
//! Whisper-tiny-like encoders from transformers configs) on the CPU executor against onnxruntime at batch 1
//! and 2, with the test inputs of the zoo's manifest.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use infergate_engine::{ExecutorKind, Session, SessionOptions};

/// Relative tolerance per element, and absolute tolerance as a fraction of the output's largest magnitude.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-4;

fn check_cpu(name: &str) {
    let model = support::zoo::load(name);
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor: ExecutorKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    support::zoo::check(&session, &model, name, &[1, 2], RTOL, ATOL);
}

#[test]
fn zoo_manifest_records_source_and_exporter() {
    let dir = support::zoo::zoo_dir();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let models = manifest.as_object().unwrap();
    assert!(models.len() >= 11, "the zoo has every model: {:?}", models.keys());
    for (name, spec) in models {
        for key in ["source", "exporter"] {
            assert!(
                spec[key].as_str().is_some_and(|s| !s.is_empty()),
                "{name}: '{key}' recorded"
            );
        }
        assert!(dir.join(format!("{name}.onnx")).is_file(), "{name}.onnx exported");
    }
}

#[test]
fn ocr_det_matches_onnxruntime() {
    check_cpu("ocr_det");
}

#[test]
fn ocr_rec_matches_onnxruntime() {
    check_cpu("ocr_rec");
}

#[test]
fn ocr_cls_matches_onnxruntime() {
    check_cpu("ocr_cls");
}

#[test]
fn tv_resnet50_matches_onnxruntime() {
    check_cpu("tv_resnet50");
}

#[test]
fn tv_mobilenet_v3_large_matches_onnxruntime() {
    check_cpu("tv_mobilenet_v3_large");
}

#[test]
fn tv_efficientnet_b0_matches_onnxruntime() {
    check_cpu("tv_efficientnet_b0");
}

#[test]
fn tv_vit_b_16_matches_onnxruntime() {
    check_cpu("tv_vit_b_16");
}

#[test]
fn tv_ssdlite320_matches_onnxruntime() {
    check_cpu("tv_ssdlite320");
}

#[test]
fn hf_bert_base_matches_onnxruntime() {
    check_cpu("hf_bert_base");
}

#[test]
fn hf_vit_small_matches_onnxruntime() {
    check_cpu("hf_vit_small");
}

#[test]
fn hf_whisper_encoder_matches_onnxruntime() {
    check_cpu("hf_whisper_encoder");
}

//! The zoo of real exporter output (`zoo/export_zoo.py`: PaddleOCR's det/rec/cls as shipped in a PyPI wheel,
//! torchvision ResNet-50, MobileNetV3, EfficientNet-B0, ViT-B/16 and SSDlite, and BERT-base, ViT-S and
//! Whisper-tiny-like encoders from transformers configs) on the CPU executor against onnxruntime at batch 1
//! and 2 and on the wgpu executor at batch 1, with the test inputs of the zoo's manifest; the zoo's int8 models (`zoo/quantize_zoo.py`), its
//! BERT fused by onnxruntime's transformer optimizer (`zoo/fuse_zoo.py`), its detector exported whole,
//! NonMaxSuppression included (`zoo/export_detector.py`), and the ResNet-50, BERT-base and ViT-S of torch's
//! dynamo exporter (`zoo/export_dynamo.py`), on both executors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use infergate_engine::{AdapterChoice, ExecutorKind, Session, SessionOptions};

/// Relative tolerance per element, and absolute tolerance as a fraction of the output's largest magnitude.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-4;
/// Absolute tolerance on the quantized models' outputs (class probabilities in [0, 1]).
const QUANTIZED_ATOL: f64 = 0.05;

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

// The same float models on the wgpu executor (lavapipe where there is no GPU), at the zoo's small test
// shapes (96×96 images for the CNNs), with the CPU executor's tolerances.

#[test]
fn ocr_det_matches_onnxruntime_on_wgpu() {
    check_wgpu("ocr_det", RTOL, ATOL);
}

#[test]
fn ocr_rec_matches_onnxruntime_on_wgpu() {
    check_wgpu("ocr_rec", RTOL, ATOL);
}

#[test]
fn ocr_cls_matches_onnxruntime_on_wgpu() {
    check_wgpu("ocr_cls", RTOL, ATOL);
}

#[test]
fn tv_resnet50_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_resnet50", RTOL, ATOL);
}

#[test]
fn tv_mobilenet_v3_large_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_mobilenet_v3_large", RTOL, ATOL);
}

#[test]
fn tv_efficientnet_b0_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_efficientnet_b0", RTOL, ATOL);
}

#[test]
fn tv_vit_b_16_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_vit_b_16", RTOL, ATOL);
}

#[test]
fn tv_ssdlite320_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_ssdlite320", RTOL, ATOL);
}

#[test]
fn hf_bert_base_matches_onnxruntime_on_wgpu() {
    check_wgpu("hf_bert_base", RTOL, ATOL);
}

#[test]
fn hf_vit_small_matches_onnxruntime_on_wgpu() {
    check_wgpu("hf_vit_small", RTOL, ATOL);
}

#[test]
fn hf_whisper_encoder_matches_onnxruntime_on_wgpu() {
    check_wgpu("hf_whisper_encoder", RTOL, ATOL);
}

/// A scripted `for` loop over the input's time dimension, exported as a real ONNX Loop, which the engine
/// unrolls per time length when it builds the plan.
#[test]
fn torch_scripted_rnn_keeps_its_loop_and_matches_onnxruntime() {
    use prost::Message;
    let path = support::zoo::zoo_dir().join("torch_scripted_rnn.onnx");
    let proto = infergate_engine::onnx::proto::ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap();
    let ops: Vec<&str> = proto
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert!(ops.contains(&"Loop"), "the export keeps the loop: {ops:?}");
    check_cpu("torch_scripted_rnn");
}

#[test]
fn torch_scripted_rnn_matches_onnxruntime_on_wgpu() {
    check_wgpu("torch_scripted_rnn", RTOL, ATOL);
}

/// The quantized zoo models (`zoo/quantize_zoo.py`, onnxruntime.quantization applied to `ocr_cls`) record
/// their quantizer and really contain the quantization operators.
#[test]
fn zoo_quantized_models_record_their_quantizer_and_operators() {
    let dir = support::zoo::zoo_dir();
    let models: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("quantized.json")).unwrap()).unwrap();
    for (name, ops) in [
        ("ocr_cls_qdq", &["QuantizeLinear", "DequantizeLinear"][..]),
        ("ocr_cls_dynamic", &["DynamicQuantizeLinear", "ConvInteger"][..]),
    ] {
        let spec = &models[name];
        assert!(
            spec["exporter"]
                .as_str()
                .is_some_and(|s| s.contains("onnxruntime")),
            "{name}: quantizer recorded: {spec}"
        );
        let used: Vec<&str> = spec["operators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for op in ops {
            assert!(used.contains(op), "{name} uses {op}: {used:?}");
        }
    }
}

/// Quantized models against onnxruntime. onnxruntime fuses the QDQ pairs into integer kernels and we run
/// float kernels between them (weights dequantized at load), so an activation can land one quantization
/// step apart and carry that to the output: the tolerance is absolute, in units of the output.
fn check_quantized(name: &str, atol: f64) {
    let model = support::zoo::load(name);
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor: ExecutorKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    support::zoo::check(&session, &model, name, &[1, 2], 0.0, atol);
}

/// `name` on the wgpu executor (lavapipe where there is no GPU) at batch 1 against onnxruntime.
fn check_wgpu(name: &str, rtol: f64, atol: f64) {
    let model = support::zoo::load(name);
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor: ExecutorKind::Wgpu(AdapterChoice::Auto),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{name}: wgpu session (is mesa-vulkan-drivers installed?): {e}"));
    support::zoo::check(&session, &model, name, &[1], rtol, atol);
}

#[test]
fn ocr_cls_qdq_matches_onnxruntime_on_wgpu() {
    check_wgpu("ocr_cls_qdq", 0.0, QUANTIZED_ATOL);
}

#[test]
fn ocr_cls_dynamic_matches_onnxruntime_on_wgpu() {
    check_wgpu("ocr_cls_dynamic", 0.0, QUANTIZED_ATOL);
}

/// The operators of `name`, from the zoo's side manifest `file` (`fused.json`, `detector.json`), after
/// checking that its exporter line records `made_by`.
fn side_manifest_operators(file: &str, name: &str, made_by: &str) -> Vec<String> {
    let dir = support::zoo::zoo_dir();
    let models: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(file)).unwrap()).unwrap();
    let spec = &models[name];
    assert!(
        spec["exporter"].as_str().is_some_and(|s| s.contains(made_by)),
        "{name}: {made_by} recorded: {spec}"
    );
    spec["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The fused BERT (`zoo/fuse_zoo.py`) records its optimizer and really holds onnxruntime's fused ops.
#[test]
fn zoo_fused_bert_records_its_optimizer_and_contrib_operators() {
    let used = side_manifest_operators("fused.json", "hf_bert_fused", "optimize_model");
    for op in [
        "com.microsoft.EmbedLayerNormalization",
        "com.microsoft.Attention",
        "com.microsoft.SkipLayerNormalization",
        "com.microsoft.BiasGelu",
    ] {
        assert!(used.iter().any(|u| u == op), "hf_bert_fused uses {op}: {used:?}");
    }
}

#[test]
fn hf_bert_fused_matches_onnxruntime() {
    check_cpu("hf_bert_fused");
}

#[test]
fn hf_bert_fused_matches_onnxruntime_on_wgpu() {
    check_wgpu("hf_bert_fused", RTOL, ATOL);
}

#[test]
fn ocr_cls_qdq_matches_onnxruntime() {
    check_quantized("ocr_cls_qdq", QUANTIZED_ATOL);
}

#[test]
fn ocr_cls_dynamic_matches_onnxruntime() {
    check_quantized("ocr_cls_dynamic", QUANTIZED_ATOL);
}

/// The detector (`zoo/export_detector.py`) records its exporter and really holds the data-dependent
/// operators that make it run in stages: NonZero (the score filter) and NonMaxSuppression.
#[test]
fn zoo_detector_records_its_exporter_and_data_dependent_operators() {
    let used = side_manifest_operators("detector.json", "tv_ssdlite320_nms", "torch.onnx.export");
    for op in ["NonZero", "TopK", "NonMaxSuppression"] {
        assert!(
            used.iter().any(|u| u == op),
            "tv_ssdlite320_nms uses {op}: {used:?}"
        );
    }
}

/// The whole detector on one image: boxes, scores and labels as onnxruntime finds them (same count).
#[test]
fn tv_ssdlite320_nms_matches_onnxruntime() {
    let name = "tv_ssdlite320_nms";
    let model = support::zoo::load(name);
    // the network runs as a plan cached by input shapes, not rebuilt for each image's values
    let network = model.first_stage().expect("the detector runs in stages");
    assert!(network.host_inputs().is_empty(), "{:?}", network.host_inputs());
    assert!(network.graph().nodes.len() > 100);
    let session = Session::new(model.clone(), SessionOptions::default()).unwrap();
    support::zoo::check(&session, &model, name, &[1], RTOL, ATOL);
}

#[test]
fn tv_ssdlite320_nms_matches_onnxruntime_on_wgpu() {
    check_wgpu("tv_ssdlite320_nms", RTOL, ATOL);
}

/// The models of torch's dynamo exporter (`zoo/export_dynamo.py`) record it, and hold the forms it writes that
/// the TorchScript exporter does not: ReduceMean for the ResNet's global pooling, and in the transformers' attention
/// the safe softmax (`Where(IsNaN(Softmax(x)), 0, …)`) and LayerNormalization.
#[test]
fn zoo_dynamo_models_record_their_exporter_and_its_operators() {
    let expect: [(&str, &[&str]); 3] = [
        ("dyn_resnet50", &["Conv", "ReduceMean"]),
        (
            "dyn_bert_base",
            &["IsNaN", "Where", "Softmax", "LayerNormalization"],
        ),
        (
            "dyn_vit_small",
            &["IsNaN", "Where", "Softmax", "LayerNormalization"],
        ),
    ];
    for (name, ops) in expect {
        let used = side_manifest_operators("dynamo.json", name, "dynamo=True");
        for op in ops {
            assert!(used.iter().any(|u| u == op), "{name} uses {op}: {used:?}");
        }
    }
}

#[test]
fn dyn_resnet50_matches_onnxruntime() {
    check_cpu("dyn_resnet50");
}

#[test]
fn dyn_bert_base_matches_onnxruntime() {
    check_cpu("dyn_bert_base");
}

#[test]
fn dyn_vit_small_matches_onnxruntime() {
    check_cpu("dyn_vit_small");
}

#[test]
fn dyn_resnet50_matches_onnxruntime_on_wgpu() {
    check_wgpu("dyn_resnet50", RTOL, ATOL);
}

#[test]
fn dyn_bert_base_matches_onnxruntime_on_wgpu() {
    check_wgpu("dyn_bert_base", RTOL, ATOL);
}

#[test]
fn dyn_vit_small_matches_onnxruntime_on_wgpu() {
    check_wgpu("dyn_vit_small", RTOL, ATOL);
}

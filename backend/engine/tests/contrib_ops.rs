//! onnxruntime's `com.microsoft` operators (the fused transformer ops its optimiser writes) against
//! onnxruntime itself, on tiny graphs built with `onnx.helper` (`tests/contrib/make_graphs.py`); also
//! ONNX RNN in the forms its node tests leave out.
//!
//! Tolerance: rtol 1e-3, atol 1e-5. onnxruntime evaluates erf and tanh with its own polynomial
//! approximations, so GELU outputs near zero differ from ours in the sixth decimal; the normalisations,
//! products and rotations agree far closer than that. Integer outputs (EmbedLayerNormalization's
//! mask_index) must be equal; quantized outputs (QLinearAdd, QLinearMul) within one quantization step
//! (see [`QUANTIZED_CASES`]). DynamicQuantizeMatMul's float output uses the float tolerance: its
//! integer product is exact and its scaling follows onnxruntime's order. MatMulNBits' weight is
//! dequantized exactly as onnxruntime's, so its products use the float tolerance too. DynamicQuantizeLSTM
//! matches onnxruntime's float LSTM on its dequantized weights within atol 1e-5, and onnxruntime's
//! kernel, which also quantizes the activations, within atol 1e-2 (see [`DYNAMIC_QUANTIZE_LSTM_CASES`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::sync::OnceLock;

use infergate_engine::{AdapterChoice, ExecutorKind, Model};
use support::conformance::{run_one_within, run_one_within_steps};

const CASES: &[&str] = &[
    "fast_gelu",
    "fast_gelu_no_bias",
    "bias_gelu",
    "gelu",
    "quick_gelu",
    "bias_add",
    "skip_layer_norm",
    "skip_layer_norm_no_beta_no_bias",
    "skip_simplified_layer_norm",
    "attention",
    "attention_lengths",
    "attention_mask",
    "multi_head_attention",
    "multi_head_attention_bias_mask",
    "embed_layer_norm",
    "embed_layer_norm_no_segment_no_mask",
    "embed_layer_norm_position_ids",
    "simplified_layer_norm",
    "simplified_layer_norm_axis1",
    "fused_matmul",
    "fused_matmul_trans",
    "fused_matmul_2d_trans_a",
    "fused_matmul_trans_batch",
    "fused_matmul_trans_batch_a_trans_a",
    "rotary_embedding",
    "rotary_embedding_interleaved",
    "rotary_embedding_offset",
    "rotary_embedding_4d",
    "rotary_embedding_partial",
    "group_query_attention",
    "group_query_attention_rotary",
    "group_query_attention_rotary_interleaved",
    "group_query_attention_softcap",
    "group_query_attention_packed",
    "group_query_attention_past_padded",
    "group_query_attention_past_padded_rotary",
    "fused_conv_relu",
    "fused_conv_tanh",
    "fused_conv_sigmoid",
    "fused_conv_leakyrelu",
    "fused_conv_clip",
    "fused_conv_hardsigmoid",
    "fused_conv_sum",
    "fused_conv_sum_no_bias",
    "fused_conv_no_activation",
    "fused_conv_1d_grouped",
    "dynamic_quantize_matmul_i8",
    "dynamic_quantize_matmul_u8_per_column_bias",
    "dynamic_quantize_matmul_no_zero_point",
    "matmul_n_bits",
    "matmul_n_bits_block32_default_zero_point",
    "matmul_n_bits_k_not_a_block_multiple",
    "matmul_n_bits_k_short_of_one_block",
    "matmul_n_bits_float_zero_points_bias",
    "matmul_n_bits_8_bits",
    "rnn_reverse",
    "rnn_bidirectional_lengths",
    "rnn_clip_no_bias",
];

/// Quantized outputs (UINT8/INT8), compared within one quantization step: onnxruntime folds the
/// scales into f32 ratios before it rounds, the engine dequantizes, computes and quantizes, so a
/// value within an f32 rounding error of a half step may round to the neighbouring step.
const QUANTIZED_CASES: &[&str] = &[
    "qlinear_add_u8",
    "qlinear_add_i8",
    "qlinear_add_no_c_zero_point",
    "qlinear_mul_u8",
    "qlinear_mul_i8",
    "qlinear_mul_no_c_zero_point",
];

/// FP16 outputs, compared within a few FP16 steps (rtol 5e-3 is five units in the last place, atol 2e-3
/// two steps at magnitude 2): the engine rounds MatMulNBits' dequantized weight to FP16, the model's
/// type, and onnxruntime rounds its intermediate values its own way, so products differ by a step or
/// two.
const FP16_CASES: &[&str] = &["matmul_n_bits_fp16"];

/// DynamicQuantizeLSTM, each case twice. `<case>` expects onnxruntime's own kernel, which quantizes X
/// and the hidden state to UINT8 at every step where the engine keeps them float: on these graphs
/// (outputs up to 0.9) the two differ by at most 5.8e-3 on both executors, so the bound is atol 1e-2.
/// `<case>_float_reference` expects onnxruntime's float LSTM on the dequantized weights, which is what
/// the engine computes: within 2.4e-7 (two f32 steps), bound atol 1e-5 to leave room for a GPU's
/// sigmoid and tanh.
const DYNAMIC_QUANTIZE_LSTM_CASES: &[&str] = &[
    "dynamic_quantize_lstm_i8",
    "dynamic_quantize_lstm_u8_per_column_lengths",
    "dynamic_quantize_lstm_bidirectional_i8_per_column",
    "dynamic_quantize_lstm_bidirectional_u8",
];

/// The generated graphs (written once per test binary).
fn graphs() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("contrib-ops");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/contrib/make_graphs.py");
        let out = std::process::Command::new(support::python::python())
            .arg(&script)
            .arg(&dir)
            .output()
            .expect("start python");
        assert!(
            out.status.success(),
            "make_graphs.py failed (run `make venv` for onnx/onnxruntime):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

fn run_all(kind: ExecutorKind) {
    let mut failures = Vec::new();
    for case in CASES {
        if let Err(e) = run_one_within(&graphs().join(case), &kind, 1e-3, 1e-5) {
            failures.push(format!("{case}: {e}"));
        }
    }
    for case in FP16_CASES {
        if let Err(e) = run_one_within(&graphs().join(case), &kind, 5e-3, 2e-3) {
            failures.push(format!("{case}: {e}"));
        }
    }
    for case in DYNAMIC_QUANTIZE_LSTM_CASES {
        if let Err(e) = run_one_within(&graphs().join(case), &kind, 0.0, 1e-2) {
            failures.push(format!("{case}: {e}"));
        }
        let reference = format!("{case}_float_reference");
        if let Err(e) = run_one_within(&graphs().join(&reference), &kind, 0.0, 1e-5) {
            failures.push(format!("{reference}: {e}"));
        }
    }
    for case in QUANTIZED_CASES {
        if let Err(e) = run_one_within_steps(&graphs().join(case), &kind, 0.0, 0.0, 1) {
            failures.push(format!("{case}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "differ from onnxruntime:\n{}",
        failures.join("\n")
    );
}

#[test]
fn contrib_ops_match_onnxruntime_on_cpu() {
    run_all(ExecutorKind::Cpu);
}

#[test]
fn contrib_ops_match_onnxruntime_on_wgpu() {
    run_all(ExecutorKind::Wgpu(AdapterChoice::Auto));
}

/// The loader reads the contrib domain's opset from `opset_import`; an opset it does not know is
/// refused naming the operator and the opsets it supports.
#[test]
fn an_unknown_contrib_opset_is_refused_naming_the_operator() {
    let path = graphs().join("fast_gelu/model.onnx");
    let mut bytes = std::fs::read(&path).unwrap();
    let mut m =
        <infergate_engine::onnx::proto::ModelProto as prost::Message>::decode(bytes.as_slice()).unwrap();
    for o in &mut m.opset_import {
        if o.domain == "com.microsoft" {
            o.version = 2;
        }
    }
    bytes = prost::Message::encode_to_vec(&m);
    let err = Model::from_bytes(&bytes, None).unwrap_err();
    assert_eq!(err.kind(), infergate_engine::ErrorKind::Unsupported, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("FastGelu") && msg.contains("opsets 1 to 1") && msg.contains("opset 2"),
        "{msg}"
    );
}

/// The generated graph `case` with its node changed by `edit`, loaded.
fn load_edited(
    case: &str,
    edit: impl FnOnce(&mut infergate_engine::onnx::proto::NodeProto),
) -> infergate_engine::Result<Model> {
    let bytes = std::fs::read(graphs().join(case).join("model.onnx")).unwrap();
    let mut m =
        <infergate_engine::onnx::proto::ModelProto as prost::Message>::decode(bytes.as_slice()).unwrap();
    edit(&mut m.graph.as_mut().unwrap().node[0]);
    Model::from_bytes(&prost::Message::encode_to_vec(&m), None)
}

/// Forms of the new contrib operators the engine does not run are refused at load, naming the
/// operator, the attribute or input, and what to do instead.
#[test]
fn unsupported_forms_of_the_new_contrib_operators_are_refused_at_load() {
    use infergate_engine::onnx::proto::{AttributeProto, attribute_type};
    let packed = load_edited("rotary_embedding", |n| {
        n.attribute.push(AttributeProto {
            name: "is_packed_batching".into(),
            r#type: attribute_type::INT,
            i: 1,
            ..Default::default()
        });
    })
    .unwrap_err();
    assert_eq!(
        packed.kind(),
        infergate_engine::ErrorKind::Unsupported,
        "{packed}"
    );
    assert!(
        packed.to_string().contains("RotaryEmbedding") && packed.to_string().contains("is_packed_batching"),
        "{packed}"
    );
    // segment ids without a segment table
    let half = load_edited("embed_layer_norm", |n| n.input[4] = String::new()).unwrap_err();
    let msg = half.to_string();
    assert!(
        msg.contains("EmbedLayerNormalization")
            && msg.contains("segment_embedding")
            && msg.contains("give both"),
        "{msg}"
    );
    let odd = load_edited("rotary_embedding_partial", |n| {
        for a in &mut n.attribute {
            if a.name == "rotary_embedding_dim" {
                a.i = 3;
            }
        }
    })
    .unwrap_err();
    assert!(odd.to_string().contains("rotary_embedding_dim=3"), "{odd}");
    // an activation onnxruntime's optimiser does not fuse into FusedConv
    let elu = load_edited("fused_conv_relu", |n| {
        for a in &mut n.attribute {
            if a.name == "activation" {
                a.s = b"Elu".to_vec();
            }
        }
    })
    .unwrap_err();
    assert_eq!(elu.kind(), infergate_engine::ErrorKind::Unsupported, "{elu}");
    assert!(
        elu.to_string().contains("FusedConv") && elu.to_string().contains("\"Elu\""),
        "{elu}"
    );
    // LeakyRelu without its alpha
    let bare = load_edited("fused_conv_leakyrelu", |n| {
        n.attribute.retain(|a| a.name != "activation_params");
    })
    .unwrap_err();
    assert!(
        bare.to_string().contains("LeakyRelu takes 1 activation_params"),
        "{bare}"
    );
}

/// GroupQueryAttention forms the decomposition does not compute exactly are refused at load, naming
/// the attribute or input and what to export instead.
#[test]
fn unsupported_forms_of_group_query_attention_are_refused_at_load() {
    use infergate_engine::onnx::proto::{AttributeProto, attribute_type};
    let window = load_edited("group_query_attention", |n| {
        n.attribute.push(AttributeProto {
            name: "local_window_size".into(),
            r#type: attribute_type::INT,
            i: 4,
            ..Default::default()
        });
    })
    .unwrap_err();
    assert_eq!(
        window.kind(),
        infergate_engine::ErrorKind::Unsupported,
        "{window}"
    );
    let msg = window.to_string();
    assert!(
        msg.contains("GroupQueryAttention") && msg.contains("local_window_size=4") && msg.contains("-1"),
        "{msg}"
    );
    let smooth = load_edited("group_query_attention", |n| {
        n.attribute.push(AttributeProto {
            name: "smooth_softmax".into(),
            r#type: attribute_type::INT,
            i: 1,
            ..Default::default()
        });
    })
    .unwrap_err();
    assert_eq!(
        smooth.kind(),
        infergate_engine::ErrorKind::Unsupported,
        "{smooth}"
    );
    assert!(smooth.to_string().contains("smooth_softmax=1"), "{smooth}");
    // a later release's attention_bias (input 10), fed here from the query
    let bias = load_edited("group_query_attention", |n| {
        let q = n.input[0].clone();
        n.input.extend(["".into(), "".into(), "".into(), q]);
    })
    .unwrap_err();
    assert_eq!(bias.kind(), infergate_engine::ErrorKind::Unsupported, "{bias}");
    assert!(
        bias.to_string().contains("input 10") && bias.to_string().contains("attention_bias"),
        "{bias}"
    );
}

/// An LLM export's GroupQueryAttention has symbolic batch, sequence and past dims: the decomposition
/// needs no host inputs (seqlens_k is request data, not a plan parameter) and gives the same outputs.
#[test]
fn group_query_attention_with_symbolic_dims_needs_no_host_inputs() {
    let case = "group_query_attention_past_padded_rotary";
    let src = graphs().join(case);
    let bytes = std::fs::read(src.join("model.onnx")).unwrap();
    let mut m =
        <infergate_engine::onnx::proto::ModelProto as prost::Message>::decode(bytes.as_slice()).unwrap();
    let graph = m.graph.as_mut().unwrap();
    for input in &mut graph.input {
        let Some(shape) = input
            .r#type
            .as_mut()
            .and_then(|t| t.tensor_type.as_mut())
            .and_then(|t| t.shape.as_mut())
        else {
            continue;
        };
        // batch, then seq (query, key, value) or kv heads and past (past_key, past_value)
        let names: &[&str] = if input.name.starts_with("past") {
            &["batch", "", "past"]
        } else {
            &["batch", "seq"]
        };
        for (d, name) in shape.dim.iter_mut().zip(names) {
            if !name.is_empty() && !matches!(input.name.as_str(), "cos" | "sin" | "total") {
                d.dim_value = None;
                d.dim_param = Some((*name).into());
            }
        }
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("contrib-ops-symbolic")
        .join(case);
    let data = dir.join("test_data_set_0");
    std::fs::create_dir_all(&data).unwrap();
    let edited = prost::Message::encode_to_vec(&m);
    std::fs::write(dir.join("model.onnx"), &edited).unwrap();
    for f in std::fs::read_dir(src.join("test_data_set_0")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), data.join(f.file_name())).unwrap();
    }
    let model = Model::from_bytes(&edited, None).unwrap();
    assert!(
        model.host_inputs().is_empty(),
        "host inputs {:?}",
        model.host_inputs()
    );
    run_one_within(&dir, &ExecutorKind::Cpu, 1e-3, 1e-5).unwrap();
}

/// ONNX RNN forms the engine cannot build its constant gates for are refused at load, naming the
/// attribute and what to give instead.
#[test]
fn rnn_without_hidden_size_or_with_a_bad_clip_is_refused() {
    let bare = load_edited("rnn_clip_no_bias", |n| {
        n.attribute.retain(|a| a.name != "hidden_size");
    })
    .unwrap_err();
    assert_eq!(bare.kind(), infergate_engine::ErrorKind::Unsupported, "{bare}");
    assert!(
        bare.to_string().contains("RNN") && bare.to_string().contains("give hidden_size"),
        "{bare}"
    );
    let negative = load_edited("rnn_clip_no_bias", |n| {
        for a in &mut n.attribute {
            if a.name == "clip" {
                a.f = -0.5;
            }
        }
    })
    .unwrap_err();
    assert_eq!(
        negative.kind(),
        infergate_engine::ErrorKind::InvalidInput,
        "{negative}"
    );
    assert!(
        negative.to_string().contains("clip=-0.5") && negative.to_string().contains("positive"),
        "{negative}"
    );
}

//! Unsupported attribute combinations of the operators added for real exports are refused at load,
//! naming the node, the operator and the attribute.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use prost::Message;

use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node, value_info};
use crate::{ErrorKind, Model};

pub(super) fn float_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    value_info(name, 1, Some(dims))
}

/// A graph output whose type the loader infers.
pub(super) fn untyped(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: None,
        doc_string: String::new(),
    }
}

pub(super) fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::STRING,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

pub(super) fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

/// The load error of a one-graph model at `opset` with `nodes` over input `x` [2, 3, 3].
fn load_error(opset: i64, nodes: Vec<NodeProto>, initializer: Vec<TensorProto>) -> crate::EngineError {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer,
            input: vec![float_input("x", &[2, 3, 3])],
            output: vec![untyped("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    Model::from_bytes(&m.encode_to_vec(), None).unwrap_err()
}

fn assert_names(e: &crate::EngineError, parts: &[&str]) {
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    for p in parts {
        assert!(e.to_string().contains(p), "'{p}' missing from: {e}");
    }
}

#[test]
fn scatter_nd_max_before_opset_18_names_the_attribute() {
    let idx = TensorProto {
        name: "idx".into(),
        dims: vec![1, 1],
        data_type: 7,
        raw_data: 0i64.to_le_bytes().to_vec(),
        ..Default::default()
    };
    let upd = init("upd", &[1, 3, 3], &[1.0; 9]);
    let scatter = node(
        "ScatterND",
        &["x", "idx", "upd"],
        "y",
        vec![string_attr("reduction", "max")],
    );
    let e = load_error(16, vec![scatter], vec![idx, upd]);
    assert_names(&e, &["ScatterND_y", "ScatterND", "reduction='max'", "opset 18"]);
}

#[test]
fn einsum_with_a_diagonal_names_the_equation() {
    let einsum = node("Einsum", &["x"], "y", vec![string_attr("equation", "bii->bi")]);
    let e = load_error(13, vec![einsum], vec![]);
    assert_names(&e, &["Einsum_y", "Einsum", "equation='bii->bi'", "diagonal"]);
}

#[test]
fn attention_with_a_double_softmax_names_the_precision() {
    let attrs = vec![
        int_attr("q_num_heads", 1),
        int_attr("kv_num_heads", 1),
        int_attr("softmax_precision", 11),
    ];
    let attention = node("Attention", &["x", "x", "x"], "y", attrs);
    let e = load_error(23, vec![attention], vec![]);
    assert_names(&e, &["Attention_y", "Attention", "softmax_precision=11", "FLOAT"]);
}

#[test]
fn attention_with_a_causal_external_cache_names_the_inputs() {
    let lens = TensorProto {
        name: "lens".into(),
        dims: vec![2],
        data_type: 7,
        raw_data: [3i64, 3].iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    };
    let attrs = vec![
        int_attr("q_num_heads", 1),
        int_attr("kv_num_heads", 1),
        int_attr("is_causal", 1),
    ];
    let attention = node("Attention", &["x", "x", "x", "", "", "", "lens"], "y", attrs);
    let e = load_error(24, vec![attention], vec![lens]);
    assert_names(&e, &["Attention_y", "is_causal=1", "nonpad_kv_seqlen"]);
}

/// The load error of a model (opset 17, com.microsoft 1) whose one node `contrib` is of the
/// com.microsoft domain, with graph inputs `input` and initializers `initializer`.
fn contrib_load_error(
    mut contrib: NodeProto,
    initializer: Vec<TensorProto>,
    input: Vec<ValueInfoProto>,
) -> crate::EngineError {
    contrib.domain = super::onnx::MICROSOFT.into();
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![
            OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            },
            OperatorSetIdProto {
                domain: super::onnx::MICROSOFT.into(),
                version: 1,
            },
        ],
        graph: Some(GraphProto {
            node: vec![contrib],
            name: "g".into(),
            initializer,
            input,
            output: vec![untyped("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    Model::from_bytes(&m.encode_to_vec(), None).unwrap_err()
}

/// The load error of a MatMulNBits node over `x` [2, 3, 3] (`K` = 3, `N` = 2, `bits`-bit codes in
/// blocks of 16) with inputs `inputs` and initializers `initializer`.
fn matmul_n_bits_error(bits: i64, inputs: &[&str], initializer: Vec<TensorProto>) -> crate::EngineError {
    let mm = node(
        "MatMulNBits",
        inputs,
        "y",
        vec![
            int_attr("K", 3),
            int_attr("N", 2),
            int_attr("bits", bits),
            int_attr("block_size", 16),
        ],
    );
    contrib_load_error(
        mm,
        initializer,
        vec![float_input("x", &[2, 3, 3]), float_input("scales_in", &[2])],
    )
}

/// B `[2, 1, 8]` (4-bit codes, one block of 16 per column) as an initializer.
fn packed_weight() -> TensorProto {
    TensorProto {
        name: "b".into(),
        dims: vec![2, 1, 8],
        data_type: 2,
        raw_data: vec![0x21; 16],
        ..Default::default()
    }
}

#[test]
fn matmul_n_bits_with_computed_scales_names_the_input() {
    let e = matmul_n_bits_error(4, &["x", "b", "scales_in"], vec![packed_weight()]);
    assert_names(&e, &["MatMulNBits", "scales", "initializers"]);
}

#[test]
fn matmul_n_bits_with_computed_weights_names_the_input() {
    let scales = init("scales", &[2], &[0.5, 0.25]);
    let e = matmul_n_bits_error(4, &["x", "x", "scales"], vec![scales]);
    assert_names(&e, &["MatMulNBits", "input B", "initializers"]);
}

#[test]
fn matmul_n_bits_with_g_idx_names_the_input() {
    let scales = init("scales", &[2], &[0.5, 0.25]);
    let g_idx = TensorProto {
        name: "g_idx".into(),
        dims: vec![3],
        data_type: 6,
        raw_data: [0i32, 0, 0].iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    };
    let e = matmul_n_bits_error(
        4,
        &["x", "b", "scales", "", "g_idx"],
        vec![packed_weight(), scales, g_idx],
    );
    assert_names(&e, &["MatMulNBits", "g_idx", "input 4"]);
}

#[test]
fn matmul_n_bits_with_two_bit_codes_names_the_attribute() {
    let scales = init("scales", &[2], &[0.5, 0.25]);
    let e = matmul_n_bits_error(2, &["x", "b", "scales"], vec![packed_weight(), scales]);
    assert_names(&e, &["MatMulNBits", "bits=2", "bits=4"]);
}

/// The load error of a forward DynamicQuantizeLSTM node (hidden 1) over `x` [2, 3, 3] with inputs
/// `inputs`; INT8 W, R and their scales and zero points are initializers, `scale_in` a graph input.
fn dynamic_quantize_lstm_error(inputs: &[&str]) -> crate::EngineError {
    let int8 = |name: &str, dims: &[i64]| TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 3,
        raw_data: vec![1; dims.iter().product::<i64>() as usize],
        ..Default::default()
    };
    let lstm = node(
        "DynamicQuantizeLSTM",
        inputs,
        "y",
        vec![int_attr("hidden_size", 1)],
    );
    contrib_load_error(
        lstm,
        vec![
            int8("w", &[1, 3, 4]),
            int8("r", &[1, 1, 4]),
            init("w_scale", &[1], &[0.01]),
            int8("w_zero", &[1]),
            init("r_scale", &[1], &[0.02]),
            int8("r_zero", &[1]),
        ],
        vec![float_input("x", &[2, 3, 3]), float_input("scale_in", &[1])],
    )
}

#[test]
fn dynamic_quantize_lstm_with_computed_weights_names_the_input() {
    let e = dynamic_quantize_lstm_error(&[
        "x", "x", "r", "", "", "", "", "", "w_scale", "w_zero", "r_scale", "r_zero",
    ]);
    assert_names(&e, &["DynamicQuantizeLSTM", "input W (1)", "initializers"]);
}

#[test]
fn dynamic_quantize_lstm_with_computed_scales_names_the_input() {
    let e = dynamic_quantize_lstm_error(&[
        "x", "w", "r", "", "", "", "", "", "w_scale", "w_zero", "scale_in", "r_zero",
    ]);
    assert_names(&e, &["DynamicQuantizeLSTM", "input R_scale (10)", "initializers"]);
}

#[test]
fn qlinear_matmul_with_a_ninth_input_is_refused_naming_the_count() {
    // the IR's QLinearMatMul reads a bias there; an ONNX node must not reach it
    let inputs = ["x", "s", "z", "x", "s", "z", "s", "z", "x"];
    let mm = node("QLinearMatMul", &inputs, "y", vec![]);
    let z = TensorProto {
        name: "z".into(),
        data_type: 2,
        int32_data: vec![0],
        ..Default::default()
    };
    let e = load_error(13, vec![mm], vec![init("s", &[], &[0.5]), z]);
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    for p in ["QLinearMatMul", "8 inputs", "has 9"] {
        assert!(e.to_string().contains(p), "'{p}' missing from: {e}");
    }
}

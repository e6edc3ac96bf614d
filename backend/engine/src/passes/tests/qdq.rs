//! QDQ-wrapped Conv and MatMul (as `quantize_static` writes them) become QLinearConv and
//! QLinearMatMul on the codes, and compute what the float graph between the QDQ pairs computes, to
//! within one step of the output's quantization.

use std::sync::Arc;

use prost::Message;

use super::{op_names, run_cpu, value};
use crate::Model;
use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};

/// A one-input, one-output opset-17 model, as bytes.
fn bytes(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>, x: &[i64], y: &[i64]) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "qdq".into(),
            initializer,
            input: vec![value("x", x, &[])],
            output: vec![value("y", y, &[])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// An 8-bit initializer (`elem_type` 2 = UINT8, 3 = INT8).
fn codes(name: &str, elem_type: i32, dims: &[i64], v: &[i32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: elem_type,
        int32_data: v.to_vec(),
        ..Default::default()
    }
}

/// `y = DQ(Q(product(DQ(Q(x)), DQ(Q(w)))))`, the product `op` with float weights `w` quantized per
/// output channel to INT8 and activations per tensor to UINT8.
fn qdq_model(op: &str, x: &[i64], w_dims: &[i64], w: &[f32], channels: usize, y: &[i64]) -> Vec<u8> {
    let axis = if op == "Conv" { 0 } else { 1 };
    let w_scale: Vec<f32> = (0..channels).map(|c| 0.01 + 0.005 * c as f32).collect();
    let nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
        node(
            "QuantizeLinear",
            &["w", "sw", "zw"],
            "wq",
            vec![super::int("axis", axis)],
        ),
        node(
            "DequantizeLinear",
            &["wq", "sw", "zw"],
            "wd",
            vec![super::int("axis", axis)],
        ),
        node(op, &["xd", "wd"], "p", vec![]),
        node("QuantizeLinear", &["p", "sy", "zy"], "pq", vec![]),
        node("DequantizeLinear", &["pq", "sy", "zy"], "y", vec![]),
    ];
    let inits = vec![
        init("w", w_dims, w),
        init("sx", &[], &[0.05]),
        codes("zx", 2, &[], &[100]),
        init("sw", &[channels as i64], &w_scale),
        codes("zw", 3, &[channels as i64], &vec![0; channels]),
        init("sy", &[], &[0.1]),
        codes("zy", 2, &[], &[120]),
    ];
    bytes(nodes, inits, x, y)
}

/// The model loaded as is and with the pass applied first; both run on `x`.
fn check(model: &[u8], shape: &[usize], want_op: &str) {
    let plain = Arc::new(Model::from_bytes(model, None).unwrap());
    let mut g = crate::onnx::load_graph(model, None).unwrap();
    assert!(crate::passes::qdq::rewrite(&mut g).unwrap());
    let rewritten = Arc::new(Model::from_graph(g).unwrap());
    let ops = op_names(&rewritten);
    assert!(ops.contains(&want_op), "{ops:?}");
    assert!(!ops.contains(&"Conv") && !ops.contains(&"MatMul"), "{ops:?}");
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5).collect();
    let want = run_cpu(&plain, shape.to_vec(), x.clone())
        .to_vec::<f32>()
        .unwrap();
    let got = run_cpu(&rewritten, shape.to_vec(), x).to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    let mut moved = 0;
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        // one output step (0.1) at most: the float product rounds to the grid once, the integer
        // one through its f32 multiplier
        assert!((g - w).abs() <= 0.1 + 1e-6, "element {k}: {g} against {w}");
        moved += usize::from(g != w);
    }
    assert!(
        moved * 10 <= got.len(),
        "{moved} of {} outputs moved a step",
        got.len()
    );
}

#[test]
fn qdq_conv_becomes_qlinear_conv_with_the_same_numbers() {
    let (c, m) = (5, 6);
    let w: Vec<f32> = (0..m * c * 9)
        .map(|i| ((i * 13) % 29) as f32 * 0.02 - 0.28)
        .collect();
    let model = qdq_model("Conv", &[1, 5, 7, 6], &[6, 5, 3, 3], &w, m, &[1, 6, 5, 4]);
    check(&model, &[1, c, 7, 6], "QLinearConv");
}

#[test]
fn qdq_matmul_becomes_qlinear_matmul_with_the_same_numbers() {
    let (k, n) = (10, 7);
    let w: Vec<f32> = (0..k * n).map(|i| ((i * 7) % 23) as f32 * 0.03 - 0.33).collect();
    let model = qdq_model("MatMul", &[3, 10], &[10, 7], &w, n, &[3, 7]);
    check(&model, &[3, k], "QLinearMatMul");
}

//! SiLU written out as `x · Sigmoid(x)` becomes one unary in the producing Conv's epilogue, in either
//! operand order; a Sigmoid read elsewhere (a squeeze-and-excitation gate) stays.

use std::sync::Arc;

use super::{assert_close, conv_1x1_then, conv_epilogues, op_names, run_cpu};
use crate::Model;
use crate::ir::{EpilogueStep, UnaryOp};
use crate::onnx::proto::NodeProto;
use crate::onnx::test_graph::node;

const C: usize = 2;

/// 1×1 Conv weights that spread the test input over both signs.
const W: [f32; C * C] = [1.5, -0.5, 0.25, 2.0];

/// `Conv(x, W)` named "conv" followed by `tail`, which reads "conv" and writes "y".
fn conv_then(tail: Vec<NodeProto>) -> Arc<Model> {
    conv_1x1_then(C, &W, tail, Vec::new())
}

/// The model's output on an input reaching from −8 to 8, against `f` of the Conv's output.
fn check_values(model: &Arc<Model>, f: impl Fn(f32) -> f32) {
    let (h, w) = (4, 5);
    let pixels = h * w;
    let x: Vec<f32> = (0..C * pixels).map(|i| i as f32 * 0.4 - 8.0).collect();
    let y = run_cpu(model, vec![1, C, h, w], x.clone());
    let want: Vec<f32> = (0..C * pixels)
        .map(|k| {
            let (o, px) = (k / pixels, k % pixels);
            f((0..C).map(|i| W[o * C + i] * x[i * pixels + px]).sum())
        })
        .collect();
    assert_close(&y.to_vec::<f32>().unwrap(), &want);
}

fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

#[test]
fn x_times_sigmoid_of_x_is_one_silu_in_the_conv_in_both_orders() {
    for order in [["conv", "s"], ["s", "conv"]] {
        let model = conv_then(vec![
            node("Sigmoid", &["conv"], "s", vec![]),
            node("Mul", &order, "y", vec![]),
        ]);
        assert_eq!(op_names(&model), vec!["Conv"], "{order:?}: the chain is gone");
        assert_eq!(
            conv_epilogues(&model),
            vec![vec![EpilogueStep::Unary(UnaryOp::Silu)]]
        );
        check_values(&model, silu);
    }
}

#[test]
fn a_sigmoid_read_elsewhere_stays() {
    // y = conv · sigmoid(conv) + sigmoid(conv): the Sigmoid's output has two readers
    let model = conv_then(vec![
        node("Sigmoid", &["conv"], "s", vec![]),
        node("Mul", &["conv", "s"], "m", vec![]),
        node("Add", &["m", "s"], "y", vec![]),
    ]);
    assert!(op_names(&model).contains(&"Unary"), "{:?}", op_names(&model));
    check_values(&model, |v| silu(v) + 1.0 / (1.0 + (-v).exp()));
}

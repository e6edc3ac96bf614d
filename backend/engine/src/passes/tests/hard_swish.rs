//! HardSwish and HardSigmoid written out as Add/Clip/Div/Mul (paddle2onnx) or as `x · HardSigmoid(x)` become
//! one unary in the producing Conv's epilogue, in either operand order; a HardSigmoid with other parameters
//! stays what it is.

use std::sync::Arc;

use super::{assert_close, conv_1x1_then, conv_epilogues, float, op_names, run_cpu};
use crate::Model;
use crate::ir::{BinaryOp, EpilogueStep, Op, UnaryOp};
use crate::onnx::proto::{NodeProto, TensorProto};
use crate::onnx::test_graph::{init, node};

const C: usize = 2;

/// 1×1 Conv weights that spread the test input over both sides of HardSwish's bends at −3 and 3.
const W: [f32; C * C] = [1.5, -0.5, 0.25, 2.0];

/// `Conv(x, W)` named "conv" followed by `tail`, which reads "conv" and writes "y"; the constants
/// "three", "six", "sixth" and "zero" are there for it to use.
fn conv_then(tail: Vec<NodeProto>) -> Arc<Model> {
    let scalar = |name: &str, v: f32| -> TensorProto { init(name, &[], &[v]) };
    conv_1x1_then(
        C,
        &W,
        tail,
        vec![
            scalar("three", 3.0),
            scalar("six", 6.0),
            scalar("sixth", 1.0 / 6.0),
            scalar("zero", 0.0),
        ],
    )
}

/// The Conv's output for a [1, C, h, w] input, from its definition.
fn conv(x: &[f32], pixels: usize) -> Vec<f32> {
    (0..C * pixels)
        .map(|k| {
            let (o, px) = (k / pixels, k % pixels);
            (0..C).map(|i| W[o * C + i] * x[i * pixels + px]).sum()
        })
        .collect()
}

fn hard_sigmoid(v: f32, alpha: f32, beta: f32) -> f32 {
    (alpha * v + beta).clamp(0.0, 1.0)
}

fn hard_swish(v: f32) -> f32 {
    v * hard_sigmoid(v, 1.0 / 6.0, 0.5)
}

/// Runs the model on an input reaching from −8 to 8 and compares with `f` applied to the Conv's output.
fn check_values(model: &Arc<Model>, f: impl Fn(f32) -> f32) {
    let (h, w) = (4, 5);
    let x: Vec<f32> = (0..C * h * w).map(|i| i as f32 * 0.4 - 8.0).collect();
    let y = run_cpu(model, vec![1, C, h, w], x.clone());
    let want: Vec<f32> = conv(&x, h * w).into_iter().map(f).collect();
    assert_close(&y.to_vec::<f32>().unwrap(), &want);
}

/// The graph is one Conv whose epilogue is exactly `step`.
fn assert_one_conv_with(model: &Model, step: UnaryOp) {
    assert_eq!(op_names(model), vec!["Conv"], "the chain is gone");
    assert_eq!(conv_epilogues(model), vec![vec![EpilogueStep::Unary(step)]]);
}

#[test]
fn paddle_hard_swish_x_times_clip_x_plus_3_over_6_is_one_hard_swish() {
    let model = conv_then(vec![
        node("Add", &["conv", "three"], "a", vec![]),
        node("Clip", &["a", "zero", "six"], "c", vec![]),
        node("Mul", &["conv", "c"], "m", vec![]),
        node("Div", &["m", "six"], "y", vec![]),
    ]);
    assert_one_conv_with(&model, UnaryOp::HardSwish);
    check_values(&model, hard_swish);
}

#[test]
fn hard_swish_with_operands_swapped_and_times_a_sixth_is_one_hard_swish() {
    let model = conv_then(vec![
        node("Add", &["three", "conv"], "a", vec![]),
        node("Clip", &["a", "zero", "six"], "c", vec![]),
        node("Mul", &["c", "conv"], "m", vec![]),
        node("Mul", &["sixth", "m"], "y", vec![]),
    ]);
    assert_one_conv_with(&model, UnaryOp::HardSwish);
    check_values(&model, hard_swish);
}

#[test]
fn written_out_hard_sigmoid_is_one_hard_sigmoid() {
    let model = conv_then(vec![
        node("Add", &["conv", "three"], "a", vec![]),
        node("Clip", &["a", "zero", "six"], "c", vec![]),
        node("Div", &["c", "six"], "y", vec![]),
    ]);
    assert_one_conv_with(
        &model,
        UnaryOp::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        },
    );
    check_values(&model, |v| hard_sigmoid(v, 1.0 / 6.0, 0.5));
}

#[test]
fn x_times_written_out_hard_sigmoid_of_x_is_one_hard_swish() {
    let model = conv_then(vec![
        node("Add", &["conv", "three"], "a", vec![]),
        node("Clip", &["a", "zero", "six"], "c", vec![]),
        node("Div", &["c", "six"], "hs", vec![]),
        node("Mul", &["conv", "hs"], "y", vec![]),
    ]);
    assert_one_conv_with(&model, UnaryOp::HardSwish);
    check_values(&model, hard_swish);
}

#[test]
fn hard_sigmoid_op_of_x_times_x_is_one_hard_swish_in_both_orders() {
    for order in [["hs", "conv"], ["conv", "hs"]] {
        let model = conv_then(vec![
            node(
                "HardSigmoid",
                &["conv"],
                "hs",
                vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)],
            ),
            node("Mul", &order, "y", vec![]),
        ]);
        assert_one_conv_with(&model, UnaryOp::HardSwish);
        check_values(&model, hard_swish);
    }
}

/// ONNX's default HardSigmoid (alpha 0.2) times x is not HardSwish: the Mul stays.
#[test]
fn x_times_hard_sigmoid_with_other_alpha_is_left_alone() {
    let model = conv_then(vec![
        node(
            "HardSigmoid",
            &["conv"],
            "hs",
            vec![float("alpha", 0.2), float("beta", 0.5)],
        ),
        node("Mul", &["conv", "hs"], "y", vec![]),
    ]);
    assert!(
        model
            .graph()
            .nodes
            .iter()
            .any(|n| n.op == Op::Binary(BinaryOp::Mul)),
        "x · HardSigmoid(x) with alpha 0.2 is kept: {:?}",
        op_names(&model)
    );
    check_values(&model, |v| v * hard_sigmoid(v, 0.2, 0.5));
}

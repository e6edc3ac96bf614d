//! GELU written out as `x · 0.5 · (1 + erf(x / √2))` becomes one unary in the producing Conv's epilogue, in the
//! three orders exporters write it: TorchScript's two and torch's dynamo exporter's `x · (0.5 · (1 + erf))`.

use std::sync::Arc;

use super::{assert_close, conv_1x1_then, conv_epilogues, op_names, run_cpu};
use crate::Model;
use crate::cpu::num::erf_f32;
use crate::ir::{EpilogueStep, UnaryOp};
use crate::onnx::proto::{NodeProto, TensorProto};
use crate::onnx::test_graph::{init, node};

const C: usize = 2;

/// 1×1 Conv weights that spread the test input over both signs.
const W: [f32; C * C] = [1.5, -0.5, 0.25, 2.0];

/// `Conv(x, W)` named "conv" followed by `tail`, which reads "conv" and writes "y"; the constants "sqrt2",
/// "half" and "one" are there for it to use.
fn conv_then(tail: Vec<NodeProto>) -> Arc<Model> {
    let scalar = |name: &str, v: f32| -> TensorProto { init(name, &[], &[v]) };
    conv_1x1_then(
        C,
        &W,
        tail,
        vec![
            scalar("sqrt2", std::f32::consts::SQRT_2),
            scalar("half", 0.5),
            scalar("one", 1.0),
        ],
    )
}

fn gelu(v: f32) -> f32 {
    0.5 * v * (1.0 + erf_f32(v / std::f32::consts::SQRT_2))
}

#[test]
fn gelu_written_out_is_one_unary_in_the_conv_in_every_exporters_order() {
    let erf = || {
        vec![
            node("Div", &["conv", "sqrt2"], "d", vec![]),
            node("Erf", &["d"], "e", vec![]),
            node("Add", &["e", "one"], "p", vec![]),
        ]
    };
    let forms: [(&str, Vec<NodeProto>); 3] = [
        (
            "Mul(Mul(x, 1+erf), 0.5)",
            vec![
                node("Mul", &["conv", "p"], "m", vec![]),
                node("Mul", &["m", "half"], "y", vec![]),
            ],
        ),
        (
            "Mul(Mul(x, 0.5), 1+erf)",
            vec![
                node("Mul", &["conv", "half"], "m", vec![]),
                node("Mul", &["m", "p"], "y", vec![]),
            ],
        ),
        (
            "Mul(x, Mul(0.5, 1+erf))",
            vec![
                node("Mul", &["half", "p"], "m", vec![]),
                node("Mul", &["conv", "m"], "y", vec![]),
            ],
        ),
    ];
    for (form, tail) in forms {
        let model = conv_then([erf(), tail].concat());
        assert_eq!(op_names(&model), vec!["Conv"], "{form}: the chain is gone");
        assert_eq!(
            conv_epilogues(&model),
            vec![vec![EpilogueStep::Unary(UnaryOp::Gelu { tanh: false })]],
            "{form}"
        );
        let (h, w) = (4, 5);
        let pixels = h * w;
        let x: Vec<f32> = (0..C * pixels).map(|i| i as f32 * 0.4 - 8.0).collect();
        let y = run_cpu(&model, vec![1, C, h, w], x.clone());
        let want: Vec<f32> = (0..C * pixels)
            .map(|k| {
                let (o, px) = (k / pixels, k % pixels);
                gelu((0..C).map(|i| W[o * C + i] * x[i * pixels + px]).sum())
            })
            .collect();
        assert_close(&y.to_vec::<f32>().unwrap(), &want);
    }
}

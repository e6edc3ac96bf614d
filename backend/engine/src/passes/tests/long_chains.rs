//! A deep stack of Conv → BatchNormalization → Add → Relu layers: every layer folds into one Conv however many
//! there are. The optimiser used to stop after 32 rounds with one fusion per pass per round, so layers past the
//! 32nd kept their Add as a separate node.

use super::{assert_close, conv_epilogues, model, op_names, run_cpu, value};
use crate::ir::{BinaryOp, EpilogueStep, UnaryOp};
use crate::onnx::test_graph::{init, node};

const C: usize = 2;

/// More layers than the old round cap (32).
const LAYERS: usize = 40;

/// Layer k's parameters: 1×1 Conv weights [C, C], BatchNormalization scale, bias, mean, var, and the Add's
/// per-channel shift. Kept small so forty layers neither vanish nor blow up.
struct Layer {
    w: [f32; C * C],
    scale: [f32; C],
    bias: [f32; C],
    mean: [f32; C],
    var: [f32; C],
    shift: [f32; C],
}

fn layer(k: usize) -> Layer {
    let s = (k % 5) as f32 * 0.05;
    Layer {
        w: [0.6 + s, -0.3, 0.25, 0.7 - s],
        scale: [1.1, 0.9],
        bias: [0.05, -0.02],
        mean: [0.1 * s, -0.1],
        var: [1.0 + s, 0.8],
        shift: [0.1, if k.is_multiple_of(2) { 0.2 } else { -0.1 }],
    }
}

const EPSILON: f32 = 1e-5;

fn deep_stack() -> std::sync::Arc<crate::Model> {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let c = C as i64;
    for k in 0..LAYERS {
        let p = layer(k);
        let input = if k == 0 {
            "x".to_string()
        } else {
            format!("relu{}", k - 1)
        };
        let output = if k == LAYERS - 1 {
            "y".to_string()
        } else {
            format!("relu{k}")
        };
        let name = |what: &str| format!("{what}{k}");
        nodes.push(node("Conv", &[&input, &name("w")], &name("conv"), vec![]));
        nodes.push(node(
            "BatchNormalization",
            &[
                &name("conv"),
                &name("scale"),
                &name("bias"),
                &name("mean"),
                &name("var"),
            ],
            &name("bn"),
            vec![super::float("epsilon", EPSILON)],
        ));
        nodes.push(node("Add", &[&name("bn"), &name("shift")], &name("add"), vec![]));
        nodes.push(node("Relu", &[&name("add")], &output, vec![]));
        inits.push(init(&name("w"), &[c, c, 1, 1], &p.w));
        inits.push(init(&name("scale"), &[c], &p.scale));
        inits.push(init(&name("bias"), &[c], &p.bias));
        inits.push(init(&name("mean"), &[c], &p.mean));
        inits.push(init(&name("var"), &[c], &p.var));
        inits.push(init(&name("shift"), &[c, 1, 1], &p.shift));
    }
    model(
        nodes,
        inits,
        value("x", &[-1, c, -1, -1], &["batch", "height", "width"]),
        value("y", &[-1, c, -1, -1], &["batch", "height", "width"]),
    )
}

/// The stack computed from its definition, pixel by pixel, for a [1, C, h, w] input.
fn reference(x: &[f32], pixels: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for px in 0..pixels {
        let mut v: [f32; C] = std::array::from_fn(|c| x[c * pixels + px]);
        for k in 0..LAYERS {
            let p = layer(k);
            v = std::array::from_fn(|o| {
                let conv: f32 = (0..C).map(|i| p.w[o * C + i] * v[i]).sum();
                let bn = (conv - p.mean[o]) / (p.var[o] + EPSILON).sqrt() * p.scale[o] + p.bias[o];
                (bn + p.shift[o]).max(0.0)
            });
        }
        for c in 0..C {
            out[c * pixels + px] = v[c];
        }
    }
    out
}

#[test]
fn every_layer_of_a_stack_deeper_than_32_folds_into_its_conv() {
    let model = deep_stack();
    let ops = op_names(&model);
    assert_eq!(
        ops,
        vec!["Conv"; LAYERS],
        "each layer is one Conv with BatchNormalization folded and Add and Relu in its epilogue"
    );
    for (k, steps) in conv_epilogues(&model).iter().enumerate() {
        assert!(
            matches!(
                steps[..],
                [
                    EpilogueStep::Binary {
                        op: BinaryOp::Add,
                        ..
                    },
                    EpilogueStep::Unary(UnaryOp::Relu)
                ]
            ),
            "layer {k}'s epilogue: {steps:?}"
        );
    }

    let (h, w) = (3, 4);
    let x: Vec<f32> = (0..C * h * w)
        .map(|i| ((i * 5) % 13) as f32 * 0.2 - 1.0)
        .collect();
    let y = run_cpu(&model, vec![1, C, h, w], x.clone());
    assert_eq!(y.shape, vec![1, C, h, w]);
    assert_close(&y.to_vec::<f32>().unwrap(), &reference(&x, h * w));
}

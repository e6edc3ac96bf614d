//! A model whose dynamic height only takes a range still gets its shape-checked fusions. PP-OCRv4's text
//! recogniser pools its feature height down to 1 and concatenates it with a height-1 branch, so it refuses
//! heights of 96 and above; the fusion pass's shape probes used 64 and 96, the 96 probe failed, and the
//! recogniser got no Binary fusion at all.

use super::{assert_close, conv_epilogues, int, ints, model, op_names, run_cpu, value};
use crate::ir::{BinaryOp, EpilogueStep};
use crate::onnx::test_graph::{init, node};

const C: usize = 2;
const W: [f32; C * C] = [0.5, -1.0, 2.0, 0.25];
const BIAS: [f32; C] = [0.5, -0.25];

/// The pooling window: heights 48 to 95 pool to 1 row, which the concatenation with the mean needs.
const WINDOW: usize = 48;

/// f = Conv(x, W) + BIAS; y = Concat(MaxPool over WINDOW rows (f), ReduceMean over height (f)) on channels.
/// Input [batch, C, height, width] with height in 48..=95.
fn recogniser_like() -> std::sync::Arc<crate::Model> {
    let c = C as i64;
    model(
        vec![
            node("Conv", &["x", "w"], "conv", vec![]),
            node("Add", &["conv", "bias"], "f", vec![]),
            node(
                "MaxPool",
                &["f"],
                "pooled",
                vec![
                    ints("kernel_shape", &[WINDOW as i64, 1]),
                    ints("strides", &[WINDOW as i64, 1]),
                ],
            ),
            node(
                "ReduceMean",
                &["f"],
                "mean",
                vec![ints("axes", &[2]), int("keepdims", 1)],
            ),
            node("Concat", &["pooled", "mean"], "y", vec![int("axis", 1)]),
        ],
        vec![init("w", &[c, c, 1, 1], &W), init("bias", &[c, 1, 1], &BIAS)],
        value("x", &[-1, c, -1, -1], &["batch", "height", "width"]),
        value("y", &[-1, 2 * c, 1, -1], &["batch", "width"]),
    )
}

/// The model from its definition for a [1, C, h, w] input: [2C, w] values.
fn reference(x: &[f32], h: usize, w: usize) -> Vec<f32> {
    let f = |c: usize, r: usize, col: usize| -> f32 {
        BIAS[c]
            + (0..C)
                .map(|i| W[c * C + i] * x[(i * h + r) * w + col])
                .sum::<f32>()
    };
    let mut out = Vec::new();
    for c in 0..C {
        out.extend((0..w).map(|col| (0..WINDOW).map(|r| f(c, r, col)).fold(f32::MIN, f32::max)));
    }
    for c in 0..C {
        out.extend((0..w).map(|col| (0..h).map(|r| f(c, r, col)).sum::<f32>() / h as f32));
    }
    out
}

#[test]
fn bias_add_fuses_into_the_conv_when_the_dynamic_height_only_takes_a_range() {
    let model = recogniser_like();
    assert!(
        !model
            .graph()
            .nodes
            .iter()
            .any(|n| matches!(n.op, crate::ir::Op::Binary(_))),
        "the bias Add is fused into the Conv: {:?}",
        op_names(&model)
    );
    assert!(
        matches!(
            conv_epilogues(&model)[..],
            [ref steps] if matches!(steps[..], [EpilogueStep::Binary { op: BinaryOp::Add, .. }])
        ),
        "the Conv's epilogue is the bias Add: {:?}",
        conv_epilogues(&model)
    );
    for (h, w) in [(48, 3), (64, 5)] {
        let x: Vec<f32> = (0..C * h * w)
            .map(|i| ((i * 7) % 17) as f32 * 0.1 - 0.8)
            .collect();
        let y = run_cpu(&model, vec![1, C, h, w], x.clone());
        assert_eq!(y.shape, vec![1, 2 * C, 1, w]);
        assert_close(&y.to_vec::<f32>().unwrap(), &reference(&x, h, w));
    }
}

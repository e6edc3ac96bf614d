//! A squeeze-and-excitation block as torchvision exports it: the scale's Mul must not become the smaller
//! Conv's epilogue.

use std::sync::Arc;

use super::{float, ints, run_cpu, value};
use crate::Model;
use crate::onnx::test_graph::{init, node};

const C: usize = 3;

/// Weights of the SE block's fully connected layer (a 1×1 Conv over channels) and its bias.
fn fc_weights() -> (Vec<f32>, Vec<f32>) {
    let w = (0..C * C).map(|i| (i as f32 - 4.0) * 0.25).collect();
    let b = vec![0.5, -0.5, 1.0];
    (w, b)
}

/// torchvision's squeeze-and-excitation block as exported: features = Conv 1×1 stride 2 (the stride makes
/// the features' spatial size 1×1 for tiny inputs, as a whole backbone does), scale =
/// HardSigmoid(Conv 1×1(GlobalAveragePool(features))), y = scale · features. Input [batch, C, height, width].
fn squeeze_excitation() -> Arc<Model> {
    let eye: Vec<f32> = (0..C * C)
        .map(|i| if i % (C + 1) == 0 { 1.0 } else { 0.0 })
        .collect();
    let (fc_w, fc_b) = fc_weights();
    let c = C as i64;
    super::model(
        vec![
            node("Conv", &["x", "eye"], "features", vec![ints("strides", &[2, 2])]),
            node("GlobalAveragePool", &["features"], "pooled", vec![]),
            node("Conv", &["pooled", "fc_w", "fc_b"], "fc", vec![]),
            node(
                "HardSigmoid",
                &["fc"],
                "scale",
                vec![float("alpha", 1.0 / 6.0), float("beta", 0.5)],
            ),
            node("Mul", &["scale", "features"], "y", vec![]),
        ],
        vec![
            init("eye", &[c, c, 1, 1], &eye),
            init("fc_w", &[c, c, 1, 1], &fc_w),
            init("fc_b", &[c], &fc_b),
        ],
        value("x", &[-1, c, -1, -1], &["batch", "height", "width"]),
        value("y", &[-1, c, -1, -1], &["batch", "oh", "ow"]),
    )
}

/// The SE block computed directly from its definition, for one [1, C, h, w] input.
fn squeeze_excitation_reference(x: &[f32], h: usize, w: usize) -> Vec<f32> {
    let (oh, ow) = (h.div_ceil(2), w.div_ceil(2));
    let features: Vec<f32> = (0..C)
        .flat_map(|c| (0..oh).flat_map(move |i| (0..ow).map(move |j| (c, i, j))))
        .map(|(c, i, j)| x[(c * h + 2 * i) * w + 2 * j])
        .collect();
    let pooled: Vec<f32> = features
        .chunks(oh * ow)
        .map(|plane| plane.iter().sum::<f32>() / (oh * ow) as f32)
        .collect();
    let (fc_w, fc_b) = fc_weights();
    let scale: Vec<f32> = (0..C)
        .map(|o| {
            let z = fc_b[o] + (0..C).map(|i| fc_w[o * C + i] * pooled[i]).sum::<f32>();
            (z / 6.0 + 0.5).clamp(0.0, 1.0)
        })
        .collect();
    features
        .iter()
        .enumerate()
        .map(|(k, f)| f * scale[k / (oh * ow)])
        .collect()
}

/// The SE block's Mul reads features larger than the fc Conv's [N, C, 1, 1] output, so it must not become
/// that Conv's epilogue (the run failed with "fused operand ... does not broadcast"); the HardSigmoid still
/// does.
#[test]
fn squeeze_excitation_scale_is_not_fused_into_the_smaller_conv() {
    let model = squeeze_excitation();
    let nodes = &model.graph().nodes;
    assert!(
        nodes
            .iter()
            .any(|n| matches!(n.op, crate::ir::Op::Binary(crate::ir::BinaryOp::Mul))),
        "the SE Mul stays a node: {:?}",
        nodes.iter().map(|n| &n.op).collect::<Vec<_>>()
    );
    assert!(
        !nodes.iter().any(|n| matches!(n.op, crate::ir::Op::Unary(_))),
        "HardSigmoid is fused into the fc Conv"
    );

    let (h, w) = (8, 6);
    let x: Vec<f32> = (0..C * h * w)
        .map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5)
        .collect();
    let y = run_cpu(&model, vec![1, C, h, w], x.clone());
    assert_eq!(y.shape, vec![1, C, h / 2, w / 2]);
    super::assert_close(
        &y.to_vec::<f32>().unwrap(),
        &squeeze_excitation_reference(&x, h, w),
    );
}

//! The passes on small graphs shaped like real exporter output: what they fuse, and that the optimised graph
//! still computes what the ONNX graph says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use prost::Message;

use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};
use crate::{ExecutorKind, Model, Session, SessionOptions, Tensor};

/// A float tensor type whose negative dims are dynamic, named by `names` in order.
fn float_type(dims: &[i64], names: &[&str]) -> TypeProto {
    let mut names = names.iter();
    TypeProto {
        tensor_type: Some(TypeProtoTensor {
            elem_type: 1,
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| Dimension {
                        dim_value: (d >= 0).then_some(d),
                        dim_param: (d < 0).then(|| names.next().expect("a name per dynamic dim").to_string()),
                        denotation: String::new(),
                    })
                    .collect(),
            }),
        }),
        ..Default::default()
    }
}

fn value(name: &str, dims: &[i64], names: &[&str]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(float_type(dims, names)),
        doc_string: String::new(),
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::FLOAT,
        f: v,
        ..Default::default()
    }
}

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
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: vec![
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
            name: "se".into(),
            initializer: vec![
                init("eye", &[c, c, 1, 1], &eye),
                init("fc_w", &[c, c, 1, 1], &fc_w),
                init("fc_b", &[c], &fc_b),
            ],
            input: vec![value("x", &[-1, c, -1, -1], &["batch", "height", "width"])],
            output: vec![value("y", &[-1, c, -1, -1], &["batch", "oh", "ow"])],
            ..Default::default()
        }),
        ..Default::default()
    };
    Arc::new(Model::from_bytes(&m.encode_to_vec(), None).unwrap())
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

    let session = Session::new(
        model,
        SessionOptions {
            executor: ExecutorKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let (h, w) = (8, 6);
    let x: Vec<f32> = (0..C * h * w)
        .map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5)
        .collect();
    let out = session
        .run_blocking(vec![(
            "x".into(),
            Tensor::from_vec(vec![1, C, h, w], x.clone()).unwrap(),
        )])
        .unwrap();
    let (name, y) = &out[0];
    assert_eq!(name, "y");
    assert_eq!(y.shape, vec![1, C, h / 2, w / 2]);
    let got = y.to_vec::<f32>().unwrap();
    let want = squeeze_excitation_reference(&x, h, w);
    for (k, (g, r)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - r).abs() <= 1e-5 * r.abs().max(1.0),
            "y[{k}]: got {g}, want {r}"
        );
    }
}

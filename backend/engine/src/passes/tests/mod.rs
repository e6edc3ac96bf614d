//! The passes on small graphs shaped like real exporter output: what they fuse, and that the optimised graph
//! still computes what the ONNX graph says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod gelu;
mod hard_swish;
mod long_chains;
mod probes;
mod qdq;
mod safe_softmax;
mod silu;
mod squeeze_excitation;

use std::sync::Arc;

use prost::Message;

use crate::ir::Op;
use crate::onnx::proto::*;
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

/// A float graph input or output.
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

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
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

/// An opset-17 model with one input and one output, loaded (and so optimised) as a user's would be.
fn model(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    input: ValueInfoProto,
    output: ValueInfoProto,
) -> Arc<Model> {
    let bytes = model_bytes(nodes, initializer, input, output);
    Arc::new(Model::from_bytes(&bytes, None).unwrap())
}

/// [`model`]'s ONNX bytes, for a test that loads the graph itself.
fn model_bytes(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    input: ValueInfoProto,
    output: ValueInfoProto,
) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "test".into(),
            initializer,
            input: vec![input],
            output: vec![output],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The model's one output on the CPU executor for input `x` of `shape`.
fn run_cpu(model: &Arc<Model>, shape: Vec<usize>, x: Vec<f32>) -> Tensor {
    run_on(ExecutorKind::Cpu, model, shape, x)
}

/// The model's one output on `executor` for input `x` of `shape`.
fn run_on(executor: ExecutorKind, model: &Arc<Model>, shape: Vec<usize>, x: Vec<f32>) -> Tensor {
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor,
            ..Default::default()
        },
    )
    .unwrap();
    let input_name = model.signature().inputs[0].name.clone();
    let mut out = session
        .run_blocking(vec![(input_name, Tensor::from_vec(shape, x).unwrap())])
        .unwrap();
    out.remove(0).1
}

/// The optimised graph's node kinds, for assertions and their messages.
fn op_names(model: &Model) -> Vec<&'static str> {
    model.graph().nodes.iter().map(|n| n.op.name()).collect()
}

/// The epilogue steps fused into the graph's Conv nodes, in graph order.
fn conv_epilogues(model: &Model) -> Vec<Vec<crate::ir::EpilogueStep>> {
    model
        .graph()
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Conv { activation, .. } => Some(activation.steps.clone()),
            _ => None,
        })
        .collect()
}

/// f32 results against a reference computed in f32 from the definition (relative 1e-5, absolute below 1).
fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "element count");
    for (k, (g, r)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - r).abs() <= 1e-5 * r.abs().max(1.0),
            "element {k}: got {g}, want {r}"
        );
    }
}

/// `Conv(x, w)` with 1×1 weights `w` over `c` channels, named "conv", followed by `tail`, which reads "conv"
/// and writes "y"; `inits` are extra constants for the tail.
fn conv_1x1_then(c: usize, w: &[f32], tail: Vec<NodeProto>, mut inits: Vec<TensorProto>) -> Arc<Model> {
    let c = c as i64;
    let mut nodes = vec![crate::onnx::test_graph::node("Conv", &["x", "w"], "conv", vec![])];
    nodes.extend(tail);
    inits.insert(0, crate::onnx::test_graph::init("w", &[c, c, 1, 1], w));
    model(
        nodes,
        inits,
        value("x", &[-1, c, -1, -1], &["batch", "height", "width"]),
        value("y", &[-1, c, -1, -1], &["batch", "height", "width"]),
    )
}

//! Models cut into stages, run end to end on the CPU executor: the answers are exact for inputs whose
//! data-dependent shapes differ, and the parts see the values they need.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use prost::Message;

use crate::onnx::proto::*;
use crate::onnx::test_graph::{graph_attr, init, node, value_info};
use crate::{ExecutorKind, Model, Session, SessionOptions, Tensor};

fn model(graph: GraphProto) -> Arc<Model> {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(graph),
        ..Default::default()
    };
    Arc::new(Model::from_bytes(&m.encode_to_vec(), None).unwrap())
}

fn session(model: Arc<Model>) -> Session {
    let options = SessionOptions {
        executor: ExecutorKind::Cpu,
        threads: Some(2),
        plan_cache_size: 2,
    };
    Session::new(model, options).unwrap()
}

fn run(session: &Session, x: Vec<f32>) -> Vec<Tensor> {
    let x = Tensor::from_vec(vec![2, 2], x).unwrap();
    session
        .run_blocking(vec![("x".into(), x)])
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

/// NonZero over values computed from the input: the input is not a host input (no plan per input
/// value); the stage before the cut computes Relu(x) and its sum, NonZero runs between, and the rest
/// transposes its coordinates and gathers the values they point at.
#[test]
fn non_zero_over_computed_values_runs_between_stages() {
    let m = model(GraphProto {
        node: vec![
            node("Relu", &["x"], "r", vec![]),
            node("ReduceSum", &["r"], "total", vec![]),
            node("NonZero", &["r"], "nz", vec![]),
            node("Transpose", &["nz"], "coords", vec![]),
            node("GatherND", &["r", "coords"], "picked", vec![]),
        ],
        name: "g".into(),
        input: vec![value_info("x", 1, Some(&[2, 2]))],
        output: vec![
            value_info("coords", 7, None),
            value_info("picked", 1, None),
            value_info("total", 1, None),
        ],
        ..Default::default()
    });
    assert!(
        m.host_inputs().is_empty(),
        "x is request data, not a plan parameter"
    );
    let stages = m.stages.as_ref().expect("NonZero over Relu(x) cuts the model");
    assert!(stages.first.is_some() && stages.rest.is_some());
    let s = session(m.clone());
    // the second and third inputs have the same number of non-zeros: the rest's plan is reused
    for (x, coords, picked) in [
        (
            vec![1.0f32, -1.0, 0.0, 2.0],
            vec![0i64, 0, 1, 1],
            vec![1.0f32, 2.0],
        ),
        (
            vec![-1.0, 3.0, 4.0, 5.0],
            vec![0, 1, 1, 0, 1, 1],
            vec![3.0, 4.0, 5.0],
        ),
        (
            vec![6.0, 7.0, -4.0, 8.0],
            vec![0, 0, 0, 1, 1, 1],
            vec![6.0, 7.0, 8.0],
        ),
    ] {
        let total: f32 = picked.iter().sum();
        let out = run(&s, x);
        assert_eq!(out[0].shape, vec![picked.len(), 2]);
        assert_eq!(out[0].to_i64_vec().unwrap(), coords);
        assert_eq!(out[1].to_vec::<f32>().unwrap(), picked);
        assert_eq!(out[2].to_vec::<f32>().unwrap(), vec![total]);
    }
}

/// An If whose condition is computed from the input (the sign of its sum): the stage before the cut
/// computes the condition, and the rest is specialised for its value with the branch inlined.
#[test]
fn if_on_a_computed_condition_takes_the_branch_its_value_chooses() {
    let branch = |op: &str, out: &str| GraphProto {
        node: vec![node(op, &["x"], out, vec![])],
        name: out.into(),
        output: vec![value_info(out, 1, Some(&[2, 2]))],
        ..Default::default()
    };
    let m = model(GraphProto {
        node: vec![
            node("ReduceSum", &["x"], "sum", vec![]),
            node("Greater", &["sum", "zero"], "positive", vec![]),
            NodeProto {
                input: vec!["positive".into()],
                output: vec!["y".into()],
                name: "choose".into(),
                op_type: "If".into(),
                attribute: vec![
                    graph_attr("then_branch", branch("Neg", "negated")),
                    graph_attr("else_branch", branch("Abs", "absolute")),
                ],
                ..Default::default()
            },
        ],
        name: "g".into(),
        initializer: vec![init("zero", &[], &[0.0])],
        input: vec![value_info("x", 1, Some(&[2, 2]))],
        output: vec![value_info("y", 1, Some(&[2, 2]))],
        ..Default::default()
    });
    assert!(m.host_inputs().is_empty());
    let s = session(m);
    assert_eq!(
        run(&s, vec![1.0, -2.0, 3.0, 4.0])[0].to_vec::<f32>().unwrap(),
        vec![-1.0, 2.0, -3.0, -4.0],
        "a positive sum takes then_branch (Neg)"
    );
    assert_eq!(
        run(&s, vec![1.0, -2.0, -3.0, 0.5])[0].to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 0.5],
        "a negative sum takes else_branch (Abs)"
    );
}

/// A model whose output is NonZero's: nothing runs after the host part.
#[test]
fn non_zero_as_the_output_needs_no_stage_after_it() {
    let m = model(GraphProto {
        node: vec![
            node("Relu", &["x"], "r", vec![]),
            node("NonZero", &["r"], "nz", vec![]),
        ],
        name: "g".into(),
        input: vec![value_info("x", 1, Some(&[2, 2]))],
        output: vec![value_info("nz", 7, None)],
        ..Default::default()
    });
    assert!(m.stages.as_ref().is_some_and(|s| s.rest.is_none()));
    let out = run(&session(m), vec![0.0, 3.0, -1.0, 2.0]);
    assert_eq!(out[0].shape, vec![2, 2]);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![0, 1, 1, 1]);
}

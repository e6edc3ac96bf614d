//! Loop and Scan unrolled at specialisation, on both executors: an If nested in a Loop body takes its
//! branch per iteration, a reversed Scan stacks along its output axis, and the loops the engine cannot
//! unroll are refused naming the node and the reason. Expected values are worked by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use prost::Message;

use crate::onnx::proto::*;
use crate::onnx::test_graph::{graph_attr, init, value_info};
use crate::wgpu::AdapterChoice;
use crate::{ErrorKind, ExecutorKind, Model, Session, SessionOptions, Tensor};

fn float(name: &str, dims: &[i64]) -> ValueInfoProto {
    value_info(name, 1, Some(dims))
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attribute: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

fn graph(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    initializer: Vec<TensorProto>,
) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "g".into(),
        initializer,
        input: inputs,
        output: outputs
            .iter()
            .map(|n| ValueInfoProto {
                name: n.to_string(),
                r#type: None,
                doc_string: String::new(),
            })
            .collect(),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

fn i64_init(name: &str, v: i64) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![],
        data_type: 7,
        raw_data: v.to_le_bytes().to_vec(),
        ..Default::default()
    }
}

fn model_bytes(opset: i64, g: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Runs the model with input `x` on both executors; returns each executor's outputs.
fn run(bytes: &[u8], x: Tensor) -> Vec<Vec<Tensor>> {
    let model = Arc::new(Model::from_bytes(bytes, None).unwrap());
    [ExecutorKind::Cpu, ExecutorKind::Wgpu(AdapterChoice::Auto)]
        .into_iter()
        .map(|executor| {
            let options = SessionOptions {
                executor,
                threads: Some(1),
                plan_cache_size: 1,
            };
            let session = Session::new(model.clone(), options).unwrap();
            let out = session.run_blocking(vec![("x".into(), x.clone())]).unwrap();
            out.into_iter().map(|(_, t)| t).collect()
        })
        .collect()
}

/// A Loop over `x` [1] with trip count `m` whose body adds one and whose condition output is `cond`
/// computed by `cond_nodes` (from `y_out`).
fn counting_loop(m: i64, cond_nodes: Vec<NodeProto>) -> Vec<u8> {
    let mut body_nodes = vec![node("Add", "add", &["y_in", "one"], &["y_out"], vec![])];
    body_nodes.extend(cond_nodes);
    let body = graph(
        body_nodes,
        vec![
            value_info("i", 7, Some(&[])),
            value_info("c", 9, Some(&[])),
            float("y_in", &[1]),
        ],
        &["cond_out", "y_out"],
        vec![],
    );
    let g = graph(
        vec![node(
            "Loop",
            "count",
            &["m", "", "x"],
            &["y"],
            vec![graph_attr("body", body)],
        )],
        vec![float("x", &[1])],
        &["y"],
        vec![
            i64_init("m", m),
            init("one", &[1], &[1.0]),
            init("ten", &[1], &[10.0]),
        ],
    );
    model_bytes(13, g)
}

/// A Loop of `m` iterations over `x` [1] whose body adds one before iteration 2 and doubles from then on
/// (an If on the iteration number), scanning out each iteration's value.
fn stepping_loop(m: i64) -> Vec<u8> {
    let then_g = graph(
        vec![node("Add", "inc", &["y_in", "one"], &["t"], vec![])],
        vec![],
        &["t"],
        vec![],
    );
    let else_g = graph(
        vec![node("Mul", "dbl", &["y_in", "two"], &["e"], vec![])],
        vec![],
        &["e"],
        vec![],
    );
    let body = graph(
        vec![
            node("Identity", "keep", &["c"], &["cond_out"], vec![]),
            node("Less", "early", &["i", "two_i"], &["lt"], vec![]),
            node(
                "If",
                "step",
                &["lt"],
                &["y_out"],
                vec![
                    graph_attr("then_branch", then_g),
                    graph_attr("else_branch", else_g),
                ],
            ),
            node("Identity", "scan", &["y_out"], &["s"], vec![]),
        ],
        vec![
            value_info("i", 7, Some(&[])),
            value_info("c", 9, Some(&[])),
            float("y_in", &[1]),
        ],
        &["cond_out", "y_out", "s"],
        vec![],
    );
    let g = graph(
        vec![node(
            "Loop",
            "steps",
            &["m", "", "x"],
            &["y", "ys"],
            vec![graph_attr("body", body)],
        )],
        vec![float("x", &[1])],
        &["y", "ys"],
        vec![
            i64_init("m", m),
            i64_init("two_i", 2),
            init("one", &[1], &[1.0]),
            init("two", &[1], &[2.0]),
        ],
    );
    model_bytes(13, g)
}

#[test]
fn an_if_in_a_loop_body_takes_its_branch_per_iteration() {
    // y: 1 → 2 → 3 → 6 → 12, each iteration's y scanned out
    let x = Tensor::from_vec(vec![1], vec![1.0f32]).unwrap();
    for outs in run(&stepping_loop(4), x) {
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), [12.0]);
        assert_eq!(outs[1].shape, [4, 1]);
        assert_eq!(outs[1].to_vec::<f32>().unwrap(), [2.0, 3.0, 6.0, 12.0]);
    }
}

#[test]
fn a_loop_of_no_iterations_passes_its_values_through_with_empty_scan_outputs() {
    let x = Tensor::from_vec(vec![1], vec![5.0f32]).unwrap();
    for outs in run(&stepping_loop(0), x) {
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), [5.0]);
        assert_eq!(outs[1].shape, [0, 1]);
    }
}

#[test]
fn a_reversed_scan_stacks_its_outputs_along_the_output_axis() {
    // running sums of x's columns from the last one: [3, 6], [5, 11], [6, 15]; stacked in reverse
    // along the last axis
    let body = graph(
        vec![
            node("Add", "sum", &["s_in", "col"], &["s_out"], vec![]),
            node("Identity", "scan", &["s_out"], &["z"], vec![]),
        ],
        vec![float("s_in", &[2]), float("col", &[2])],
        &["s_out", "z"],
        vec![],
    );
    let scan = node(
        "Scan",
        "sums",
        &["zero", "x"],
        &["s", "zs"],
        vec![
            graph_attr("body", body),
            int_attr("num_scan_inputs", 1),
            ints_attr("scan_input_axes", &[1]),
            ints_attr("scan_input_directions", &[1]),
            ints_attr("scan_output_axes", &[-1]),
            ints_attr("scan_output_directions", &[1]),
        ],
    );
    let g = graph(
        vec![scan],
        vec![float("x", &[2, 3])],
        &["s", "zs"],
        vec![init("zero", &[2], &[0.0, 0.0])],
    );
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    for outs in run(&model_bytes(16, g), x) {
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), [6.0, 15.0]);
        assert_eq!(outs[1].shape, [2, 3]);
        assert_eq!(outs[1].to_vec::<f32>().unwrap(), [6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
    }
}

#[test]
fn a_loop_whose_condition_depends_on_request_data_is_refused_naming_it() {
    let bytes = counting_loop(
        5,
        vec![node("Less", "below", &["y_out", "ten"], &["cond_out"], vec![])],
    );
    let e = Model::from_bytes(&bytes, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    for part in [
        "'count' (Loop)",
        "condition output 'cond_out'",
        "depends on request data",
    ] {
        assert!(e.to_string().contains(part), "'{part}' missing from: {e}");
    }
}

#[test]
fn a_loop_past_the_unroll_limit_is_refused_naming_the_limit() {
    let bytes = counting_loop(
        5000,
        vec![node("Identity", "keep", &["c"], &["cond_out"], vec![])],
    );
    let e = Model::from_bytes(&bytes, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    for part in ["'count' (Loop)", "4096 iterations"] {
        assert!(e.to_string().contains(part), "'{part}' missing from: {e}");
    }
}

#[test]
fn a_loop_whose_trip_count_is_computed_from_request_data_runs_in_stages() {
    // M = int(floor(x)): the stage before the Loop computes it, the rest unrolls M iterations
    let body = graph(
        vec![
            node("Identity", "keep", &["c"], &["cond_out"], vec![]),
            node("Add", "add", &["y_in", "one"], &["y_out"], vec![]),
        ],
        vec![
            value_info("i", 7, Some(&[])),
            value_info("c", 9, Some(&[])),
            float("y_in", &[1]),
        ],
        &["cond_out", "y_out"],
        vec![],
    );
    let g = graph(
        vec![
            node("Floor", "floor", &["x"], &["f"], vec![]),
            node("ReduceMax", "max", &["f"], &["fm"], vec![int_attr("keepdims", 0)]),
            node("Cast", "trips", &["fm"], &["m"], vec![int_attr("to", 7)]),
            node(
                "Loop",
                "count",
                &["m", "", "zero"],
                &["y"],
                vec![graph_attr("body", body)],
            ),
        ],
        vec![float("x", &[1])],
        &["y"],
        vec![init("zero", &[1], &[0.0]), init("one", &[1], &[1.0])],
    );
    // the stage after the cut is specialised per trip count, so its output's type is declared
    let g = GraphProto {
        output: vec![float("y", &[1])],
        ..g
    };
    let bytes = model_bytes(13, g);
    // x is no host input: the network before the cut is one cached plan, not evaluated per request
    let model = Model::from_bytes(&bytes, None).unwrap();
    assert!(model.host_inputs().is_empty(), "{:?}", model.host_inputs());
    for (x, want) in [(3.5f32, 3.0f32), (7.0, 7.0)] {
        let x = Tensor::from_vec(vec![1], vec![x]).unwrap();
        for outs in run(&bytes, x) {
            assert_eq!(outs[0].to_vec::<f32>().unwrap(), [want]);
        }
    }
}

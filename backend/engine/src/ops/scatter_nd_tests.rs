//! ScatterND on both executors: duplicate index tuples combine in tuple order, negative indices count
//! from the end, and the wgpu executor gives the CPU executor's values; expected values are worked
//! from the operator's definition.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use prost::Message;

use super::refusal_tests::{float_input, string_attr, untyped};
use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};
use crate::wgpu::AdapterChoice;
use crate::{ExecutorKind, Model, Session, SessionOptions, Tensor};

/// An INT64 initializer.
fn ints(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 7,
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn scatter_nd(data: &str, idx: &str, upd: &str, out: &str, reduction: &str) -> NodeProto {
    node(
        "ScatterND",
        &[data, idx, upd],
        out,
        vec![string_attr("reduction", reduction)],
    )
}

#[test]
fn scatter_nd_on_wgpu_combines_duplicates_and_wraps_negative_indices_as_the_cpu_does() {
    // x [4, 3] = 1..=12, a graph input so that nothing folds at load
    let x: Vec<f32> = (1..=12).map(|v| v as f32).collect();
    let nodes = vec![
        // rows 1, -3 (= 1), 3, -1 (= 3) from tuples laid out [2, 2], each adding a row
        scatter_nd("x", "rows", "row_upd", "added", "add"),
        // single elements (0, -1), (-4, 0), (2, 1) replaced
        scatter_nd("x", "elems", "elem_upd", "replaced", "none"),
        // (1, 1) twice and (-1, 0) multiplied
        scatter_nd("x", "dup_elems", "mul_upd", "multiplied", "mul"),
        // row 0 and row -4 (= 0) combined by max
        scatter_nd("x", "dup_rows", "max_upd", "maxed", "max"),
    ];
    let initializer = vec![
        ints("rows", &[2, 2, 1], &[1, -3, 3, -1]),
        init(
            "row_upd",
            &[2, 2, 3],
            &[
                10.0, 20.0, 30.0, 1.0, 2.0, 3.0, 100.0, 200.0, 300.0, 0.5, 0.5, 0.5,
            ],
        ),
        ints("elems", &[3, 2], &[0, -1, -4, 0, 2, 1]),
        init("elem_upd", &[3], &[-1.0, -2.0, -3.0]),
        ints("dup_elems", &[3, 2], &[1, 1, -3, -2, -1, 0]),
        init("mul_upd", &[3], &[2.0, 3.0, 0.5]),
        ints("dup_rows", &[2, 1], &[0, -4]),
        init("max_upd", &[2, 3], &[5.0, 0.0, 5.0, 0.0, 6.0, 1.0]),
    ];
    let names = ["added", "replaced", "multiplied", "maxed"];
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 18,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer,
            input: vec![float_input("x", &[4, 3])],
            output: names.iter().map(|n| untyped(n)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = Arc::new(Model::from_bytes(&m.encode_to_vec(), None).unwrap());
    let run = |executor| -> Vec<Vec<f32>> {
        let session = Session::new(
            model.clone(),
            SessionOptions {
                executor,
                threads: Some(1),
                plan_cache_size: 1,
            },
        )
        .unwrap();
        let input = Tensor::from_vec(vec![4, 3], x.clone()).unwrap();
        let out = session.run_blocking(vec![("x".into(), input)]).unwrap();
        out.into_iter()
            .map(|(_, t)| {
                assert_eq!(t.shape, [4, 3]);
                t.to_vec::<f32>().unwrap()
            })
            .collect()
    };
    let cpu = run(ExecutorKind::Cpu);
    #[rustfmt::skip]
    let want: [[f32; 12]; 4] = [
        [1.0, 2.0, 3.0, 15.0, 27.0, 39.0, 7.0, 8.0, 9.0, 110.5, 211.5, 312.5],
        [-2.0, 2.0, -1.0, 4.0, 5.0, 6.0, 7.0, -3.0, 9.0, 10.0, 11.0, 12.0],
        [1.0, 2.0, 3.0, 4.0, 30.0, 6.0, 7.0, 8.0, 9.0, 5.0, 11.0, 12.0],
        [5.0, 6.0, 5.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0],
    ];
    for ((name, got), want) in names.iter().zip(&cpu).zip(&want) {
        assert_eq!(got, want, "CPU executor, output '{name}'");
    }
    // every value is exact in f32 and both executors combine in tuple order, so they agree bit for bit
    let gpu = run(ExecutorKind::Wgpu(AdapterChoice::Auto));
    for ((name, g), c) in names.iter().zip(&gpu).zip(&cpu) {
        assert_eq!(g, c, "wgpu executor against the CPU executor, output '{name}'");
    }
}

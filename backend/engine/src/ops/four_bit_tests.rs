//! INT4 and UINT4 initializers (carried as INT8 and UINT8) through DequantizeLinear per tensor, per
//! axis and in blocks (opset 21), and QuantizeLinear and Cast to 4-bit types, on both executors;
//! expected values are worked from the operators' definitions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use prost::Message;

use super::refusal_tests::int_attr;
use crate::onnx::int4::{INT4, UINT4};
use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};
use crate::wgpu::AdapterChoice;
use crate::{ExecutorKind, Model, Session, SessionOptions, Tensor};

/// A 4-bit initializer: `values` packed two per byte, the first in the low nibble; in `int32_data`
/// (one packed byte per entry) when `as_int32`, else in `raw_data`.
fn four_bit(name: &str, code: i32, dims: &[i64], values: &[i8], as_int32: bool) -> TensorProto {
    let packed: Vec<u8> = values
        .chunks(2)
        .map(|p| (p[0] as u8 & 0x0F) | ((p.get(1).copied().unwrap_or(0) as u8 & 0x0F) << 4))
        .collect();
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: code,
        raw_data: if as_int32 { Vec::new() } else { packed.clone() },
        int32_data: if as_int32 {
            packed.iter().map(|&b| i32::from(b)).collect()
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: None,
        doc_string: String::new(),
    }
}

fn float_input(name: &str, n: i64) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: vec![Dimension {
                        dim_value: Some(n),
                        dim_param: None,
                        denotation: String::new(),
                    }],
                }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

/// Runs the opset-21 graph of `nodes` over `initializer`, with graph input `s` = `scales`, on both
/// executors; returns each executor's outputs `names`.
fn run(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    scales: &[f32],
    names: &[&str],
) -> Vec<Vec<Tensor>> {
    let m = ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 21,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer,
            input: vec![float_input("s", scales.len() as i64)],
            output: names.iter().map(|n| output(n)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = Arc::new(Model::from_bytes(&m.encode_to_vec(), None).unwrap());
    [ExecutorKind::Cpu, ExecutorKind::Wgpu(AdapterChoice::Auto)]
        .into_iter()
        .map(|executor| {
            let session = Session::new(
                model.clone(),
                SessionOptions {
                    executor,
                    threads: Some(1),
                    plan_cache_size: 1,
                },
            )
            .unwrap();
            let s = Tensor::from_vec(vec![scales.len()], scales.to_vec()).unwrap();
            let out = session.run_blocking(vec![("s".into(), s)]).unwrap();
            out.into_iter().map(|(_, t)| t).collect()
        })
        .collect()
}

#[test]
fn four_bit_initializers_dequantize_per_tensor_per_axis_and_in_blocks() {
    // per tensor: INT4 [5] (an odd count, in int32_data), scale 0.25, no zero point
    let x = four_bit("x", INT4, &[5], &[1, -2, 3, -4, 5], true);
    let per_tensor = node("DequantizeLinear", &["x", "quarter"], "y", vec![]);
    // per axis: INT4 [2, 3] over axis 0, the scales a graph input, INT4 zero points [1, -2]
    let w = four_bit("w", INT4, &[2, 3], &[-8, -1, 0, 3, 7, -5], false);
    let wz = four_bit("wz", INT4, &[2], &[1, -2], false);
    let per_axis = node(
        "DequantizeLinear",
        &["w", "s", "wz"],
        "z",
        vec![int_attr("axis", 0)],
    );
    // blocked: UINT4 [2, 4], blocks of 2 along axis 1, scales and UINT4 zero points [2, 2]
    let u = four_bit("u", UINT4, &[2, 4], &[0, 15, 8, 9, 1, 2, 14, 3], false);
    let uz = four_bit("uz", UINT4, &[2, 2], &[8, 0, 15, 2], false);
    let blocked = node(
        "DequantizeLinear",
        &["u", "us", "uz"],
        "v",
        vec![int_attr("axis", 1), int_attr("block_size", 2)],
    );
    let initializer = vec![
        x,
        init("quarter", &[], &[0.25]),
        w,
        wz,
        u,
        init("us", &[2, 2], &[0.5, 1.0, 2.0, 0.1]),
        uz,
    ];
    for outs in run(
        vec![per_tensor, per_axis, blocked],
        initializer,
        &[0.5, 2.0],
        &["y", "z", "v"],
    ) {
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), [0.25, -0.5, 0.75, -1.0, 1.25]);
        assert_eq!(outs[1].shape, [2, 3]);
        assert_eq!(
            outs[1].to_vec::<f32>().unwrap(),
            [-4.5, -1.0, -0.5, 10.0, 18.0, -6.0]
        );
        let v = outs[2].to_vec::<f32>().unwrap();
        let want = [-4.0, 3.5, 8.0, 9.0, -28.0, -26.0, 1.2, 0.1];
        for (g, w) in v.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{v:?} != {want:?}");
        }
    }
}

#[test]
fn quantize_and_cast_to_four_bits_saturate_and_wrap() {
    // QuantizeLinear to INT4 by output_dtype saturates to [-8, 7]; Cast to UINT4 keeps the low 4 bits
    let x = init("x", &[4], &[-20.0, -3.0, 4.0, 20.0]);
    let quantize = node(
        "QuantizeLinear",
        &["x", "one"],
        "q",
        vec![int_attr("output_dtype", i64::from(INT4))],
    );
    let cast = node("Cast", &["x"], "c", vec![int_attr("to", i64::from(UINT4))]);
    let uses_s = node("Mul", &["s", "s"], "unused", vec![]);
    let initializer = vec![x, init("one", &[], &[1.0])];
    for outs in run(
        vec![quantize, cast, uses_s],
        initializer,
        &[1.0; 4],
        &["q", "c", "unused"],
    ) {
        assert_eq!(outs[0].to_vec::<i8>().unwrap(), [-8, -3, 4, 7]);
        assert_eq!(outs[1].to_vec::<u8>().unwrap(), [12, 13, 4, 4]);
    }
}

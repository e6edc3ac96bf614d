//! Building small ONNX models in Rust with the crate's own protobuf structs.

use infergate_engine::onnx::proto::*;
use prost::Message;

pub fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: (d >= 0).then_some(d),
                            dim_param: (d < 0).then(|| "batch".to_string()),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_{}", outputs.first().copied().unwrap_or("")),
        op_type: op.into(),
        attribute: attrs,
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

pub fn tensor_f32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

pub fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    opset: i64,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        producer_name: "infergate-tests".into(),
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer: inits,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn bytes(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}

/// A small CNN: Conv → BatchNormalization → Relu → GlobalAveragePool → Flatten → Gemm.
pub fn small_cnn() -> ModelProto {
    let w: Vec<f32> = (0..8 * 3 * 3 * 3)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
        .collect();
    let fc: Vec<f32> = (0..4 * 8).map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0).collect();
    model(
        vec![
            node(
                "Conv",
                &["x", "w"],
                &["c"],
                vec![attr_ints("pads", &[1, 1, 1, 1])],
            ),
            node("BatchNormalization", &["c", "s", "b", "m", "v"], &["bn"], vec![]),
            node("Relu", &["bn"], &["r"], vec![]),
            node("GlobalAveragePool", &["r"], &["p"], vec![]),
            node("Flatten", &["p"], &["f"], vec![]),
            node("Gemm", &["f", "fc"], &["y"], vec![attr_int("transB", 1)]),
        ],
        vec![vi("x", 1, &[-1, 3, 8, 8])],
        vec![vi("y", 1, &[-1, 4])],
        vec![
            tensor_f32("w", &[8, 3, 3, 3], &w),
            tensor_f32("s", &[8], &[1.0, 0.5, 2.0, 1.5, 1.0, 0.8, 1.2, 0.9]),
            tensor_f32("b", &[8], &[0.1, -0.1, 0.2, 0.0, 0.3, -0.2, 0.1, 0.0]),
            tensor_f32("m", &[8], &[0.0, 0.1, -0.1, 0.2, 0.0, 0.0, 0.1, -0.2]),
            tensor_f32("v", &[8], &[1.0, 0.9, 1.1, 1.2, 0.8, 1.0, 1.0, 1.3]),
            tensor_f32("fc", &[4, 8], &fc),
        ],
        13,
    )
}

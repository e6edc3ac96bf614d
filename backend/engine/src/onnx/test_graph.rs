//! Builders for the small ONNX graphs the engine's unit tests write by hand.

use super::proto::*;

/// A node of type `op` with one output; its name is `<op>_<output>`.
pub(crate) fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: format!("{op}_{output}"),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

/// A float initializer stored as raw little-endian bytes.
pub(crate) fn init(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// A tensor value of ONNX element type `elem_type` (1 FLOAT, 7 INT64, …); `dims` None leaves the
/// shape out (as exporters write NonZero's output).
pub(crate) fn value_info(name: &str, elem_type: i32, dims: Option<&[i64]>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: dims.map(|dims| TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
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

/// A graph attribute (an If branch, a Loop or Scan body).
pub(crate) fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::GRAPH,
        g: Some(g),
        ..Default::default()
    }
}

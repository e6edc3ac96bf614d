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

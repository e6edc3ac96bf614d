//! ONNX protobuf decoding (hand-written prost structs) and conversion into the IR.

pub(crate) mod attrs;
pub(crate) mod int4;
mod load;
pub mod proto;
pub(crate) mod tensor;
#[cfg(test)]
pub(crate) mod test_graph;

pub use load::load_graph;
pub use tensor::decode_tensor;

/// Oldest default-domain opset accepted.
pub const MIN_OPSET: i64 = 7;
/// Newest default-domain opset accepted. The issue asks for 7–21; opsets 22–27 (onnx 1.22) changed
/// the supported operators only by adding element types (bf16, float8/4, int4), so they load too.
pub const MAX_OPSET: i64 = 27;

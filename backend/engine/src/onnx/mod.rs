//! ONNX protobuf decoding (hand-written prost structs) and conversion into the IR.

mod attrs;
mod load;
mod ops;
pub mod proto;
mod tensor;

pub use load::{MAX_OPSET, MIN_OPSET, load_graph};
pub use tensor::decode_tensor;

//! The quantization operators of the IR: integer tensors that carry real numbers through a scale and
//! a zero point (`real = (q - zero_point) · scale`), and the integer matrix products over them.
//!
//! A scale or zero point applies to a tensor in one of three layouts, decided by its shape: one value
//! for the whole tensor (per-tensor), a 1-D value per index of `axis` (per-axis), or, with
//! `block_size > 0`, a tensor of the input's rank whose `axis` dim counts blocks of `block_size`
//! consecutive indices (blocked, ONNX opset 21).

use super::{AutoPad, BinaryOp};
use crate::tensor::DataType;

/// The window of ConvInteger and QLinearConv, as [`super::Op::Conv`] has it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvWindow {
    /// kernel spatial shape (empty in a `Graph` = taken from w)
    pub kernel_shape: Vec<usize>,
    /// strides per spatial axis
    pub strides: Vec<usize>,
    /// `[begin…, end…]`
    pub pads: Vec<usize>,
    /// dilations per spatial axis
    pub dilations: Vec<usize>,
    /// groups
    pub group: usize,
    /// auto_pad (NotSet in concrete graphs)
    pub auto_pad: AutoPad,
}

/// One quantization operator ([`super::Op::Quant`]). Zero points absent from a node are 0.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantOp {
    /// `[x, scale, zero_point?]` → `[y]`: y = saturate(round_half_even(x / scale) + zero_point).
    /// y's dtype is `output_dtype`, else zero_point's, else UINT8.
    QuantizeLinear {
        /// the axis of a per-axis or blocked scale (normalised in concrete graphs)
        axis: i64,
        /// block length along `axis`; 0 = not blocked
        block_size: usize,
        /// the ONNX `output_dtype` attribute, when set
        output_dtype: Option<DataType>,
    },
    /// `[x, scale, zero_point?]` → `[y]`: y = (x - zero_point) · scale, in scale's dtype (or
    /// `output_dtype`). x is any integer type up to INT32.
    DequantizeLinear {
        /// the axis of a per-axis or blocked scale (normalised in concrete graphs)
        axis: i64,
        /// block length along `axis`; 0 = not blocked
        block_size: usize,
        /// the ONNX `output_dtype` attribute, when set
        output_dtype: Option<DataType>,
    },
    /// `[x, scale, zero_point?]` → `[y]`: a QuantizeLinear to `codes` followed by a DequantizeLinear
    /// with the same parameters, in one pass: y = (saturate(round_half_even(x / scale) + zero_point)
    /// − zero_point) · scale, FP32 in and out. No ONNX operator: the pass `fuse_quantize_dequantize`
    /// makes it from the pairs QDQ models put between their operators.
    QuantizeDequantize {
        /// the axis of a per-axis or blocked scale (normalised in concrete graphs)
        axis: i64,
        /// block length along `axis`; 0 = not blocked
        block_size: usize,
        /// the integer type the values are rounded and saturated to
        codes: DataType,
    },
    /// `[x]` → `[y, y_scale, y_zero_point]`: UINT8 quantization of FP32 x with a scale and zero point
    /// chosen from x's range (extended to include 0).
    DynamicQuantizeLinear,
    /// `[a, b, a_zero_point?, b_zero_point?]` → `[y]`: INT32 numpy matmul of (a - a_zero_point) and
    /// (b - b_zero_point); a's zero point is per-tensor or per-row, b's per-tensor or per-column.
    MatMulInteger,
    /// `[a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, bias?]` → `[y]`:
    /// the integer matmul plus INT32 bias (one per column of b; not an ONNX input: the QDQ pass
    /// writes a Gemm's C there), requantized to y's scale and zero point (y has a's dtype).
    QLinearMatMul,
    /// `[x, w, x_zero_point?, w_zero_point?]` → `[y]`: INT32 convolution of (x - x_zero_point) and
    /// (w - w_zero_point) (w's zero point per-tensor or per output channel); padding reads zero_point.
    ConvInteger(ConvWindow),
    /// `[x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias?]` → `[y]`:
    /// the integer convolution plus INT32 bias, requantized to y's scale and zero point (w's scale and
    /// zero point per-tensor or per output channel; y has x's dtype).
    QLinearConv(ConvWindow),
    /// `[a, a_scale, a_zero_point?, b, b_scale, b_zero_point?, c_scale, c_zero_point?]` → `[c]`:
    /// onnxruntime's QLinearAdd (`Add`) and QLinearMul (`Mul`), numpy broadcasting, every scale
    /// and zero point per tensor: `c = QuantizeLinear(DequantizeLinear(a) ∘ DequantizeLinear(b))`
    /// with c's scale and zero point; c has c_zero_point's dtype, else a's.
    QLinearBinary(BinaryOp),
}

impl QuantOp {
    /// The ONNX name of the operator, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            QuantOp::QuantizeLinear { .. } => "QuantizeLinear",
            QuantOp::DequantizeLinear { .. } => "DequantizeLinear",
            QuantOp::QuantizeDequantize { .. } => "QuantizeDequantize",
            QuantOp::DynamicQuantizeLinear => "DynamicQuantizeLinear",
            QuantOp::MatMulInteger => "MatMulInteger",
            QuantOp::QLinearMatMul => "QLinearMatMul",
            QuantOp::ConvInteger(_) => "ConvInteger",
            QuantOp::QLinearConv(_) => "QLinearConv",
            QuantOp::QLinearBinary(BinaryOp::Mul) => "QLinearMul",
            QuantOp::QLinearBinary(_) => "QLinearAdd",
        }
    }
}

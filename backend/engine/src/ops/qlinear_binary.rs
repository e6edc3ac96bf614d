//! onnxruntime's quantized element-wise operators (`com.microsoft`) QLinearAdd and QLinearMul: what
//! `onnxruntime.quantization` writes for an Add or a Mul between quantized tensors.
//!
//! Both decompose at load into `QuantizeLinear(DequantizeLinear(A) ∘ DequantizeLinear(B), C_scale,
//! C_zero_point)` with numpy broadcasting, ops both executors run. onnxruntime's kernels fold the
//! three scales into f32 ratios before rounding, so a value that lands within an f32 rounding error
//! of a half step may round to the neighbouring step: results agree with onnxruntime within one
//! quantization step (exactly on the contrib test graphs).

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, QuantOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::microsoft("QLinearAdd", convert, &FAMILY),
    OnnxOp::microsoft("QLinearMul", convert, &FAMILY),
];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("qlinear_binary");

/// Per-tensor (de)quantization: the scales and zero points of these operators are scalars.
const PER_TENSOR_DQ: QuantOp = QuantOp::DequantizeLinear {
    axis: 1,
    block_size: 0,
    output_dtype: None,
};

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    _a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let op = n.op_type.as_str();
    match op {
        "QLinearAdd" => qlinear(cx, name, inputs, BinaryOp::Add),
        "QLinearMul" => qlinear(cx, name, inputs, BinaryOp::Mul),
        other => Err(not_registered(other)),
    }
}

/// `[A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point?]` → `[C]`, C of A's
/// element type.
fn qlinear(cx: &mut Ctx<'_>, name: &str, inputs: &[Option<ValueId>], op: BinaryOp) -> Result<Converted> {
    let a = need(inputs, 0, "A")?;
    let a_scale = need(inputs, 1, "A_scale")?;
    let b = need(inputs, 3, "B")?;
    let b_scale = need(inputs, 4, "B_scale")?;
    let c_scale = need(inputs, 6, "C_scale")?;
    let at = |i: usize| inputs.get(i).copied().flatten();
    let mut chain = Chain::new(cx, name);
    let mut dequantize = |step: &str, x: ValueId, scale: ValueId, zero: Option<ValueId>| {
        let ins: Vec<ValueId> = [Some(x), Some(scale), zero].into_iter().flatten().collect();
        chain.push(step, Op::Quant(PER_TENSOR_DQ), &ins)
    };
    let fa = dequantize("a_dequantized", a, a_scale, at(2));
    let fb = dequantize("b_dequantized", b, b_scale, at(5));
    let fc = chain.binary("float_result", op, fa, fb);
    // Without C_zero_point the result is still of A's type (an INT8 A gives an INT8 C): a zero of
    // that type makes QuantizeLinear produce it.
    let c_zero = match at(7) {
        Some(z) => z,
        None => chain.scalar_like("c_zero_point", 0.0, a),
    };
    Ok(chain.finish(
        Op::Quant(QuantOp::QuantizeLinear {
            axis: 1,
            block_size: 0,
            output_dtype: None,
        }),
        &[fc, c_scale, c_zero],
    ))
}

//! onnxruntime's DynamicQuantizeMatMul (`com.microsoft`): `A · dequantize(B) + bias` with A float,
//! quantized on the fly — what `onnxruntime.quantization.quantize_dynamic` writes for a MatMul.
//!
//! Decomposes at load into ops both executors run: `DynamicQuantizeLinear(A)` (UINT8, as onnxruntime
//! quantizes A), the integer `MatMulInteger` with B and its zero point, the INT32 product cast to f32
//! and scaled by `a_scale · b_scale`, then `+ bias` — onnxruntime's output processor in the same
//! order, so the float results agree to rounding.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, QuantOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("DynamicQuantizeMatMul", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("dynamic_quantize_matmul");

/// `[A, B, b_scale, b_zero_point?, bias?]` → `[Y]`: A FP32, B UINT8 or INT8, b_scale and
/// b_zero_point per tensor or per column of B.
fn convert(
    cx: &mut Ctx<'_>,
    _n: &NodeProto,
    name: &str,
    _a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let a = need(inputs, 0, "A")?;
    let b = need(inputs, 1, "B")?;
    let b_scale = need(inputs, 2, "b_scale")?;
    let b_zero = inputs.get(3).copied().flatten();
    let bias = inputs.get(4).copied().flatten();
    let mut chain = Chain::new(cx, name);
    let q = chain.push_multi("a_quantized", Op::Quant(QuantOp::DynamicQuantizeLinear), &[a], 3);
    let (aq, a_scale, a_zero) = (q[0], q[1], q[2]);
    let mut mm_inputs = vec![aq, b, a_zero];
    if let Some(z) = b_zero {
        mm_inputs.push(z);
    }
    let product = chain.push("integer_product", Op::Quant(QuantOp::MatMulInteger), &mm_inputs);
    let product = chain.push("float_product", Op::Cast { to: DataType::F32 }, &[product]);
    let scale = chain.binary("scale", BinaryOp::Mul, a_scale, b_scale);
    match bias {
        None => Ok(chain.finish(Op::Binary(BinaryOp::Mul), &[product, scale])),
        Some(bias) => {
            let y = chain.binary("scaled", BinaryOp::Mul, product, scale);
            Ok(chain.finish(Op::Binary(BinaryOp::Add), &[y, bias]))
        }
    }
}

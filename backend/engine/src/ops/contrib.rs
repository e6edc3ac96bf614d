//! onnxruntime's fused activations and bias adds (`com.microsoft`): FastGelu, BiasGelu, Gelu,
//! QuickGelu, BiasAdd.
//!
//! onnxruntime's optimiser (`onnxruntime.transformers.optimizer`) writes these into transformer
//! exports. Each decomposes at load into the IR's own Add and GELU, so both executors run them and
//! the fusion passes treat them like the exporter's unfused form.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::microsoft("FastGelu", convert, &FAMILY),
    OnnxOp::microsoft("BiasGelu", convert, &FAMILY),
    OnnxOp::microsoft("Gelu", convert, &FAMILY),
    OnnxOp::microsoft("QuickGelu", convert, &FAMILY),
    OnnxOp::microsoft("BiasAdd", convert, &FAMILY),
];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("contrib");

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let op = n.op_type.as_str();
    let x = need(inputs, 0, "X")?;
    let bias = inputs.get(1).copied().flatten();
    let mut chain = Chain::new(cx, name);
    match op {
        // FastGelu(X, bias?) = GELU's tanh approximation of X + bias
        "FastGelu" | "BiasGelu" | "Gelu" => {
            let tanh = op == "FastGelu";
            let x = match bias {
                Some(b) if op != "Gelu" => chain.binary("bias", BinaryOp::Add, x, b),
                None if op == "BiasGelu" => need(inputs, 1, "bias").map(|_| x)?,
                _ => x,
            };
            Ok(chain.finish(Op::Unary(UnaryOp::Gelu { tanh }), &[x]))
        }
        // QuickGelu(X) = X · sigmoid(alpha · X)
        "QuickGelu" => {
            let alpha = a.float("alpha", 1.702)?;
            let alpha = chain.scalar_like("alpha", alpha, x);
            let ax = chain.binary("scaled", BinaryOp::Mul, x, alpha);
            let gate = chain.push("gate", Op::Unary(UnaryOp::Sigmoid), &[ax]);
            Ok(chain.finish(Op::Binary(BinaryOp::Mul), &[x, gate]))
        }
        // BiasAdd(X, bias, skip) = X + bias + skip
        "BiasAdd" => {
            let bias = need(inputs, 1, "bias")?;
            let skip = need(inputs, 2, "skip")?;
            let xb = chain.binary("bias", BinaryOp::Add, x, bias);
            Ok(chain.finish(Op::Binary(BinaryOp::Add), &[xb, skip]))
        }
        other => Err(not_registered(other)),
    }
}

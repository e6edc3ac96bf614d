//! LRN: local response normalisation across channels (AlexNet, GoogLeNet, ZFNet).
//!
//! Decomposes at load: `y = x / (bias + alpha · mean_window(x²))^beta`, where the mean over `size`
//! neighbouring channels (zero-padded, always divided by `size`, as ONNX defines the sum) is an
//! AveragePool over a `[N, 1, C, rest]` view of x² with a `size × 1` window.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::BinaryOp;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("LRN", 1, convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("lrn");

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    if n.op_type != "LRN" {
        return Err(not_registered(&n.op_type));
    }
    let size = a.int("size", 0)?;
    if size < 1 {
        return Err(EngineError::invalid(format!(
            "LRN attribute size is {size}; it must be 1 or more (the number of channels summed)"
        )));
    }
    let (alpha, beta, bias) = (
        a.float("alpha", 1e-4)?,
        a.float("beta", 0.75)?,
        a.float("bias", 1.0)?,
    );
    let x = need(inputs, 0, "X")?;
    let size = size as usize;
    let mut chain = Chain::new(cx, name);
    let sq = chain.binary("square", BinaryOp::Mul, x, x);
    // [N, C, *] → [N, 1, C, rest]: channels become a spatial axis the window slides along
    let lifted = chain.push("lifted", Op::Unsqueeze { axes: Some(vec![1]) }, &[sq]);
    let view_shape = chain.ints(&[0, 0, 0, -1]);
    let view = chain.push("view", Op::Reshape { allowzero: false }, &[lifted, view_shape]);
    let (before, after) = ((size - 1) / 2, size / 2);
    let mean = chain.push(
        "window_mean",
        Op::AveragePool {
            kernel_shape: vec![size, 1],
            strides: vec![1, 1],
            pads: vec![before, 0, after, 0],
            dilations: vec![1, 1],
            ceil_mode: false,
            count_include_pad: true,
            auto_pad: crate::ir::AutoPad::NotSet,
        },
        &[view],
    );
    let x_shape = chain.push("shape", Op::Shape { start: 0, end: None }, &[x]);
    let mean = chain.push("unview", Op::Reshape { allowzero: false }, &[mean, x_shape]);
    let alpha = chain.scalar_like("alpha", alpha, x);
    let bias = chain.scalar_like("bias", bias, x);
    let beta = chain.scalar_like("beta", beta, x);
    let scaled = chain.binary("scaled", BinaryOp::Mul, mean, alpha);
    let base = chain.binary("biased", BinaryOp::Add, scaled, bias);
    let denom = chain.binary("power", BinaryOp::Pow, base, beta);
    Ok(chain.finish(Op::Binary(BinaryOp::Div), &[x, denom]))
}

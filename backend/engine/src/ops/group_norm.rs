//! GroupNormalization (opsets 18 and 21).
//!
//! Decomposes at load: x `[N, C, *]` is viewed as `[N, G, C/G·*]` and instance-normalised (each
//! group is one "channel" there), then viewed back. Opset 18's scale and bias are per group and go
//! into that normalisation; opset 21's are per channel and apply to the `[N, C, *]` view after it.
//! Every step is a Reshape view or an op both executors have.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::BinaryOp;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("GroupNormalization", 18, convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("group_norm");

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    if n.op_type != "GroupNormalization" {
        return Err(not_registered(&n.op_type));
    }
    let per_channel = cx.opset >= 21;
    let groups = a.int("num_groups", 0)?;
    if groups < 1 {
        return Err(EngineError::invalid(format!(
            "GroupNormalization attribute num_groups is {groups}; it must be 1 or more"
        )));
    }
    let epsilon = a.float("epsilon", 1e-5)?;
    let x = need(inputs, 0, "X")?;
    let scale = need(inputs, 1, "scale")?;
    let bias = need(inputs, 2, "bias")?;
    let mut chain = Chain::new(cx, name);
    let g = groups as usize;
    let grouped_shape = chain.ints(&[0, groups, -1]);
    let grouped = chain.push("grouped", Op::Reshape { allowzero: false }, &[x, grouped_shape]);
    let x_shape = chain.push("shape", Op::Shape { start: 0, end: None }, &[x]);
    let inorm = Op::InstanceNormalization { epsilon };
    if !per_channel {
        let normed = chain.push("normalised", inorm, &[grouped, scale, bias]);
        return Ok(chain.finish(Op::Reshape { allowzero: false }, &[normed, x_shape]));
    }
    let ones = chain.cast_like("ones", Tensor::from_vec(vec![g], vec![1f32; g])?, x);
    let zeros = chain.cast_like("zeros", Tensor::from_vec(vec![g], vec![0f32; g])?, x);
    let normed = chain.push("normalised", inorm, &[grouped, ones, zeros]);
    let back = chain.push("ungrouped", Op::Reshape { allowzero: false }, &[normed, x_shape]);
    // [N, C, *] as [N, C, S], so the [C, 1] scale and bias broadcast whatever the rank
    let ncs_shape = chain.ints(&[0, 0, -1]);
    let ncs = chain.push("channels", Op::Reshape { allowzero: false }, &[back, ncs_shape]);
    let column = chain.ints(&[-1, 1]);
    let scale_c = chain.push("scale", Op::Reshape { allowzero: false }, &[scale, column]);
    let bias_c = chain.push("bias", Op::Reshape { allowzero: false }, &[bias, column]);
    let scaled = chain.binary("scaled", BinaryOp::Mul, ncs, scale_c);
    let shifted = chain.binary("shifted", BinaryOp::Add, scaled, bias_c);
    Ok(chain.finish(Op::Reshape { allowzero: false }, &[shifted, x_shape]))
}

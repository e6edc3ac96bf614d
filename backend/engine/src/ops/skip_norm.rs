//! Residual and RMS normalisations: onnxruntime's SkipLayerNormalization and
//! SkipSimplifiedLayerNormalization (`com.microsoft`), its SimplifiedLayerNormalization (which
//! onnxruntime defines in the default domain, opset 1, and its optimiser writes there), and ONNX
//! RMSNormalization (opset 23).
//!
//! Each decomposes at load: the residual sum is an Add (or two), layer normalisation is the IR's
//! LayerNormalization, and RMS normalisation is `x / sqrt(mean(x²) + epsilon) · scale` over the
//! normalised axes. Both executors run them.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, ReduceOp, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::microsoft("SkipLayerNormalization", convert, &FAMILY),
    OnnxOp::microsoft("SkipSimplifiedLayerNormalization", convert, &FAMILY),
    OnnxOp::new("RMSNormalization", 23, convert, &FAMILY),
    OnnxOp::new("SimplifiedLayerNormalization", 1, convert, &FAMILY),
];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("skip_norm");

/// onnxruntime's default epsilon for the Skip*LayerNormalization ops.
const SKIP_NORM_EPSILON: f32 = 1e-12;

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let op = n.op_type.as_str();
    let wants = |i: usize| n.output.get(i).is_some_and(|o| !o.is_empty());
    let mut chain = Chain::new(cx, name);
    match op {
        "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization" => {
            let simplified = op == "SkipSimplifiedLayerNormalization";
            let epsilon = a.float("epsilon", SKIP_NORM_EPSILON)?;
            let x = need(inputs, 0, "input")?;
            let skip = need(inputs, 1, "skip")?;
            let gamma = need(inputs, 2, "gamma")?;
            // SkipLayerNormalization: beta at 3, bias at 4; the simplified form has no beta
            let (beta, bias) = if simplified {
                (None, inputs.get(3).copied().flatten())
            } else {
                (inputs.get(3).copied().flatten(), inputs.get(4).copied().flatten())
            };
            let mut sum = chain.binary("skip", BinaryOp::Add, x, skip);
            if let Some(b) = bias {
                sum = chain.binary("bias", BinaryOp::Add, sum, b);
            }
            let mut copies = vec![(3, sum)];
            if simplified {
                if wants(1) {
                    return Err(EngineError::unsupported(
                        "SkipSimplifiedLayerNormalization output 1 (mean): RMS normalisation computes no \
                         mean; leave the output unnamed",
                    ));
                }
                let (normed, rms) = rms_parts(&mut chain, sum, &[-1], epsilon);
                if wants(2) {
                    let inv = chain.push("inv_std_var", Op::Unary(UnaryOp::Reciprocal), &[rms]);
                    copies.push((2, inv));
                }
                return Ok(chain.finish_with_copies(Op::Binary(BinaryOp::Mul), &[normed, gamma], copies));
            }
            let ln = Op::LayerNormalization { axis: -1, epsilon };
            let ins: Vec<ValueId> = [Some(sum), Some(gamma), beta].into_iter().flatten().collect();
            Ok(chain.finish_with_copies(ln, &ins, copies))
        }
        "RMSNormalization" => {
            let x = need(inputs, 0, "X")?;
            let scale = need(inputs, 1, "scale")?;
            let epsilon = a.float("epsilon", 1e-5)?;
            let axis = a.int("axis", -1)?;
            let axes = trailing_axes(chain.graph(), x, axis)?;
            let (normed, _) = rms_parts(&mut chain, x, &axes, epsilon);
            Ok(chain.finish(Op::Binary(BinaryOp::Mul), &[normed, scale]))
        }
        // SimplifiedLayerNormalization(X, scale) → (Y, inv_std_var?): RMS normalisation over the axes
        // from `axis` on; stash_type only names the precision onnxruntime computes in (f32 here too)
        "SimplifiedLayerNormalization" => {
            let x = need(inputs, 0, "X")?;
            let scale = need(inputs, 1, "scale")?;
            let epsilon = a.float("epsilon", 1e-5)?;
            let axis = a.int("axis", -1)?;
            let axes = trailing_axes(chain.graph(), x, axis)?;
            let (normed, rms) = rms_parts(&mut chain, x, &axes, epsilon);
            let mut copies = Vec::new();
            if wants(1) {
                let inv = chain.push("inv_std_var", Op::Unary(UnaryOp::Reciprocal), &[rms]);
                copies.push((1, inv));
            }
            Ok(chain.finish_with_copies(Op::Binary(BinaryOp::Mul), &[normed, scale], copies))
        }
        other => Err(not_registered(other)),
    }
}

/// `x / rms` and `rms = sqrt(mean(x², axes) + epsilon)` (kept dims).
fn rms_parts(chain: &mut Chain<'_, '_>, x: ValueId, axes: &[i64], epsilon: f32) -> (ValueId, ValueId) {
    let sq = chain.binary("square", BinaryOp::Mul, x, x);
    let mean = chain.push(
        "mean_square",
        Op::Reduce {
            op: ReduceOp::Mean,
            axes: axes.to_vec(),
            keepdims: true,
            noop_with_empty_axes: false,
        },
        &[sq],
    );
    let eps = chain.scalar_like("epsilon", epsilon, x);
    let var = chain.binary("plus_epsilon", BinaryOp::Add, mean, eps);
    let rms = chain.push("rms", Op::Unary(UnaryOp::Sqrt), &[var]);
    let normed = chain.binary("normalised", BinaryOp::Div, x, rms);
    (normed, rms)
}

/// The axes from `axis` to the last, counted from the end (so the rank is only needed when `axis`
/// counts from the start).
fn trailing_axes(g: &crate::ir::Graph, x: ValueId, axis: i64) -> Result<Vec<i64>> {
    let from_end = if axis < 0 {
        axis
    } else {
        let rank = g.values[x.0].shape.as_ref().map(Vec::len).ok_or_else(|| {
            EngineError::unsupported(format!(
                "attribute axis={axis} on an input of unknown rank; give the input a shape in the model, \
                 or a negative axis"
            ))
        })? as i64;
        if axis >= rank {
            return Err(EngineError::invalid(format!(
                "attribute axis={axis} is out of range for an input of rank {rank}"
            )));
        }
        axis - rank
    };
    Ok((from_end..0).collect())
}

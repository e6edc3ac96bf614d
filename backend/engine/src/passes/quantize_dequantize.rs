//! `DequantizeLinear(QuantizeLinear(x))` with the same parameters as one QuantizeDequantize node.
//!
//! QDQ models (`quantize_static`'s default format) put such a pair on every activation between two
//! float operators: on the CPU the pair wrote 8-bit codes and read them back, two passes over the
//! tensor and a node each. The fused node rounds and saturates each value and takes it straight back
//! to FP32, with the same values. A QuantizeLinear whose codes something else also reads (another
//! operator, a graph output) stays for that reader.
//!
//! With one scale and zero point (the activations' pairs), the fused node is a unary whose parameters are
//! constants, so that the next round's `fuse_activation` moves it into the producing Conv or MatMul: the
//! values are rounded as they are stored, not in a pass of their own.

use crate::cpu::quant::linear::int_range;
use crate::error::Result;
use crate::ir::{Graph, Op, QuantOp, UnaryOp, ValueId};
use crate::passes::{Facts, is_output, same_parameter, scalar, sweep};
use crate::tensor::DataType;

/// Every DequantizeLinear of a QuantizeLinear's codes, FP32 in and out, with the same scale and zero
/// point (one value, or the same tensor), as a QuantizeDequantize.
pub(crate) fn fuse_quantize_dequantize(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, i| {
        let Some(fused) = matched(g, facts, i) else {
            return Ok(None);
        };
        let Fused { quantize, op, inputs } = fused;
        let codes = g.nodes[i].input(0);
        let n = &mut g.nodes[i];
        n.op = op;
        n.inputs = inputs;
        // The QuantizeLinear goes with its last reader.
        let dead = codes.is_some_and(|c| facts.uses[c.0] == 1 && !is_output(g, c));
        if dead {
            g.nodes.remove(quantize);
            return Ok(Some(if quantize < i { i } else { i + 1 }));
        }
        Ok(Some(i + 1))
    })
}

/// What replaces DequantizeLinear node `i`: its op and inputs, and the QuantizeLinear it reads.
struct Fused {
    quantize: usize,
    op: Op,
    inputs: Vec<Option<ValueId>>,
}

fn matched(g: &Graph, facts: &Facts, i: usize) -> Option<Fused> {
    let dq = &g.nodes[i];
    let Op::Quant(QuantOp::DequantizeLinear {
        axis,
        block_size,
        output_dtype,
    }) = &dq.op
    else {
        return None;
    };
    let &qi = facts.producers.get(&dq.input(0)?)?;
    let q = &g.nodes[qi];
    let Op::Quant(QuantOp::QuantizeLinear {
        axis: q_axis,
        block_size: q_block,
        output_dtype: q_output,
    }) = &q.op
    else {
        return None;
    };
    // Intermediate values' types are not known before specialisation; the parameters' are: an FP32
    // scale (so the pair's output is FP32) and 8-bit codes (by the zero point's type, else UINT8).
    let scale = g.constants.get(&q.input(1)?)?;
    let zero_point = match q.input(2) {
        None => None,
        Some(z) => Some(g.constants.get(&z)?),
    };
    let codes = q_output.or(zero_point.map(|z| z.dtype)).unwrap_or(DataType::U8);
    if scale.dtype != DataType::F32
        || output_dtype.is_some_and(|d| d != DataType::F32)
        || !matches!(codes, DataType::U8 | DataType::I8)
        || zero_point.is_some_and(|z| z.dtype != codes)
        || q_block != block_size
        || !same_parameter(g, q.input(1), dq.input(1))
        || !same_parameter(g, q.input(2), dq.input(2))
    {
        return None;
    }
    // A per-axis or blocked pair must name one axis; one value applies whatever the axis says.
    if q_axis != axis && !(scale.len() == 1 && *block_size == 0) {
        return None;
    }
    let one_zero_point = match q.input(2) {
        None => Some(0.0),
        z => scalar(g, z),
    };
    if let (Some(scale), Some(zero_point)) = (scalar(g, q.input(1)), one_zero_point) {
        let (lo, hi) = int_range(codes).ok()?;
        return Some(Fused {
            quantize: qi,
            op: Op::Unary(UnaryOp::QuantizeDequantize {
                scale: scale as f32,
                zero_point: zero_point as i32,
                lo,
                hi,
            }),
            inputs: vec![q.input(0)],
        });
    }
    Some(Fused {
        quantize: qi,
        op: Op::Quant(QuantOp::QuantizeDequantize {
            axis: *q_axis,
            block_size: *q_block,
            codes,
        }),
        inputs: match q.input(2) {
            Some(zero_point) => vec![q.input(0), q.input(1), Some(zero_point)],
            None => vec![q.input(0), q.input(1)],
        },
    })
}

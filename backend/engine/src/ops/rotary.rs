//! Rotary position embeddings: ONNX RotaryEmbedding (opset 23) and onnxruntime's `com.microsoft`
//! RotaryEmbedding.
//!
//! Both decompose at load into the steps of the ONNX function body, so both executors run them: the
//! input is brought to `[batch, seq, heads, head_size]` (a Transpose of a 4-D input, a Reshape of a 3-D
//! one), the cos/sin rows are gathered by position, the rotated part is split into halves (or, when
//! interleaved, into even and odd elements through a `[.., rotary_dim/2, 2]` view), `real = cos·x1 −
//! sin·x2` and `imag = sin·x1 + cos·x2` are concatenated back, and the part past `rotary_embedding_dim`
//! is appended unchanged.
//!
//! The two differ in their inputs: ONNX takes `(X, cos_cache, sin_cache, position_ids?)`, with caches
//! already per position (`[batch, seq, rotary_dim/2]`) when position_ids is absent; onnxruntime takes
//! `(input, position_ids, cos_cache, sin_cache)`, where position_ids is `[batch, seq]` or a single
//! offset (positions `offset..offset + seq`), and a 3-D input without num_heads has heads of
//! `2 · cos_cache.shape[1]`.

use super::chain::{Chain, decomposed, shape_of, transpose_heads};
use super::onnx::MICROSOFT;
use super::prelude::*;
use crate::ir::{BinaryOp, Dim};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("RotaryEmbedding", 23, convert, &FAMILY),
    OnnxOp::microsoft("RotaryEmbedding", convert, &FAMILY),
];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("rotary");

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let microsoft = n.domain == MICROSOFT;
    let interleaved = a.int("interleaved", 0)? != 0;
    let rotary_dim = a.int("rotary_embedding_dim", 0)?;
    let num_heads = a.int("num_heads", 0)?;
    if rotary_dim < 0 || rotary_dim % 2 != 0 {
        return Err(EngineError::invalid(format!(
            "RotaryEmbedding attribute rotary_embedding_dim={rotary_dim}: it must be 0 (the whole head) or a \
             positive even number"
        )));
    }
    if num_heads < 0 {
        return Err(EngineError::invalid(format!(
            "RotaryEmbedding attribute num_heads={num_heads}: it must be 0 (unset) or positive"
        )));
    }
    let x = need(inputs, 0, "input")?;
    let mut chain = Chain::new(cx, name);
    let rank = match shape_of(chain.graph(), x).map(|s| s.len()) {
        Some(r @ (3 | 4)) => r,
        Some(r) => {
            return Err(EngineError::invalid(format!(
                "RotaryEmbedding input of rank {r}: it must be [batch, seq, hidden] or [batch, heads, seq, \
                 head_size]"
            )));
        }
        None => {
            return Err(EngineError::unsupported(
                "RotaryEmbedding input of unknown rank: give it a shape in the model (3-D or 4-D)",
            ));
        }
    };
    // onnxruntime's 3-D input without num_heads has heads of 2 · cos_cache.shape[1]; the ONNX
    // operator requires num_heads for a 3-D input.
    let (cos, sin, head_size) = if microsoft {
        if a.int("is_packed_batching", 0)? != 0 {
            return Err(EngineError::unsupported(
                "RotaryEmbedding attribute is_packed_batching=1 (packed sequences)",
            ));
        }
        // `scale` only scales caches that onnxruntime would extend past their length, which its CPU
        // kernel refuses to do; the rotation itself does not read it.
        let position_ids = need(inputs, 1, "position_ids")?;
        let cos_cache = need(inputs, 2, "cos_cache")?;
        let sin_cache = need(inputs, 3, "sin_cache")?;
        if rotary_dim > 0 && num_heads == 0 {
            return Err(EngineError::invalid(
                "RotaryEmbedding (com.microsoft) has rotary_embedding_dim but no num_heads; give num_heads",
            ));
        }
        let positions = microsoft_positions(&mut chain, x, rank, position_ids)?;
        let cos = chain.push("cos", Op::Gather { axis: 0 }, &[cos_cache, positions]);
        let sin = chain.push("sin", Op::Gather { axis: 0 }, &[sin_cache, positions]);
        let head_size = if num_heads == 0 {
            match shape_of(chain.graph(), cos_cache).and_then(|s| s.get(1).cloned()) {
                Some(Dim::Fixed(half)) => Some(2 * half as i64),
                _ if rank == 4 => None,
                _ => {
                    return Err(EngineError::unsupported(
                        "RotaryEmbedding (com.microsoft) with a 3-D input, no num_heads and a cos_cache of \
                         unknown width: give num_heads, or a cos_cache shape in the model",
                    ));
                }
            }
        } else {
            None
        };
        (cos, sin, head_size)
    } else {
        let cos_cache = need(inputs, 1, "cos_cache")?;
        let sin_cache = need(inputs, 2, "sin_cache")?;
        if rank == 3 && num_heads == 0 {
            return Err(EngineError::invalid(
                "RotaryEmbedding with a 3-D input needs the num_heads attribute; give num_heads",
            ));
        }
        match inputs.get(3).copied().flatten() {
            Some(p) => (
                chain.push("cos", Op::Gather { axis: 0 }, &[cos_cache, p]),
                chain.push("sin", Op::Gather { axis: 0 }, &[sin_cache, p]),
                None,
            ),
            None => (cos_cache, sin_cache, None),
        }
    };

    // [batch, seq, heads, head_size]
    let x4 = if rank == 4 {
        chain.push("seq_first", transpose_heads(), &[x])
    } else {
        let target = match head_size {
            Some(h) => chain.ints(&[0, 0, -1, h]),
            None => chain.ints(&[0, 0, num_heads, -1]),
        };
        chain.push("heads", Op::Reshape { allowzero: false }, &[x, target])
    };
    // the rotated part and the rest (absent when the whole head rotates)
    let declared = |axis: usize| match shape_of(chain.graph(), x).and_then(|s| s.get(axis).cloned()) {
        Some(Dim::Fixed(d)) => Some(d as i64),
        _ => None,
    };
    let known_head = match rank {
        4 => declared(3),
        _ => head_size.or_else(|| declared(2).filter(|_| num_heads > 0).map(|h| h / num_heads)),
    };
    let y = rotate(
        &mut chain,
        "",
        x4,
        (cos, sin),
        rotary_dim,
        known_head,
        interleaved,
    );
    if rank == 4 {
        Ok(chain.finish(transpose_heads(), &[y]))
    } else {
        let hidden = chain.ints(&[0, 0, -1]);
        Ok(chain.finish(Op::Reshape { allowzero: false }, &[y, hidden]))
    }
}

/// `x4` (`[batch, seq, heads, head_size]`) with its first `rotary_dim` elements of each head rotated
/// (0: the whole head) by `cos`/`sin`, gathered per position (`[batch|1, seq, rotary_dim/2]`): halves,
/// or even and odd elements when `interleaved`; the rest of the head is kept. `known_head` is the
/// head size when the model fixes it; `prefix` keeps the step names of several calls apart.
pub(super) fn rotate(
    chain: &mut Chain<'_, '_>,
    prefix: &str,
    x4: ValueId,
    (cos, sin): (ValueId, ValueId),
    rotary_dim: i64,
    known_head: Option<i64>,
    interleaved: bool,
) -> ValueId {
    let whole_head = rotary_dim == 0 || known_head == Some(rotary_dim);
    let (rot, rest) = if whole_head {
        (x4, None)
    } else {
        let rot = slice_last(chain, &format!("{prefix}rotated_part"), x4, 0, rotary_dim);
        let rest = slice_last(chain, &format!("{prefix}kept_part"), x4, rotary_dim, i64::MAX);
        (rot, Some(rest))
    };
    let halves = Op::Split {
        axis: -1,
        sizes: Vec::new(),
    };
    let (x1, x2, cos, sin) = if interleaved {
        // even and odd elements: a [.., rotary_dim/2, 2] view split on its last axis
        let pairs_shape = chain.ints(&[0, 0, 0, -1, 2]);
        let pairs = chain.push(
            &format!("{prefix}pairs"),
            Op::Reshape { allowzero: false },
            &[rot, pairs_shape],
        );
        let parts = chain.push_multi(&format!("{prefix}even_odd"), halves, &[pairs], 2);
        let axes = Some(vec![2, 4]);
        let cos = chain.push(
            &format!("{prefix}cos_heads"),
            Op::Unsqueeze { axes: axes.clone() },
            &[cos],
        );
        let sin = chain.push(&format!("{prefix}sin_heads"), Op::Unsqueeze { axes }, &[sin]);
        (parts[0], parts[1], cos, sin)
    } else {
        let parts = chain.push_multi(&format!("{prefix}halves"), halves, &[rot], 2);
        let cos = chain.push(
            &format!("{prefix}cos_heads"),
            Op::Unsqueeze { axes: Some(vec![2]) },
            &[cos],
        );
        let sin = chain.push(
            &format!("{prefix}sin_heads"),
            Op::Unsqueeze { axes: Some(vec![2]) },
            &[sin],
        );
        (parts[0], parts[1], cos, sin)
    };
    let cos_x1 = chain.binary(&format!("{prefix}cos_x1"), BinaryOp::Mul, cos, x1);
    let sin_x2 = chain.binary(&format!("{prefix}sin_x2"), BinaryOp::Mul, sin, x2);
    let real = chain.binary(&format!("{prefix}real"), BinaryOp::Sub, cos_x1, sin_x2);
    let sin_x1 = chain.binary(&format!("{prefix}sin_x1"), BinaryOp::Mul, sin, x1);
    let cos_x2 = chain.binary(&format!("{prefix}cos_x2"), BinaryOp::Mul, cos, x2);
    let imag = chain.binary(&format!("{prefix}imag"), BinaryOp::Add, sin_x1, cos_x2);
    let mut y = chain.push(
        &format!("{prefix}rotated"),
        Op::Concat { axis: -1 },
        &[real, imag],
    );
    if interleaved {
        let flat = chain.ints(&[0, 0, 0, -1]);
        y = chain.push(
            &format!("{prefix}interleaved"),
            Op::Reshape { allowzero: false },
            &[y, flat],
        );
    }
    if let Some(rest) = rest {
        y = chain.push(
            &format!("{prefix}with_kept_part"),
            Op::Concat { axis: -1 },
            &[y, rest],
        );
    }
    y
}

/// onnxruntime's position_ids as `[batch|1, seq]` indices: given as `[batch, seq]`, or as one offset
/// (a scalar or `[1]`) from which the positions `offset..offset + seq` follow.
fn microsoft_positions(
    chain: &mut Chain<'_, '_>,
    x: ValueId,
    rank: usize,
    position_ids: ValueId,
) -> Result<ValueId> {
    match shape_of(chain.graph(), position_ids).map(|s| s.len()) {
        Some(2) => Ok(position_ids),
        Some(0 | 1) => {
            let seq_axis = if rank == 4 { 2 } else { 1 };
            let seq = chain.axis_len("seq_len", x, seq_axis);
            let steps = chain.positions("steps", seq);
            let one_shape = chain.ints(&[1]);
            let offset = chain.push(
                "offset",
                Op::Reshape { allowzero: false },
                &[position_ids, one_shape],
            );
            let positions = chain.binary("positions", BinaryOp::Add, steps, offset);
            Ok(chain.push(
                "positions_row",
                Op::Unsqueeze { axes: Some(vec![0]) },
                &[positions],
            ))
        }
        Some(r) => Err(EngineError::invalid(format!(
            "RotaryEmbedding (com.microsoft) position_ids of rank {r}: it must be [batch, seq] or one offset"
        ))),
        None => Err(EngineError::unsupported(
            "RotaryEmbedding (com.microsoft) position_ids of unknown rank: give it a shape in the model \
             ([batch, seq], or [1] for an offset)",
        )),
    }
}

/// `x[..., start..end]` on the last of four axes.
fn slice_last(chain: &mut Chain<'_, '_>, step: &str, x: ValueId, start: i64, end: i64) -> ValueId {
    let starts = chain.ints(&[start]);
    let ends = chain.ints(&[end]);
    let axes = chain.ints(&[3]);
    chain.push(
        step,
        Op::Slice {
            starts: Vec::new(),
            steps: Vec::new(),
        },
        &[x, starts, ends, axes],
    )
}

//! ONNX Attention (opset 23, with opset 24's `nonpad_kv_seqlen`): scaled dot-product attention over
//! 3-D `[batch, seq, heads · head_size]` or 4-D `[batch, heads, seq, head_size]` inputs.
//!
//! Decomposes at load into the steps of the ONNX function body, so both executors run it: 3-D inputs
//! are split into heads (Reshape, Transpose); past_key/past_value are concatenated in front of K and V
//! (the present outputs); grouped-query K and V heads are repeated `[h0, h0, h1, h1, …]` (Unsqueeze,
//! Expand, Reshape); Q and Kᵀ are each scaled by `√scale` (default `scale = 1/√head_size`); the scores
//! are soft-capped (`softcap · tanh(x / softcap)`) and an additive bias is added: the mask (boolean as
//! 0/−∞, float as it is, padded with false/−∞ up to the total length), −∞ above the causal diagonal
//! (offset by the past length) and −∞ past each sequence's `nonpad_kv_seqlen`; then Softmax (in
//! `softmax_precision` when it is FLOAT) and the product with V, whose heads a 3-D output merges back.
//! `qk_matmul_output` is a copy of the scores at the stage `qk_matmul_output_mode` names.

use super::chain::{Chain, decomposed, fixed_dim, matmul, shape_of, transpose_heads};
use super::prelude::*;
use crate::ir::{BinaryOp, Dim, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("Attention", 23, convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("onnx_attention");

/// The optional outputs after Y.
const PRESENT_KEY: usize = 1;
const PRESENT_VALUE: usize = 2;
const QK_MATMUL_OUTPUT: usize = 3;

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let wants = |i: usize| n.output.get(i).is_some_and(|o| !o.is_empty());
    let q = need(inputs, 0, "Q")?;
    let k = need(inputs, 1, "K")?;
    let v = need(inputs, 2, "V")?;
    let (mask, past_key, past_value, nonpad) = (input(3), input(4), input(5), input(6));
    if past_key.is_some() != past_value.is_some() {
        return Err(EngineError::invalid(
            "Attention has only one of past_key (input 4) and past_value (input 5); give both or neither",
        ));
    }
    let causal = a.int("is_causal", 0)? != 0;
    if causal && nonpad.is_some() && past_key.is_none() {
        return Err(EngineError::unsupported(
            "Attention with is_causal=1 and nonpad_kv_seqlen (input 6) but no past_key: the causal offset \
             of an external KV cache is not implemented; give the causal part as attn_mask instead",
        ));
    }
    let mode = a.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(EngineError::invalid(format!(
            "Attention attribute qk_matmul_output_mode={mode}: it must be 0, 1, 2 or 3"
        )));
    }
    let softcap = a.float("softcap", 0.0)?;
    let scale = a.opt_float("scale")?;
    let q_dtype = dtype_of(cx.graph, q);
    let precision = if a.has("softmax_precision") {
        Some(a.int("softmax_precision", 0)?)
    } else {
        None
    };
    let softmax_f32 = match precision {
        None => false,
        Some(p) if Some(p) == q_dtype.map(|t| i64::from(t.onnx_code())) => false,
        Some(1) => true,
        Some(p) => {
            return Err(EngineError::unsupported(format!(
                "Attention attribute softmax_precision={p}: only FLOAT (1) or the type of Q is supported; \
                 leave it out or set it to 1"
            )));
        }
    };

    let mut chain = Chain::new(cx, name);
    let rank = match shape_of(chain.graph(), q).map(|s| s.len()) {
        Some(r @ (3 | 4)) => r,
        Some(r) => {
            return Err(EngineError::invalid(format!(
                "Attention Q of rank {r}: it must be [batch, seq, hidden] or [batch, heads, seq, head_size]"
            )));
        }
        None => {
            return Err(EngineError::unsupported(
                "Attention Q of unknown rank: give Q a shape in the model (3-D or 4-D)",
            ));
        }
    };
    // heads: the attributes for 3-D inputs, the declared dims for 4-D ones (None when unknown)
    let (q_heads, kv_heads) = if rank == 3 {
        let qh = a.int("q_num_heads", 0)?;
        let kvh = a.int("kv_num_heads", 0)?;
        if qh < 1 || kvh < 1 {
            return Err(EngineError::invalid(format!(
                "Attention with 3-D inputs needs q_num_heads and kv_num_heads (got {qh} and {kvh}); give both"
            )));
        }
        (Some(qh as usize), Some(kvh as usize))
    } else {
        (fixed_dim(chain.graph(), q, 1), fixed_dim(chain.graph(), k, 1))
    };
    if let (Some(qh), Some(kvh)) = (q_heads, kv_heads)
        && qh % kvh != 0
    {
        return Err(EngineError::invalid(format!(
            "Attention with {qh} query heads and {kvh} key/value heads: the query heads must be a multiple \
             of the key/value heads"
        )));
    }

    // [batch, heads, seq, head_size]
    let (q4, k4, v4) = if rank == 3 {
        let split = |chain: &mut Chain<'_, '_>, x: ValueId, what: &str, heads: Option<usize>| {
            // 3-D inputs always have both head counts (checked above)
            let target = chain.ints(&[0, 0, heads.map_or(-1, |h| h as i64), -1]);
            let r = chain.push(
                &format!("{what}_heads"),
                Op::Reshape { allowzero: false },
                &[x, target],
            );
            chain.push(&format!("{what}_heads_first"), transpose_heads(), &[r])
        };
        (
            split(&mut chain, q, "query", q_heads),
            split(&mut chain, k, "key", kv_heads),
            split(&mut chain, v, "value", kv_heads),
        )
    } else {
        (q, k, v)
    };
    let (k4, v4) = match (past_key, past_value) {
        (Some(pk), Some(pv)) => (
            chain.push("present_key", Op::Concat { axis: 2 }, &[pk, k4]),
            chain.push("present_value", Op::Concat { axis: 2 }, &[pv, v4]),
        ),
        _ => (k4, v4),
    };
    let mut copies = Vec::new();
    if wants(PRESENT_KEY) {
        copies.push((PRESENT_KEY, k4));
    }
    if wants(PRESENT_VALUE) {
        copies.push((PRESENT_VALUE, v4));
    }
    let (k_att, v_att) = if q_heads.is_some() && q_heads == kv_heads {
        (k4, v4)
    } else {
        (
            repeat_heads(&mut chain, "key", k4, q4),
            repeat_heads(&mut chain, "value", v4, q4),
        )
    };

    // √scale, applied to Q and Kᵀ as the function body does
    let root_scale = match scale {
        Some(s) => chain.scalar_like("scale_sqrt", s.sqrt(), q),
        None => {
            let s = default_scale(&mut chain, q4);
            let s = chain.push("scale_sqrt_f32", Op::Unary(UnaryOp::Sqrt), &[s]);
            chain.push("scale_sqrt", Op::CastLike, &[s, q])
        }
    };
    let kt = chain.push(
        "key_transposed",
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[k_att],
    );
    let q_scaled = chain.binary("query_scaled", BinaryOp::Mul, q4, root_scale);
    let kt_scaled = chain.binary("key_scaled", BinaryOp::Mul, kt, root_scale);
    let qk = chain.push("scores", matmul(), &[q_scaled, kt_scaled]);
    let mut scores = qk;
    if softcap > 0.0 {
        let cap = chain.scalar_like("softcap", softcap, q);
        let x = chain.binary("softcap_div", BinaryOp::Div, scores, cap);
        let t = chain.push("softcap_tanh", Op::Unary(UnaryOp::Tanh), &[x]);
        scores = chain.binary("softcapped", BinaryOp::Mul, t, cap);
    }
    let capped = scores;

    // the additive bias: mask, causal, padding
    let static_total = total_len(chain.graph(), k, past_key, rank);
    let mut biases = Vec::new();
    if let Some(m) = mask {
        biases.push(mask_bias(&mut chain, m, k4, q, static_total)?);
    }
    if causal {
        biases.push(causal_bias(&mut chain, q4, k4, past_key, q));
    }
    if let Some(lens) = nonpad {
        biases.push(padding_bias(&mut chain, lens, k4, q));
    }
    for (i, b) in biases.into_iter().enumerate() {
        scores = chain.binary(&format!("biased{i}"), BinaryOp::Add, scores, b);
    }
    let softmax_in = if softmax_f32 {
        chain.push("scores_f32", Op::Cast { to: DataType::F32 }, &[scores])
    } else {
        scores
    };
    let mut probs = chain.push(
        "probs",
        Op::Softmax {
            axis: -1,
            log: false,
            coerce_2d: false,
            nan_rows_to_zero: false,
        },
        &[softmax_in],
    );
    if softmax_f32 {
        probs = chain.push("probs_cast", Op::CastLike, &[probs, q]);
    }
    if wants(QK_MATMUL_OUTPUT) {
        let stage = match mode {
            0 => qk,
            1 => capped,
            2 => scores,
            _ => probs,
        };
        copies.push((QK_MATMUL_OUTPUT, stage));
    }
    if rank == 4 {
        return Ok(chain.finish_with_copies(matmul(), &[probs, v_att], copies));
    }
    let context = chain.push("context", matmul(), &[probs, v_att]);
    let merged = chain.push("heads_last", transpose_heads(), &[context]);
    let hidden = chain.ints(&[0, 0, -1]);
    Ok(chain.finish_with_copies(Op::Reshape { allowzero: false }, &[merged, hidden], copies))
}

/// `1/√head_size` as an f32 `[1]`, read from the last axis of the 4-D `q4` when the plan is built
/// (the default scale when the model gives none and the head size is not fixed).
pub(super) fn default_scale(chain: &mut Chain<'_, '_>, q4: ValueId) -> ValueId {
    let d = chain.push(
        "head_size",
        Op::Shape {
            start: 3,
            end: Some(4),
        },
        &[q4],
    );
    let d = chain.push("head_size_float", Op::Cast { to: DataType::F32 }, &[d]);
    let d = chain.push("head_size_sqrt", Op::Unary(UnaryOp::Sqrt), &[d]);
    chain.push("scale_f32", Op::Unary(UnaryOp::Reciprocal), &[d])
}

/// K or V `[batch, kv_heads, total, d]` with each head repeated for its group of query heads:
/// `[batch, q_heads, total, d]`, the repeats `q_heads / kv_heads` read from the shapes when the plan
/// is built.
pub(super) fn repeat_heads(chain: &mut Chain<'_, '_>, what: &str, x: ValueId, q4: ValueId) -> ValueId {
    let dims = |chain: &mut Chain<'_, '_>, step: &str, v: ValueId, start: i64, end: i64| {
        chain.push(
            &format!("{what}_{step}"),
            Op::Shape {
                start,
                end: Some(end),
            },
            &[v],
        )
    };
    let q_heads = dims(chain, "query_heads", q4, 1, 2);
    let kv_heads = dims(chain, "heads", x, 1, 2);
    let reps = chain.binary(&format!("{what}_group"), BinaryOp::Div, q_heads, kv_heads);
    let ones = chain.ints(&[1, 1]);
    let expand_shape = chain.push(
        &format!("{what}_expand_shape"),
        Op::Concat { axis: 0 },
        &[ones, reps, ones],
    );
    let x5 = chain.push(
        &format!("{what}_group_axis"),
        Op::Unsqueeze { axes: Some(vec![2]) },
        &[x],
    );
    let x5 = chain.push(&format!("{what}_grouped"), Op::Expand, &[x5, expand_shape]);
    let lead = chain.ints(&[0, -1]);
    let tail = dims(chain, "seq_and_size", x, 2, 4);
    let target = chain.push(
        &format!("{what}_repeated_shape"),
        Op::Concat { axis: 0 },
        &[lead, tail],
    );
    chain.push(
        &format!("{what}_repeated"),
        Op::Reshape { allowzero: false },
        &[x5, target],
    )
}

/// The mask as an additive bias in the type of `like`: a boolean mask is 0 where true and −∞ where
/// false, a float mask is used as it is; a mask shorter than the total sequence is padded with
/// false/−∞ (`static_total`: the total length when the model's shapes give it).
fn mask_bias(
    chain: &mut Chain<'_, '_>,
    m: ValueId,
    k4: ValueId,
    like: ValueId,
    static_total: Option<usize>,
) -> Result<ValueId> {
    let Some(shape) = shape_of(chain.graph(), m) else {
        return Err(EngineError::unsupported(
            "Attention attn_mask of unknown rank: give it a shape in the model",
        ));
    };
    let Some(dtype) = dtype_of(chain.graph(), m) else {
        return Err(EngineError::unsupported(
            "Attention attn_mask of unknown type: declare it (BOOL for a 0/−∞ mask, or the type of Q for an \
             additive one)",
        ));
    };
    let boolean = dtype == DataType::Bool;
    let r = shape.len();
    if r == 0 {
        return Err(EngineError::invalid(
            "Attention attn_mask is a scalar: it must be broadcastable to [batch, heads, q_len, total_len]",
        ));
    }
    let full = matches!((shape.last(), static_total), (Some(Dim::Fixed(l)), Some(t)) if *l == t);
    let mut m = m;
    if !full {
        // pads: zeros before every axis and after all but the last, then total − mask_len
        let total = chain.push(
            "total_len",
            Op::Shape {
                start: 2,
                end: Some(3),
            },
            &[k4],
        );
        let len = chain.push("mask_len", Op::Shape { start: -1, end: None }, &[m]);
        let missing = chain.binary("mask_missing", BinaryOp::Sub, total, len);
        let zeros = chain.ints(&vec![0; 2 * r - 1]);
        let pads = chain.push("mask_pads", Op::Concat { axis: 0 }, &[zeros, missing]);
        let value = if boolean { 0.0 } else { f64::NEG_INFINITY };
        m = chain.push(
            "mask_padded",
            Op::Pad {
                mode: crate::ir::PadMode::Constant,
                pads: Vec::new(),
                value,
            },
            &[m, pads],
        );
    }
    if !boolean {
        if dtype_of(chain.graph(), like) == Some(dtype) {
            return Ok(m);
        }
        return Ok(chain.push("mask_bias", Op::CastLike, &[m, like]));
    }
    let zero = chain.scalar_like("mask_pass", 0.0, like);
    let masked = chain.scalar_like("mask_block", f32::NEG_INFINITY, like);
    Ok(chain.push("mask_bias", Op::Where, &[m, zero, masked]))
}

/// `[q_len, total]`: 0 where key j may be attended by query i (`j ≤ i + past_len`), −∞ above.
fn causal_bias(
    chain: &mut Chain<'_, '_>,
    q4: ValueId,
    k4: ValueId,
    past_key: Option<ValueId>,
    like: ValueId,
) -> ValueId {
    let q_len = chain.axis_len("causal_q_len", q4, 2);
    let total = chain.axis_len("causal_total", k4, 2);
    let rows = chain.positions("causal_rows", q_len);
    let mut rows = chain.push(
        "causal_rows_column",
        Op::Unsqueeze { axes: Some(vec![1]) },
        &[rows],
    );
    if let Some(pk) = past_key {
        let past = chain.axis_len("causal_past_len", pk, 2);
        rows = chain.binary("causal_rows_offset", BinaryOp::Add, rows, past);
    }
    let cols = chain.positions("causal_cols", total);
    let keep = chain.binary("causal_keep", BinaryOp::LessOrEqual, cols, rows);
    let pass = chain.scalar_like("causal_pass", 0.0, like);
    let block = chain.scalar_like("causal_block", f32::NEG_INFINITY, like);
    chain.push("causal_bias", Op::Where, &[keep, pass, block])
}

/// `[batch, 1, 1, total]`: 0 for the first `nonpad_kv_seqlen[b]` keys of sequence b, −∞ after.
fn padding_bias(chain: &mut Chain<'_, '_>, lens: ValueId, k4: ValueId, like: ValueId) -> ValueId {
    let total = chain.axis_len("padding_total", k4, 2);
    let positions = chain.positions("padding_positions", total);
    let lens = chain.push("padding_lens", Op::Cast { to: DataType::I64 }, &[lens]);
    let lens = chain.push(
        "padding_lens_column",
        Op::Unsqueeze { axes: Some(vec![1]) },
        &[lens],
    );
    let keep = chain.binary("padding_keep", BinaryOp::Less, positions, lens);
    let pass = chain.scalar_like("padding_pass", 0.0, like);
    let block = chain.scalar_like("padding_block", f32::NEG_INFINITY, like);
    let bias = chain.push("padding_bias_rows", Op::Where, &[keep, pass, block]);
    chain.push(
        "padding_bias",
        Op::Unsqueeze {
            axes: Some(vec![1, 2]),
        },
        &[bias],
    )
}

/// The total sequence length (past + new keys) when the model's shapes give it.
fn total_len(g: &crate::ir::Graph, k: ValueId, past_key: Option<ValueId>, rank: usize) -> Option<usize> {
    let new = fixed_dim(g, k, rank - 2)?;
    match past_key {
        Some(pk) => Some(new + fixed_dim(g, pk, 2)?),
        None => Some(new),
    }
}

/// The element type the loader knows for `v`.
fn dtype_of(g: &crate::ir::Graph, v: ValueId) -> Option<DataType> {
    if let Some(t) = g.constants.get(&v) {
        return Some(t.dtype);
    }
    g.values[v.0].dtype
}

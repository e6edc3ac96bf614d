//! onnxruntime's `com.microsoft` GroupQueryAttention: causal grouped-query attention over a KV cache,
//! the operator LLM exports from onnxruntime-genai and the transformer optimiser use.
//!
//! Decomposes at load, as onnxruntime's CPU kernel computes it, so both executors run it. Each sequence
//! b has `total_b = seqlens_k[b] + 1` valid keys, and its new tokens start at `past_b = max(total_b −
//! seq, 0)` (0 in a first prompt, whose padding is on the right). Query, key and value
//! `[batch, seq, heads · head_size]` (or one packed `[.., (heads + 2 · kv_heads) · head_size]` query)
//! are split into heads; with `do_rotary` Q and K are rotated at positions `past_b + i` by rows of
//! cos_cache/sin_cache (see [`super::rotary`]). present_key/present_value are past_key/past_value
//! (`[batch, kv_heads, past, head_size]`) with the new rows written at `past_b` (a Concat when no
//! sequence is padded, a GatherElements when some are) and zeros after `total_b`, which onnxruntime
//! leaves unwritten. The scores `scale · Q·Kᵀ` (default `scale = 1/√head_size`) against the repeated
//! K heads `[h0, h0, h1, h1, …]` are soft-capped, get −∞ where key `j > min(past_b + i, total_b − 1)`,
//! and their Softmax multiplies the repeated V heads, merged back to `[batch, seq, hidden]`.
//!
//! total_sequence_length is not read: present has `past + seq` rows, which is onnxruntime's length
//! when past and present are separate buffers (total_sequence_length = past + seq). With one shared,
//! preallocated buffer (total_sequence_length ≤ past) onnxruntime keeps present at the past's length
//! and this decomposition grows it by `seq` rows; the attention output is the same.

use super::chain::{Chain, decomposed, fixed_dim, matmul, shape_of, transpose_heads};
use super::onnx_attention::{default_scale, repeat_heads};
use super::prelude::*;
use super::rotary::rotate;
use crate::ir::{BinaryOp, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("GroupQueryAttention", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("group_query_attention");

/// Inputs after sin_cache (onnxruntime releases after 1.20): what each is, for the refusal.
const LATER_INPUTS: &[&str] = &["position_ids", "attention_bias", "head_sink"];

/// The present outputs after the attention output.
const PRESENT_KEY: usize = 1;
const PRESENT_VALUE: usize = 2;

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let wants = |i: usize| n.output.get(i).is_some_and(|o| !o.is_empty());
    let query = need(inputs, 0, "query")?;
    let (key, value) = (input(1), input(2));
    let (past_key, past_value) = (input(3), input(4));
    let seqlens_k = need(inputs, 5, "seqlens_k")?;
    let (cos_cache, sin_cache) = (input(7), input(8));
    check_form(a, inputs)?;
    if key.is_some() != value.is_some() {
        return Err(EngineError::invalid(
            "GroupQueryAttention has only one of key (input 1) and value (input 2); give both, or neither \
             with a packed QKV query",
        ));
    }
    if past_key.is_some() != past_value.is_some() {
        return Err(EngineError::invalid(
            "GroupQueryAttention has only one of past_key (input 3) and past_value (input 4); give both or \
             neither",
        ));
    }
    let heads = a.int("num_heads", 0)?;
    let kv_heads = a.int("kv_num_heads", 0)?;
    if heads < 1 || kv_heads < 1 || heads % kv_heads != 0 {
        return Err(EngineError::invalid(format!(
            "GroupQueryAttention with num_heads={heads} and kv_num_heads={kv_heads}: both must be positive \
             and num_heads a multiple of kv_num_heads"
        )));
    }
    let scale = a.float("scale", 0.0)?;
    let softcap = a.float("softcap", 0.0)?;
    let do_rotary = a.int("do_rotary", 0)? != 0;
    let interleaved = a.int("rotary_interleaved", 0)? != 0;

    let mut chain = Chain::new(cx, name);
    if shape_of(chain.graph(), query).map(|s| s.len()) != Some(3) {
        return Err(EngineError::unsupported(
            "GroupQueryAttention query must have a known shape [batch, seq, hidden]: give it one in the model",
        ));
    }
    // the head size when the model fixes the query's width
    let packed_heads = if key.is_some() {
        heads
    } else {
        heads + 2 * kv_heads
    };
    let head_size = fixed_dim(chain.graph(), query, 2)
        .map(|w| w as i64 / packed_heads)
        .filter(|&h| h > 0);

    // [batch, seq, heads, head_size]
    let split = |chain: &mut Chain<'_, '_>, x: ValueId, what: &str, h: i64| {
        let target = chain.ints(&[0, 0, h, -1]);
        chain.push(
            &format!("{what}_heads"),
            Op::Reshape { allowzero: false },
            &[x, target],
        )
    };
    let (q, k, v) = match (key, value) {
        (Some(k), Some(v)) => (
            split(&mut chain, query, "query", heads),
            split(&mut chain, k, "key", kv_heads),
            split(&mut chain, v, "value", kv_heads),
        ),
        _ => {
            let all = split(&mut chain, query, "packed", packed_heads);
            let sizes = vec![heads as usize, kv_heads as usize, kv_heads as usize];
            let parts = chain.push_multi("unpacked", Op::Split { axis: 2, sizes }, &[all], 3);
            (parts[0], parts[1], parts[2])
        }
    };

    // past_b = max(seqlens_k + 1 − seq, 0), [batch]
    let seq = chain.push(
        "seq_len",
        Op::Shape {
            start: 1,
            end: Some(2),
        },
        &[query],
    );
    let seq_scalar = chain.push("seq_len_scalar", Op::Squeeze { axes: Some(vec![0]) }, &[seq]);
    let last = chain.push("seqlens", Op::Cast { to: DataType::I64 }, &[seqlens_k]);
    let one = chain.scalar_i64(1);
    let zero = chain.scalar_i64(0);
    let total = chain.binary("total_lens", BinaryOp::Add, last, one);
    let past = chain.binary("past_lens_unclamped", BinaryOp::Sub, total, seq);
    let past = chain.binary("past_lens", BinaryOp::Max, past, zero);
    let past_column = chain.push("past_lens_column", Op::Unsqueeze { axes: Some(vec![1]) }, &[past]);
    let steps = chain.positions("steps", seq_scalar);
    // [batch, seq]: the position of each new token
    let positions = chain.binary("positions", BinaryOp::Add, past_column, steps);

    let (q, k) = if do_rotary {
        let (Some(cos_cache), Some(sin_cache)) = (cos_cache, sin_cache) else {
            return Err(EngineError::invalid(
                "GroupQueryAttention with do_rotary=1 needs cos_cache (input 7) and sin_cache (input 8)",
            ));
        };
        let Some(half) = fixed_dim(chain.graph(), cos_cache, 1) else {
            return Err(EngineError::unsupported(
                "GroupQueryAttention with do_rotary=1 and a cos_cache of unknown width: give cos_cache a shape \
                 in the model (an initializer [max_positions, rotary_dim / 2])",
            ));
        };
        let cos = chain.push("cos", Op::Gather { axis: 0 }, &[cos_cache, positions]);
        let sin = chain.push("sin", Op::Gather { axis: 0 }, &[sin_cache, positions]);
        let rotary_dim = 2 * half as i64;
        (
            rotate(
                &mut chain,
                "query_",
                q,
                (cos, sin),
                rotary_dim,
                head_size,
                interleaved,
            ),
            rotate(
                &mut chain,
                "key_",
                k,
                (cos, sin),
                rotary_dim,
                head_size,
                interleaved,
            ),
        )
    } else {
        (q, k)
    };
    let q = chain.push("query_heads_first", transpose_heads(), &[q]);
    let k = chain.push("key_heads_first", transpose_heads(), &[k]);
    let v = chain.push("value_heads_first", transpose_heads(), &[v]);

    let (present_key, present_value) = match (past_key, past_value) {
        (Some(pk), Some(pv)) => write_new_rows(&mut chain, (pk, pv), (k, v), past_column, seq, query),
        _ => (k, v),
    };
    let mut copies = Vec::new();
    if wants(PRESENT_KEY) {
        copies.push((PRESENT_KEY, present_key));
    }
    if wants(PRESENT_VALUE) {
        copies.push((PRESENT_VALUE, present_value));
    }
    let (k_att, v_att) = if heads == kv_heads {
        (present_key, present_value)
    } else {
        (
            repeat_heads(&mut chain, "key", present_key, q),
            repeat_heads(&mut chain, "value", present_value, q),
        )
    };

    let scale = if scale != 0.0 {
        chain.scalar_like("scale", scale, query)
    } else if let Some(h) = head_size {
        chain.scalar_like("scale", 1.0 / (h as f32).sqrt(), query)
    } else {
        let s = default_scale(&mut chain, q);
        chain.push("scale", Op::CastLike, &[s, query])
    };
    let q_scaled = chain.binary("query_scaled", BinaryOp::Mul, q, scale);
    let kt = chain.push(
        "key_transposed",
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[k_att],
    );
    let mut scores = chain.push("scores", matmul(), &[q_scaled, kt]);
    if softcap > 0.0 {
        let cap = chain.scalar_like("softcap", softcap, query);
        let x = chain.binary("softcap_div", BinaryOp::Div, scores, cap);
        let t = chain.push("softcap_tanh", Op::Unary(UnaryOp::Tanh), &[x]);
        scores = chain.binary("softcapped", BinaryOp::Mul, t, cap);
    }
    let bias = causal_padding_bias(&mut chain, present_key, past_column, last, steps, query);
    let scores = chain.binary("biased", BinaryOp::Add, scores, bias);
    let probs = chain.push(
        "probs",
        Op::Softmax {
            axis: -1,
            log: false,
            coerce_2d: false,
            nan_rows_to_zero: false,
        },
        &[scores],
    );
    let context = chain.push("context", matmul(), &[probs, v_att]);
    let merged = chain.push("heads_last", transpose_heads(), &[context]);
    let hidden = chain.ints(&[0, 0, -1]);
    Ok(chain.finish_with_copies(Op::Reshape { allowzero: false }, &[merged, hidden], copies))
}

/// Refuses the attributes and inputs whose forms this decomposition does not compute.
fn check_form(a: &Attrs<'_>, inputs: &[Option<ValueId>]) -> Result<()> {
    let window = a.int("local_window_size", -1)?;
    if window != -1 {
        return Err(EngineError::unsupported(format!(
            "GroupQueryAttention attribute local_window_size={window} (sliding-window attention) is not \
             implemented; export the model without a local window (local_window_size=-1)"
        )));
    }
    let smooth = a.int("smooth_softmax", 0)?;
    if smooth != 0 {
        return Err(EngineError::unsupported(format!(
            "GroupQueryAttention attribute smooth_softmax={smooth} is not implemented; export the model \
             with smooth_softmax=0"
        )));
    }
    let qk_output = a.int("qk_output", 0)?;
    if qk_output != 0 {
        return Err(EngineError::unsupported(format!(
            "GroupQueryAttention attribute qk_output={qk_output} (an output of the attention scores) is not \
             implemented; leave it out"
        )));
    }
    for (i, what) in LATER_INPUTS.iter().enumerate() {
        if inputs.get(9 + i).copied().flatten().is_some() {
            return Err(EngineError::unsupported(format!(
                "GroupQueryAttention input {} ({what}, from onnxruntime releases after 1.20) is not \
                 implemented; export the model with onnxruntime 1.20's operator form (positions from \
                 seqlens_k, no attention bias or head sink)",
                9 + i
            )));
        }
    }
    Ok(())
}

/// present_key/present_value `[batch, kv_heads, past + seq, head_size]`: the past with each sequence's
/// new rows written at `past_b` (`past_column`, `[batch, 1]`) and zeros after `past_b + seq`.
fn write_new_rows(
    chain: &mut Chain<'_, '_>,
    (past_key, past_value): (ValueId, ValueId),
    (k, v): (ValueId, ValueId),
    past_column: ValueId,
    seq: ValueId,
    like: ValueId,
) -> (ValueId, ValueId) {
    let keys = chain.push("keys", Op::Concat { axis: 2 }, &[past_key, k]);
    let values = chain.push("values", Op::Concat { axis: 2 }, &[past_value, v]);
    let dim = |chain: &mut Chain<'_, '_>, step: &str, x: ValueId| {
        chain.push(
            step,
            Op::Shape {
                start: 2,
                end: Some(3),
            },
            &[x],
        )
    };
    let past_rows = dim(chain, "past_rows", past_key);
    let rows = dim(chain, "present_rows", keys);
    let rows_scalar = chain.push(
        "present_rows_scalar",
        Op::Squeeze { axes: Some(vec![0]) },
        &[rows],
    );
    let j = chain.positions("present_row_ids", rows_scalar);
    let one = chain.scalar_i64(1);
    // row j reads keys[j] before past_b, keys[past_rows + j − past_b] from past_b on
    let from_start = chain.binary("rows_after_past", BinaryOp::Sub, j, past_column);
    let new_row = chain.binary("new_row_ids", BinaryOp::Add, from_start, past_rows);
    let last_row = chain.binary("last_row", BinaryOp::Sub, rows, one);
    let new_row = chain.binary("new_row_ids_clamped", BinaryOp::Min, new_row, last_row);
    let is_new = chain.binary("is_new_row", BinaryOp::GreaterOrEqual, j, past_column);
    let ids = chain.push("row_ids", Op::Where, &[is_new, new_row, j]);
    let ids = chain.push(
        "row_ids_4d",
        Op::Unsqueeze {
            axes: Some(vec![1, 3]),
        },
        &[ids],
    );
    let full = chain.push("present_shape", Op::Shape { start: 0, end: None }, &[keys]);
    let ids = chain.push("row_ids_full", Op::Expand, &[ids, full]);
    let end = chain.binary("written_end", BinaryOp::Add, past_column, seq);
    let written = chain.binary("written", BinaryOp::Less, j, end);
    let written = chain.push(
        "written_4d",
        Op::Unsqueeze {
            axes: Some(vec![1, 3]),
        },
        &[written],
    );
    let blank = chain.scalar_like("unwritten", 0.0, like);
    let mut present = |what: &str, x: ValueId| {
        let g = chain.push(&format!("{what}_rows"), Op::GatherElements { axis: 2 }, &[x, ids]);
        chain.push(&format!("present_{what}"), Op::Where, &[written, g, blank])
    };
    (present("key", keys), present("value", values))
}

/// `[batch, 1, seq, total]`: 0 where key j may be attended by new token i of sequence b (`j ≤
/// min(past_b + i, seqlens_k[b])`), −∞ elsewhere.
fn causal_padding_bias(
    chain: &mut Chain<'_, '_>,
    present_key: ValueId,
    past_column: ValueId,
    last: ValueId,
    steps: ValueId,
    like: ValueId,
) -> ValueId {
    let rows = chain.axis_len("key_rows", present_key, 2);
    let j = chain.positions("key_ids", rows);
    let causal = chain.binary("causal_limit", BinaryOp::Add, past_column, steps);
    let last = chain.push("last_key", Op::Unsqueeze { axes: Some(vec![1]) }, &[last]);
    let limit = chain.binary("key_limit", BinaryOp::Min, causal, last);
    let limit = chain.push(
        "key_limit_column",
        Op::Unsqueeze { axes: Some(vec![2]) },
        &[limit],
    );
    let keep = chain.binary("key_visible", BinaryOp::LessOrEqual, j, limit);
    let pass = chain.scalar_like("key_pass", 0.0, like);
    let block = chain.scalar_like("key_block", f32::NEG_INFINITY, like);
    let bias = chain.push("key_bias_rows", Op::Where, &[keep, pass, block]);
    chain.push("key_bias", Op::Unsqueeze { axes: Some(vec![1]) }, &[bias])
}

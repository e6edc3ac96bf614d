//! onnxruntime's fused attention (`com.microsoft` Attention and MultiHeadAttention), without a KV
//! cache.
//!
//! Decomposes at load into the ops an exported attention block has: split heads (Reshape and
//! Transpose), `softmax(q·kᵀ·scale + mask) · v` (MatMul, Mul, Add, Softmax, MatMul) and merge heads,
//! so both executors run it. Attention's packed projection is a MatMul, a bias Add and a Split.
//! Masks: a 2-D `[batch, kv_len]` 0/1 mask, a 3-D `[batch, q_len, kv_len]` one, and Attention's 1-D
//! `[batch]` valid lengths (what onnxruntime's BERT fusion writes) become an additive bias of
//! `mask_filter_value`. Past and present states, `unidirectional`, rotary embeddings and the other
//! mask formats are refused at load naming the input or attribute.

use super::chain::{Chain, decomposed, matmul};
use super::prelude::*;
use crate::ir::{BinaryOp, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::microsoft("Attention", convert, &FAMILY),
    OnnxOp::microsoft("MultiHeadAttention", convert, &FAMILY),
];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("attention");

/// onnxruntime's default for masked scores.
const MASK_FILTER_VALUE: f32 = -10000.0;

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let op = n.op_type.as_str();
    let has = |i: usize| inputs.get(i).copied().flatten().is_some();
    let heads = a.int("num_heads", 0)?;
    if heads < 1 {
        return Err(EngineError::invalid(format!(
            "{op} attribute num_heads is {heads}; it must be 1 or more"
        )));
    }
    if a.int("unidirectional", 0)? != 0 {
        return Err(EngineError::unsupported(format!(
            "{op} attribute unidirectional=1 (causal attention)"
        )));
    }
    if a.int("do_rotary", 0)? != 0 {
        return Err(EngineError::unsupported(format!("{op} attribute do_rotary=1")));
    }
    if let Some(i) = n.output.iter().skip(1).position(|o| !o.is_empty()) {
        return Err(EngineError::unsupported(format!(
            "{op} output {} (present state or scores): only output 0 is supported",
            i + 1
        )));
    }
    let scale = a.float("scale", 0.0)?;
    let filter = a.float("mask_filter_value", MASK_FILTER_VALUE)?;
    let mut chain = Chain::new(cx, name);
    let (q, k, v, mask, attention_bias) = match op {
        // Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?)
        "Attention" => {
            for (i, what) in [(4, "past"), (6, "past_sequence_length")] {
                if has(i) {
                    return Err(EngineError::unsupported(format!(
                        "{op} input {i} ({what}): no KV cache"
                    )));
                }
            }
            let x = need(inputs, 0, "input")?;
            let w = need(inputs, 1, "weights")?;
            let mut qkv = chain.push("qkv", matmul(), &[x, w]);
            if let Some(b) = inputs.get(2).copied().flatten() {
                qkv = chain.binary("qkv_bias", BinaryOp::Add, qkv, b);
            }
            let sizes = a.ints("qkv_hidden_sizes")?.unwrap_or_default();
            if !sizes.is_empty() && sizes.len() != 3 {
                return Err(EngineError::invalid(format!(
                    "{op} attribute qkv_hidden_sizes must hold 3 sizes, got {sizes:?}"
                )));
            }
            let split = Op::Split {
                axis: -1,
                sizes: sizes.iter().map(|&s| s.max(0) as usize).collect(),
            };
            let parts = chain.push_multi("split_qkv", split, &[qkv], 3);
            let mask = match inputs.get(3).copied().flatten() {
                Some(m) => Some((m, mask_kind(&chain, m, op, "mask_index", true)?)),
                None => None,
            };
            (
                parts[0],
                parts[1],
                parts[2],
                mask,
                inputs.get(5).copied().flatten(),
            )
        }
        // MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?, past_key?, …)
        _ => {
            for (i, what) in [
                (6, "past_key"),
                (7, "past_value"),
                (8, "past_sequence_length"),
                (9, "cache_indirection"),
            ] {
                if has(i) {
                    return Err(EngineError::unsupported(format!(
                        "{op} input {i} ({what}): no KV cache"
                    )));
                }
            }
            let mut q = need(inputs, 0, "query")?;
            let (Some(mut k), Some(mut v)) =
                (inputs.get(1).copied().flatten(), inputs.get(2).copied().flatten())
            else {
                return Err(EngineError::unsupported(format!(
                    "{op} with packed QKV or packed KV (key or value absent): give query, key and value"
                )));
            };
            for (x, what) in [(q, "query"), (k, "key"), (v, "value")] {
                if let Some(r) = rank(&chain, x)
                    && r != 3
                {
                    return Err(EngineError::unsupported(format!(
                        "{op} {what} of rank {r}: only [batch, sequence, hidden] inputs are supported"
                    )));
                }
            }
            if let Some(b) = inputs.get(3).copied().flatten() {
                // bias is [q_hidden + k_hidden + v_hidden], split in three equal parts
                let parts = chain.push_multi(
                    "split_bias",
                    Op::Split {
                        axis: 0,
                        sizes: Vec::new(),
                    },
                    &[b],
                    3,
                );
                q = chain.binary("query_bias", BinaryOp::Add, q, parts[0]);
                k = chain.binary("key_bias", BinaryOp::Add, k, parts[1]);
                v = chain.binary("value_bias", BinaryOp::Add, v, parts[2]);
            }
            let mask = match inputs.get(4).copied().flatten() {
                Some(m) => Some((m, mask_kind(&chain, m, op, "key_padding_mask", false)?)),
                None => None,
            };
            (q, k, v, mask, inputs.get(5).copied().flatten())
        }
    };
    let mut score_bias = Vec::new();
    if let Some((m, kind)) = mask {
        score_bias.push(mask_bias(&mut chain, m, kind, k, q, filter));
    }
    score_bias.extend(attention_bias);
    let heads_shape = chain.ints(&[0, 0, heads, -1]);
    let split_heads = |chain: &mut Chain<'_, '_>, x: ValueId, what: &str, perm: Vec<usize>| {
        let r = chain.push(
            &format!("{what}_heads"),
            Op::Reshape { allowzero: false },
            &[x, heads_shape],
        );
        chain.push(&format!("{what}_heads_first"), Op::Transpose { perm }, &[r])
    };
    let qh = split_heads(&mut chain, q, "query", vec![0, 2, 1, 3]);
    let kt = split_heads(&mut chain, k, "key", vec![0, 2, 3, 1]);
    let vh = split_heads(&mut chain, v, "value", vec![0, 2, 1, 3]);
    let scores = chain.push("scores", matmul(), &[qh, kt]);
    let scale = if scale != 0.0 {
        chain.scalar_like("scale", scale, q)
    } else {
        // 1/√head_size, from the split query's last dim (computed when the plan is built)
        let dim = chain.push(
            "head_size",
            Op::Shape {
                start: 3,
                end: Some(4),
            },
            &[qh],
        );
        let dim = chain.push("head_size_float", Op::CastLike, &[dim, q]);
        let root = chain.push("head_size_sqrt", Op::Unary(UnaryOp::Sqrt), &[dim]);
        chain.push("scale", Op::Unary(UnaryOp::Reciprocal), &[root])
    };
    let mut scores = chain.binary("scaled", BinaryOp::Mul, scores, scale);
    for (i, b) in score_bias.into_iter().enumerate() {
        scores = chain.binary(&format!("masked{i}"), BinaryOp::Add, scores, b);
    }
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
    let context = chain.push("context", matmul(), &[probs, vh]);
    let merged = chain.push(
        "heads_last",
        Op::Transpose {
            perm: vec![0, 2, 1, 3],
        },
        &[context],
    );
    let hidden = chain.ints(&[0, 0, -1]);
    Ok(chain.finish(Op::Reshape { allowzero: false }, &[merged, hidden]))
}

/// The rank of `x` when the model declares it, or when it follows from its producers. onnxruntime's
/// optimizer writes no shapes for the values it adds: BERT's `mask_index` is `ReduceSum(Cast(mask),
/// axes=[1], keepdims=0)` of a declared `[batch, seq]` input (or EmbedLayerNormalization's output 1,
/// a copy of the same reduction over `mask == 1`), so its rank is read through that chain.
fn rank(chain: &Chain<'_, '_>, x: ValueId) -> Option<usize> {
    const MAX_DEPTH: usize = 8;
    inferred_rank(chain.graph(), chain.earlier(), x, MAX_DEPTH)
}

fn inferred_rank(g: &crate::ir::Graph, earlier: &[Node], x: ValueId, depth: usize) -> Option<usize> {
    if let Some(shape) = &g.values[x.0].shape {
        return Some(shape.len());
    }
    if let Some(t) = g.constants.get(&x) {
        return Some(t.shape.len());
    }
    let producer = earlier.iter().rev().find(|n| n.outputs.contains(&Some(x)))?;
    let input = producer.inputs.first().copied().flatten()?;
    let depth = depth.checked_sub(1)?;
    match &producer.op {
        Op::Cast { .. } | Op::CastLike | Op::Unary(_) | Op::Identity => {
            inferred_rank(g, earlier, input, depth)
        }
        // a comparison with a scalar (EmbedLayerNormalization's `mask == 1`): the larger rank
        Op::Binary(_) => {
            let other = producer.inputs.get(1).copied().flatten()?;
            let a = inferred_rank(g, earlier, input, depth)?;
            Some(a.max(inferred_rank(g, earlier, other, depth)?))
        }
        Op::Reduce {
            axes,
            keepdims,
            noop_with_empty_axes,
            ..
        } => {
            let r = inferred_rank(g, earlier, input, depth)?;
            if *keepdims {
                return Some(r);
            }
            let reduced = if axes.is_empty() {
                // opset 18+ (and ReduceSum 13+) take the axes as an input; absent means all axes
                match producer.inputs.get(1).copied().flatten() {
                    Some(a) => g.constants.get(&a)?.shape.iter().product::<usize>(),
                    None if *noop_with_empty_axes => 0,
                    None => r,
                }
            } else {
                axes.len()
            };
            r.checked_sub(reduced)
        }
        _ => None,
    }
}

/// The mask formats supported.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MaskKind {
    /// `[batch]`: the number of valid (leading) key positions per sequence
    EndPositions,
    /// `[batch, kv_len]` of 0/1
    Keys,
    /// `[batch, q_len, kv_len]` of 0/1
    Pairs,
}

fn mask_kind(
    chain: &Chain<'_, '_>,
    m: ValueId,
    op: &str,
    what: &str,
    lengths_allowed: bool,
) -> Result<MaskKind> {
    match rank(chain, m) {
        Some(1) if lengths_allowed => Ok(MaskKind::EndPositions),
        Some(2) => Ok(MaskKind::Keys),
        Some(3) => Ok(MaskKind::Pairs),
        Some(r) => Err(EngineError::unsupported(format!(
            "{op} input {what} of rank {r} (supported: [batch] valid lengths for Attention, [batch, kv_len] and \
             [batch, q_len, kv_len] 0/1 masks)"
        ))),
        None => Err(EngineError::unsupported(format!(
            "{op} input {what} of unknown rank: give it a shape in the model so its format is known"
        ))),
    }
}

/// The additive score bias of a mask: 0 where attending, `filter` where masked, `[batch, 1, q|1, kv]`.
fn mask_bias(
    chain: &mut Chain<'_, '_>,
    m: ValueId,
    kind: MaskKind,
    k: ValueId,
    like: ValueId,
    filter: f32,
) -> ValueId {
    let filter = chain.scalar_like("mask_filter", filter, like);
    let (keep, axes) = match kind {
        MaskKind::EndPositions => {
            // positions 0..kv_len against each sequence's valid length
            let len = chain.axis_len("kv_len", k, 1);
            let positions = chain.positions("positions", len);
            let ends = chain.push("valid_len", Op::Cast { to: DataType::I64 }, &[m]);
            let ends = chain.push("valid_len_column", Op::Unsqueeze { axes: Some(vec![1]) }, &[ends]);
            (
                chain.binary("attend", BinaryOp::Less, positions, ends),
                vec![1, 2],
            )
        }
        MaskKind::Keys | MaskKind::Pairs => {
            let zero = chain.scalar_like("mask_zero", 0.0, m);
            let keep = chain.binary("attend", BinaryOp::Equal, m, zero);
            let keep = chain.push("attend_not", Op::Unary(UnaryOp::Not), &[keep]);
            (
                keep,
                if kind == MaskKind::Keys {
                    vec![1, 2]
                } else {
                    vec![1]
                },
            )
        }
    };
    let zero = chain.scalar_like("mask_pass", 0.0, like);
    let bias = chain.push("mask_bias", Op::Where, &[keep, zero, filter]);
    chain.push("mask_bias_heads", Op::Unsqueeze { axes: Some(axes) }, &[bias])
}

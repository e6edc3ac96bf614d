//! onnxruntime's EmbedLayerNormalization (`com.microsoft`): BERT's embeddings and their layer
//! normalisation in one node, as `onnxruntime.transformers.optimizer` writes it.
//!
//! Decomposes at load, so both executors run it: word, position and (optional) segment rows are
//! Gathers, summed, then the IR's LayerNormalization over the last axis. Positions are
//! `position_ids` when given, else the first `seq` rows of the position table (a Slice whose end
//! comes from the input's shape). The optional outputs: `mask_index` is, per batch row, the number
//! of mask elements equal to 1 (onnxruntime's count; all zeros without a mask), as INT32 `[batch]`,
//! the valid lengths its Attention reads; `embedding_sum` is the sum before normalisation.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, ReduceOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("EmbedLayerNormalization", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("embed_norm");

/// onnxruntime's default epsilon for EmbedLayerNormalization.
const EMBED_NORM_EPSILON: f32 = 1e-12;

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let opt_in = |i: usize| inputs.get(i).copied().flatten();
    let wants = |i: usize| n.output.get(i).is_some_and(|o| !o.is_empty());
    let epsilon = a.float("epsilon", EMBED_NORM_EPSILON)?;
    let ids = need(inputs, 0, "input_ids")?;
    let word_table = need(inputs, 2, "word_embedding")?;
    let position_table = need(inputs, 3, "position_embedding")?;
    let gamma = need(inputs, 5, "gamma")?;
    let mut chain = Chain::new(cx, name);
    let gather = Op::Gather { axis: 0 };

    let word = chain.push("word", gather.clone(), &[word_table, ids]);
    let position = match opt_in(8) {
        // [batch, seq] or [1, seq]: broadcast by the Add below
        Some(p) => chain.push("position", gather.clone(), &[position_table, p]),
        None => {
            let seq = chain.push(
                "seq_len",
                Op::Shape {
                    start: 1,
                    end: Some(2),
                },
                &[ids],
            );
            let zero = chain.ints(&[0]);
            let axes = chain.ints(&[0]);
            chain.push(
                "position",
                Op::Slice {
                    starts: Vec::new(),
                    steps: Vec::new(),
                },
                &[position_table, zero, seq, axes],
            )
        }
    };
    let mut sum = chain.binary("word_position", BinaryOp::Add, word, position);
    match (opt_in(1), opt_in(4)) {
        (Some(segment_ids), Some(segment_table)) => {
            let segment = chain.push("segment", gather, &[segment_table, segment_ids]);
            sum = chain.binary("with_segment", BinaryOp::Add, sum, segment);
        }
        (None, None) => {}
        (Some(_), None) | (None, Some(_)) => {
            return Err(EngineError::invalid(
                "EmbedLayerNormalization has only one of segment_ids (input 1) and segment_embedding \
                 (input 4); give both or neither",
            ));
        }
    }

    let mut copies = Vec::new();
    if wants(1) {
        let mask_index = match opt_in(7) {
            Some(mask) => {
                let one = chain.scalar_like("mask_one", 1.0, mask);
                let valid = chain.binary("mask_valid", BinaryOp::Equal, mask, one);
                let valid = chain.push("mask_valid_i32", Op::Cast { to: DataType::I32 }, &[valid]);
                chain.push(
                    "mask_index",
                    Op::Reduce {
                        op: ReduceOp::Sum,
                        axes: vec![1],
                        keepdims: false,
                        noop_with_empty_axes: false,
                    },
                    &[valid],
                )
            }
            None => {
                let batch = chain.push(
                    "batch",
                    Op::Shape {
                        start: 0,
                        end: Some(1),
                    },
                    &[ids],
                );
                let zero = Tensor {
                    dtype: DataType::I32,
                    shape: vec![1],
                    data: 0i32.to_le_bytes().to_vec().into(),
                };
                chain.push("mask_index", Op::ConstantOfShape { value: zero }, &[batch])
            }
        };
        copies.push((1, mask_index));
    }
    if wants(2) {
        copies.push((2, sum));
    }
    let ins: Vec<ValueId> = [Some(sum), Some(gamma), opt_in(6)]
        .into_iter()
        .flatten()
        .collect();
    let ln = Op::LayerNormalization { axis: -1, epsilon };
    Ok(chain.finish_with_copies(ln, &ins, copies))
}

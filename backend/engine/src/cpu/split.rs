//! Batch splitting: a plan in which every node treats the samples along axis 0 of the inputs
//! independently runs as one sub-run per sample, spread over the pool's threads, so that each
//! worker's activations stay in its caches (a batch-16 MobileNet's layers do not fit in L2; one
//! sample's do). The outputs are the per-sample outputs concatenated along axis 0.
//!
//! Two checks make this exact rather than a heuristic:
//! - [`batch_axis`] follows the sample axis through the full-batch plan (Transpose, Slice and Reshape
//!   may move it off axis 0 and back; inputs and outputs carry it on axis 0) with a per-op rule (a
//!   Conv's input 0 carries it, its weights must not; a Reduce must not reduce axis 0; a broadcast
//!   operand without the sample axis must have size 1 there or a smaller rank; …). Any op without a
//!   rule, or any use that could mix samples, refuses the split.
//! - [`same_but_batch`] checks that the one-sample plan, specialised from the model on its own, is
//!   the full plan with the batch dim set to 1: same nodes and attributes, same shapes elsewhere,
//!   identical constants (so nothing folded at specialisation depends on the batch size).

use std::sync::Mutex;
use std::time::Duration;

use crate::ir::{ConcreteGraph, CoordTransform, Op, ResizeMode, ValueId};
use crate::tensor::{DataType, Tensor};

/// Runs of each way timed before a plan settles on the faster one.
const TRIALS: u32 = 2;

/// How a batch that can run split is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// one execution of the full-batch plan
    Whole,
    /// one execution of the one-sample plan per sample, in parallel
    Split,
}

/// The choice between [`Way::Whole`] and [`Way::Split`] for one plan, measured on its own first
/// batches (real requests, so the trials cost nothing extra): they alternate until each way has
/// run [`TRIALS`] times, then the faster best time wins for good. Which is faster depends on the
/// model and the machine (a transformer's batch-8 products beat eight single-threaded ones on two
/// cores; a CNN's cache-sized samples win apart), and guessing it wrong made batching slower per
/// sample than single requests.
#[derive(Debug, Default)]
pub(crate) struct Choice {
    state: Mutex<Trials>,
}

#[derive(Debug, Default)]
struct Trials {
    whole: Vec<Duration>,
    split: Vec<Duration>,
    settled: Option<Way>,
}

impl Choice {
    /// The way to run the next batch.
    pub(crate) fn next(&self) -> Way {
        let Ok(t) = self.state.lock() else {
            return Way::Whole;
        };
        match t.settled {
            Some(way) => way,
            None if t.split.len() < t.whole.len() => Way::Split,
            None => Way::Whole,
        }
    }

    /// The way settled on, once measured.
    pub(crate) fn settled(&self) -> Option<Way> {
        self.state.lock().ok().and_then(|t| t.settled)
    }

    /// Record that a batch ran `way` in `took`.
    pub(crate) fn record(&self, way: Way, took: Duration) {
        let Ok(mut t) = self.state.lock() else {
            return;
        };
        if t.settled.is_some() {
            return;
        }
        match way {
            Way::Whole => t.whole.push(took),
            Way::Split => t.split.push(took),
        }
        if t.whole.len() >= TRIALS as usize && t.split.len() >= TRIALS as usize {
            let best = |v: &[Duration]| v.iter().min().copied().unwrap_or(Duration::MAX);
            let (whole, split) = (best(&t.whole), best(&t.split));
            let way = if split < whole { Way::Split } else { Way::Whole };
            tracing::debug!(?whole, ?split, ?way, "cpu plan: batch way measured");
            t.settled = Some(way);
        }
    }
}

/// Weights up to this size are taken to stay in the last-level cache (32 MiB on the machines we
/// measure on; server parts have as much or more), so re-reading them once per sample is cheap.
const CACHED_WEIGHT_BYTES: usize = 32 << 20;

/// Whether running the samples apart on `one` (the one-sample plan) pays: each sub-run reads every
/// weight again, so splitting wins only where one sample's activations are what overflow the caches.
/// When the weights are both larger than the last-level cache and larger than one sample's
/// activations (an MLP with large dense layers), every sub-run would stream them from memory again —
/// exactly the cost batching exists to amortise — and the batch runs whole.
pub(crate) fn split_pays(one: &ConcreteGraph) -> bool {
    let weights: usize = one.constants.values().map(|t| t.data.len()).sum();
    let activations: usize = one
        .values
        .iter()
        .enumerate()
        .filter(|(id, _)| !one.constants.contains_key(&ValueId(*id)))
        .map(|(_, v)| v.dtype.size().unwrap_or(8) * v.len())
        .sum();
    weights <= CACHED_WEIGHT_BYTES || weights <= activations
}

/// The batch size `n` when `g` can run as `n` independent one-sample runs: every input and output
/// has `n` (≥ 2) as its first dim and every node keeps the samples apart. `None` otherwise.
pub(crate) fn batch_axis(g: &ConcreteGraph) -> Option<usize> {
    batched_values(g).map(|(n, _)| n)
}

/// The sample axis of each value: `None` for a value shared by all samples.
type SampleAxes = Vec<Option<usize>>;

/// The batch size and, per value, which axis carries the samples. Inputs and outputs carry them on
/// axis 0; inside the plan, Transpose, Slice and Reshape may move them (an attention block's
/// `[B, L, 3, H, D] → [3, B, H, L, D]` before taking Q, K and V apart), every other op needs them on
/// axis 0.
fn batched_values(g: &ConcreteGraph) -> Option<(usize, SampleAxes)> {
    let first = g.inputs.first()?;
    let n = *g.values[first.0].shape.first()?;
    if n < 2 {
        return None;
    }
    let fixed_width = |dt: DataType| dt != DataType::String;
    let mut axes: SampleAxes = vec![None; g.values.len()];
    for id in &g.inputs {
        let v = &g.values[id.0];
        if v.shape.first() != Some(&n) || !fixed_width(v.dtype) || g.constants.contains_key(id) {
            return None;
        }
        axes[id.0] = Some(0);
    }
    for node in &g.nodes {
        let in_axes: Vec<usize> = node.inputs.iter().flatten().filter_map(|v| axes[v.0]).collect();
        if in_axes.is_empty() {
            // computed from constants only: the same for every sample
            continue;
        }
        let out_axis = match moved_axis(g, node, n, &axes) {
            Some(a) => Some(a),
            None if in_axes.iter().all(|&a| a == 0) && node_keeps_samples_apart(g, node, n, &axes) => Some(0),
            None => None,
        };
        let Some(out_axis) = out_axis else {
            tracing::debug!(node = %node.name, op = node.op.name(), "cpu plan: the node may mix samples; no split");
            return None;
        };
        if matches!(node.op, Op::Concat { .. }) {
            // the repeated constants it takes (see its rule) are per-sample from here on
            for v in node.inputs.iter().flatten() {
                axes[v.0] = Some(0);
            }
        }
        for o in node.outputs.iter().flatten() {
            let v = &g.values[o.0];
            if v.shape.get(out_axis) != Some(&n) || !fixed_width(v.dtype) {
                tracing::debug!(node = %node.name, shape = ?v.shape, "cpu plan: an output loses the sample axis; no split");
                return None;
            }
            axes[o.0] = Some(out_axis);
        }
    }
    g.outputs
        .iter()
        .all(|o| axes[o.0] == Some(0))
        .then_some((n, axes))
}

/// Where a data-movement node puts the sample axis of its input (any axis), when it keeps every
/// sample's values together: a Transpose moves it, a Slice that takes all of it keeps it, a Reshape
/// that keeps the same number of values before it (row-major, so sample i's values keep their
/// offsets) moves it to the output dim of size `n` there. `None` for other nodes.
fn moved_axis(g: &ConcreteGraph, node: &crate::ir::Node, n: usize, axes: &[Option<usize>]) -> Option<usize> {
    let a = axes[node.input(0)?.0]?;
    let in_shape = &g.values[node.input(0)?.0].shape;
    let out_shape = &g.values[node.output(0)?.0].shape;
    match &node.op {
        Op::Transpose { perm } => perm.iter().position(|&p| p == a),
        Op::Slice { starts, steps } => {
            (starts.get(a) == Some(&0) && steps.get(a) == Some(&1) && out_shape.get(a) == Some(&n))
                .then_some(a)
        }
        Op::Reshape { .. } => {
            let before: usize = in_shape[..a].iter().product();
            let mut prefix = 1usize;
            for (j, &d) in out_shape.iter().enumerate() {
                if prefix == before && d == n {
                    return Some(j);
                }
                prefix *= d;
            }
            None
        }
        _ => None,
    }
}

/// True when `t` (at least one slice along axis 0) is one slice repeated along axis 0.
fn repeated_along_axis0(t: &Tensor) -> bool {
    let n = t.shape.first().copied().unwrap_or(0);
    if n == 0 || !t.data.len().is_multiple_of(n) {
        return false;
    }
    let per = t.data.len() / n;
    per > 0 && t.data.chunks(per).all(|c| c == &t.data[..per])
}

/// `axis` counted from the front.
fn norm(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

/// The per-op rule: true when every sample of the node's outputs depends only on the same sample
/// of its batched inputs (and on values shared by all samples).
fn node_keeps_samples_apart(
    g: &ConcreteGraph,
    node: &crate::ir::Node,
    n: usize,
    axes: &[Option<usize>],
) -> bool {
    let batched = |v: ValueId| axes[v.0] == Some(0);
    let shape = |i: usize| node.input(i).map(|v| g.values[v.0].shape.as_slice());
    let is_b = |i: usize| node.input(i).is_some_and(batched);
    let out_rank = node.output(0).map_or(0, |o| g.values[o.0].shape.len());
    let x_rank = shape(0).map_or(0, <[usize]>::len);
    // input i broadcast against the output: carries the sample axis at the output's axis 0, or is
    // shared by all samples (size 1 at the output's axis 0, or a smaller rank)
    let broadcasts = |i: usize| match node.input(i) {
        None => true,
        Some(v) => {
            let s = &g.values[v.0].shape;
            if batched(v) {
                s.len() == out_rank && s.first() == Some(&n)
            } else {
                s.len() < out_rank || s.first() == Some(&1)
            }
        }
    };
    let shared = |i: usize| !is_b(i);
    let x_batched = is_b(0) && x_rank >= 1;
    // inputs from `from` on (fused epilogue operands) broadcast against the output
    let rest_broadcast = |from: usize| (from..node.inputs.len()).all(broadcasts);
    match &node.op {
        Op::Unary(_) | Op::Cast { .. } | Op::Identity | Op::DepthToSpace { .. } | Op::SpaceToDepth { .. } => {
            x_batched
        }
        Op::Binary(_) | Op::Where => rest_broadcast(0),
        Op::Conv { .. } => x_batched && shared(1) && shared(2) && rest_broadcast(3),
        Op::ConvTranspose { .. } => x_batched && shared(1) && shared(2) && node.inputs.len() <= 3,
        Op::Gemm { trans_a, .. } => {
            let c_ok = match shape(2) {
                None => true,
                Some(c) => shared(2) && (c.len() < 2 || c.first() == Some(&1)),
            };
            x_batched && !trans_a && shared(1) && c_ok && rest_broadcast(3)
        }
        Op::MatMul { trans_a, .. } => {
            let (ra, rb) = (x_rank, shape(1).map_or(0, <[usize]>::len));
            let operands = if out_rank == 2 {
                // rows of a are samples; b is shared
                ra == 2 && is_b(0) && !trans_a && shared(1)
            } else {
                out_rank >= 3 && ra >= 2 && rb >= 2 && broadcasts(0) && broadcasts(1)
            };
            operands && rest_broadcast(2)
        }
        Op::BatchNormalization { .. } | Op::InstanceNormalization { .. } => {
            x_batched && (1..node.inputs.len()).all(shared)
        }
        Op::LayerNormalization { axis, .. } => {
            x_batched && norm(*axis, x_rank).is_some_and(|a| a >= 1) && shared(1) && shared(2)
        }
        // MaxPool's optional indices are offsets into the whole batch
        Op::MaxPool { .. } => x_batched && node.output(1).is_none(),
        Op::AveragePool { .. } | Op::GlobalAveragePool | Op::GlobalMaxPool => x_batched,
        Op::Reduce { axes, .. } => {
            x_batched && !axes.is_empty() && axes.iter().all(|&a| norm(a, x_rank).is_some_and(|a| a >= 1))
        }
        Op::ArgReduce { axis, .. }
        | Op::Softmax { axis, .. }
        | Op::TopK { axis, .. }
        | Op::Split { axis, .. } => x_batched && norm(*axis, x_rank).is_some_and(|a| a >= 1),
        // data movement: `moved_axis` follows the sample axis through it
        Op::Reshape { .. } | Op::Transpose { .. } | Op::Slice { .. } => false,
        // a constant made of one slice repeated n times along axis 0 (a ViT's class token expanded
        // to the batch, folded at specialisation) is the same for every sample: sample i takes slice i
        Op::Concat { axis } => {
            norm(*axis, out_rank).is_some_and(|a| a >= 1)
                && node.inputs.iter().flatten().all(|&v| {
                    batched(v)
                        || g.constants.get(&v).is_some_and(|t| {
                            t.shape.first() == Some(&n)
                                && t.dtype != DataType::String
                                && repeated_along_axis0(t)
                        })
                })
        }
        Op::Gather { axis } => {
            let a = norm(*axis, x_rank);
            let idx_rank = shape(1).map_or(0, <[usize]>::len);
            // take along a later axis of batched data, or an embedding lookup of batched indices
            (x_batched && shared(1) && a.is_some_and(|a| a >= 1))
                || (shared(0) && is_b(1) && idx_rank >= 1 && a == Some(0))
        }
        Op::GatherElements { axis } => {
            x_batched
                && is_b(1)
                && shape(1).map(<[usize]>::len) == Some(x_rank)
                && norm(*axis, x_rank).is_some_and(|a| a >= 1)
        }
        Op::Expand => x_batched && x_rank == out_rank,
        Op::Tile { repeats } => x_batched && repeats.first() == Some(&1),
        Op::Pad { pads, .. } => x_batched && pads.first() == Some(&0) && pads.get(x_rank) == Some(&0),
        // scale 1 on axis 0 reads exactly the same sample with nearest or linear weights (cubic
        // weights of the neighbours are only zero up to rounding)
        Op::Resize {
            scales, coord, mode, ..
        } => {
            x_batched
                && scales.first() == Some(&1.0)
                && matches!(mode, ResizeMode::Nearest | ResizeMode::Linear)
                && !matches!(
                    coord,
                    CoordTransform::TfCropAndResize | CoordTransform::AlignCorners
                )
        }
        // recurrent ops keep the batch on axis 1; the rest never reach an executor
        // indexed ops address whole tensors (scatter and gather offsets, triangles over the last
        // dims); kept whole for simplicity
        Op::CumSum { .. }
        | Op::Trilu { .. }
        | Op::OneHot { .. }
        | Op::GatherNd { .. }
        | Op::ScatterNd { .. }
        | Op::NonZero
        | Op::Lstm { .. }
        | Op::Gru { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. }
        | Op::Shape { .. }
        | Op::Size
        | Op::ConstantOfShape { .. }
        | Op::Range
        | Op::CastLike
        | Op::Quant(_)
        | Op::If { .. } => false,
    }
}

/// True when `one` (specialised for one sample) is `full` (specialised for `n`) with the sample
/// axis of every batched value set to 1: same nodes, wiring, dtypes, other dims and constants.
pub(crate) fn same_but_batch(full: &ConcreteGraph, one: &ConcreteGraph) -> bool {
    let Some((_, axes)) = batched_values(full) else {
        return false;
    };
    if full.values.len() != one.values.len()
        || full.nodes.len() != one.nodes.len()
        || full.inputs != one.inputs
        || full.outputs != one.outputs
        || full.constants.len() != one.constants.len()
    {
        return false;
    }
    // identical constants, or (batched ones) the one-sample constant repeated along axis 0
    let constants_match = full.constants.iter().all(|(id, a)| {
        one.constants.get(id).is_some_and(|b| {
            a == b
                || (axes[id.0] == Some(0)
                    && a.dtype == b.dtype
                    && b.shape.first() == Some(&1)
                    && a.shape.get(1..) == b.shape.get(1..)
                    && a.data.chunks(b.data.len().max(1)).all(|c| c == &b.data[..]))
        })
    });
    if !constants_match {
        return false;
    }
    let values_match = full
        .values
        .iter()
        .zip(&one.values)
        .zip(&axes)
        .all(|((a, b), &axis)| {
            a.dtype == b.dtype
                && a.shape.len() == b.shape.len()
                && match axis {
                    Some(k) => {
                        b.shape[k] == 1
                            && a.shape
                                .iter()
                                .zip(&b.shape)
                                .enumerate()
                                .all(|(j, (x, y))| j == k || x == y)
                    }
                    None => a.shape == b.shape,
                }
        });
    values_match
        && full
            .nodes
            .iter()
            .zip(&one.nodes)
            .all(|(a, b)| a.op == b.op && a.inputs == b.inputs && a.outputs == b.outputs)
}

/// Sample `i` of a batched tensor (no copy).
pub(crate) fn sample(t: &Tensor, i: usize) -> Option<Tensor> {
    let n = *t.shape.first()?;
    let per = t.data.len() / n.max(1);
    if i >= n || per * n != t.data.len() {
        return None;
    }
    let mut shape = t.shape.clone();
    shape[0] = 1;
    Some(Tensor {
        dtype: t.dtype,
        shape,
        data: t.data.slice(i * per..(i + 1) * per),
    })
}

/// The one-sample tensors `parts` stacked along axis 0.
pub(crate) fn stack(parts: &[&Tensor]) -> Option<Tensor> {
    let first = parts.first()?;
    if parts
        .iter()
        .any(|p| p.dtype != first.dtype || p.shape != first.shape)
        || first.shape.first() != Some(&1)
    {
        return None;
    }
    let mut data = Vec::with_capacity(first.data.len() * parts.len());
    for p in parts {
        data.extend_from_slice(&p.data);
    }
    let mut shape = first.shape.clone();
    shape[0] = parts.len();
    Some(Tensor {
        dtype: first.dtype,
        shape,
        data: data.into(),
    })
}

#[cfg(test)]
mod tests;

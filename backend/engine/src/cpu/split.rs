//! Batch splitting: a plan in which every node treats the samples along axis 0 of the inputs
//! independently may run as one sub-run per sample, spread over the pool's threads, so that each
//! worker's activations stay in its caches (a batch-16 MobileNet's layers do not fit in L2; one
//! sample's do), or one sub-run after another, each on every thread, as single requests would run.
//! [`Choice`] measures which is fastest. The outputs are the per-sample outputs concatenated along
//! axis 0.
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

use crate::ir::{ConcreteGraph, CoordTransform, Op, QuantOp, ResizeMode, ValueId};
use crate::tensor::{DataType, Tensor};

/// Runs of each way timed before a plan settles on the fastest one.
const TRIALS: usize = 2;

/// Batches a plan that can run split takes to settle on its way: [`TRIALS`] of each [`Way`]. Benchmarks
/// run this many before they time anything.
pub const SETTLING_RUNS: usize = TRIALS * Way::ALL.len();

/// How a batch that can run split is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// one execution of the full-batch plan
    Whole,
    /// one execution of the one-sample plan per sample, the samples in parallel
    Split,
    /// one execution of the one-sample plan per sample, one after the other, each on every thread:
    /// exactly what the samples cost as single requests, so a batch is never slower per sample
    Serial,
}

impl Way {
    /// Every way, in the order trials take them.
    pub(crate) const ALL: [Way; 3] = [Way::Whole, Way::Split, Way::Serial];
    /// The ways for a plan whose samples should not run in parallel apart ([`split_pays`]).
    pub(crate) const NOT_SPLIT: [Way; 2] = [Way::Whole, Way::Serial];

    fn index(self) -> usize {
        match self {
            Way::Whole => 0,
            Way::Split => 1,
            Way::Serial => 2,
        }
    }
}

/// The choice between the candidate [`Way`]s for one plan, measured on its own first batches
/// (real requests, so the trials cost nothing extra): they take turns until each has run
/// [`TRIALS`] times, then the fastest best time wins for good. Which is fastest depends on the
/// model and the machine (a transformer's batch-8 products beat eight single-threaded ones on two
/// cores; a CNN's cache-sized samples win apart; a sample on both threads can beat both), and
/// guessing it wrong made batching slower per sample than single requests. With [`Way::Serial`]
/// among the candidates, a batch costs at most what its samples cost as single requests.
#[derive(Debug)]
pub(crate) struct Choice {
    /// The ways tried, in turn.
    ways: &'static [Way],
    state: Mutex<Trials>,
}

#[derive(Debug, Default)]
struct Trials {
    /// Times of each way, by [`Way::index`].
    times: [Vec<Duration>; 3],
    settled: Option<Way>,
}

impl Choice {
    /// A choice among `ways` (the first on a tie), none tried yet.
    pub(crate) fn new(ways: &'static [Way]) -> Choice {
        Choice {
            ways,
            state: Mutex::default(),
        }
    }

    /// The way to run the next batch.
    pub(crate) fn next(&self) -> Way {
        let Ok(t) = self.state.lock() else {
            return Way::Whole;
        };
        if let Some(way) = t.settled {
            return way;
        }
        // the first way with the fewest trials
        self.ways
            .iter()
            .copied()
            .min_by_key(|w| t.times[w.index()].len())
            .unwrap_or(Way::Whole)
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
        t.times[way.index()].push(took);
        if self.ways.iter().any(|w| t.times[w.index()].len() < TRIALS) {
            return;
        }
        // every candidate has times here; a way not tried has none
        let best = |w: Way| t.times[w.index()].iter().min().copied();
        // the earlier way on a tie: one execution over several, parallel over serial
        let fastest = self
            .ways
            .iter()
            .copied()
            .reduce(|a, b| if best(b) < best(a) { b } else { a })
            .unwrap_or(Way::Whole);
        tracing::debug!(
            whole = ?best(Way::Whole),
            split = ?best(Way::Split),
            serial = ?best(Way::Serial),
            way = ?fastest,
            "cpu plan: batch way measured"
        );
        t.settled = Some(fastest);
    }
}

/// Weights up to this size are taken to stay in the last-level cache (32 MiB on the machines we
/// measure on; server parts have as much or more), so re-reading them once per sample is cheap.
const CACHED_WEIGHT_BYTES: usize = 32 << 20;

/// Whether running the samples apart on `one` (the one-sample plan) in parallel, one per thread,
/// may pay: each sub-run reads every weight again, so splitting wins only where one sample's
/// activations are what overflow the caches. When the weights are both larger than the last-level
/// cache and larger than one sample's activations (an MLP with large dense layers, BERT-base), the
/// threads' sub-runs would stream them from memory side by side, and only [`Way::NOT_SPLIT`] are
/// tried: whole, or one sample at a time on every thread as single requests run.
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

/// Where a value carries the samples: along `axis`, whose size is `outer × n × inner`, sample `s`
/// holding the indices `o·n·inner + s·inner + j` of it. Inputs and outputs carry them plainly on
/// axis 0 (`n` long, `inner` 1); a Reshape may merge the sample axis with its neighbours (a
/// torchvision attention block's `[L, B, E] → [L, B·H, D]` and `[L, B, H, D] → [L·B, E]`), which
/// keeps every sample's values apart as long as the ops reading the merged axis treat its indices
/// independently (a batched product over `B·H`, a Gemm over the rows `L·B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    axis: usize,
    inner: usize,
}

impl Sample {
    /// The samples plainly on axis 0.
    const FRONT: Sample = Sample { axis: 0, inner: 1 };

    /// The same inner layout on another axis.
    fn on(self, axis: usize) -> Sample {
        Sample { axis, ..self }
    }
}

/// The sample layout of each value: `None` for a value shared by all samples.
type Samples = Vec<Option<Sample>>;

/// The batch size and, per value, where it carries the samples (see [`Sample`]): inputs and
/// outputs on axis 0; inside the plan, Transpose, Slice and Reshape may move them, and the per-op
/// rule of [`output_sample`] says where each other node's outputs carry them.
fn batched_values(g: &ConcreteGraph) -> Option<(usize, Samples)> {
    let first = g.inputs.first()?;
    let n = *g.values[first.0].shape.first()?;
    if n < 2 {
        return None;
    }
    let fixed_width = |dt: DataType| dt != DataType::String;
    let mut samples: Samples = vec![None; g.values.len()];
    for id in &g.inputs {
        let v = &g.values[id.0];
        if v.shape.first() != Some(&n) || !fixed_width(v.dtype) || g.constants.contains_key(id) {
            return None;
        }
        samples[id.0] = Some(Sample::FRONT);
    }
    for node in &g.nodes {
        if node.inputs.iter().flatten().all(|v| samples[v.0].is_none()) {
            // computed from constants only: the same for every sample
            continue;
        }
        // A constant made of one slice repeated n times along axis 0 (a ViT's class token expanded
        // to the batch, BERT's token types expanded to it, folded at specialisation) is the same for
        // every sample: sample i takes slice i, and the one-sample plan holds the slice.
        let out_rank = node.output(0).map_or(0, |o| g.values[o.0].shape.len());
        for v in node.inputs.iter().flatten() {
            if samples[v.0].is_none()
                && g.constants.get(v).is_some_and(|t| {
                    t.shape.first() == Some(&n)
                        && t.shape.len() == out_rank
                        && t.dtype != DataType::String
                        && repeated_along_axis0(t)
                })
            {
                samples[v.0] = Some(Sample::FRONT);
            }
        }
        let Some(out) = output_sample(g, node, n, &samples) else {
            tracing::debug!(node = %node.name, op = node.op.name(), "cpu plan: the node may mix samples; no split");
            return None;
        };
        for o in node.outputs.iter().flatten() {
            let v = &g.values[o.0];
            let holds = v
                .shape
                .get(out.axis)
                .is_some_and(|&d| d.is_multiple_of(n * out.inner));
            if !holds || !fixed_width(v.dtype) {
                tracing::debug!(node = %node.name, shape = ?v.shape, "cpu plan: an output loses the sample axis; no split");
                return None;
            }
            samples[o.0] = Some(out);
        }
    }
    g.outputs
        .iter()
        .all(|o| samples[o.0] == Some(Sample::FRONT) && g.values[o.0].shape.first() == Some(&n))
        .then_some((n, samples))
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

/// Where a Reshape puts samples laid out as `s` in `from`: row-major, the sample is one digit
/// (radix `n`) of the flat index, with the place value `s.inner × from[s.axis + 1..]`, which a
/// Reshape keeps. It lands in the output axis whose index range holds that whole digit.
fn reshaped(s: Sample, n: usize, from: &[usize], to: &[usize]) -> Option<Sample> {
    if from.contains(&0) || to.contains(&0) {
        return None;
    }
    let place = s.inner * from.get(s.axis + 1..)?.iter().product::<usize>();
    let mut after = 1usize;
    for (j, &d) in to.iter().enumerate().rev() {
        if place.is_multiple_of(after) {
            let inner = place / after;
            if d.is_multiple_of(inner * n) {
                return Some(Sample { axis: j, inner });
            }
        }
        after *= d;
        if after > place {
            return None;
        }
    }
    None
}

/// The per-op rule: where the node's outputs carry the samples, when every sample of them depends
/// only on the same sample of its batched inputs (and on values shared by all samples); `None`
/// when the node may mix samples or has no rule.
fn output_sample(
    g: &ConcreteGraph,
    node: &crate::ir::Node,
    n: usize,
    samples: &[Option<Sample>],
) -> Option<Sample> {
    let sample = |i: usize| node.input(i).and_then(|v| samples[v.0]);
    let shape = |i: usize| node.input(i).map(|v| g.values[v.0].shape.as_slice());
    let rank = |i: usize| shape(i).map_or(0, <[usize]>::len);
    let shared = |i: usize| sample(i).is_none();
    let out_shape = node.output(0).map_or(&[][..], |o| g.values[o.0].shape.as_slice());
    let out_rank = out_shape.len();
    // input i, broadcast against the output, is consistent with samples laid out as `s` there:
    // it carries them the same way at the same rank, or it is shared and does not vary along the
    // sample axis (size 1 there, or a rank too small to reach it)
    let broadcasts = |i: usize, s: Sample| match node.input(i) {
        None => true,
        Some(v) => {
            let vs = &g.values[v.0].shape;
            match samples[v.0] {
                Some(t) => t == s && vs.len() == out_rank,
                None => {
                    let reach = out_rank.saturating_sub(vs.len());
                    s.axis < reach || vs.get(s.axis - reach) == Some(&1)
                }
            }
        }
    };
    // every input from `from` on (fused epilogue operands) broadcasts against samples at `s`
    let rest = |from: usize, s: Sample| (from..node.inputs.len()).all(|i| broadcasts(i, s));
    let x = sample(0);
    // image ops treat the rows of axis 0 apart, however they are laid out
    let front = x.filter(|s| s.axis == 0);
    match &node.op {
        Op::Unary(_) | Op::Cast { .. } | Op::Identity => x,
        Op::DepthToSpace { .. } | Op::SpaceToDepth { .. } => front,
        Op::Binary(_) | Op::Where | Op::Quant(QuantOp::QLinearBinary(_)) => {
            let s = (0..node.inputs.len()).find_map(sample)?;
            rest(0, s).then_some(s)
        }
        Op::Conv { .. } => front.filter(|&s| shared(1) && shared(2) && rest(3, s)),
        Op::ConvTranspose { .. } => front.filter(|_| shared(1) && shared(2) && node.inputs.len() <= 3),
        Op::Gemm { trans_a, .. } => {
            let c_ok = match shape(2) {
                None => true,
                Some(c) => shared(2) && (c.len() < 2 || c.first() == Some(&1)),
            };
            front.filter(|&s| !trans_a && shared(1) && c_ok && rest(3, s))
        }
        Op::MatMul { trans_a, .. } => {
            let (ra, rb) = (rank(0), rank(1));
            let s = if rb == 2 && shared(1) {
                // b is shared: samples on a batch axis of a or on its rows, never on the contracted axis
                let row = if *trans_a {
                    ra.checked_sub(1)?
                } else {
                    ra.checked_sub(2)?
                };
                x.filter(|s| out_rank == ra && (s.axis + 2 < ra || (s.axis == row && !trans_a)))?
            } else {
                // a batched product: samples on a batch axis, of both operands or of one with the
                // other shared
                let s = sample(0).or(sample(1))?;
                (ra >= 2 && rb >= 2 && s.axis + 2 < out_rank && broadcasts(0, s) && broadcasts(1, s))
                    .then_some(s)?
            };
            rest(2, s).then_some(s)
        }
        Op::BatchNormalization { .. } | Op::InstanceNormalization { .. } => {
            front.filter(|_| (1..node.inputs.len()).all(shared))
        }
        Op::LayerNormalization { axis, .. } => {
            x.filter(|s| norm(*axis, rank(0)).is_some_and(|a| a > s.axis) && shared(1) && shared(2))
        }
        // MaxPool's optional indices are offsets into the whole batch
        Op::MaxPool { .. } => front.filter(|_| node.output(1).is_none()),
        Op::AveragePool { .. } | Op::GlobalAveragePool | Op::GlobalMaxPool => front,
        // reduced axes after the sample axis leave it where it is, kept or not
        Op::Reduce { axes, .. } => x.filter(|s| {
            !axes.is_empty() && axes.iter().all(|&a| norm(a, rank(0)).is_some_and(|a| a > s.axis))
        }),
        Op::ArgReduce { axis, .. }
        | Op::Softmax { axis, .. }
        | Op::TopK { axis, .. }
        | Op::Split { axis, .. } => x.filter(|s| norm(*axis, rank(0)).is_some_and(|a| a > s.axis)),
        Op::Transpose { perm } => x.and_then(|s| perm.iter().position(|&p| p == s.axis).map(|a| s.on(a))),
        // every index of the sample axis, in order: the same layout
        Op::Slice { starts, steps } => x.filter(|s| {
            starts.get(s.axis) == Some(&0)
                && steps.get(s.axis) == Some(&1)
                && out_shape.get(s.axis) == shape(0).and_then(|i| i.get(s.axis))
        }),
        Op::Reshape { .. } => x.and_then(|s| reshaped(s, n, shape(0)?, out_shape)),
        Op::Concat { axis } => {
            let s = x?;
            (norm(*axis, out_rank).is_some_and(|a| a != s.axis)
                && (0..node.inputs.len()).all(|i| sample(i) == Some(s)))
            .then_some(s)
        }
        Op::Gather { axis } => {
            let a = norm(*axis, rank(0))?;
            let idx_rank = rank(1);
            match (sample(0), sample(1)) {
                // take along another axis of batched data: the index dims replace axis a
                (Some(s), None) if a < s.axis => Some(s.on(s.axis + idx_rank - 1)),
                (Some(s), None) if a > s.axis => Some(s),
                // an embedding lookup of batched indices: their dims come first
                (None, Some(s)) if a == 0 && idx_rank >= 1 => Some(s),
                _ => None,
            }
        }
        Op::GatherElements { axis } => x.filter(|s| {
            sample(1) == Some(*s) && rank(1) == rank(0) && norm(*axis, rank(0)).is_some_and(|a| a != s.axis)
        }),
        Op::Expand => {
            x.filter(|s| rank(0) == out_rank && shape(0).and_then(|i| i.get(s.axis)) == out_shape.get(s.axis))
        }
        Op::Tile { repeats } => x.filter(|s| repeats.get(s.axis) == Some(&1)),
        Op::Pad { pads, .. } => {
            x.filter(|s| pads.get(s.axis) == Some(&0) && pads.get(rank(0) + s.axis) == Some(&0))
        }
        // scale 1 on axis 0 reads exactly the same sample with nearest or linear weights (cubic
        // weights of the neighbours are only zero up to rounding)
        Op::Resize {
            scales, coord, mode, ..
        } => front.filter(|_| {
            scales.first() == Some(&1.0)
                && matches!(mode, ResizeMode::Nearest | ResizeMode::Linear)
                && !matches!(
                    coord,
                    CoordTransform::TfCropAndResize | CoordTransform::AlignCorners
                )
        }),
        // recurrent ops keep the batch on axis 1; the rest never reach an executor
        // indexed ops address whole tensors (scatter and gather offsets, triangles over the last
        // dims); kept whole for simplicity
        Op::CumSum { .. }
        | Op::Trilu { .. }
        | Op::OneHot { .. }
        | Op::GatherNd { .. }
        | Op::ScatterNd { .. }
        | Op::ScatterElements { .. }
        | Op::NonZero
        | Op::NonMaxSuppression { .. }
        | Op::RoiAlign { .. }
        | Op::GridSample { .. }
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
        | Op::If { .. }
        | Op::Loop { .. }
        | Op::Scan { .. } => None,
    }
}

/// True when `one` (specialised for one sample) is `full` (specialised for `n`) with the sample
/// axis of every batched value set to 1: same nodes, wiring, dtypes, other dims and constants.
pub(crate) fn same_but_batch(full: &ConcreteGraph, one: &ConcreteGraph) -> bool {
    let Some((n, samples)) = batched_values(full) else {
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
                || (samples[id.0] == Some(Sample::FRONT)
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
        .zip(&samples)
        .all(|((a, b), &sample)| {
            a.dtype == b.dtype
                && a.shape.len() == b.shape.len()
                && match sample {
                    Some(Sample { axis: k, .. }) => {
                        b.shape[k] * n == a.shape[k]
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

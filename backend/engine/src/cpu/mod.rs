//! The CPU executor: runs concrete graphs with our own kernels (AVX-512/AVX2 micro-kernels for
//! matrix products, the `gemm` crate elsewhere; rayon for parallelism). The per-operator glue that
//! calls these kernels lives with each operator in `crate::ops`.

mod arena;
mod awake;
pub(crate) mod buf;
pub(crate) mod conv;
mod depthwise;
pub(crate) mod elementwise;
pub(crate) mod epilogue;
mod fastmath;
mod gemm;
pub(crate) mod grid_sample;
pub(crate) mod indexed;
mod inline;
pub(crate) mod matmul;
pub(crate) mod mm;
pub(crate) mod movement;
pub(crate) mod norm;
pub(crate) mod num;
mod padded;
pub(crate) mod pool;
pub(crate) mod quant;
pub(crate) mod reduce;
pub(crate) mod rnn;
pub(crate) mod roi_align;
mod simd;
mod split;
pub(crate) mod suppress;
#[cfg(test)]
mod test_data;
mod transpose;
pub(crate) mod weights;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::ir::ConcreteGraph;
use crate::model::Model;
use crate::ops::run_cpu;
use crate::plan_cache::{PlanCache, plan_key};
use crate::tensor::{DataType, Tensor};

pub(crate) use buf::Buf;
use buf::In;
pub use split::SETTLING_RUNS;
use weights::{Packing, Prepared, Weights};

/// Where one run of a plan spent its time, node by node ([`CpuExecutor::profile`]).
#[derive(Debug, Clone)]
pub struct Profile {
    /// The batch size when the plan runs its samples apart ([`split`]): the nodes are then those of the
    /// one-sample plan, timed on the first sample alone.
    pub split_into: Option<usize>,
    /// The plan's nodes in execution order.
    pub nodes: Vec<NodeTiming>,
}

/// One node of a plan and the time it took.
#[derive(Debug, Clone)]
pub struct NodeTiming {
    /// The node's name (the ONNX node it came from; fused nodes keep their first node's name).
    pub name: String,
    /// The IR operator (`Conv`, `MatMul`, ...).
    pub op: &'static str,
    /// The name of the node's first output (a fused node's: its last node's output).
    pub output_name: String,
    /// The shape of the node's first output.
    pub output_shape: Vec<usize>,
    /// Wall time of the node's kernel (zero for a Reshape that moves its input's buffer).
    pub time: Duration,
}

/// A specialised plan. Its constants (converted buffers, weights packed for the matrix products)
/// are borrowed from the executor's [`Weights`], shared with its plans for other batch sizes.
struct CpuPlan {
    graph: ConcreteGraph,
    consts: Vec<Option<Arc<Buf>>>,
    last_use: Vec<Option<usize>>,
    prepared: Vec<Option<Arc<Prepared>>>,
    /// The one-sample plan when the batch can also run as one-sample runs ([`split`]).
    split: Option<SplitPlan>,
    /// Runs on the caller's thread rather than the pool ([`inline`]).
    on_caller: bool,
}

impl CpuPlan {
    fn new(graph: ConcreteGraph, weights: &Weights) -> Result<CpuPlan> {
        let mut consts = vec![None; graph.values.len()];
        for (id, t) in &graph.constants {
            consts[id.0] = Some(weights.buf(t)?);
        }
        let last_use = graph.last_uses();
        let prepared = graph
            .nodes
            .iter()
            .map(|node| prepare(&graph, &consts, weights, node))
            .collect::<Result<_>>()?;
        Ok(CpuPlan {
            on_caller: inline::runs_on_caller(&graph),
            graph,
            consts,
            last_use,
            prepared,
            split: None,
        })
    }
}

/// A full-batch plan's alternative: its `n` samples run apart on `one`, when [`split::Choice`]
/// measures that faster.
struct SplitPlan {
    n: usize,
    one: Arc<CpuPlan>,
    choice: split::Choice,
}

/// Pack a node's constant weights for its kernel (once per executor, [`Weights::packed`]): a
/// Conv's filters, a MatMul's or Gemm's 2-D right-hand side, and the 8-bit ones of the integer
/// convolutions (unless depthwise) and products.
fn prepare(
    g: &ConcreteGraph,
    consts: &[Option<Arc<Buf>>],
    weights: &Weights,
    node: &crate::ir::Node,
) -> Result<Option<Arc<Prepared>>> {
    use crate::cpu::quant::qconv::{PackedFilters as QPackedFilters, filter_order};
    use crate::cpu::quant::qgemm::{Codes, PackedRight, QKernel};
    use crate::ir::{Op, QuantOp};
    let isa = simd::isa();
    let constant = |i: usize| -> Option<(&[f32], &[usize], &Tensor)> {
        let v = node.input(i)?;
        match (consts[v.0].as_deref(), g.constants.get(&v)) {
            (Some(Buf::F32(d)), Some(t)) => Some((d.as_slice(), g.values[v.0].shape.as_slice(), t)),
            _ => None,
        }
    };
    let input_shape = |i: usize| node.input(i).map(|v| g.values[v.0].shape.as_slice());
    // a constant of 8-bit codes, for the integer products
    let constant_codes = |i: usize| -> Option<(Codes<'_>, &[usize], &Tensor)> {
        let v = node.input(i)?;
        let codes = match consts[v.0].as_deref()? {
            Buf::U8(d) => Codes::u8(d),
            Buf::I8(d) => Codes::i8(d),
            _ => return None,
        };
        Some((codes, g.values[v.0].shape.as_slice(), g.constants.get(&v)?))
    };
    Ok(match &node.op {
        Op::Conv { group, .. } => {
            let (Some((w, sw, t)), Some(sx)) = (constant(1), input_shape(0)) else {
                return Ok(None);
            };
            let out = node.output(0).map(|v| g.values[v.0].shape.as_slice());
            let (Some(so), true) = (out, sx.len() == sw.len() && sx.len() > 2) else {
                return Ok(None);
            };
            let Some(geom) = conv::ConvGeom::of_conv(&node.op, sx, sw, so) else {
                return Ok(None);
            };
            let packing = Packing::ConvWeights {
                group: *group,
                layout: geom.filter_layout(isa),
                isa,
            };
            Some(weights.packed(t, packing, || {
                Ok(Prepared::ConvWeights(conv::pack_filters(w, &geom, isa)?))
            })?)
        }
        Op::Quant(QuantOp::ConvInteger(win) | QuantOp::QLinearConv(win)) => {
            // the filters are input 1 of ConvInteger, input 3 of QLinearConv
            let iw = if matches!(node.op, Op::Quant(QuantOp::ConvInteger(_))) {
                1
            } else {
                3
            };
            let out = node.output(0).map(|v| g.values[v.0].shape.as_slice());
            let (Some(kernel), Some((w, sw, t)), Some(sx), Some(so)) =
                (QKernel::current(), constant_codes(iw), input_shape(0), out)
            else {
                return Ok(None);
            };
            // depthwise ones run their own kernel on the codes as they are
            let depthwise =
                win.group > 1 && sx.len() == 4 && sx.get(1) == Some(&win.group) && sw[0] == win.group;
            if depthwise || sw.is_empty() || sw[0] % win.group.max(1) != 0 || sx.len() < 3 {
                return Ok(None);
            }
            let geom = crate::cpu::quant::igemm::ConvGeom::of(win, sx, sw, &so[2..]);
            // the filters' zero points (input 3 of ConvInteger, 5 of QLinearConv): all 0 or absent
            let izp = if iw == 1 { 3 } else { 5 };
            let symmetric = match node.input(izp) {
                None => true,
                Some(z) => g
                    .constants
                    .get(&z)
                    .is_some_and(|t| t.to_i64_vec().is_ok_and(|v| v.iter().all(|&x| x == 0))),
            };
            let order = filter_order(&geom, symmetric);
            let packing = Packing::QConvFilters {
                group: win.group,
                kernel,
                order,
            };
            Some(weights.packed(t, packing, || {
                Ok(Prepared::QConvFilters(QPackedFilters::for_conv(
                    kernel, w, &geom, symmetric,
                )))
            })?)
        }
        Op::Quant(QuantOp::MatMulInteger | QuantOp::QLinearMatMul) => {
            // B is input 1 of MatMulInteger, input 3 of QLinearMatMul
            let ib = if matches!(node.op, Op::Quant(QuantOp::MatMulInteger)) {
                1
            } else {
                3
            };
            let left_signed = node.input(0).map(|a| g.values[a.0].dtype) == Some(DataType::I8);
            match (QKernel::current(), constant_codes(ib)) {
                (Some(kernel), Some((b, sb, t))) if sb.len() == 2 => {
                    let packing = Packing::QRhs { left_signed, kernel };
                    Some(weights.packed(t, packing, || {
                        Ok(Prepared::QRhs(PackedRight::pack(
                            kernel,
                            b,
                            sb[0],
                            sb[1],
                            left_signed,
                        )))
                    })?)
                }
                _ => None,
            }
        }
        Op::MatMul { trans_b, .. } | Op::Gemm { trans_b, .. } => match constant(1) {
            Some((b, sb, t)) if sb.len() == 2 => {
                let packing = Packing::Rhs { trans: *trans_b, isa };
                Some(weights.packed(t, packing, || {
                    Ok(Prepared::Rhs(matmul::pack_rhs(b, sb, *trans_b, isa)?))
                })?)
            }
            _ => None,
        },
        _ => None,
    })
}

enum Slot {
    Shared(Arc<Buf>),
    Owned(Buf),
}

impl Slot {
    fn buf(&self) -> &Buf {
        match self {
            Slot::Shared(b) => b,
            Slot::Owned(b) => b,
        }
    }
}

struct Inner {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
    plans: PlanCache<CpuPlan>,
    /// constants converted and packed once, shared by all plans
    weights: Weights,
}

/// Executes a model's concrete plans on the CPU. Plans are cached per input shapes (and host-input
/// values); runs use a dedicated rayon pool.
pub struct CpuExecutor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CpuExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuExecutor")
            .field("threads", &self.inner.pool.current_num_threads())
            .finish()
    }
}

impl CpuExecutor {
    /// A CPU executor for `model` on `threads` workers (`None` = all cores), keeping `plan_cache_size`
    /// specialised plans.
    pub fn new(model: Arc<Model>, threads: Option<usize>, plan_cache_size: usize) -> Result<CpuExecutor> {
        if model.stages.is_some() {
            return Err(EngineError::invalid(
                "this model runs in stages (values it computes decide shapes: NonZero, NonMaxSuppression or \
                 an If on computed values); run it through a Session, or give the executor \
                 Model::first_stage()",
            ));
        }
        let mut b = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("infergate-cpu-{i}"));
        if let Some(n) = threads {
            b = b.num_threads(n.max(1));
        }
        let pool = b
            .build()
            .map_err(|e| EngineError::ResourceExhausted(format!("cannot start CPU worker threads: {e}")))?;
        Ok(CpuExecutor::on_pool(model, Arc::new(pool), plan_cache_size))
    }

    /// A CPU executor for `model` on an existing pool: the stages of a staged model share one.
    pub(crate) fn on_pool(
        model: Arc<Model>,
        pool: Arc<rayon::ThreadPool>,
        plan_cache_size: usize,
    ) -> CpuExecutor {
        CpuExecutor {
            inner: Arc::new(Inner {
                model,
                pool,
                plans: PlanCache::new(plan_cache_size),
                weights: Weights::default(),
            }),
        }
    }

    /// The executor's worker pool.
    pub(crate) fn pool(&self) -> Arc<rayon::ThreadPool> {
        Arc::clone(&self.inner.pool)
    }

    /// Run with inputs in signature order without blocking the caller's async runtime: on the
    /// executor's threads, or right here for a built plan that takes microseconds ([`inline`]).
    pub async fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let cached = self.inner.cached_plan(&inputs)?;
        if let Some(plan) = &cached
            && plan.on_caller
        {
            return self.inner.run_plan(plan, &inputs);
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        let inner = self.inner.clone();
        self.inner.pool.spawn(move || {
            let result = match cached {
                Some(plan) => inner.run_plan(&plan, &inputs),
                None => inner.run(inputs),
            };
            let _ = tx.send(result);
        });
        rx.await
            .map_err(|_| EngineError::internal("the CPU worker stopped before answering"))?
    }

    /// Run on the executor's threads, blocking the caller.
    pub fn run_blocking(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let inner = &self.inner;
        inner.pool.install(|| inner.run(inputs))
    }

    /// Runs `inputs` once on the executor's threads, timing every node of the plan: what
    /// `examples/profile.rs` prints beside onnxruntime's profiler.
    pub fn profile(&self, inputs: Vec<Tensor>) -> Result<Profile> {
        let inner = &self.inner;
        inner.pool.install(|| {
            let plan = inner.plan(&inputs)?;
            let (plan, inputs, split_into) = match &plan.split {
                Some(SplitPlan { n, one, choice })
                    if matches!(choice.settled(), Some(split::Way::Split | split::Way::Serial)) =>
                {
                    let first = inputs
                        .iter()
                        .map(|t| split::sample(t, 0))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| EngineError::internal("cannot take sample 0 of the inputs"))?;
                    (one.clone(), first, Some(*n))
                }
                _ => (plan.clone(), inputs, None),
            };
            let mut times = Vec::with_capacity(plan.graph.nodes.len());
            let awake = awake::keep_awake();
            execute(&plan, &inputs, Some(&mut times))?;
            drop(awake);
            let g = &plan.graph;
            let nodes = g
                .nodes
                .iter()
                .zip(times)
                .map(|(n, time)| NodeTiming {
                    name: n.name.clone(),
                    op: n.op.name(),
                    output_name: n
                        .output(0)
                        .map(|o| g.values[o.0].name.clone())
                        .unwrap_or_default(),
                    output_shape: n
                        .output(0)
                        .map(|o| g.values[o.0].shape.clone())
                        .unwrap_or_default(),
                    time,
                })
                .collect();
            Ok(Profile { split_into, nodes })
        })
    }

    /// The concrete plan used for these inputs (built and cached when needed).
    pub fn plan_for(&self, inputs: &[Tensor]) -> Result<ConcreteGraph> {
        Ok(self.inner.plan(inputs)?.graph.clone())
    }
}

impl Inner {
    /// The plan for `inputs` if it is built already (never builds one).
    fn cached_plan(&self, inputs: &[Tensor]) -> Result<Option<Arc<CpuPlan>>> {
        self.plans.get(&plan_key(&self.model, inputs))
    }

    fn plan(&self, inputs: &[Tensor]) -> Result<Arc<CpuPlan>> {
        let key = plan_key(&self.model, inputs);
        if let Some(p) = self.plans.get(&key)? {
            return Ok(p);
        }
        let plan = Arc::new(self.build(self.model.specialise_for(inputs)?, inputs)?);
        self.plans.insert(key, Arc::clone(&plan))?;
        Ok(plan)
    }

    /// The plan for `graph`, specialised for `inputs`; with the one-sample alternative when every
    /// node keeps the samples apart and the one-sample plan is this one with batch 1
    /// ([`split::batch_axis`], [`split::same_but_batch`]).
    fn build(&self, graph: ConcreteGraph, inputs: &[Tensor]) -> Result<CpuPlan> {
        // A plan small enough for the caller's thread is also too small to gain from splitting.
        if !inline::runs_on_caller(&graph)
            && let Some(n) = split::batch_axis(&graph)
            && self.model.host_inputs().is_empty()
            && let Some(first) = inputs
                .iter()
                .map(|t| split::sample(t, 0))
                .collect::<Option<Vec<_>>>()
            && let Ok(one) = self.model.specialise_for(&first)
            && split::same_but_batch(&graph, &one)
        {
            let ways: &'static [split::Way] = if split::split_pays(&one) {
                &split::Way::ALL
            } else {
                &split::Way::NOT_SPLIT
            };
            tracing::debug!(batch = n, ?ways, "cpu plan: samples can run apart");
            let one = Arc::new(CpuPlan::new(one, &self.weights)?);
            let mut plan = CpuPlan::new(graph, &self.weights)?;
            plan.split = Some(SplitPlan {
                n,
                one,
                choice: split::Choice::new(ways),
            });
            return Ok(plan);
        }
        CpuPlan::new(graph, &self.weights)
    }

    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let plan = self.plan(&inputs)?;
        self.run_plan(&plan, &inputs)
    }

    fn run_plan(&self, plan: &CpuPlan, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let _awake = awake::keep_awake();
        let Some(SplitPlan { n, one, choice }) = &plan.split else {
            return execute(plan, inputs, None);
        };
        let way = choice.next();
        let start = Instant::now();
        let out = match way {
            split::Way::Whole => execute(plan, inputs, None),
            split::Way::Split => run_split(one, inputs, *n),
            split::Way::Serial => run_serial(one, inputs, *n),
        }?;
        choice.record(way, start.elapsed());
        Ok(out)
    }
}

/// The `n` samples of `inputs` run apart on `one` (a one-sample plan), in parallel; the outputs
/// stacked again.
fn run_split(one: &CpuPlan, inputs: &[Tensor], n: usize) -> Result<Vec<Tensor>> {
    let per_sample: Vec<Vec<Tensor>> = (0..n)
        .into_par_iter()
        .with_max_len(1)
        .map(|i| execute(one, &sample_inputs(inputs, i)?, None))
        .collect::<Result<_>>()?;
    stack_outputs(one, &per_sample)
}

/// The `n` samples of `inputs` run on `one` (a one-sample plan) one after another, each with the
/// whole pool, as `n` single requests would; the outputs stacked again.
fn run_serial(one: &CpuPlan, inputs: &[Tensor], n: usize) -> Result<Vec<Tensor>> {
    let per_sample: Vec<Vec<Tensor>> = (0..n)
        .map(|i| execute(one, &sample_inputs(inputs, i)?, None))
        .collect::<Result<_>>()?;
    stack_outputs(one, &per_sample)
}

/// Sample `i` of each of `inputs`.
fn sample_inputs(inputs: &[Tensor], i: usize) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .map(|t| split::sample(t, i))
        .collect::<Option<_>>()
        .ok_or_else(|| EngineError::internal(format!("cannot take sample {i} of the inputs")))
}

/// The outputs of `one` for each sample, stacked along axis 0.
fn stack_outputs(one: &CpuPlan, per_sample: &[Vec<Tensor>]) -> Result<Vec<Tensor>> {
    (0..one.graph.outputs.len())
        .map(|j| {
            let parts: Vec<&Tensor> = per_sample.iter().filter_map(|o| o.get(j)).collect();
            split::stack(&parts).ok_or_else(|| {
                EngineError::internal(format!("the per-sample values of output {j} do not stack"))
            })
        })
        .collect()
}

/// The buffer of `node`'s first input, taken out of its slot, when this node is its last use, the
/// node reads it once and the run owns it (not a constant).
fn take_at_last_use(
    plan: &CpuPlan,
    slots: &mut [Option<Slot>],
    node: &crate::ir::Node,
    ni: usize,
) -> Option<Buf> {
    let src = node.input(0)?;
    if plan.last_use[src.0] != Some(ni)
        || !matches!(slots[src.0], Some(Slot::Owned(_)))
        || node.inputs.iter().flatten().filter(|v| **v == src).count() != 1
    {
        return None;
    }
    match slots[src.0].take() {
        Some(Slot::Owned(b)) => Some(b),
        _ => None,
    }
}

/// Run `plan` on `inputs` (in signature order); with `times`, push each node's wall time there.
fn execute(plan: &CpuPlan, inputs: &[Tensor], mut times: Option<&mut Vec<Duration>>) -> Result<Vec<Tensor>> {
    let g = &plan.graph;
    let mut slots: Vec<Option<Slot>> = (0..g.values.len()).map(|_| None).collect();
    for (i, c) in plan.consts.iter().enumerate() {
        if let Some(c) = c {
            slots[i] = Some(Slot::Shared(c.clone()));
        }
    }
    for (id, t) in g.inputs.iter().zip(inputs) {
        if slots[id.0].is_none() {
            slots[id.0] = Some(Slot::Owned(Buf::from_tensor(t)?));
        }
    }
    for (ni, node) in g.nodes.iter().enumerate() {
        let outs: Vec<(DataType, Vec<usize>)> = node
            .outputs
            .iter()
            .map(|o| match o {
                Some(o) => (g.values[o.0].dtype, g.values[o.0].shape.clone()),
                None => (DataType::F32, Vec::new()),
            })
            .collect();
        // Reshape/Identity of a value at its last use: move the buffer.
        if matches!(node.op, crate::ir::Op::Reshape { .. } | crate::ir::Op::Identity)
            && let Some(dst) = node.output(0)
            && let Some(buf) = take_at_last_use(plan, &mut slots, node, ni)
        {
            slots[dst.0] = Some(Slot::Owned(buf));
            if let Some(t) = times.as_deref_mut() {
                t.push(Duration::ZERO);
            }
            continue;
        }
        let started = times.is_some().then(Instant::now);
        // A float unary op (a standalone rounding, an activation) on a value at its last use: in
        // its buffer, no copy.
        if let crate::ir::Op::Unary(u) = node.op
            && !u.tests_floats()
            && let Some(dst) = node.output(0)
            && g.values[dst.0].dtype == DataType::F32
            && matches!(
                node.input(0).and_then(|v| slots[v.0].as_ref()),
                Some(Slot::Owned(Buf::F32(_)))
            )
            && let Some(Buf::F32(mut v)) = take_at_last_use(plan, &mut slots, node, ni)
        {
            elementwise::unary_in_place(u, &mut v);
            slots[dst.0] = Some(Slot::Owned(Buf::F32(v)));
            if let (Some(t), Some(s)) = (times.as_deref_mut(), started) {
                t.push(s.elapsed());
            }
            continue;
        }
        let result = {
            let ins: Vec<In<'_>> = node
                .inputs
                .iter()
                .map(|i| match i {
                    Some(v) => slots[v.0]
                        .as_ref()
                        .map(|s| (s.buf(), g.values[v.0].shape.as_slice())),
                    None => None,
                })
                .collect();
            if ins
                .iter()
                .zip(&node.inputs)
                .any(|(a, b)| a.is_none() && b.is_some())
            {
                return Err(EngineError::internal(format!(
                    "node '{}': an input was freed too early",
                    node.name
                )));
            }
            run_cpu(&node.op, &ins, &outs, plan.prepared[ni].as_deref())
                .map_err(|e| e.context(format!("node '{}' ({})", node.name, node.op.name())))?
        };
        if let (Some(t), Some(s)) = (times.as_deref_mut(), started) {
            t.push(s.elapsed());
        }
        for (o, b) in node.outputs.iter().zip(result) {
            if let Some(o) = o {
                let v = &g.values[o.0];
                if b.dtype() != v.dtype || b.len() != v.len() {
                    return Err(EngineError::internal(format!(
                        "node '{}' produced {} x{} for '{}' ({} {:?})",
                        node.name,
                        b.dtype(),
                        b.len(),
                        v.name,
                        v.dtype,
                        v.shape
                    )));
                }
                slots[o.0] = Some(Slot::Owned(b));
            }
        }
        for v in node.inputs.iter().flatten() {
            if plan.last_use[v.0] == Some(ni)
                && let Some(Slot::Owned(Buf::F32(b))) = slots[v.0].take()
            {
                arena::give(b);
            }
        }
    }
    let mut outputs = Vec::with_capacity(g.outputs.len());
    for (i, o) in g.outputs.iter().enumerate() {
        let v = &g.values[o.0];
        // an owned buffer goes into its tensor as it is, unless it is f32 (copied, so that the
        // buffer serves the next run through the arena) or the value is a later output too
        let hand_over = matches!(&slots[o.0], Some(Slot::Owned(b)) if !matches!(b, Buf::F32(_)))
            && !g.outputs[i + 1..].contains(o);
        if hand_over && let Some(Slot::Owned(b)) = slots[o.0].take() {
            outputs.push(b.into_tensor(v.shape.clone())?);
            continue;
        }
        let Some(slot) = slots[o.0].as_ref() else {
            return Err(EngineError::internal(format!(
                "output '{}' was not computed",
                v.name
            )));
        };
        outputs.push(slot.buf().to_tensor(v.shape.clone())?);
    }
    // the f32 outputs were copied into their tensors: their buffers serve the next run
    for o in &g.outputs {
        if let Some(Slot::Owned(Buf::F32(b))) = slots[o.0].take() {
            arena::give(b);
        }
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests;

//! Specialisation: from an [`crate::ir::Graph`] with symbolic dims to a [`ConcreteGraph`].
//!
//! Walks the nodes in order with concrete input shapes. Each node is *resolved* by its operator family (`crate::ops`):
//! its output dtypes/shapes are inferred and its parameter inputs (which must be known on the host)
//! become attributes. A node whose data inputs are all known on the host is evaluated right away with
//! its family's CPU code (constant folding, shape subgraphs); the others form the concrete graph.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{EngineError, Result};
use crate::ir::{BinaryOp, ConcreteGraph, ConcreteValue, Graph, Node, Op, ValueId};
use crate::model::{Dim, PlanInput, Signature, TensorSpec};
use crate::ops::{InVal, Resolved, eval_host, is_param_input, resolve};
use crate::tensor::{DataType, Tensor, checked_elements};

mod unroll;
#[cfg(test)]
mod unroll_tests;

/// Indices of graph inputs whose values feed parameter inputs (shapes, axes, …), directly or
/// through host-computable nodes. The nodes that cut the graph into stages ([`crate::stages`]) are
/// passed over: their parameters are computed by an earlier stage, not given by the request.
pub fn host_inputs(graph: &Graph) -> Vec<usize> {
    let cuts = crate::stages::cut_nodes(graph);
    let mut needed: HashSet<ValueId> = HashSet::new();
    fn walk(nodes: &[Node], skip: &HashSet<usize>, needed: &mut HashSet<ValueId>) {
        for (k, n) in nodes.iter().enumerate().rev() {
            if skip.contains(&k) {
                continue;
            }
            unroll::body_needs(n, needed);
            for b in n.op.subgraphs() {
                walk(&b.nodes, &HashSet::new(), needed);
            }
            unroll::body_needs(n, needed);
            for (i, v) in n.inputs.iter().enumerate() {
                if let Some(v) = v
                    && is_param_input(&n.op, i)
                {
                    needed.insert(*v);
                }
            }
            // a needed output makes the node's inputs needed (except through shape-only reads)
            if n.outputs.iter().flatten().any(|o| needed.contains(o))
                && !matches!(n.op, Op::Shape { .. } | Op::Size)
            {
                for v in n.inputs.iter().flatten() {
                    needed.insert(*v);
                }
            }
        }
    }
    // iterate to a fixpoint because of subgraphs (a loop's body feeds its next iteration)
    loop {
        let before = needed.len();
        walk(&graph.nodes, &cuts, &mut needed);
        if needed.len() == before {
            break;
        }
    }
    graph
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, v)| needed.contains(v))
        .map(|(i, _)| i)
        .collect()
}

/// The signature of a graph. Output dims are inferred by specialising with probe sizes for dynamic
/// input dims (a dim that changes with them is dynamic), falling back to the declared output types.
pub fn infer_signature(graph: &Graph, host_inputs: &[usize]) -> Result<Signature> {
    let inputs = input_specs(graph)?;
    let sig_in = Signature {
        inputs: inputs.clone(),
        outputs: Vec::new(),
    };
    let dynamic = inputs
        .iter()
        .any(|s| s.dims.iter().any(|d| matches!(d, Dim::Dynamic(_))));
    let probe = |size: usize| -> Result<ConcreteGraph> {
        let plan: Vec<PlanInput> = inputs
            .iter()
            .map(|s| PlanInput {
                shape: s
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => *n,
                        Dim::Dynamic(_) => size,
                    })
                    .collect(),
                value: None,
            })
            .collect();
        specialise(graph, &sig_in, &[], &plan)
    };
    let (p1, p2) = if host_inputs.is_empty() {
        if dynamic {
            (probe(1).ok(), probe(2).ok())
        } else {
            // Fully static: the probe is the real plan, so its errors are the model's errors.
            let p = probe(1)?;
            (Some(p.clone()), Some(p))
        }
    } else {
        (None, None)
    };
    let mut outputs = Vec::new();
    for (k, &id) in graph.outputs.iter().enumerate() {
        let v = &graph.values[id.0];
        let declared_dims = v.shape.clone();
        let (dtype, dims) = match (&p1, &p2) {
            (Some(a), Some(b)) => {
                let va = a.value(a.outputs[k]);
                let vb = b.value(b.outputs[k]);
                let dims = if va.shape.len() == vb.shape.len() {
                    va.shape
                        .iter()
                        .zip(&vb.shape)
                        .enumerate()
                        .map(|(i, (x, y))| {
                            if x == y {
                                Dim::Fixed(*x)
                            } else {
                                match declared_dims.as_ref().and_then(|d| d.get(i)) {
                                    Some(Dim::Dynamic(name)) => Dim::Dynamic(name.clone()),
                                    _ => Dim::Dynamic(None),
                                }
                            }
                        })
                        .collect()
                } else {
                    declared_dims.clone().unwrap_or_default()
                };
                (va.dtype, dims)
            }
            _ => {
                let dtype = v.dtype.ok_or_else(|| {
                    EngineError::invalid(format!("graph output '{}' has no declared element type", v.name))
                })?;
                (dtype, declared_dims.clone().unwrap_or_default())
            }
        };
        outputs.push(TensorSpec {
            name: v.name.clone(),
            dtype,
            dims,
        });
    }
    Ok(Signature { inputs, outputs })
}

/// The graph's inputs as declared.
pub(crate) fn input_specs(graph: &Graph) -> Result<Vec<TensorSpec>> {
    graph
        .inputs
        .iter()
        .map(|&id| {
            let v = &graph.values[id.0];
            let dtype = v.dtype.ok_or_else(|| {
                EngineError::invalid(format!("graph input '{}' has no element type", v.name))
            })?;
            Ok(TensorSpec {
                name: v.name.clone(),
                dtype,
                dims: v.shape.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// State of one specialisation run.
struct Spec<'g> {
    graph: &'g Graph,
    /// dtype and shape of every value seen so far
    info: HashMap<ValueId, (DataType, Vec<usize>)>,
    /// values known on the host
    host: HashMap<ValueId, Tensor>,
    /// If outputs and removed identities: value → the value it stands for
    alias: HashMap<ValueId, ValueId>,
    /// new values created during specialisation (ids after the graph's)
    extra: Vec<ConcreteValue>,
    nodes: Vec<Node>,
    /// Shape probing of a staged graph: nodes that cut it into stages, and the nodes after them, are
    /// passed over (their values get no shape) instead of failing the run.
    partial: bool,
}

impl Spec<'_> {
    fn map(&self, mut id: ValueId) -> ValueId {
        while let Some(&a) = self.alias.get(&id) {
            id = a;
        }
        id
    }

    fn name(&self, id: ValueId) -> String {
        if id.0 < self.graph.values.len() {
            self.graph.values[id.0].name.clone()
        } else {
            self.extra
                .get(id.0 - self.graph.values.len())
                .map(|v| v.name.clone())
                .unwrap_or_default()
        }
    }

    fn new_value(&mut self, name: String, dtype: DataType, shape: Vec<usize>) -> ValueId {
        let id = ValueId(self.graph.values.len() + self.extra.len());
        self.extra.push(ConcreteValue {
            name,
            dtype,
            shape: shape.clone(),
        });
        self.info.insert(id, (dtype, shape));
        id
    }

    fn run_nodes(&mut self, nodes: &[Node]) -> Result<()> {
        for n in nodes {
            if self.partial && !self.has_input_shapes(n) {
                continue;
            }
            match self.run_node(n) {
                Err(_) if self.partial && crate::stages::may_cut(&n.op) => continue,
                r => r.map_err(|e| e.context(format!("node '{}' ({})", n.name, n.op.name())))?,
            }
        }
        Ok(())
    }

    /// True when every input of `n` has a shape (false after a node passed over by a partial run).
    fn has_input_shapes(&self, n: &Node) -> bool {
        n.inputs
            .iter()
            .flatten()
            .all(|v| self.info.contains_key(&self.map(*v)))
    }

    fn run_node(&mut self, n: &Node) -> Result<()> {
        let inputs: Vec<Option<ValueId>> = n.inputs.iter().map(|i| i.map(|v| self.map(v))).collect();
        if let Op::If {
            then_branch,
            else_branch,
        } = &n.op
        {
            let cond = inputs
                .first()
                .copied()
                .flatten()
                .ok_or_else(|| EngineError::invalid("If without cond"))?;
            let Some(t) = self.host.get(&cond) else {
                return Err(EngineError::unsupported(format!(
                    "If whose condition '{}' depends on request data inside another If's branch (a \
                     top-level If runs the model in stages; a nested one needs its condition known when \
                     the plan is built)",
                    self.name(cond)
                )));
            };
            let c = t
                .to_f64_vec()?
                .first()
                .copied()
                .ok_or_else(|| EngineError::invalid("If cond is empty"))?;
            let b = if c != 0.0 { then_branch } else { else_branch };
            self.run_nodes(&b.nodes)?;
            for (o, bo) in n.outputs.iter().zip(&b.outputs) {
                if let Some(o) = o {
                    let target = self.map(*bo);
                    self.alias.insert(*o, target);
                }
            }
            return Ok(());
        }
        if matches!(n.op, Op::Loop { .. } | Op::Scan { .. }) {
            return self.unroll(n, &inputs);
        }
        let mut inputs = inputs;
        self.promote_constants(n, &mut inputs)?;
        let mut ins: Vec<Option<InVal<'_>>> = Vec::with_capacity(inputs.len());
        for (i, v) in inputs.iter().enumerate() {
            ins.push(match v {
                None => None,
                Some(v) => {
                    let (dtype, shape) = self.info.get(v).ok_or_else(|| {
                        EngineError::internal(format!("input {i} '{}' has no shape", self.name(*v)))
                    })?;
                    Some(InVal {
                        dtype: *dtype,
                        shape,
                        host: self.host.get(v),
                    })
                }
            });
        }
        let resolved = resolve(&n.op, &ins, n.outputs.len())?;
        match resolved {
            Resolved::Host(values) => {
                drop(ins);
                for (o, t) in n.outputs.iter().zip(values) {
                    if let Some(o) = o {
                        self.info.insert(*o, (t.dtype, t.shape.clone()));
                        self.host.insert(*o, t);
                    }
                }
            }
            Resolved::Alias(i) => {
                drop(ins);
                let src = inputs
                    .get(i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| EngineError::internal("alias of a missing input"))?;
                if let Some(o) = n.output(0) {
                    self.alias.insert(o, src);
                }
            }
            Resolved::Op {
                op,
                inputs: keep,
                outputs,
            } => {
                for (_, shape) in &outputs {
                    checked_elements(shape).map_err(|e| e.context(format!("node '{}'", n.name)))?;
                }
                let all_host = keep
                    .iter()
                    .all(|k| k.is_none_or(|i| ins[i].as_ref().is_some_and(|v| v.host.is_some())));
                if all_host {
                    let host_ins: Vec<Option<&Tensor>> = keep
                        .iter()
                        .map(|k| k.and_then(|i| ins[i].as_ref().and_then(|v| v.host)))
                        .collect();
                    let wanted: Vec<bool> = n.outputs.iter().map(Option::is_some).collect();
                    let values = eval_host(&op, &host_ins, &outputs, &wanted)?;
                    drop(ins);
                    for ((o, t), (dt, shape)) in n.outputs.iter().zip(values).zip(outputs) {
                        if let (Some(o), Some(t)) = (o, t) {
                            self.info.insert(*o, (dt, shape));
                            self.host.insert(*o, t);
                        }
                    }
                } else {
                    drop(ins);
                    for (o, (dt, shape)) in n.outputs.iter().zip(&outputs) {
                        if let Some(o) = o {
                            self.info.insert(*o, (*dt, shape.clone()));
                        }
                    }
                    let node_inputs: Vec<Option<ValueId>> =
                        keep.iter().map(|k| k.and_then(|i| inputs[i])).collect();
                    self.nodes.push(Node {
                        name: n.name.clone(),
                        op,
                        inputs: node_inputs,
                        outputs: n.outputs.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// A host-known operand of an arithmetic op whose dtype differs from the other operand is cast to
    /// it (e.g. Mean's divisor); ONNX itself requires equal dtypes, so this only touches our own.
    fn promote_constants(&mut self, n: &Node, inputs: &mut [Option<ValueId>]) -> Result<()> {
        let Op::Binary(b) = &n.op else { return Ok(()) };
        if matches!(b, BinaryOp::Pow) || inputs.len() != 2 {
            return Ok(());
        }
        let (Some(a), Some(c)) = (inputs[0], inputs[1]) else {
            return Ok(());
        };
        let (Some(ta), Some(tc)) = (self.info.get(&a).map(|x| x.0), self.info.get(&c).map(|x| x.0)) else {
            return Ok(());
        };
        if ta == tc {
            return Ok(());
        }
        for (k, (v, want)) in [(c, ta), (a, tc)].into_iter().enumerate() {
            if let Some(t) = self.host.get(&v).cloned()
                && want != DataType::String
            {
                let cast = eval_host(
                    &Op::Cast { to: want },
                    &[Some(&t)],
                    &[(want, t.shape.clone())],
                    &[true],
                )?;
                if let Some(Some(ct)) = cast.into_iter().next() {
                    let nv = self.new_value(format!("{}#as_{}", self.name(v), want), want, t.shape.clone());
                    self.host.insert(nv, ct);
                    inputs[1 - k] = Some(nv);
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// Specialise `graph` to concrete inputs.
pub fn specialise(
    graph: &Graph,
    signature: &Signature,
    host_inputs: &[usize],
    inputs: &[PlanInput],
) -> Result<ConcreteGraph> {
    let sp = run_spec(graph, Some(signature), host_inputs, inputs, false)?;
    let outputs: Vec<ValueId> = graph.outputs.iter().map(|&o| sp.map(o)).collect();
    compact(sp, graph, outputs)
}

/// The sizes [`probe_shapes`] tries for every dynamic input dim, in order; it keeps the first two the model
/// accepts. The first two are large enough that a backbone's downsampling (stride 32 or 64) leaves spatial
/// dims above 1 in one of them: with tiny probes a [N, C, H, W] feature map shrinks to [N, C, 1, 1] and looks
/// like a squeeze-and-excitation scale, so a shape condition checked on them would hold only for the probes.
/// Multiples of 32 keep U-Net-style skip connections (upsampled features concatenated with earlier ones)
/// consistent. The later ones serve models whose dynamic dims only take a range: a text recogniser whose
/// height must pool down to 1 (PP-OCRv4's accepts heights up to 80) refuses 96 and above.
const PROBE_SIZES: [usize; 5] = [64, 96, 80, 128, 48];

/// Every value's shape at each of the two probe sizes ([`probe_shapes`]).
pub(crate) type ProbedShapes = [HashMap<ValueId, Vec<usize>>; 2];

/// Concrete shapes of every value for two probe sizes of the dynamic input dims (the first two of
/// [`PROBE_SIZES`] whose shape inference succeeds), or `None` when the graph has host inputs or fewer than two
/// probes succeed. Passes use it to check shape conditions.
pub(crate) fn probe_shapes(graph: &Graph) -> Option<ProbedShapes> {
    if !host_inputs(graph).is_empty() {
        return None;
    }
    let probe = |size: usize| -> Option<HashMap<ValueId, Vec<usize>>> {
        let plan: Vec<PlanInput> = graph
            .inputs
            .iter()
            .map(|id| {
                let dims = graph.values[id.0].shape.clone().unwrap_or_default();
                PlanInput {
                    shape: dims
                        .iter()
                        .map(|d| match d {
                            Dim::Fixed(n) => *n,
                            Dim::Dynamic(_) => size,
                        })
                        .collect(),
                    value: None,
                }
            })
            .collect();
        let sp = match run_spec(graph, None, &[], &plan, true) {
            Ok(sp) => sp,
            Err(e) => {
                tracing::debug!(size, error = %e, "probe shape inference refused this size");
                return None;
            }
        };
        let mut m: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (k, v) in &sp.info {
            m.insert(*k, v.1.clone());
        }
        for (k, _) in sp.alias.iter() {
            let t = sp.map(*k);
            if let Some(v) = sp.info.get(&t) {
                m.insert(*k, v.1.clone());
            }
        }
        Some(m)
    };
    let mut found = PROBE_SIZES.iter().filter_map(|&size| probe(size));
    Some([found.next()?, found.next()?])
}

/// Evaluates every node of `graph` on the host for these input values (in the graph's input
/// order) and returns its outputs: what runs between the stages of a staged model.
pub(crate) fn evaluate(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let all: Vec<usize> = (0..graph.inputs.len()).collect();
    let plan: Vec<PlanInput> = inputs
        .iter()
        .map(|t| PlanInput {
            shape: t.shape.clone(),
            value: Some(t.clone()),
        })
        .collect();
    let sp = run_spec(graph, None, &all, &plan, false)?;
    graph
        .outputs
        .iter()
        .map(|&o| {
            sp.host.get(&sp.map(o)).cloned().ok_or_else(|| {
                EngineError::internal(format!("'{}' was not computed on the host", sp.name(o)))
            })
        })
        .collect()
}

fn run_spec<'g>(
    graph: &'g Graph,
    signature: Option<&Signature>,
    host_inputs: &[usize],
    inputs: &[PlanInput],
    partial: bool,
) -> Result<Spec<'g>> {
    if inputs.len() != graph.inputs.len() {
        return Err(EngineError::invalid(format!(
            "the model has {} inputs, {} were given",
            graph.inputs.len(),
            inputs.len()
        )));
    }
    let mut sp = Spec {
        graph,
        info: HashMap::new(),
        host: HashMap::new(),
        alias: HashMap::new(),
        extra: Vec::new(),
        nodes: Vec::new(),
        partial,
    };
    for (id, t) in &graph.constants {
        sp.info.insert(*id, (t.dtype, t.shape.clone()));
        sp.host.insert(*id, t.clone());
    }
    for (i, (&id, p)) in graph.inputs.iter().zip(inputs).enumerate() {
        let v = &graph.values[id.0];
        let dtype = v
            .dtype
            .ok_or_else(|| EngineError::invalid(format!("input '{}' has no dtype", v.name)))?;
        if let Some(dims) = signature
            .and_then(|s| s.inputs.get(i))
            .map(|s| &s.dims)
            .or(v.shape.as_ref())
        {
            let ok = dims.len() == p.shape.len()
                && dims
                    .iter()
                    .zip(&p.shape)
                    .all(|(d, n)| !matches!(d, Dim::Fixed(f) if f != n));
            if !ok {
                let want: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                return Err(EngineError::invalid(format!(
                    "input '{}': expected shape [{}], got {:?}",
                    v.name,
                    want.join(","),
                    p.shape
                )));
            }
        }
        sp.info.insert(id, (dtype, p.shape.clone()));
        if host_inputs.contains(&i) {
            let t = p.value.clone().ok_or_else(|| {
                EngineError::invalid(format!(
                    "input '{}' decides shapes in this model; its value is needed to build the plan",
                    v.name
                ))
            })?;
            if t.shape != p.shape || t.dtype != dtype {
                return Err(EngineError::invalid(format!(
                    "input '{}': value has {} {:?}, expected {} {:?}",
                    v.name, t.dtype, t.shape, dtype, p.shape
                )));
            }
            sp.host.insert(id, t);
        }
    }
    sp.run_nodes(&graph.nodes)?;
    Ok(sp)
}

/// Renumber the used values densely and collect constants.
fn compact(sp: Spec<'_>, graph: &Graph, outputs: Vec<ValueId>) -> Result<ConcreteGraph> {
    let mut remap: HashMap<ValueId, ValueId> = HashMap::new();
    let mut values: Vec<ConcreteValue> = Vec::new();
    let mut constants = BTreeMap::new();
    let mut take = |id: ValueId,
                    remap: &mut HashMap<ValueId, ValueId>,
                    values: &mut Vec<ConcreteValue>|
     -> Result<ValueId> {
        if let Some(&n) = remap.get(&id) {
            return Ok(n);
        }
        let (dtype, shape) =
            sp.info.get(&id).cloned().ok_or_else(|| {
                EngineError::internal(format!("value '{}' was never computed", sp.name(id)))
            })?;
        let nid = ValueId(values.len());
        values.push(ConcreteValue {
            name: sp.name(id),
            dtype,
            shape,
        });
        remap.insert(id, nid);
        if let Some(t) = sp.host.get(&id) {
            constants.insert(nid, t.clone());
        }
        Ok(nid)
    };
    let inputs: Vec<ValueId> = graph
        .inputs
        .iter()
        .map(|&i| take(i, &mut remap, &mut values))
        .collect::<Result<_>>()?;
    let mut nodes = Vec::with_capacity(sp.nodes.len());
    for n in &sp.nodes {
        let ins = n
            .inputs
            .iter()
            .map(|i| i.map(|v| take(v, &mut remap, &mut values)).transpose())
            .collect::<Result<_>>()?;
        let outs = n
            .outputs
            .iter()
            .map(|o| o.map(|v| take(v, &mut remap, &mut values)).transpose())
            .collect::<Result<_>>()?;
        nodes.push(Node {
            name: n.name.clone(),
            op: n.op.clone(),
            inputs: ins,
            outputs: outs,
        });
    }
    let outputs = outputs
        .into_iter()
        .map(|o| take(o, &mut remap, &mut values))
        .collect::<Result<_>>()?;
    Ok(ConcreteGraph {
        values,
        nodes,
        inputs,
        outputs,
        constants,
    })
}

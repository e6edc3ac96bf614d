//! Loop and Scan, unrolled while the plan is built. Every shape is fixed before a plan runs, so a
//! loop becomes ordinary nodes: each iteration runs the body's nodes with fresh value ids (its
//! states feed the next iteration) and the per-iteration scan outputs are stacked with Unsqueeze
//! and Concat. Scan iterates over its scan inputs' length (a shape); Loop needs its trip count and
//! its condition on the host, computed from values known when the plan is built.

use std::collections::{HashMap, HashSet};

use super::Spec;
use crate::error::{EngineError, Result};
use crate::ir::{Branch, ConcreteValue, Node, Op, ValueId};
use crate::tensor::{DataType, Tensor};

/// Most iterations one Loop or Scan is unrolled to.
pub(super) const MAX_ITERATIONS: usize = 4096;

/// Most body nodes one Loop or Scan is unrolled to (iterations × the body's nodes, counting a nested
/// subgraph's node as one).
pub(super) const MAX_UNROLLED_NODES: usize = 1 << 16;

/// The attributes of one Scan, without its body.
struct ScanAxes<'a> {
    input_axes: &'a [i64],
    input_reverse: &'a [bool],
    output_axes: &'a [i64],
    output_reverse: &'a [bool],
}

impl Spec<'_> {
    /// Unrolls a Loop or Scan node whose inputs (already mapped) are `inputs`.
    pub(super) fn unroll(&mut self, n: &Node, inputs: &[Option<ValueId>]) -> Result<()> {
        match &n.op {
            Op::Loop { body } => self.unroll_loop(n, body, inputs),
            Op::Scan {
                body,
                num_scan_inputs,
                input_axes,
                input_reverse,
                output_axes,
                output_reverse,
                batched,
            } => {
                let axes = ScanAxes {
                    input_axes,
                    input_reverse,
                    output_axes,
                    output_reverse,
                };
                if *batched {
                    self.unroll_batched_scan(n, body, *num_scan_inputs, &axes, inputs)
                } else {
                    let n_states = states_before(inputs.len(), *num_scan_inputs, body)?;
                    let (states, xs) = inputs.split_at(n_states);
                    let (states, xs) = (required(states, "state")?, required(xs, "scan")?);
                    let (finals, scans) = self.scan(&n.name, body, &axes, &states, &xs)?;
                    self.bind_outputs(n, finals.into_iter().chain(scans))
                }
            }
            _ => Err(EngineError::internal(format!("{} is not a loop", n.op.name()))),
        }
    }

    fn unroll_loop(&mut self, n: &Node, body: &Branch, inputs: &[Option<ValueId>]) -> Result<()> {
        let host_scalar = |sp: &Self, v: Option<ValueId>, what: &str| -> Result<Option<f64>> {
            let Some(v) = v else { return Ok(None) };
            let t = sp.host.get(&v).ok_or_else(|| {
                EngineError::unsupported(format!(
                    "Loop {what} '{}' depends on request data; a Loop is unrolled when the plan is built, \
                     so its trip count and condition must be known then (every shape is fixed before a plan runs)",
                    sp.name(v)
                ))
            })?;
            let x = t.to_f64_vec()?;
            x.first()
                .copied()
                .map(Some)
                .ok_or_else(|| EngineError::invalid(format!("Loop {what} '{}' is empty", sp.name(v))))
        };
        let trip = host_scalar(self, inputs.first().copied().flatten(), "trip count M")?;
        let cond0 = host_scalar(self, inputs.get(1).copied().flatten(), "condition")?;
        if trip.is_none() && cond0.is_none() {
            return Err(EngineError::unsupported(
                "Loop has neither a trip count nor a condition, so it never ends",
            ));
        }
        let mut carried = required(inputs.get(2..).unwrap_or_default(), "loop-carried")?;
        let n_carried = carried.len();
        if body.inputs.len() != 2 + n_carried || body.outputs.len() < 1 + n_carried {
            return Err(EngineError::invalid(format!(
                "Loop has {n_carried} loop-carried values, its body {} inputs and {} outputs",
                body.inputs.len(),
                body.outputs.len()
            )));
        }
        let n_scan = body.outputs.len() - 1 - n_carried;
        let trip = trip.map_or(f64::INFINITY, |m| m.max(0.0));
        let mut cond = cond0.is_none_or(|c| c != 0.0);
        let mut scans: Vec<Vec<ValueId>> = vec![Vec::new(); n_scan];
        let mut i = 0usize;
        while (i as f64) < trip && cond {
            self.check_budget(i, body)?;
            let it = self.host_value(
                &format!("{}#iter{i}", n.name),
                Tensor::from_vec(vec![], vec![i as i64])?,
            );
            let c = self.host_value(
                &format!("{}#cond{i}", n.name),
                Tensor::from_bools(vec![], &[true])?,
            );
            let args: Vec<ValueId> = [it, c].into_iter().chain(carried.iter().copied()).collect();
            let outs = self.run_body(body, &args, &format!("{}#{i}", n.name))?;
            let c_out = outs[0];
            let t = self.host.get(&c_out).ok_or_else(|| {
                EngineError::unsupported(format!(
                    "the Loop body's condition output '{}' depends on request data; a Loop is unrolled \
                     when the plan is built, so whether it goes on must be known then (every shape is \
                     fixed before a plan runs)",
                    self.name(body.outputs[0])
                ))
            })?;
            cond = t.to_f64_vec()?.first().is_some_and(|&c| c != 0.0);
            carried = outs[1..=n_carried].to_vec();
            for (k, s) in scans.iter_mut().enumerate() {
                s.push(outs[1 + n_carried + k]);
            }
            i += 1;
        }
        let empty = if i == 0 && n_scan > 0 {
            self.empty_scan_outputs(n, body, &carried)?
        } else {
            Vec::new()
        };
        let mut outs = carried;
        outs.extend(empty);
        for (k, parts) in scans.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            outs.push(self.stack(&format!("{}#scan{k}", n.name), parts, 0)?);
        }
        self.bind_outputs(n, outs)
    }

    /// The scan outputs of a Loop that ran no iterations: empty along the new axis 0, each slice shaped
    /// as the body would make it, which one iteration run and then discarded tells.
    fn empty_scan_outputs(&mut self, n: &Node, body: &Branch, carried: &[ValueId]) -> Result<Vec<ValueId>> {
        let mark = self.nodes.len();
        let it = self.host_value(&format!("{}#dry", n.name), Tensor::from_vec(vec![], vec![0i64])?);
        let c = self.host_value(
            &format!("{}#dry_cond", n.name),
            Tensor::from_bools(vec![], &[true])?,
        );
        let args: Vec<ValueId> = [it, c].into_iter().chain(carried.iter().copied()).collect();
        let outs = self
            .run_body(body, &args, &format!("{}#dry", n.name))
            .map_err(|e| {
                e.context(
                    "the Loop runs no iterations and its scan outputs' shapes come from the body, which fails \
                     on the initial values",
                )
            })?;
        // the trial iteration's nodes are not part of the plan
        self.nodes.truncate(mark);
        let mut empty = Vec::new();
        for (k, &v) in outs[1 + carried.len()..].iter().enumerate() {
            let (dtype, mut shape) = self
                .info
                .get(&v)
                .cloned()
                .ok_or_else(|| EngineError::internal(format!("scan output {k} was not computed")))?;
            shape.insert(0, 0);
            let t = Tensor::new(dtype, shape, bytes::Bytes::new())?;
            empty.push(self.host_value(&format!("{}#scan{k}", n.name), t));
        }
        Ok(empty)
    }

    /// Opset 8's Scan: every input and output has a batch axis 0, and the body runs per batch entry.
    fn unroll_batched_scan(
        &mut self,
        n: &Node,
        body: &Branch,
        num_scan_inputs: usize,
        axes: &ScanAxes<'_>,
        inputs: &[Option<ValueId>],
    ) -> Result<()> {
        let rest = inputs
            .get(1..)
            .ok_or_else(|| EngineError::invalid("Scan (opset 8) without inputs"))?;
        let n_states = states_before(rest.len(), num_scan_inputs, body)?;
        let (states, xs) = rest.split_at(n_states);
        let (states, xs) = (required(states, "state")?, required(xs, "scan")?);
        let x0 = xs[0];
        let shape = self.shape(x0)?;
        if shape.len() < 2 {
            return Err(EngineError::invalid(format!(
                "Scan (opset 8) input '{}' needs a batch and a sequence axis, has shape {shape:?}",
                self.name(x0)
            )));
        }
        let (batch, len) = (shape[0], shape[1]);
        if let Some(Some(lens)) = inputs.first() {
            let full = self
                .host
                .get(lens)
                .map(|t| t.to_i64_vec())
                .transpose()?
                .is_some_and(|l| l.iter().all(|&x| x == len as i64));
            if !full {
                return Err(EngineError::unsupported(
                    "Scan (opset 8) with sequence_lens shorter than the sequence or not known when the \
                     plan is built (only full-length sequences are supported; re-export with opset 9 or later)",
                ));
            }
        }
        let mut per_batch: Vec<Vec<ValueId>> = Vec::with_capacity(batch);
        for b in 0..batch {
            let tag = format!("{}#batch{b}", n.name);
            let entry = |sp: &mut Self, v: ValueId| sp.gather(&tag, v, 0, b);
            let states_b = states
                .iter()
                .map(|&v| entry(self, v))
                .collect::<Result<Vec<_>>>()?;
            let xs_b = xs.iter().map(|&v| entry(self, v)).collect::<Result<Vec<_>>>()?;
            let (finals, scans) = self.scan(&tag, body, axes, &states_b, &xs_b)?;
            per_batch.push(finals.into_iter().chain(scans).collect());
        }
        let mut outs = Vec::with_capacity(n.outputs.len());
        for j in 0..n.outputs.len() {
            let parts: Vec<ValueId> = per_batch.iter().map(|o| o[j]).collect();
            if parts.is_empty() {
                return Err(EngineError::unsupported(
                    "Scan (opset 8) with an empty batch (the body's output shapes are unknown)",
                ));
            }
            outs.push(self.stack(&format!("{}#out{j}", n.name), &parts, 0)?);
        }
        self.bind_outputs(n, outs)
    }

    /// One Scan over `xs` from `states`: the final states and the stacked scan outputs.
    fn scan(
        &mut self,
        name: &str,
        body: &Branch,
        axes: &ScanAxes<'_>,
        states: &[ValueId],
        xs: &[ValueId],
    ) -> Result<(Vec<ValueId>, Vec<ValueId>)> {
        let mut len = None;
        let mut in_axes = Vec::with_capacity(xs.len());
        for (&x, &axis) in xs.iter().zip(axes.input_axes) {
            let shape = self.shape(x)?;
            let a = norm_axis(axis, shape.len()).ok_or_else(|| {
                EngineError::invalid(format!(
                    "Scan input axis {axis} is out of range for '{}' of shape {shape:?}",
                    self.name(x)
                ))
            })?;
            match len {
                None => len = Some(shape[a]),
                Some(l) if l != shape[a] => {
                    return Err(EngineError::invalid(format!(
                        "Scan inputs have different lengths ({l} and {} for '{}')",
                        shape[a],
                        self.name(x)
                    )));
                }
                Some(_) => {}
            }
            in_axes.push(a);
        }
        let len = len.unwrap_or(0);
        if len == 0 {
            return Err(EngineError::unsupported(
                "Scan over an empty sequence (the body's output shapes are unknown)",
            ));
        }
        // the length is known: refuse before unrolling anything
        self.check_budget(len - 1, body)?;
        let n_states = states.len();
        let mut states = states.to_vec();
        let mut scans: Vec<Vec<ValueId>> = vec![Vec::new(); body.outputs.len() - n_states];
        for t in 0..len {
            let tag = format!("{name}#{t}");
            let mut args = states.clone();
            for ((&x, &a), &rev) in xs.iter().zip(&in_axes).zip(axes.input_reverse) {
                let i = if rev { len - 1 - t } else { t };
                args.push(self.gather(&tag, x, a, i)?);
            }
            let outs = self.run_body(body, &args, &tag)?;
            states = outs[..n_states].to_vec();
            for (k, s) in scans.iter_mut().enumerate() {
                s.push(outs[n_states + k]);
            }
        }
        let mut stacked = Vec::with_capacity(scans.len());
        for (k, mut parts) in scans.into_iter().enumerate() {
            if axes.output_reverse[k] {
                parts.reverse();
            }
            let rank = self.shape(parts[0])?.len();
            let axis = axes.output_axes[k];
            let a = norm_axis(axis, rank + 1).ok_or_else(|| {
                EngineError::invalid(format!(
                    "Scan output axis {axis} is out of range for rank {}",
                    rank + 1
                ))
            })?;
            stacked.push(self.stack(&format!("{name}#scan{k}"), &parts, a)?);
        }
        Ok((states, stacked))
    }

    /// Refuses iteration `i` when it goes past [`MAX_ITERATIONS`] or [`MAX_UNROLLED_NODES`].
    fn check_budget(&self, i: usize, body: &Branch) -> Result<()> {
        if i >= MAX_ITERATIONS {
            return Err(EngineError::unsupported(format!(
                "the loop runs more than {MAX_ITERATIONS} iterations, the most the engine unrolls when it \
                 builds a plan"
            )));
        }
        if (i + 1) * body.nodes.len() > MAX_UNROLLED_NODES {
            return Err(EngineError::unsupported(format!(
                "unrolling the loop would take more than {MAX_UNROLLED_NODES} nodes ({} body nodes per \
                 iteration, at iteration {i}), the most the engine unrolls when it builds a plan",
                body.nodes.len()
            )));
        }
        Ok(())
    }

    /// Runs one iteration of `body` with `args` bound to its inputs; returns its outputs.
    fn run_body(&mut self, body: &Branch, args: &[ValueId], tag: &str) -> Result<Vec<ValueId>> {
        let mut map: HashMap<ValueId, ValueId> =
            body.inputs.iter().copied().zip(args.iter().copied()).collect();
        let nodes = self.rename(&body.nodes, &mut map, tag);
        self.run_nodes(&nodes)?;
        Ok(body
            .outputs
            .iter()
            .map(|o| self.map(map.get(o).copied().unwrap_or(*o)))
            .collect())
    }

    /// A copy of `nodes` where every value they (and their subgraphs) define has a fresh id, so that
    /// each iteration has its own values; reads of enclosing values and constants keep their ids.
    fn rename(&mut self, nodes: &[Node], map: &mut HashMap<ValueId, ValueId>, tag: &str) -> Vec<Node> {
        let mut out = Vec::with_capacity(nodes.len());
        for n in nodes {
            let mut op = n.op.clone();
            for b in op.subgraphs_mut() {
                for i in &mut b.inputs {
                    let f = self.fresh(*i, tag);
                    map.insert(*i, f);
                    *i = f;
                }
                b.nodes = self.rename(&b.nodes, map, tag);
                for o in &mut b.outputs {
                    *o = map.get(o).copied().unwrap_or(*o);
                }
            }
            let inputs = n
                .inputs
                .iter()
                .map(|i| i.map(|v| map.get(&v).copied().unwrap_or(v)))
                .collect();
            let outputs = n
                .outputs
                .iter()
                .map(|o| {
                    o.map(|v| {
                        let f = self.fresh(v, tag);
                        map.insert(v, f);
                        f
                    })
                })
                .collect();
            out.push(Node {
                name: format!("{}#{tag}", n.name),
                op,
                inputs,
                outputs,
            });
        }
        out
    }

    /// A new value standing for `v` in one iteration; its dtype and shape are set when it is computed.
    fn fresh(&mut self, v: ValueId, tag: &str) -> ValueId {
        let name = format!("{}#{tag}", self.name(v));
        self.placeholder(name)
    }

    /// A new value whose dtype and shape are set when it is computed.
    fn placeholder(&mut self, name: String) -> ValueId {
        let id = ValueId(self.graph.values.len() + self.extra.len());
        // `compact` reads dtype and shape from `info`, which the node computing the value fills in
        self.extra.push(ConcreteValue {
            name,
            dtype: DataType::F32,
            shape: Vec::new(),
        });
        id
    }

    /// A new value known on the host.
    fn host_value(&mut self, name: &str, t: Tensor) -> ValueId {
        let id = self.new_value(name.to_string(), t.dtype, t.shape.clone());
        self.host.insert(id, t);
        id
    }

    /// Runs one helper node writing a new value; returns the value.
    fn emit(&mut self, name: String, op: Op, inputs: Vec<Option<ValueId>>) -> Result<ValueId> {
        let out = self.placeholder(name.clone());
        self.run_node(&Node {
            name,
            op,
            inputs,
            outputs: vec![Some(out)],
        })?;
        Ok(self.map(out))
    }

    /// Entry `i` of `x` along `axis` (the axis removed).
    fn gather(&mut self, tag: &str, x: ValueId, axis: usize, i: usize) -> Result<ValueId> {
        let idx = self.host_value(&format!("{tag}#index"), Tensor::from_vec(vec![], vec![i as i64])?);
        self.emit(
            format!("{}#{tag}#slice", self.name(x)),
            Op::Gather { axis: axis as i64 },
            vec![Some(x), Some(idx)],
        )
    }

    /// `parts` stacked along a new `axis`.
    fn stack(&mut self, name: &str, parts: &[ValueId], axis: usize) -> Result<ValueId> {
        let mut ins = Vec::with_capacity(parts.len());
        for (i, &p) in parts.iter().enumerate() {
            let u = self.emit(
                format!("{name}#unsqueeze{i}"),
                Op::Unsqueeze {
                    axes: Some(vec![axis as i64]),
                },
                vec![Some(p)],
            )?;
            ins.push(u);
        }
        match ins[..] {
            [one] => Ok(one),
            _ => self.emit(
                name.to_string(),
                Op::Concat { axis: axis as i64 },
                ins.into_iter().map(Some).collect(),
            ),
        }
    }

    /// Makes the node's outputs stand for `values`, in order.
    fn bind_outputs(&mut self, n: &Node, values: impl IntoIterator<Item = ValueId>) -> Result<()> {
        let values: Vec<ValueId> = values.into_iter().collect();
        if values.len() < n.outputs.len() {
            return Err(EngineError::invalid(format!(
                "{} yields {} values for {} outputs",
                n.op.name(),
                values.len(),
                n.outputs.len()
            )));
        }
        for (o, v) in n.outputs.iter().zip(values) {
            if let Some(o) = o {
                self.alias.insert(*o, v);
            }
        }
        Ok(())
    }

    fn shape(&self, v: ValueId) -> Result<Vec<usize>> {
        self.info
            .get(&v)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| EngineError::internal(format!("value '{}' has no shape", self.name(v))))
    }
}

/// For [`super::host_inputs`]: links a Loop's or Scan's values with its body's, so that parameter
/// inputs of body nodes (a Reshape's shape) make the values that feed them needed on the host, across
/// iterations. A Loop body's condition output is not a parameter: a condition computed from request
/// data would make the whole loop run on the host for each distinct request, so it is refused when
/// the plan is built instead.
pub(super) fn body_needs(n: &Node, needed: &mut HashSet<ValueId>) {
    let (body, lead, n_states, scan_ins) = match &n.op {
        Op::Loop { body } => (body, 2, n.inputs.len().saturating_sub(2), 0),
        Op::Scan {
            body,
            num_scan_inputs,
            batched,
            ..
        } => {
            let lead = usize::from(*batched);
            let states = n.inputs.len().saturating_sub(lead + num_scan_inputs);
            (body, lead, states, *num_scan_inputs)
        }
        _ => return,
    };
    // a Loop's body inputs and outputs start with the iteration number and the condition
    let (b_in, b_out) = if matches!(n.op, Op::Loop { .. }) {
        (2, 1)
    } else {
        (0, 0)
    };
    for j in 0..n_states {
        let node_out = n.output(j);
        let body_in = body.inputs.get(b_in + j).copied();
        let body_out = body.outputs.get(b_out + j).copied();
        let out_needed = node_out.is_some_and(|o| needed.contains(&o));
        let in_needed = body_in.is_some_and(|i| needed.contains(&i));
        if out_needed || in_needed {
            needed.extend(body_out);
        }
        if in_needed {
            needed.extend(n.input(lead + j));
        }
    }
    for j in 0..scan_ins {
        if body.inputs.get(n_states + j).is_some_and(|i| needed.contains(i)) {
            needed.extend(n.input(lead + n_states + j));
        }
    }
    for k in n_states..n.outputs.len() {
        if n.output(k).is_some_and(|o| needed.contains(&o)) {
            needed.extend(body.outputs.get(b_out + k).copied());
        }
    }
}

/// The values of a loop's inputs, all of which must be present.
fn required(inputs: &[Option<ValueId>], what: &str) -> Result<Vec<ValueId>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| EngineError::invalid(format!("{what} input {i} is missing"))))
        .collect()
}

/// How many of a Scan's `n_inputs` (after opset 8's `sequence_lens`) are states, checked against its body.
fn states_before(n_inputs: usize, num_scan_inputs: usize, body: &Branch) -> Result<usize> {
    n_inputs
        .checked_sub(num_scan_inputs)
        .filter(|&n| body.inputs.len() == n + num_scan_inputs && body.outputs.len() >= n)
        .ok_or_else(|| {
            EngineError::invalid(format!(
                "Scan has {n_inputs} inputs with {num_scan_inputs} scan inputs, its body {} inputs and {} outputs",
                body.inputs.len(),
                body.outputs.len()
            ))
        })
}

/// `axis` (negative counts from the end) as an index below `rank`.
fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank)
}

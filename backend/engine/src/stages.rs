//! Staged models: models whose shapes depend on values they compute.
//!
//! Plans fix every shape before they run. NonZero and NonMaxSuppression produce a shape decided by
//! their inputs' values, an If picks its branch by its condition's value, and a Loop unrolls as far
//! as its trip count and initial condition say. When those values are
//! computed from request data (a detector's boxes and scores, a condition on the input's contents),
//! no single plan can be built ahead, and specialising for the request's values would fold the
//! whole network on the host for every request. Such a model is cut into stages instead:
//! - the *first* stage computes everything that does not depend on the cut nodes (for a detector,
//!   the whole network) as an ordinary model, whose plans are cached by input shapes;
//! - *between* the stages, NonZero and NonMaxSuppression run on the host, their inputs now known;
//! - the *rest* is a model whose inputs are what crosses the cut. It is specialised for what is now
//!   known: the shapes of the host nodes' outputs, and the values of If conditions (the branch taken
//!   is inlined, as for a condition known at load). A cut further on makes stages of it in turn.
//!
//! Each stage's outputs come back to the host (on the wgpu executor, one read-back per cut).
//! Only top-level nodes cut a graph; a NonZero inside an If branch still needs values known when
//! the plan is built.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::ir::{Graph, Node, Op, ValueId, ValueInfo};
use crate::model::{Dim, Model, TensorSpec};
use crate::ops::{has_value_dependent_shapes, is_param_input};
use crate::tensor::Tensor;

/// How a node cuts a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// NonZero, NonMaxSuppression: runs on the host between the stages.
    OnHost,
    /// If, and Loop: the stage before computes the condition (a Loop's trip count and initial
    /// condition); the rest is specialised for its value (the branch inlined, the loop unrolled).
    Condition,
}

/// True when `op` cuts a graph into stages wherever its parameters are computed from request data.
pub(crate) fn may_cut(op: &Op) -> bool {
    matches!(op, Op::If { .. } | Op::Loop { .. }) || has_value_dependent_shapes(op)
}

/// Indices of the top-level nodes that cut `graph` into stages.
pub(crate) fn cut_nodes(graph: &Graph) -> HashSet<usize> {
    cuts(graph).into_keys().collect()
}

/// The cutting nodes: those of [`may_cut`] with a parameter computed from request data. A parameter
/// that *is* a graph input does not cut: that input becomes a host input, and plans are
/// specialised for its value.
fn cuts(graph: &Graph) -> HashMap<usize, Cut> {
    let run_time = run_time_values(graph);
    let computed = |v: ValueId| run_time.contains(&v) && !graph.inputs.contains(&v);
    let mut out = HashMap::new();
    for (k, n) in graph.nodes.iter().enumerate() {
        let cut = match &n.op {
            Op::If { .. } | Op::Loop { .. } => Cut::Condition,
            op if has_value_dependent_shapes(op) => Cut::OnHost,
            _ => continue,
        };
        let params_computed = n
            .inputs
            .iter()
            .enumerate()
            .any(|(i, v)| v.is_some_and(|v| is_param_input(&n.op, i) && computed(v)));
        if params_computed {
            out.insert(k, cut);
        }
    }
    out
}

/// The values known only when a request runs: the graph inputs and what is computed from them,
/// except through Shape and Size (which read shapes only). Conservative for If, Loop and Scan: their
/// outputs are run-time values when anything they or their subgraphs read is.
fn run_time_values(graph: &Graph) -> HashSet<ValueId> {
    let mut run_time: HashSet<ValueId> = graph.inputs.iter().copied().collect();
    for n in &graph.nodes {
        if matches!(n.op, Op::Shape { .. } | Op::Size) {
            continue;
        }
        if reads(n).iter().any(|v| run_time.contains(v)) {
            run_time.extend(n.outputs.iter().flatten().copied());
        }
    }
    run_time
}

/// Every value a node reads: its inputs, and for an If, Loop or Scan what its subgraphs' nodes read
/// and yield.
fn reads(n: &Node) -> Vec<ValueId> {
    let mut out: Vec<ValueId> = n.inputs.iter().flatten().copied().collect();
    for b in n.op.subgraphs() {
        out.extend(b.nodes.iter().flat_map(reads));
        out.extend(b.outputs.iter().copied());
    }
    out
}

fn outputs_of(nodes: &[Node]) -> HashSet<ValueId> {
    nodes
        .iter()
        .flat_map(|n| n.outputs.iter().flatten().copied())
        .collect()
}

/// A model cut into stages (see the module docs). Every part's graph shares the whole model's
/// value table, so values pass between the parts by id.
#[derive(Debug)]
pub(crate) struct Stages {
    /// The model's inputs and outputs.
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    /// The model's outputs that are constants.
    constant_outputs: HashMap<ValueId, Tensor>,
    /// Everything that does not depend on a cut node; `None` when no node comes before the cuts.
    pub(crate) first: Option<Arc<Model>>,
    /// The nodes run on the host between the stages (none when every cut is an If).
    between: Arc<Graph>,
    /// What depends on the cut nodes, as a model of its own; `None` when the cut nodes' outputs are
    /// the model's outputs.
    pub(crate) rest: Option<Arc<Model>>,
    /// The model's output specs, in order.
    pub(crate) output_specs: Vec<TensorSpec>,
}

impl Stages {
    /// The stages of `graph` (optimised), or `None` when no node cuts it.
    pub(crate) fn plan(graph: &Graph) -> Result<Option<Stages>> {
        let cuts = cuts(graph);
        if cuts.is_empty() {
            return Ok(None);
        }
        let (mut first, mut between, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        let mut after_cut: HashSet<ValueId> = HashSet::new();
        for (k, n) in graph.nodes.iter().enumerate() {
            let downstream = reads(n).iter().any(|v| after_cut.contains(v));
            let part = match (downstream, cuts.get(&k)) {
                (true, _) | (false, Some(Cut::Condition)) => &mut rest,
                (false, Some(Cut::OnHost)) => &mut between,
                (false, None) => {
                    first.push(n.clone());
                    continue;
                }
            };
            after_cut.extend(n.outputs.iter().flatten().copied());
            part.push(n.clone());
        }
        let (made_first, made_between, made_rest) =
            (outputs_of(&first), outputs_of(&between), outputs_of(&rest));
        let read_later: BTreeSet<ValueId> = between
            .iter()
            .chain(&rest)
            .flat_map(reads)
            .chain(graph.outputs.iter().copied())
            .collect();

        // the first stage: the model's inputs, and every value read past the cut as outputs
        let first_outputs: Vec<ValueId> = read_later
            .iter()
            .copied()
            .filter(|v| made_first.contains(v))
            .collect();
        let first_model = if first.is_empty() {
            None
        } else {
            let g = part_graph(
                graph,
                first,
                graph.inputs.clone(),
                first_outputs.clone(),
                &HashMap::new(),
            );
            Some(Arc::new(
                Model::from_optimised(g).map_err(|e| e.context("the stage before the cut"))?,
            ))
        };
        let mut specs: HashMap<ValueId, TensorSpec> = HashMap::new();
        for (&id, spec) in graph.inputs.iter().zip(crate::specialise::input_specs(graph)?) {
            specs.insert(id, spec);
        }
        if let Some(m) = &first_model {
            for (&id, spec) in first_outputs.iter().zip(&m.signature().outputs) {
                specs.insert(id, spec.clone());
            }
        }

        // the host nodes between the stages
        let between_inputs: Vec<ValueId> = between
            .iter()
            .flat_map(|n| n.inputs.iter().flatten().copied())
            .filter(|v| !graph.constants.contains_key(v))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let between_outputs: Vec<ValueId> = read_later
            .iter()
            .copied()
            .filter(|v| made_between.contains(v))
            .collect();
        let host_infos = infos(graph, &between_inputs, &specs, false)?;
        let between = Arc::new(part_graph(
            graph,
            between,
            between_inputs,
            between_outputs,
            &host_infos,
        ));
        for (&id, spec) in between
            .outputs
            .iter()
            .zip(host_output_specs(graph, &between, &specs)?)
        {
            specs.insert(id, spec);
        }

        // the rest: a model of what crosses the cut
        let rest_model = if rest.is_empty() {
            None
        } else {
            let crossing =
                |v: &ValueId| graph.inputs.contains(v) || made_first.contains(v) || made_between.contains(v);
            let rest_inputs: Vec<ValueId> = rest
                .iter()
                .flat_map(reads)
                .filter(crossing)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut rest_outputs: Vec<ValueId> = Vec::new();
            for &o in &graph.outputs {
                if made_rest.contains(&o) && !rest_outputs.contains(&o) {
                    rest_outputs.push(o);
                }
            }
            let rest_infos = infos(graph, &rest_inputs, &specs, true)?;
            let g = part_graph(graph, rest, rest_inputs, rest_outputs.clone(), &rest_infos);
            let m = Arc::new(Model::from_optimised(g).map_err(|e| e.context("the stage after the cut"))?);
            for (&id, spec) in rest_outputs.iter().zip(&m.signature().outputs) {
                specs.insert(id, spec.clone());
            }
            Some(m)
        };

        tracing::debug!(
            first = first_model.as_ref().map_or(0, |m| m.graph().nodes.len()),
            between = between.nodes.len(),
            rest = rest_model.as_ref().map_or(0, |m| m.graph().nodes.len()),
            "model in stages: nodes before the cut, on the host, after it"
        );
        let mut constant_outputs = HashMap::new();
        let mut output_specs = Vec::new();
        for &o in &graph.outputs {
            let name = graph.name(o).to_string();
            if let Some(t) = graph.constants.get(&o) {
                constant_outputs.insert(o, t.clone());
                output_specs.push(TensorSpec {
                    name,
                    dtype: t.dtype,
                    dims: t.shape.iter().map(|&n| Dim::Fixed(n)).collect(),
                });
                continue;
            }
            let spec = specs.get(&o).ok_or_else(|| {
                EngineError::internal(format!("staged output '{name}' is computed by no stage"))
            })?;
            output_specs.push(TensorSpec { name, ..spec.clone() });
        }
        Ok(Some(Stages {
            inputs: graph.inputs.clone(),
            outputs: graph.outputs.clone(),
            constant_outputs,
            first: first_model,
            between,
            rest: rest_model,
            output_specs,
        }))
    }

    /// The model's inputs whose values some part is specialised for: the first stage's host
    /// inputs, and the model inputs that the host part or the rest read as parameters.
    pub(crate) fn host_inputs(&self) -> Vec<usize> {
        let mut read_as_values: HashSet<ValueId> = self.between.inputs.iter().copied().collect();
        if let Some(rest) = &self.rest {
            read_as_values.extend(rest.host_inputs().iter().map(|&i| rest.graph().inputs[i]));
        }
        (0..self.inputs.len())
            .filter(|&i| {
                self.first.as_ref().is_some_and(|f| f.host_inputs().contains(&i))
                    || read_as_values.contains(&self.inputs[i])
            })
            .collect()
    }

    /// The values of one run, starting from the model's inputs (in signature order).
    pub(crate) fn start(&self, inputs: Vec<Tensor>) -> Values {
        Values(self.inputs.iter().copied().zip(inputs).collect())
    }

    /// The graph of host nodes run between the stages.
    pub(crate) fn between(&self) -> &Arc<Graph> {
        &self.between
    }

    /// The model's outputs, in signature order, once every part has run.
    pub(crate) fn finish(&self, values: Values) -> Result<Vec<Tensor>> {
        self.outputs
            .iter()
            .map(|o| {
                values
                    .0
                    .get(o)
                    .or_else(|| self.constant_outputs.get(o))
                    .cloned()
                    .ok_or_else(|| EngineError::internal(format!("staged output #{} was not computed", o.0)))
            })
            .collect()
    }
}

/// The values of one staged run, by id.
pub(crate) struct Values(HashMap<ValueId, Tensor>);

impl Values {
    /// The inputs of a part whose graph has these inputs.
    pub(crate) fn inputs_of(&self, graph: &Graph) -> Result<Vec<Tensor>> {
        graph
            .inputs
            .iter()
            .map(|v| {
                self.0.get(v).cloned().ok_or_else(|| {
                    EngineError::internal(format!(
                        "'{}' is read past a cut but no stage computed it",
                        graph.name(*v)
                    ))
                })
            })
            .collect()
    }

    /// Keeps the outputs of a part whose graph has these outputs.
    pub(crate) fn record(&mut self, graph: &Graph, outputs: Vec<Tensor>) {
        self.0.extend(graph.outputs.iter().copied().zip(outputs));
    }
}

/// One part of `graph`: these nodes, inputs and outputs, the constants they read, and the value
/// table with `infos` for the values crossing a cut.
fn part_graph(
    graph: &Graph,
    nodes: Vec<Node>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    infos: &HashMap<ValueId, ValueInfo>,
) -> Graph {
    let mut values = graph.values.clone();
    for (v, info) in infos {
        values[v.0] = info.clone();
    }
    let used: HashSet<ValueId> = nodes
        .iter()
        .flat_map(reads)
        .chain(outputs.iter().copied())
        .collect();
    let constants = graph
        .constants
        .iter()
        .filter(|(k, _)| used.contains(k))
        .map(|(k, t)| (*k, t.clone()))
        .collect();
    Graph {
        values,
        nodes,
        inputs,
        outputs,
        constants,
    }
}

/// Value infos for the inputs of a part past a cut, from what the earlier parts produce. With
/// `shapes`, each input gets its rank with the dims the earlier part fixes (others dynamic), so the
/// part's signature checks ranks; without, no shape (the host part checks nothing).
fn infos(
    graph: &Graph,
    ids: &[ValueId],
    specs: &HashMap<ValueId, TensorSpec>,
    shapes: bool,
) -> Result<HashMap<ValueId, ValueInfo>> {
    let mut out = HashMap::new();
    for &id in ids {
        let name = graph.name(id).to_string();
        let spec = specs.get(&id).ok_or_else(|| {
            EngineError::unsupported(format!(
                "the element type of '{name}', computed before a data-dependent node (NonZero, \
                 NonMaxSuppression or an If on computed values), is unknown; declare it in the model's \
                 value_info"
            ))
        })?;
        out.insert(
            id,
            ValueInfo {
                name,
                dtype: Some(spec.dtype),
                shape: shapes.then(|| spec.dims.clone()),
            },
        );
    }
    Ok(out)
}

/// The specs of the host part's outputs: their element types and ranks, found by running it on
/// zeros of its inputs' shapes (dynamic dims as 1); every dim is dynamic, since values decide them.
fn host_output_specs(
    graph: &Graph,
    between: &Graph,
    specs: &HashMap<ValueId, TensorSpec>,
) -> Result<Vec<TensorSpec>> {
    let zeros = between
        .inputs
        .iter()
        .map(|v| {
            let spec = &specs[v];
            let shape: Vec<usize> = spec
                .dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Dynamic(_) => 1,
                })
                .collect();
            Tensor::zeros(spec.dtype, shape)
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = crate::specialise::evaluate(between, &zeros)
        .map_err(|e| e.context("running the data-dependent nodes on zeros to learn their output types"))?;
    Ok(between
        .outputs
        .iter()
        .zip(outs)
        .map(|(&id, t)| TensorSpec {
            name: graph.name(id).to_string(),
            dtype: t.dtype,
            dims: vec![Dim::Dynamic(None); t.shape.len()],
        })
        .collect())
}

#[cfg(test)]
mod tests;

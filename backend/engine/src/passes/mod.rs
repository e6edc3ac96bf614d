//! Optimisation passes: functions from graph to graph (in place), applied until nothing changes
//! (tract's optimiser loop). Each pass returns whether it changed the graph.

mod fold;
mod fuse;
mod hard_swish;
mod patterns;
pub(crate) mod qdq;
mod quantize_dequantize;
mod silu;
#[cfg(test)]
mod tests;

use crate::error::Result;
use crate::ir::{Graph, Node, ValueId};

/// One pass.
pub type Pass = fn(&mut Graph) -> Result<bool>;

/// The passes, in the order each round applies them.
pub const PASSES: &[(&str, Pass)] = &[
    // before folding turns the weights' DequantizeLinear into float constants
    ("qdq_to_qlinear", qdq::qdq_to_qlinear),
    ("fold_constants", fold::fold_constants),
    ("inline_known_if", fold::inline_known_if),
    ("remove_identity", fuse::remove_identity),
    (
        "fuse_quantize_dequantize",
        quantize_dequantize::fuse_quantize_dequantize,
    ),
    ("fold_batchnorm", fuse::fold_batchnorm),
    ("layer_norm", patterns::layer_norm),
    ("gelu", patterns::gelu),
    ("safe_softmax", patterns::safe_softmax),
    ("hard_swish", hard_swish::hard_swish),
    ("silu", silu::silu),
    ("transpose_into_matmul", fuse::transpose_into_matmul),
    ("fuse_activation", fuse::fuse_activation),
    ("fuse_binary", fuse::fuse_binary),
];

/// Run every pass until none changes the graph. Each pass rewrites every match it finds in one sweep, so a
/// round is not limited to one fusion and large models reach the same fixpoint as small ones. The loop ends:
/// a pass reports a change only when it removed at least one node or inlined an `If`, and neither can
/// happen without end.
pub fn optimise(mut graph: Graph) -> Result<Graph> {
    let mut rounds = 0usize;
    loop {
        rounds += 1;
        let mut changed = false;
        for (name, pass) in PASSES {
            let c = pass(&mut graph)?;
            if c {
                tracing::trace!(pass = name, round = rounds, "graph changed");
            }
            changed |= c;
        }
        if !changed {
            break;
        }
    }
    tracing::debug!(rounds, nodes = graph.nodes.len(), "graph optimised");
    Ok(graph)
}

/// The value of a one-element constant, if `v` is one.
pub(crate) fn scalar(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = g.constants.get(&v?)?;
    if t.len() != 1 {
        return None;
    }
    t.to_f64_vec().ok()?.first().copied()
}

/// What the rewrites of a sweep read about the graph: how often each value is read and which node produces
/// it. Recomputed after every rewrite, so each rewrite's checks see the graph as it is.
pub(crate) struct Facts {
    /// For each value, how many node inputs and graph outputs read it ([`Graph::use_counts`]).
    pub(crate) uses: Vec<usize>,
    /// Index of the node producing each value ([`producers`]).
    pub(crate) producers: std::collections::HashMap<ValueId, usize>,
}

impl Facts {
    fn of(g: &Graph) -> Facts {
        Facts {
            uses: g.use_counts(),
            producers: producers(g),
        }
    }
}

/// Apply `rewrite_at` at every node index, front to back, and report whether any applied. `rewrite_at(g,
/// facts, i)` returns the index to continue from when it rewrote the graph (a rewrite may remove nodes before
/// and at `i`), or `None` to move on to `i + 1`. Every rewrite removes at least one node, so the sweep ends.
pub(crate) fn sweep(
    g: &mut Graph,
    mut rewrite_at: impl FnMut(&mut Graph, &Facts, usize) -> Result<Option<usize>>,
) -> Result<bool> {
    let mut changed = false;
    let mut facts = Facts::of(g);
    let mut i = 0;
    while i < g.nodes.len() {
        match rewrite_at(g, &facts, i)? {
            Some(next) => {
                changed = true;
                facts = Facts::of(g);
                i = next;
            }
            None => i += 1,
        }
    }
    Ok(changed)
}

/// Index of the node producing each value (top-level nodes only).
pub(crate) fn producers(g: &Graph) -> std::collections::HashMap<ValueId, usize> {
    let mut m = std::collections::HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for o in n.outputs.iter().flatten() {
            m.insert(*o, i);
        }
    }
    m
}

/// Replace every read of `from` with `to` (nodes, branches, graph outputs).
pub(crate) fn replace_uses(g: &mut Graph, from: ValueId, to: ValueId) {
    fn walk(nodes: &mut [Node], from: ValueId, to: ValueId) {
        for n in nodes {
            for i in n.inputs.iter_mut().flatten() {
                if *i == from {
                    *i = to;
                }
            }
            for b in n.op.subgraphs_mut() {
                walk(&mut b.nodes, from, to);
                for o in &mut b.outputs {
                    if *o == from {
                        *o = to;
                    }
                }
            }
        }
    }
    walk(&mut g.nodes, from, to);
    for o in &mut g.outputs {
        if *o == from {
            *o = to;
        }
    }
}

/// Whether two optional inputs hold one parameter: the same value, or constants of equal bytes.
pub(crate) fn same_parameter(g: &Graph, a: Option<ValueId>, b: Option<ValueId>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(b)) => match (g.constants.get(&a), g.constants.get(&b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        _ => false,
    }
}

/// True when `v` is a graph output.
pub(crate) fn is_output(g: &Graph, v: ValueId) -> bool {
    g.outputs.contains(&v)
}

/// The node producing `v` when nothing else reads `v` (so the node can go with the chain).
pub(crate) fn private_producer<'g>(
    g: &'g Graph,
    facts: &Facts,
    v: ValueId,
) -> Option<(usize, &'g crate::ir::Node)> {
    if facts.uses[v.0] != 1 || is_output(g, v) {
        return None;
    }
    let i = *facts.producers.get(&v)?;
    Some((i, &g.nodes[i]))
}

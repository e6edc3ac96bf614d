//! Optimisation passes: functions from graph to graph (in place), applied until nothing changes
//! (tract's optimiser loop). Each pass returns whether it changed the graph.

mod fold;
mod fuse;
mod patterns;
#[cfg(test)]
mod tests;

use crate::error::Result;
use crate::ir::{Graph, Node, ValueId};

/// One pass.
pub type Pass = fn(&mut Graph) -> Result<bool>;

/// The passes, in the order each round applies them.
pub const PASSES: &[(&str, Pass)] = &[
    ("fold_constants", fold::fold_constants),
    ("inline_known_if", fold::inline_known_if),
    ("remove_identity", fuse::remove_identity),
    ("fold_batchnorm", fuse::fold_batchnorm),
    ("layer_norm", patterns::layer_norm),
    ("gelu", patterns::gelu),
    ("transpose_into_matmul", fuse::transpose_into_matmul),
    ("fuse_activation", fuse::fuse_activation),
    ("fuse_binary", fuse::fuse_binary),
];

/// Run every pass until the graph stops changing (at most 32 rounds).
pub fn optimise(mut graph: Graph) -> Result<Graph> {
    for _ in 0..32 {
        let mut changed = false;
        for (name, pass) in PASSES {
            let c = pass(&mut graph)?;
            if c {
                tracing::trace!(pass = name, "graph changed");
            }
            changed |= c;
        }
        if !changed {
            break;
        }
    }
    Ok(graph)
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
            if let crate::ir::Op::If {
                then_branch,
                else_branch,
            } = &mut n.op
            {
                for b in [then_branch, else_branch] {
                    walk(&mut b.nodes, from, to);
                    for o in &mut b.outputs {
                        if *o == from {
                            *o = to;
                        }
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

/// True when `v` is a graph output.
pub(crate) fn is_output(g: &Graph, v: ValueId) -> bool {
    g.outputs.contains(&v)
}

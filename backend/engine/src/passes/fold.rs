//! Constant folding and inlining of `If`s whose condition is a constant.

use crate::error::Result;
use crate::ir::{Graph, Node, Op};
use crate::ops::{InVal, Resolved, eval_host, resolve};
use crate::tensor::Tensor;

/// Evaluate nodes whose inputs are all constants (with the CPU kernels) and drop them.
pub(crate) fn fold_constants(g: &mut Graph) -> Result<bool> {
    let mut changed = false;
    let mut keep = Vec::with_capacity(g.nodes.len());
    let nodes = std::mem::take(&mut g.nodes);
    for n in nodes {
        // a subgraph reads values the node's inputs do not list
        let foldable = n.op.subgraphs().is_empty()
            && !n.inputs.is_empty()
            && n.inputs.iter().flatten().all(|i| g.constants.contains_key(i))
            && n.outputs.iter().flatten().count() > 0;
        if !foldable {
            keep.push(n);
            continue;
        }
        let values = evaluate(g, &n)?;
        for (o, t) in n.outputs.iter().zip(values) {
            if let (Some(o), Some(t)) = (o, t) {
                g.values[o.0].dtype = Some(t.dtype);
                g.values[o.0].shape = Some(t.shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
                g.constants.insert(*o, t);
            }
        }
        changed = true;
    }
    g.nodes = keep;
    Ok(changed)
}

/// The outputs of `n`, whose inputs are all constants, evaluated with the CPU kernels.
pub(crate) fn evaluate(g: &Graph, n: &Node) -> Result<Vec<Option<Tensor>>> {
    let ins: Vec<Option<InVal<'_>>> = n
        .inputs
        .iter()
        .map(|i| {
            i.and_then(|i| g.constants.get(&i)).map(|t| InVal {
                dtype: t.dtype,
                shape: &t.shape,
                host: Some(t),
            })
        })
        .collect();
    let values = match resolve(&n.op, &ins, n.outputs.len()) {
        Ok(Resolved::Host(v)) => v.into_iter().map(Some).collect::<Vec<_>>(),
        Ok(Resolved::Alias(i)) => vec![ins[i].and_then(|v| v.host.cloned())],
        Ok(Resolved::Op { op, inputs, outputs }) => {
            let host: Vec<Option<&crate::tensor::Tensor>> = inputs
                .iter()
                .map(|k| k.and_then(|i| ins[i].and_then(|v| v.host)))
                .collect();
            let wanted: Vec<bool> = n.outputs.iter().map(Option::is_some).collect();
            match eval_host(&op, &host, &outputs, &wanted) {
                Ok(v) => v,
                Err(e) => return Err(e.context(format!("node '{}' ({})", n.name, n.op.name()))),
            }
        }
        Err(e) => return Err(e.context(format!("node '{}' ({})", n.name, n.op.name()))),
    };
    Ok(values)
}

/// Replace an `If` whose condition is a constant by the nodes of the branch it takes.
pub(crate) fn inline_known_if(g: &mut Graph) -> Result<bool> {
    let mut changed = false;
    let nodes = std::mem::take(&mut g.nodes);
    let mut out = Vec::with_capacity(nodes.len());
    let mut aliases = Vec::new();
    for n in nodes {
        let cond = n
            .input(0)
            .and_then(|c| g.constants.get(&c))
            .map(|t| t.to_f64_vec());
        match (&n.op, cond) {
            (
                Op::If {
                    then_branch,
                    else_branch,
                },
                Some(Ok(c)),
            ) if !c.is_empty() => {
                let b = if c[0] != 0.0 { then_branch } else { else_branch };
                out.extend(b.nodes.iter().cloned());
                for (o, bo) in n.outputs.iter().zip(&b.outputs) {
                    if let Some(o) = o {
                        aliases.push((*o, *bo));
                    }
                }
                changed = true;
            }
            _ => out.push(n),
        }
    }
    g.nodes = out;
    for (from, to) in aliases {
        if crate::passes::is_output(g, from) {
            // keep the output's name: an Identity from the branch value
            g.nodes.push(crate::ir::Node {
                name: format!("{}#if_out", g.values[from.0].name),
                op: Op::Identity,
                inputs: vec![Some(to)],
                outputs: vec![Some(from)],
            });
            if let Some(t) = g.constants.get(&to).cloned() {
                g.constants.insert(from, t);
                g.nodes.pop();
            }
        } else {
            crate::passes::replace_uses(g, from, to);
            if let Some(t) = g.constants.get(&to).cloned() {
                g.constants.insert(from, t);
            }
        }
    }
    Ok(changed)
}

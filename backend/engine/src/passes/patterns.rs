//! Pattern recognition: decomposed LayerNorm, GELU (Erf form) and torch's safe softmax.

use crate::error::Result;
use crate::ir::{BinaryOp, Graph, Node, Op, ReduceOp, UnaryOp, ValueId};
use crate::passes::{is_output, scalar, sweep};

fn node<'a>(
    g: &'a Graph,
    prod: &std::collections::HashMap<ValueId, usize>,
    v: Option<ValueId>,
) -> Option<(usize, &'a Node)> {
    let i = *prod.get(&v?)?;
    Some((i, &g.nodes[i]))
}

/// ReduceMean over the last axis with keepdims (axes given as a constant `[-1]`).
fn is_mean_last(g: &Graph, n: &Node) -> bool {
    let Op::Reduce {
        op: ReduceOp::Mean,
        keepdims: true,
        axes,
        ..
    } = &n.op
    else {
        return false;
    };
    let ax: Vec<i64> = match n.input(1) {
        Some(a) => match g.constants.get(&a).map(|t| t.to_i64_vec()) {
            Some(Ok(v)) => v,
            _ => return false,
        },
        None => axes.clone(),
    };
    ax == [-1]
}

fn single_use(g: &Graph, uses: &[usize], v: ValueId, n: usize) -> bool {
    uses[v.0] == n && !is_output(g, v)
}

/// Add(Mul(Div(Sub(x, mean(x)), Sqrt(Add(mean(Pow(Sub, 2)), ε))), γ), β) → LayerNormalization.
pub(crate) fn layer_norm(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, di| {
        let dn = &g.nodes[di];
        if dn.op != Op::Binary(BinaryOp::Div) {
            return Ok(None);
        }
        let Some((_, sub)) = node(g, &facts.producers, dn.input(0)) else {
            return Ok(None);
        };
        let Some((_, sqrt)) = node(g, &facts.producers, dn.input(1)) else {
            return Ok(None);
        };
        if sub.op != Op::Binary(BinaryOp::Sub) || sqrt.op != Op::Unary(UnaryOp::Sqrt) {
            return Ok(None);
        }
        let Some((_, mean)) = node(g, &facts.producers, sub.input(1)) else {
            return Ok(None);
        };
        if !is_mean_last(g, mean) || mean.input(0) != sub.input(0) {
            return Ok(None);
        }
        let Some((_, add_eps)) = node(g, &facts.producers, sqrt.input(0)) else {
            return Ok(None);
        };
        if add_eps.op != Op::Binary(BinaryOp::Add) {
            return Ok(None);
        }
        let Some(eps) = scalar(g, add_eps.input(1)) else {
            return Ok(None);
        };
        let Some((_, var)) = node(g, &facts.producers, add_eps.input(0)) else {
            return Ok(None);
        };
        if !is_mean_last(g, var) {
            return Ok(None);
        }
        let Some((_, pow)) = node(g, &facts.producers, var.input(0)) else {
            return Ok(None);
        };
        let squares = match pow.op {
            Op::Binary(BinaryOp::Pow) => {
                pow.input(0) == sub.output(0) && scalar(g, pow.input(1)) == Some(2.0)
            }
            Op::Binary(BinaryOp::Mul) => pow.input(0) == sub.output(0) && pow.input(1) == sub.output(0),
            _ => false,
        };
        if !squares {
            return Ok(None);
        }
        // optional affine tail: Mul(γ) then Add(β), both constants
        let Some(div_out) = dn.output(0) else {
            return Ok(None);
        };
        let users: Vec<usize> = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.inputs.contains(&Some(div_out)))
            .map(|(i, _)| i)
            .collect();
        let [mi] = users[..] else { return Ok(None) };
        let mul = &g.nodes[mi];
        if mul.op != Op::Binary(BinaryOp::Mul) || mul.input(0) != Some(div_out) {
            return Ok(None);
        }
        let Some(gamma) = mul.input(1).filter(|v| g.constants.contains_key(v)) else {
            return Ok(None);
        };
        let Some(mul_out) = mul.output(0) else {
            return Ok(None);
        };
        let users: Vec<usize> = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.inputs.contains(&Some(mul_out)))
            .map(|(i, _)| i)
            .collect();
        let [ai] = users[..] else { return Ok(None) };
        let add = &g.nodes[ai];
        if add.op != Op::Binary(BinaryOp::Add) || add.input(0) != Some(mul_out) {
            return Ok(None);
        }
        let Some(beta) = add.input(1).filter(|v| g.constants.contains_key(v)) else {
            return Ok(None);
        };
        let sub_out = sub.output(0);
        let intermediates_private = sub_out.is_some_and(|v| {
            single_use(
                g,
                &facts.uses,
                v,
                2 + usize::from(matches!(pow.op, Op::Binary(BinaryOp::Mul))),
            )
        }) && [
            mean.output(0),
            sqrt.output(0),
            add_eps.output(0),
            var.output(0),
            pow.output(0),
            Some(div_out),
            Some(mul_out),
        ]
        .iter()
        .all(|v| v.is_some_and(|v| single_use(g, &facts.uses, v, 1)));
        if !intermediates_private {
            return Ok(None);
        }
        let (Some(x), Some(y)) = (sub.input(0), add.output(0)) else {
            return Ok(None);
        };
        let remove: Vec<ValueId> = [
            sub.output(0),
            mean.output(0),
            sqrt.output(0),
            add_eps.output(0),
            var.output(0),
            pow.output(0),
            Some(div_out),
            Some(mul_out),
        ]
        .into_iter()
        .flatten()
        .collect();
        let name = add.name.clone();
        let eps = eps as f32;
        let ln = Node {
            name: format!("{name}#layernorm"),
            op: Op::LayerNormalization {
                axis: -1,
                epsilon: eps,
            },
            inputs: vec![Some(x), Some(gamma), Some(beta)],
            outputs: vec![Some(y)],
        };
        g.nodes
            .retain(|n| !n.outputs.iter().flatten().any(|o| remove.contains(o) || *o == y));
        let pos = g
            .nodes
            .iter()
            .position(|n| n.inputs.contains(&Some(y)))
            .unwrap_or(g.nodes.len());
        g.nodes.insert(pos, ln);
        // the rewrite moved nodes: look again from the start
        Ok(Some(0))
    })
}

/// x·0.5·(1 + erf(x/√2)) in its usual three orders → Unary(Gelu).
pub(crate) fn gelu(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, ei| {
        let en = &g.nodes[ei];
        if en.op != Op::Unary(UnaryOp::Erf) {
            return Ok(None);
        }
        let Some((_, scale)) = node(g, &facts.producers, en.input(0)) else {
            return Ok(None);
        };
        let x = match scale.op {
            Op::Binary(BinaryOp::Div)
                if scalar(g, scale.input(1)).is_some_and(|c| (c - std::f64::consts::SQRT_2).abs() < 1e-3) =>
            {
                scale.input(0)
            }
            Op::Binary(BinaryOp::Mul)
                if scalar(g, scale.input(1))
                    .is_some_and(|c| (c - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-3) =>
            {
                scale.input(0)
            }
            _ => None,
        };
        let Some(x) = x else { return Ok(None) };
        let Some(e_out) = en.output(0) else {
            return Ok(None);
        };
        let find_user = |v: ValueId| g.nodes.iter().position(|n| n.inputs.contains(&Some(v)));
        let Some(ai) = find_user(e_out) else {
            return Ok(None);
        };
        let add = &g.nodes[ai];
        let one = if add.input(0) == Some(e_out) {
            add.input(1)
        } else {
            add.input(0)
        };
        if add.op != Op::Binary(BinaryOp::Add) || scalar(g, one) != Some(1.0) {
            return Ok(None);
        }
        let Some(a_out) = add.output(0) else {
            return Ok(None);
        };
        let Some(m1i) = find_user(a_out) else {
            return Ok(None);
        };
        let m1 = &g.nodes[m1i];
        if m1.op != Op::Binary(BinaryOp::Mul) {
            return Ok(None);
        }
        let other = if m1.input(0) == Some(a_out) {
            m1.input(1)
        } else {
            m1.input(0)
        };
        let Some(m1_out) = m1.output(0) else {
            return Ok(None);
        };
        // form A: Mul(Mul(x, 1+erf), 0.5); form B: Mul(Mul(x, 0.5), 1+erf); form C (torch's dynamo
        // exporter): Mul(x, Mul(0.5, 1+erf))
        let first_half = scalar(g, other) == Some(0.5);
        let (y, mut dead) = if other == Some(x) || first_half {
            let Some(m2i) = find_user(m1_out) else {
                return Ok(None);
            };
            let m2 = &g.nodes[m2i];
            let rest = if m2.input(0) == Some(m1_out) {
                m2.input(1)
            } else {
                m2.input(0)
            };
            let completes = if first_half {
                rest == Some(x)
            } else {
                scalar(g, rest) == Some(0.5)
            };
            if m2.op != Op::Binary(BinaryOp::Mul) || !completes || !single_use(g, &facts.uses, m1_out, 1) {
                return Ok(None);
            }
            (m2.output(0), vec![m1_out])
        } else {
            let Some((_, h)) = node(g, &facts.producers, other) else {
                return Ok(None);
            };
            let hx = if h.input(0) == Some(x) {
                h.input(1)
            } else {
                h.input(0)
            };
            if h.op != Op::Binary(BinaryOp::Mul) || !h.inputs.contains(&Some(x)) || scalar(g, hx) != Some(0.5)
            {
                return Ok(None);
            }
            let Some(h_out) = h.output(0) else { return Ok(None) };
            if !single_use(g, &facts.uses, h_out, 1) {
                return Ok(None);
            }
            (Some(m1_out), vec![h_out])
        };
        let Some(y) = y else { return Ok(None) };
        let Some(s_out) = scale.output(0) else {
            return Ok(None);
        };
        if ![s_out, e_out, a_out]
            .iter()
            .all(|&v| single_use(g, &facts.uses, v, 1))
        {
            return Ok(None);
        }
        dead.extend([s_out, e_out, a_out]);
        let name = en.name.clone();
        g.nodes
            .retain(|n| !n.outputs.iter().flatten().any(|o| dead.contains(o) || *o == y));
        let pos = g
            .nodes
            .iter()
            .position(|n| n.inputs.contains(&Some(y)))
            .unwrap_or(g.nodes.len());
        g.nodes.insert(
            pos,
            Node {
                name: format!("{name}#gelu"),
                op: Op::Unary(UnaryOp::Gelu { tanh: false }),
                inputs: vec![Some(x)],
                outputs: vec![Some(y)],
            },
        );
        // the rewrite moved nodes: look again from the start
        Ok(Some(0))
    })
}

/// `Where(IsNaN(s), 0, s)` with `s = Softmax(x)` (torch's "safe" softmax, which the dynamo exporter writes in
/// every attention: a fully masked row gives zeros, not NaN) → the Softmax with `nan_rows_to_zero`.
pub(crate) fn safe_softmax(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, wi| {
        let w = &g.nodes[wi];
        if w.op != Op::Where || scalar(g, w.input(1)) != Some(0.0) {
            return Ok(None);
        }
        let (Some(s), Some(y)) = (w.input(2), w.output(0)) else {
            return Ok(None);
        };
        let Some((ni, nan)) = node(g, &facts.producers, w.input(0)) else {
            return Ok(None);
        };
        let Some((si, softmax)) = node(g, &facts.producers, Some(s)) else {
            return Ok(None);
        };
        let is_plain_softmax = matches!(
            softmax.op,
            Op::Softmax {
                log: false,
                nan_rows_to_zero: false,
                ..
            }
        );
        let Some(tested) = nan.output(0) else {
            return Ok(None);
        };
        if nan.op != Op::Unary(UnaryOp::IsNaN)
            || nan.input(0) != Some(s)
            || !is_plain_softmax
            || !single_use(g, &facts.uses, tested, 1)
            || !single_use(g, &facts.uses, s, 2)
        {
            return Ok(None);
        }
        // The Softmax writes the Where's output; the IsNaN and the Where go.
        if let Op::Softmax { nan_rows_to_zero, .. } = &mut g.nodes[si].op {
            *nan_rows_to_zero = true;
        }
        g.nodes[si].outputs = vec![Some(y)];
        let (first, second) = if ni > wi { (ni, wi) } else { (wi, ni) };
        g.nodes.remove(first);
        g.nodes.remove(second);
        // both read the Softmax, so they came after it: its index stands
        Ok(Some(si))
    })
}

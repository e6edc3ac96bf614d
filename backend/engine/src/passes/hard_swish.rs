//! HardSigmoid and HardSwish as exporters write them out: `Clip(x + 3, 0, 6) / 6` becomes one HardSigmoid,
//! `x · HardSigmoid(x)` and `x · Clip(x + 3, 0, 6) / 6` (paddle2onnx's form) become one HardSwish. A single
//! unary is what a Conv/MatMul epilogue can take; the written-out chains cost four passes over memory.

use crate::error::Result;
use crate::ir::{BinaryOp, Graph, Op, UnaryOp, ValueId};
use crate::passes::{Facts, private_producer, sweep};

/// The HardSigmoid inside HardSwish: max(0, min(1, x/6 + 1/2)).
const SIXTH: f32 = 1.0 / 6.0;

/// How far an exported 1/6 may sit from ours (paddle2onnx writes HardSigmoid's alpha as 0.1666667).
const SIXTH_TOLERANCE: f32 = 1e-6;

/// A matched chain: the anchor node becomes `Unary(op)` on `x`; the nodes at `dead` (all before the anchor)
/// go.
struct Rewrite {
    op: UnaryOp,
    x: ValueId,
    dead: Vec<usize>,
}

/// Rewrite every written-out HardSigmoid and HardSwish (see the module doc) into its unary.
pub(crate) fn hard_swish(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, i| {
        let Some(mut rw) = match_at(g, facts, i) else {
            return Ok(None);
        };
        let node = &mut g.nodes[i];
        node.op = Op::Unary(rw.op);
        node.inputs = vec![Some(rw.x)];
        rw.dead.sort_unstable();
        for &d in rw.dead.iter().rev() {
            g.nodes.remove(d);
        }
        Ok(Some(i - rw.dead.len()))
    })
}

/// The chain ending at node `i`, if it is one of the forms in the module doc.
fn match_at(g: &Graph, facts: &Facts, i: usize) -> Option<Rewrite> {
    let n = &g.nodes[i];
    if let Some(v) = divided_by_six(g, n) {
        let (pi, p) = private_producer(g, facts, v)?;
        if let Some((x, dead)) = clip_x_plus_3(g, facts, v) {
            return Some(Rewrite {
                op: UnaryOp::HardSigmoid {
                    alpha: SIXTH,
                    beta: 0.5,
                },
                x,
                dead,
            });
        }
        // x · Clip(x + 3, 0, 6), then / 6
        if p.op == Op::Binary(BinaryOp::Mul) {
            for (x, c) in [(p.input(0)?, p.input(1)?), (p.input(1)?, p.input(0)?)] {
                if let Some((cx, mut dead)) = clip_x_plus_3(g, facts, c)
                    && cx == x
                {
                    dead.push(pi);
                    return Some(Rewrite {
                        op: UnaryOp::HardSwish,
                        x,
                        dead,
                    });
                }
            }
        }
        return None;
    }
    // x · HardSigmoid(x) with HardSwish's alpha and beta
    if n.op == Op::Binary(BinaryOp::Mul) {
        for (x, h) in [(n.input(0)?, n.input(1)?), (n.input(1)?, n.input(0)?)] {
            let Some((hi, hn)) = private_producer(g, facts, h) else {
                continue;
            };
            if let Op::Unary(UnaryOp::HardSigmoid { alpha, beta }) = hn.op
                && (alpha - SIXTH).abs() <= SIXTH_TOLERANCE
                && beta == 0.5
                && hn.input(0) == Some(x)
            {
                return Some(Rewrite {
                    op: UnaryOp::HardSwish,
                    x,
                    dead: vec![hi],
                });
            }
        }
    }
    None
}

/// `v` when node `n` is `Div(v, 6)`, `Mul(v, 1/6)` or `Mul(1/6, v)`.
fn divided_by_six(g: &Graph, n: &crate::ir::Node) -> Option<ValueId> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    match n.op {
        Op::Binary(BinaryOp::Div) if scalar(g, b, a) == Some(6.0) => Some(a),
        Op::Binary(BinaryOp::Mul) => {
            let is_sixth = |c: ValueId, x: ValueId| {
                scalar(g, c, x).is_some_and(|s| (s - SIXTH).abs() <= SIXTH_TOLERANCE)
            };
            if is_sixth(b, a) {
                Some(a)
            } else if is_sixth(a, b) {
                Some(b)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `(x, [clip, add])` when `c` is `Clip(x + 3, 0, 6)` (either operand order of the Add) and neither the
/// Clip's nor the Add's output is read elsewhere.
fn clip_x_plus_3(g: &Graph, facts: &Facts, c: ValueId) -> Option<(ValueId, Vec<usize>)> {
    let (ci, clip) = private_producer(g, facts, c)?;
    if clip_bounds(g, clip)? != (0.0, 6.0) {
        return None;
    }
    let a = clip.input(0)?;
    let (ai, add) = private_producer(g, facts, a)?;
    if add.op != Op::Binary(BinaryOp::Add) {
        return None;
    }
    let (l, r) = (add.input(0)?, add.input(1)?);
    let x = if scalar(g, r, l) == Some(3.0) {
        l
    } else if scalar(g, l, r) == Some(3.0) {
        r
    } else {
        return None;
    };
    Some((x, vec![ci, ai]))
}

/// The bounds of a Clip node: its attributes (opset < 11) or its constant min/max inputs.
fn clip_bounds(g: &Graph, n: &crate::ir::Node) -> Option<(f64, f64)> {
    let Op::Unary(UnaryOp::Clip { mut min, mut max }) = n.op else {
        return None;
    };
    for (k, bound) in [(1, &mut min), (2, &mut max)] {
        if let Some(v) = n.input(k) {
            *bound = g.constants.get(&v)?.to_f64_vec().ok()?.first().copied()?;
        }
    }
    Some((min, max))
}

/// The value of `c` when it is a one-element f32 constant that does not grow `x`'s rank when broadcast
/// against it (rank ≤ 1, or no more than `x`'s known rank).
fn scalar(g: &Graph, c: ValueId, x: ValueId) -> Option<f32> {
    let t = g.constants.get(&c)?;
    if t.dtype != crate::DataType::F32 || t.len() != 1 {
        return None;
    }
    let x_rank = g.values[x.0].shape.as_ref().map(Vec::len);
    if t.shape.len() > 1 && x_rank.is_none_or(|r| r < t.shape.len()) {
        return None;
    }
    t.to_vec::<f32>().ok()?.first().copied()
}

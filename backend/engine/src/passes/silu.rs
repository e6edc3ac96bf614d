//! SiLU as exporters write it out: `Mul(x, Sigmoid(x))` (torch's `nn.SiLU`, EfficientNet's and YOLO's
//! activation) becomes one `Silu` unary, which the producing Conv's epilogue takes. Written out, it is two
//! passes over memory and a Sigmoid output the size of the activation.

use crate::error::Result;
use crate::ir::{BinaryOp, Graph, Op, UnaryOp};
use crate::passes::{private_producer, sweep};

/// Rewrite every `x · Sigmoid(x)` (either operand order) whose Sigmoid output is read nowhere else.
pub(crate) fn silu(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, i| {
        let n = &g.nodes[i];
        if n.op != Op::Binary(BinaryOp::Mul) {
            return Ok(None);
        }
        let (Some(a), Some(b)) = (n.input(0), n.input(1)) else {
            return Ok(None);
        };
        for (x, s) in [(a, b), (b, a)] {
            let Some((si, sn)) = private_producer(g, facts, s) else {
                continue;
            };
            if sn.op == Op::Unary(UnaryOp::Sigmoid) && sn.input(0) == Some(x) {
                let node = &mut g.nodes[i];
                node.op = Op::Unary(UnaryOp::Silu);
                node.inputs = vec![Some(x)];
                g.nodes.remove(si);
                return Ok(Some(if si < i { i - 1 } else { i }));
            }
        }
        Ok(None)
    })
}

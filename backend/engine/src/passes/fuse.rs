//! Structural passes: Identity removal, BatchNormalization folding, transposes merged into MatMul,
//! activations and element-wise operands fused into Conv/MatMul/Gemm epilogues.

use crate::error::Result;
use crate::ir::{BinaryOp, EpilogueStep, Graph, Op, UnaryOp};
use crate::passes::{is_output, replace_uses, sweep};
use crate::tensor::Tensor;

/// Drop Identity nodes (Dropout became Identity at load) unless they name a graph output.
pub(crate) fn remove_identity(g: &mut Graph) -> Result<bool> {
    let mut changed = false;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        if let (Op::Identity, Some(x), Some(y)) = (&n.op, n.input(0), n.output(0))
            && !is_output(g, y)
        {
            g.nodes.remove(i);
            replace_uses(g, y, x);
            changed = true;
            continue;
        }
        i += 1;
    }
    Ok(changed)
}

fn f32s(t: &Tensor) -> Option<Vec<f32>> {
    if t.dtype == crate::DataType::F32 {
        t.to_vec::<f32>().ok()
    } else {
        None
    }
}

/// BatchNormalization(Conv(x, w, b)) → Conv(x, w·s, (b − mean)·s + beta) with s = scale/√(var+ε).
pub(crate) fn fold_batchnorm(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, bi| {
        let Op::BatchNormalization { epsilon } = g.nodes[bi].op else {
            return Ok(None);
        };
        let bn = &g.nodes[bi];
        let (Some(x), Some(y)) = (bn.input(0), bn.output(0)) else {
            return Ok(None);
        };
        let params: Option<Vec<Vec<f32>>> = (1..5)
            .map(|k| bn.input(k).and_then(|v| g.constants.get(&v)).and_then(f32s))
            .collect();
        let Some(p) = params else { return Ok(None) };
        let Some(&ci) = facts.producers.get(&x) else {
            return Ok(None);
        };
        if facts.uses[x.0] != 1 || is_output(g, x) {
            return Ok(None);
        }
        let conv = &g.nodes[ci];
        let Op::Conv { activation, .. } = &conv.op else {
            return Ok(None);
        };
        if !activation.is_empty() {
            return Ok(None);
        }
        let Some(w) = conv
            .input(1)
            .and_then(|v| g.constants.get(&v))
            .and_then(|t| f32s(t).map(|d| (d, t.shape.clone())))
        else {
            return Ok(None);
        };
        let m = w.1[0];
        if p.iter().any(|v| v.len() != m) {
            return Ok(None);
        }
        let bias: Vec<f32> = match conv.input(2) {
            Some(b) => match g.constants.get(&b).and_then(f32s) {
                Some(b) if b.len() == m => b,
                _ => return Ok(None),
            },
            None => vec![0.0; m],
        };
        let (scale, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
        let s: Vec<f32> = (0..m).map(|i| scale[i] / (var[i] + epsilon).sqrt()).collect();
        let per = w.0.len() / m.max(1);
        let nw: Vec<f32> =
            w.0.iter()
                .enumerate()
                .map(|(i, v)| v * s[i / per.max(1)])
                .collect();
        let nb: Vec<f32> = (0..m).map(|i| (bias[i] - mean[i]) * s[i] + beta[i]).collect();
        let name = conv.name.clone();
        let wid = g.add_value(format!("{name}#bn_w"), Some(crate::DataType::F32));
        g.constants.insert(wid, Tensor::from_vec(w.1.clone(), nw)?);
        let bid = g.add_value(format!("{name}#bn_b"), Some(crate::DataType::F32));
        g.constants.insert(bid, Tensor::from_vec(vec![m], nb)?);
        let conv = &mut g.nodes[ci];
        conv.inputs.resize(3, None);
        conv.inputs[1] = Some(wid);
        conv.inputs[2] = Some(bid);
        conv.outputs[0] = Some(y);
        g.nodes.remove(bi);
        Ok(Some(bi))
    })
}

/// MatMul(Transpose(a, perm swapping the last two dims), b) → MatMul { trans_a } (same for b).
pub(crate) fn transpose_into_matmul(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, mi| {
        let Op::MatMul { epilogue, .. } = &g.nodes[mi].op else {
            return Ok(None);
        };
        if !epilogue.is_empty() {
            return Ok(None);
        }
        for side in 0..2 {
            let Some(v) = g.nodes[mi].input(side) else {
                continue;
            };
            let Some(&ti) = facts.producers.get(&v) else {
                continue;
            };
            let Op::Transpose { perm } = &g.nodes[ti].op else {
                continue;
            };
            let r = perm.len();
            let swaps_last =
                r >= 2 && perm[r - 1] == r - 2 && perm[r - 2] == r - 1 && (0..r - 2).all(|i| perm[i] == i);
            if !swaps_last || facts.uses[v.0] != 1 || is_output(g, v) {
                continue;
            }
            let Some(src) = g.nodes[ti].input(0) else { continue };
            let Op::MatMul { trans_a, trans_b, .. } = &mut g.nodes[mi].op else {
                continue;
            };
            let flag = if side == 0 { trans_a } else { trans_b };
            if *flag {
                continue;
            }
            *flag = true;
            g.nodes[mi].inputs[side] = Some(src);
            g.nodes.remove(ti);
            // the MatMul moved to mi - 1; look at it again for its other operand
            return Ok(Some(mi - 1));
        }
        Ok(None)
    })
}

fn epilogue_mut(op: &mut Op) -> Option<&mut crate::ir::Epilogue> {
    match op {
        Op::Conv { activation, .. } => Some(activation),
        Op::MatMul { epilogue, .. } | Op::Gemm { epilogue, .. } => Some(epilogue),
        _ => None,
    }
}

/// Unary(Conv|MatMul|Gemm(..)) → the producer with the unary appended to its epilogue (f32 only).
pub(crate) fn fuse_activation(g: &mut Graph) -> Result<bool> {
    sweep(g, |g, facts, ui| {
        let Op::Unary(mut u) = g.nodes[ui].op else {
            return Ok(None);
        };
        if u.is_predicate() {
            return Ok(None);
        }
        if g.nodes[ui].inputs.len() > 1 {
            // Clip with constant min/max inputs (opset ≥ 11): move the bounds into the op
            let UnaryOp::Clip { min, max } = &mut u else {
                return Ok(None);
            };
            let bound = |k: usize| -> Option<Option<f64>> {
                match g.nodes[ui].input(k) {
                    None => Some(None),
                    Some(v) => g
                        .constants
                        .get(&v)
                        .and_then(|t| t.to_f64_vec().ok())
                        .and_then(|v| v.first().copied())
                        .map(Some),
                }
            };
            let (Some(lo), Some(hi)) = (bound(1), bound(2)) else {
                return Ok(None);
            };
            if let Some(lo) = lo {
                *min = lo;
            }
            if let Some(hi) = hi {
                *max = hi;
            }
        }
        let (Some(x), Some(y)) = (g.nodes[ui].input(0), g.nodes[ui].output(0)) else {
            return Ok(None);
        };
        let Some(&pi) = facts.producers.get(&x) else {
            return Ok(None);
        };
        if facts.uses[x.0] != 1
            || is_output(g, x)
            || g.values[x.0].dtype.is_some_and(|d| d != crate::DataType::F32)
        {
            return Ok(None);
        }
        let Some(e) = epilogue_mut(&mut g.nodes[pi].op) else {
            return Ok(None);
        };
        e.steps.push(EpilogueStep::Unary(u));
        g.nodes[pi].outputs[0] = Some(y);
        g.nodes.remove(ui);
        Ok(Some(ui))
    })
}

/// Binary(Conv|MatMul|Gemm(..), t) → the producer with a Binary epilogue step reading t, when t
/// broadcasts into the producer's output without growing it (checked on both probe shapes, whose sizes keep
/// downsampled feature maps above 1×1, so a squeeze-and-excitation `features · scale` stays unfused).
pub(crate) fn fuse_binary(g: &mut Graph) -> Result<bool> {
    let fusable = |op: &Op| {
        matches!(
            op,
            Op::Binary(
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min
            )
        )
    };
    if !g.nodes.iter().any(|n| fusable(&n.op)) {
        return Ok(false);
    }
    // Shapes on the probes, inferred once per sweep: a fusion keeps every remaining value's shape.
    let mut probes = None;
    sweep(g, |g, facts, bi| {
        let Op::Binary(op) = g.nodes[bi].op else {
            return Ok(None);
        };
        if !fusable(&g.nodes[bi].op) {
            return Ok(None);
        }
        let (Some(a), Some(b), Some(y)) = (g.nodes[bi].input(0), g.nodes[bi].input(1), g.nodes[bi].output(0))
        else {
            return Ok(None);
        };
        for (side, (x, t)) in [(a, b), (b, a)].into_iter().enumerate() {
            let Some(&pi) = facts.producers.get(&x) else {
                continue;
            };
            if facts.uses[x.0] != 1 || is_output(g, x) || x == t {
                continue;
            }
            if epilogue_mut(&mut g.nodes[pi].op).is_none() {
                continue;
            }
            // t must be computed before the producer runs: a constant, an input, or produced earlier.
            if let Some(&tp) = facts.producers.get(&t)
                && tp > pi
            {
                continue;
            }
            let Some(ps) = probes.get_or_insert_with(|| crate::specialise::probe_shapes(g)) else {
                return Ok(None);
            };
            let fits = ps.iter().all(|m| match (m.get(&x), m.get(&t)) {
                (Some(sx), Some(st)) => crate::ops::broadcast_shapes(st, sx).is_ok_and(|s| &s == sx),
                _ => false,
            });
            let f32_only = g.values[x.0].dtype.is_none_or(|d| d == crate::DataType::F32);
            if !fits || !f32_only {
                continue;
            }
            // epilogue operands come after the op's own optional inputs (Conv bias, Gemm C)
            if matches!(g.nodes[pi].op, Op::Conv { .. } | Op::Gemm { .. }) && g.nodes[pi].inputs.len() < 3 {
                g.nodes[pi].inputs.resize(3, None);
            }
            let idx = g.nodes[pi].inputs.len();
            g.nodes[pi].inputs.push(Some(t));
            if let Some(e) = epilogue_mut(&mut g.nodes[pi].op) {
                e.steps.push(EpilogueStep::Binary {
                    op,
                    input: idx,
                    operand_first: side == 1,
                });
            }
            g.nodes[pi].outputs[0] = Some(y);
            g.nodes.remove(bi);
            return Ok(Some(bi));
        }
        Ok(None)
    })
}

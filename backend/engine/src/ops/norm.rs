//! Normalisations: BatchNormalization (inference mode), InstanceNormalization, LayerNormalization.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::norm;
use crate::wgpu::expr::{self, EwNode, EwProgram};
use crate::wgpu::kernels::{copy, elementwise, reduce};
use crate::wgpu::usize_axis;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("BatchNormalization", 7, convert, &FAMILY),
    OnnxOp::new("InstanceNormalization", 6, convert, &FAMILY),
    OnnxOp::new("LayerNormalization", 17, convert, &FAMILY),
];

/// The IR ops of this module: BatchNormalization, InstanceNormalization, LayerNormalization.
pub(super) static FAMILY: Family = Family {
    name: "norm",
    plan_time: false,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let ins = inputs.to_vec();
    let op = n.op_type.as_str();
    match op {
        "BatchNormalization" => {
            if a.int("training_mode", 0)? != 0 || n.output.iter().skip(1).any(|o| !o.is_empty()) {
                return Err(EngineError::unsupported(
                    "BatchNormalization in training mode (running mean/var outputs)",
                ));
            }
            Ok(Converted::Node(
                Op::BatchNormalization {
                    epsilon: a.float("epsilon", 1e-5)?,
                },
                ins,
            ))
        }
        "InstanceNormalization" => Ok(Converted::Node(
            Op::InstanceNormalization {
                epsilon: a.float("epsilon", 1e-5)?,
            },
            ins,
        )),
        "LayerNormalization" => Ok(Converted::Node(
            Op::LayerNormalization {
                axis: a.int("axis", -1)?,
                epsilon: a.float("epsilon", 1e-5)?,
            },
            ins,
        )),
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::BatchNormalization { .. } | Op::InstanceNormalization { .. } => {
            let x = req(ins, 0, "X")?;
            if x.shape.len() < 2 {
                return Err(EngineError::invalid(format!(
                    "{} needs rank ≥ 2, got {:?}",
                    op.name(),
                    x.shape
                )));
            }
            let c = x.shape[1];
            let n_params = if matches!(op, Op::BatchNormalization { .. }) {
                5
            } else {
                3
            };
            for i in 1..n_params {
                let p = req(ins, i, "parameter")?;
                if p.shape.iter().product::<usize>() != c {
                    return Err(EngineError::invalid(format!(
                        "{}: parameter input {i} has shape {:?}, expected [{c}]",
                        op.name(),
                        p.shape
                    )));
                }
            }
            Ok(concrete(op.clone(), n_params, vec![(x.dtype, x.shape.to_vec())]))
        }
        Op::LayerNormalization { axis, epsilon } => {
            let x = req(ins, 0, "X")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            let mut stat = x.shape.to_vec();
            for d in stat.iter_mut().skip(ax) {
                *d = 1;
            }
            let mut outs = vec![(x.dtype, x.shape.to_vec())];
            for _ in 1..n_out {
                outs.push((DataType::F32, stat.clone()));
            }
            Ok(concrete(
                Op::LayerNormalization {
                    axis: ax as i64,
                    epsilon: *epsilon,
                },
                n_in.min(3),
                outs,
            ))
        }
        other => Err(wrong_family(other, "norm")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::BatchNormalization { epsilon } => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), "BatchNormalization")?;
            let p: Vec<Vec<f32>> = (1..5)
                .map(|i| arg(ins, i).map(|(b, _)| b.to_f32()))
                .collect::<Result<_>>()?;
            let inner: usize = sx[2..].iter().product();
            one(back(
                x.dtype(),
                norm::batch_norm(
                    &f32_of(x),
                    sx[0],
                    sx[1],
                    inner,
                    &p[0],
                    &p[1],
                    &p[2],
                    &p[3],
                    *epsilon,
                ),
            ))
        }
        Op::InstanceNormalization { epsilon } => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), "InstanceNormalization")?;
            let s = arg(ins, 1)?.0.to_f32();
            let b = arg(ins, 2)?.0.to_f32();
            let inner: usize = sx[2..].iter().product();
            one(back(
                x.dtype(),
                norm::instance_norm(&f32_of(x), sx[1], inner, &s, &b, *epsilon),
            ))
        }
        Op::LayerNormalization { axis, epsilon } => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), "LayerNormalization")?;
            let s = arg(ins, 1)?.0.to_f32();
            let b = ins.get(2).copied().flatten().map(|(b, _)| b.to_f32());
            let d: usize = sx[*axis as usize..].iter().product();
            let (y, m, i) = norm::layer_norm(&f32_of(x), d, &s, b.as_deref(), *epsilon);
            let mut res = vec![back(x.dtype(), y)];
            if outs.len() > 1 {
                res.push(Buf::from_f32(outs[1].0, m));
            }
            if outs.len() > 2 {
                res.push(Buf::from_f32(outs[2].0, i));
            }
            Ok(res)
        }
        other => Err(wrong_family(other, "norm")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::BatchNormalization { epsilon } => {
            let x = c.input(n, 0)?;
            let mut ops = vec![x.clone()];
            for i in 1..5 {
                let t = c.input(n, i)?;
                let mut shape = vec![t.numel()];
                shape.extend(std::iter::repeat_n(1, x.rank().saturating_sub(2)));
                ops.push(c.b.alias(&t, &shape)?);
            }
            // (x - mean) * scale / sqrt(var + eps) + bias
            let prog = EwProgram {
                nodes: vec![
                    EwNode::Operand(0),
                    EwNode::Operand(3),
                    EwNode::Binary(expr::BinaryOp::Sub, 0, 1),
                    EwNode::Operand(4),
                    EwNode::Const(*epsilon),
                    EwNode::Binary(expr::BinaryOp::Add, 3, 4),
                    EwNode::Unary(expr::UnaryOp::Sqrt, 5),
                    EwNode::Operand(1),
                    EwNode::Binary(expr::BinaryOp::Div, 7, 6),
                    EwNode::Binary(expr::BinaryOp::Mul, 2, 8),
                    EwNode::Operand(2),
                    EwNode::Binary(expr::BinaryOp::Add, 9, 10),
                ],
            };
            let refs: Vec<&DTensor> = ops.iter().collect();
            let out = c.dev_type(Compiler::out_id(n, 0)?)?;
            let y = elementwise::elementwise(&mut c.b, &name, &prog, &refs, out, &x.shape)?;
            c.set(n, 0, y)
        }
        Op::InstanceNormalization { epsilon } => {
            let x = c.input(n, 0)?;
            let s = c.input(n, 1)?;
            let bias = c.input(n, 2)?;
            let r = reduce::normalise(&mut c.b, &name, &x, &s, Some(&bias), 2, *epsilon, true, false)?;
            c.set(n, 0, r.y)
        }
        Op::LayerNormalization { axis, epsilon } => {
            let x = c.input(n, 0)?;
            let axis = usize_axis(*axis, x.rank())?;
            let norm_shape = x.shape[axis..].to_vec();
            let l: usize = norm_shape.iter().product();
            let mut s = c.input(n, 1)?;
            if s.numel() != l {
                s = copy::expand(&mut c.b, &format!("{name}.scale"), &s, &norm_shape)?;
            }
            let mut bias = c.opt_input(n, 2)?;
            if let Some(bt) = &bias
                && bt.numel() != l
            {
                bias = Some(copy::expand(&mut c.b, &format!("{name}.bias"), bt, &norm_shape)?);
            }
            let want_stats = n.output(1).is_some() || n.output(2).is_some();
            let r = reduce::normalise(
                &mut c.b,
                &name,
                &x,
                &s,
                bias.as_ref(),
                axis,
                *epsilon,
                false,
                want_stats,
            )?;
            c.set(n, 0, r.y)?;
            if let Some(stats) = r.stats {
                let rows: usize = x.shape[..axis].iter().product();
                let st = c.b.alias(&stats, &[2, rows])?;
                for (k, out) in [(0usize, 1usize), (1, 2)] {
                    if n.output(out).is_some() {
                        let nm = c.out_name(n, out);
                        let part = copy::slice(&mut c.b, &nm, &st, &[k as i64, 0], &[1, 1], &[1, rows])?;
                        c.set(n, out, part)?;
                    }
                }
            }
            Ok(())
        }
        other => Err(gpu_wrong_family(other, "norm")),
    }
}

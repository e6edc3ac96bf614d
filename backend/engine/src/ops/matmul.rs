//! Matrix products: MatMul and Gemm, with their fused element-wise epilogues.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::epilogue::Epi;
use crate::cpu::matmul::{GemmC, gemm_f32, matmul_f32};
use crate::wgpu::expr::{EwNode, EwProgram};
use crate::wgpu::kernels::matmul::{self, Epilogue};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("MatMul", 1, convert, &FAMILY),
    OnnxOp::new("Gemm", 7, convert, &FAMILY),
];

/// The IR ops of this module: MatMul, Gemm.
pub(super) static FAMILY: Family = Family {
    name: "matmul",
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
        "MatMul" => Ok(Converted::Node(
            Op::MatMul {
                trans_a: false,
                trans_b: false,
                epilogue: Default::default(),
            },
            ins,
        )),
        "Gemm" => Ok(Converted::Node(
            Op::Gemm {
                alpha: a.float("alpha", 1.0)?,
                beta: a.float("beta", 1.0)?,
                trans_a: a.int("transA", 0)? != 0,
                trans_b: a.int("transB", 0)? != 0,
                epilogue: Default::default(),
            },
            ins,
        )),
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::MatMul {
            trans_a,
            trans_b,
            epilogue,
        } => {
            let a = req(ins, 0, "A")?;
            let b = req(ins, 1, "B")?;
            if a.shape.is_empty() || b.shape.is_empty() {
                return Err(EngineError::invalid("MatMul inputs must have rank ≥ 1"));
            }
            let mut sa = a.shape.to_vec();
            let mut sb = b.shape.to_vec();
            let a1 = sa.len() == 1;
            let b1 = sb.len() == 1;
            if a1 {
                sa.insert(0, 1);
            }
            if b1 {
                sb.push(1);
            }
            let (ra, rb) = (sa.len(), sb.len());
            if *trans_a {
                sa.swap(ra - 1, ra - 2);
            }
            if *trans_b {
                sb.swap(rb - 1, rb - 2);
            }
            let (m, k) = (sa[ra - 2], sa[ra - 1]);
            let (k2, nn) = (sb[rb - 2], sb[rb - 1]);
            if k != k2 {
                return Err(EngineError::invalid(format!(
                    "MatMul: A {:?} and B {:?} have mismatching inner dims {k} and {k2}",
                    a.shape, b.shape
                )));
            }
            let mut out = broadcast_shapes(&sa[..ra - 2], &sb[..rb - 2])?;
            if !a1 {
                out.push(m);
            }
            if !b1 {
                out.push(nn);
            }
            check_epilogue(epilogue, ins, &out)?;
            Ok(concrete(op.clone(), n_in, vec![(a.dtype, out)]))
        }
        Op::Gemm {
            trans_a,
            trans_b,
            epilogue,
            ..
        } => {
            let a = req(ins, 0, "A")?;
            let b = req(ins, 1, "B")?;
            if a.shape.len() != 2 || b.shape.len() != 2 {
                return Err(EngineError::invalid(format!(
                    "Gemm needs 2-D inputs, got {:?} and {:?}",
                    a.shape, b.shape
                )));
            }
            let (m, k) = if *trans_a {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (k2, n) = if *trans_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if k != k2 {
                return Err(EngineError::invalid(format!(
                    "Gemm: inner dims differ ({k} vs {k2}) for A {:?}, B {:?}",
                    a.shape, b.shape
                )));
            }
            if let Some(c) = opt(ins, 2) {
                let s = broadcast_shapes(c.shape, &[m, n])?;
                if s != [m, n] {
                    return Err(EngineError::invalid(format!(
                        "Gemm: C {:?} does not broadcast to [{m}, {n}]",
                        c.shape
                    )));
                }
            }
            check_epilogue(epilogue, ins, &[m, n])?;
            Ok(concrete(op.clone(), n_in, vec![(a.dtype, vec![m, n])]))
        }
        other => Err(wrong_family(other, "matmul")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let rhs = match prep {
        Some(Prepared::Rhs(p)) => Some(p),
        _ => None,
    };
    let out0 = || outs.first().map(|o| o.1.as_slice()).unwrap_or(&[]);
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::MatMul {
            trans_a,
            trans_b,
            epilogue,
        } => {
            let (a, sa) = arg(ins, 0)?;
            let (b, sb) = arg(ins, 1)?;
            float_only(a.dtype(), "MatMul")?;
            let mut pa = sa.to_vec();
            let mut pb = sb.to_vec();
            if pa.len() == 1 {
                pa.insert(0, 1);
            }
            if pb.len() == 1 {
                pb.push(1);
            }
            let r = out0().len();
            let batch = &out0()[..r.saturating_sub(2).min(r)];
            let batch: Vec<usize> = if sa.len() == 1 || sb.len() == 1 {
                // promoted dims were dropped from the output; recompute batch dims
                let ba = &pa[..pa.len() - 2];
                let bb = &pb[..pb.len() - 2];
                broadcast_shapes(ba, bb)?
            } else {
                batch.to_vec()
            };
            let epi = Epi::new(epilogue, ins, out0(), out0().len().saturating_sub(1))?;
            let y = matmul_f32(
                &f32_of(a),
                &pa,
                *trans_a,
                &f32_of(b),
                &pb,
                *trans_b,
                &batch,
                &epi,
                rhs,
            )?;
            one(back(a.dtype(), y))
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            epilogue,
        } => {
            let (a, sa) = arg(ins, 0)?;
            let (b, sb) = arg(ins, 1)?;
            float_only(a.dtype(), "Gemm")?;
            let (m, n) = (out0()[0], out0()[1]);
            let cv = ins.get(2).copied().flatten().map(|(c, sc)| (f32_of(c), sc));
            let c = match &cv {
                Some((c, sc)) if *beta != 0.0 => GemmC::Some(c, sc, *beta),
                _ => GemmC::None,
            };
            let epi = Epi::new(epilogue, ins, out0(), 1)?;
            let y = gemm_f32(
                *alpha,
                &f32_of(a),
                sa,
                *trans_a,
                &f32_of(b),
                sb,
                *trans_b,
                c,
                [m, n],
                &epi,
                rhs,
            )?;
            one(back(a.dtype(), y))
        }
        other => Err(wrong_family(other, "matmul")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::MatMul {
            trans_a,
            trans_b,
            epilogue,
        } => {
            let mut a = c.input(n, 0)?;
            let mut bm = c.input(n, 1)?;
            if a.rank() == 1 {
                a = c.b.alias(&a, &[1, a.shape[0]])?;
            }
            if bm.rank() == 1 {
                bm = c.b.alias(&bm, &[bm.shape[0], 1])?;
            }
            let out_dt = c.dev_type(Compiler::out_id(n, 0)?)?;
            let out_shape = c.out_shape(n, 0)?;
            let (prog, ops) = c.epilogue(
                n,
                EwProgram {
                    nodes: vec![EwNode::Acc],
                },
                Vec::new(),
                epilogue,
            )?;
            let refs: Vec<&DTensor> = ops.iter().collect();
            let ep = Epilogue {
                program: (!epilogue.is_empty()).then_some(prog),
                operands: refs,
                shape: Some(out_shape),
            };
            let y = matmul::matmul(&mut c.b, &name, &a, &bm, *trans_a, *trans_b, out_dt, &ep)?;
            c.set(n, 0, y)
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
            epilogue,
        } => {
            let a = c.input(n, 0)?;
            let bm = c.input(n, 1)?;
            let cm = c.opt_input(n, 2)?;
            let out_dt = c.dev_type(Compiler::out_id(n, 0)?)?;
            let prefix = matmul::gemm_prologue(*alpha, *beta, cm.is_some());
            let used_c = prefix.nodes.iter().any(|x| matches!(x, EwNode::Operand(0)));
            let operands = if used_c {
                cm.into_iter().collect()
            } else {
                Vec::new()
            };
            let trivial = prefix.nodes.len() == 1 && epilogue.is_empty();
            let (prog, ops) = c.epilogue(n, prefix, operands, epilogue)?;
            let refs: Vec<&DTensor> = ops.iter().collect();
            let ep = Epilogue {
                program: (!trivial).then_some(prog),
                operands: refs,
                shape: None,
            };
            let y = matmul::matmul(&mut c.b, &name, &a, &bm, *trans_a, *trans_b, out_dt, &ep)?;
            c.set(n, 0, y)
        }
        other => Err(gpu_wrong_family(other, "matmul")),
    }
}

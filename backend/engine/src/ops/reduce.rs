//! Reductions along axes: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax, TopK.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

// The dtype macros instantiate the same code for Copy and non-Copy (string) elements.
#![allow(clippy::clone_on_copy)]

use super::prelude::*;
use crate::cpu::buf::map_same;
use crate::cpu::elementwise::cast;
use crate::cpu::reduce;
use crate::ir::ReduceOp;
use crate::wgpu::kernels::reduce::{self as gpu_reduce, Reduction};
use crate::wgpu::usize_axis;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("ReduceMean", 1, convert, &FAMILY),
    OnnxOp::new("ReduceSum", 1, convert, &FAMILY),
    OnnxOp::new("ReduceMax", 1, convert, &FAMILY),
    OnnxOp::new("ReduceMin", 1, convert, &FAMILY),
    OnnxOp::new("ReduceProd", 1, convert, &FAMILY),
    OnnxOp::new("ReduceL2", 1, convert, &FAMILY),
    OnnxOp::new("ReduceL1", 1, convert, &FAMILY),
    OnnxOp::new("ReduceSumSquare", 1, convert, &FAMILY),
    OnnxOp::new("ReduceLogSum", 1, convert, &FAMILY),
    OnnxOp::new("ReduceLogSumExp", 1, convert, &FAMILY),
    OnnxOp::new("ArgMax", 1, convert, &FAMILY),
    OnnxOp::new("ArgMin", 1, convert, &FAMILY),
    OnnxOp::new("Softmax", 1, convert, &FAMILY),
    OnnxOp::new("LogSoftmax", 1, convert, &FAMILY),
    OnnxOp::new("TopK", 1, convert, &FAMILY),
];

/// The IR ops of this module: Reduce, ArgReduce, Softmax, TopK.
pub(super) static FAMILY: Family = Family {
    name: "reduce",
    plan_time: false,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let opset = cx.opset;
    let ins = inputs.to_vec();
    let op = n.op_type.as_str();
    match op {
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2" | "ReduceL1"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => {
            let rop = match op {
                "ReduceMean" => ReduceOp::Mean,
                "ReduceSum" => ReduceOp::Sum,
                "ReduceMax" => ReduceOp::Max,
                "ReduceMin" => ReduceOp::Min,
                "ReduceProd" => ReduceOp::Prod,
                "ReduceL2" => ReduceOp::L2,
                "ReduceL1" => ReduceOp::L1,
                "ReduceSumSquare" => ReduceOp::SumSquare,
                "ReduceLogSum" => ReduceOp::LogSum,
                _ => ReduceOp::LogSumExp,
            };
            let mut ins = ins;
            let attr_axes = a.ints("axes")?;
            if let Some(axes) = attr_axes {
                ins.truncate(1);
                ins.push(Some(cx.constant(name, ints_const(&axes))));
            }
            Ok(Converted::Node(
                Op::Reduce {
                    op: rop,
                    axes: Vec::new(),
                    keepdims: a.int("keepdims", 1)? != 0,
                    noop_with_empty_axes: a.int("noop_with_empty_axes", 0)? != 0,
                },
                ins,
            ))
        }
        "ArgMax" | "ArgMin" => Ok(Converted::Node(
            Op::ArgReduce {
                max: op == "ArgMax",
                axis: a.int("axis", 0)?,
                keepdims: a.int("keepdims", 1)? != 0,
                select_last_index: a.int("select_last_index", 0)? != 0,
            },
            ins,
        )),
        "Softmax" | "LogSoftmax" => Ok(Converted::Node(
            Op::Softmax {
                axis: a.int("axis", if opset < 13 { 1 } else { -1 })?,
                log: op == "LogSoftmax",
                coerce_2d: opset < 13,
                nan_rows_to_zero: false,
            },
            ins,
        )),
        "TopK" => {
            let mut ins = ins;
            if opset < 10 {
                let k = a.int("k", 0)?;
                ins.truncate(1);
                ins.push(Some(cx.constant(name, ints_const(&[k]))));
            }
            Ok(Converted::Node(
                Op::TopK {
                    axis: a.int("axis", -1)?,
                    k: 0,
                    largest: a.int("largest", 1)? != 0,
                    sorted: a.int("sorted", 1)? != 0,
                },
                ins,
            ))
        }
        other => Err(not_registered(other)),
    }
}

fn param_input(op: &Op, i: usize) -> bool {
    matches!(op, Op::Reduce { .. } | Op::TopK { .. }) && i == 1
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::Reduce {
            op: rop,
            axes,
            keepdims,
            noop_with_empty_axes,
        } => {
            let x = req(ins, 0, "data")?;
            let mut ax: Vec<i64> = axes.clone();
            if let Some(v) = opt(ins, 1) {
                ax = host_ints(v, "Reduce axes")?;
            }
            let rank = x.shape.len();
            if ax.is_empty() {
                if *noop_with_empty_axes {
                    return Ok(Resolved::Alias(0));
                }
                ax = (0..rank as i64).collect();
            }
            let mut norm: Vec<usize> = ax
                .iter()
                .map(|&a| norm_axis(a, rank, "axis"))
                .collect::<Result<_>>()?;
            norm.sort_unstable();
            norm.dedup();
            let mut out = Vec::new();
            for (i, &d) in x.shape.iter().enumerate() {
                if norm.contains(&i) {
                    if *keepdims {
                        out.push(1);
                    }
                } else {
                    out.push(d);
                }
            }
            Ok(Resolved::Op {
                op: Op::Reduce {
                    op: *rop,
                    axes: norm.iter().map(|&a| a as i64).collect(),
                    keepdims: *keepdims,
                    noop_with_empty_axes: false,
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        Op::ArgReduce {
            max,
            axis,
            keepdims,
            select_last_index,
        } => {
            let x = req(ins, 0, "data")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            let mut out = x.shape.to_vec();
            if *keepdims {
                out[ax] = 1;
            } else {
                out.remove(ax);
            }
            Ok(concrete(
                Op::ArgReduce {
                    max: *max,
                    axis: ax as i64,
                    keepdims: *keepdims,
                    select_last_index: *select_last_index,
                },
                1,
                vec![(DataType::I64, out)],
            ))
        }
        Op::Softmax {
            axis,
            log,
            coerce_2d,
            nan_rows_to_zero,
        } => {
            let x = req(ins, 0, "input")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            Ok(concrete(
                Op::Softmax {
                    axis: ax as i64,
                    log: *log,
                    coerce_2d: *coerce_2d,
                    nan_rows_to_zero: *nan_rows_to_zero,
                },
                1,
                vec![(x.dtype, x.shape.to_vec())],
            ))
        }
        Op::TopK {
            axis,
            largest,
            sorted,
            ..
        } => {
            let x = req(ins, 0, "X")?;
            let k = host_ints(req(ins, 1, "K")?, "TopK K")?;
            let k = *k.first().ok_or_else(|| EngineError::invalid("TopK K is empty"))?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            if k < 0 || k as usize > x.shape[ax] {
                return Err(EngineError::invalid(format!(
                    "TopK K={k} is outside [0, {}]",
                    x.shape[ax]
                )));
            }
            let mut out = x.shape.to_vec();
            out[ax] = k as usize;
            Ok(Resolved::Op {
                op: Op::TopK {
                    axis: ax as i64,
                    k: k as usize,
                    largest: *largest,
                    sorted: *sorted,
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out.clone()), (DataType::I64, out)],
            })
        }
        other => Err(wrong_family(other, "reduce")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    _outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::Reduce { op: rop, axes, .. } => {
            let (x, sx) = arg(ins, 0)?;
            let axes: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
            one(match x {
                Buf::F32(v) => Buf::F32(reduce::reduce_f32(v, sx, &axes, *rop)),
                Buf::F16(_) | Buf::BF16(_) => {
                    back(x.dtype(), reduce::reduce_f32(&x.to_f32(), sx, &axes, *rop))
                }
                _ => {
                    let r = reduce::reduce_f64(&x.to_f64(), sx, &axes, *rop);
                    cast(&Buf::F64(r), x.dtype())?
                }
            })
        }
        Op::ArgReduce {
            max,
            axis,
            select_last_index,
            ..
        } => {
            let (x, sx) = arg(ins, 0)?;
            one(Buf::I64(reduce::arg_reduce(
                &x.to_f64(),
                sx,
                *axis as usize,
                *max,
                *select_last_index,
            )))
        }
        Op::Softmax {
            axis,
            log,
            coerce_2d,
            nan_rows_to_zero,
        } => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), "Softmax")?;
            let a = *axis as usize;
            let outer: usize = sx[..a].iter().product();
            let (d, inner) = if *coerce_2d {
                (sx[a..].iter().product(), 1)
            } else {
                (sx[a], sx[a + 1..].iter().product())
            };
            one(back(
                x.dtype(),
                reduce::softmax_f32(&f32_of(x), outer, d, inner, *log, *nan_rows_to_zero),
            ))
        }
        Op::TopK { axis, k, largest, .. } => {
            let (x, sx) = arg(ins, 0)?;
            let (src, idx) = reduce::topk(&x.to_f64(), sx, *axis as usize, *k, *largest);
            let vals = map_same!(x, v => src.iter().map(|&i| v[i].clone()).collect());
            Ok(vec![vals, Buf::I64(idx)])
        }
        other => Err(wrong_family(other, "reduce")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::Reduce {
            op, axes, keepdims, ..
        } => {
            let x = c.input(n, 0)?;
            let mut ax = axes
                .iter()
                .map(|&a| usize_axis(a, x.rank()))
                .collect::<GpuResult<Vec<_>>>()?;
            if ax.is_empty() {
                ax = (0..x.rank()).collect();
            }
            ax.sort_unstable();
            ax.dedup();
            let op = match op {
                ReduceOp::Mean => Reduction::Mean,
                ReduceOp::Sum => Reduction::Sum,
                ReduceOp::Max => Reduction::Max,
                ReduceOp::Min => Reduction::Min,
                ReduceOp::Prod => Reduction::Prod,
                ReduceOp::L2 => Reduction::L2,
                ReduceOp::L1 => Reduction::L1,
                ReduceOp::SumSquare => Reduction::SumSquare,
                ReduceOp::LogSum => Reduction::LogSum,
                ReduceOp::LogSumExp => Reduction::LogSumExp,
            };
            let y = gpu_reduce::reduce(&mut c.b, &name, &x, op, &ax, *keepdims)?;
            c.set(n, 0, y)
        }
        Op::ArgReduce {
            max,
            axis,
            keepdims,
            select_last_index,
        } => {
            let x = c.input(n, 0)?;
            let axis = usize_axis(*axis, x.rank())?;
            let y = gpu_reduce::arg_reduce(&mut c.b, &name, &x, axis, *max, *keepdims, *select_last_index)?;
            c.set(n, 0, y)
        }
        Op::Softmax {
            axis,
            log,
            coerce_2d,
            nan_rows_to_zero,
        } => {
            let x = c.input(n, 0)?;
            let axis = usize_axis(*axis, x.rank())?;
            let y = gpu_reduce::softmax(&mut c.b, &name, &x, axis, *log, *coerce_2d, *nan_rows_to_zero)?;
            c.set(n, 0, y)
        }
        Op::TopK { axis, k, largest, .. } => {
            let x = c.input(n, 0)?;
            let axis = usize_axis(*axis, x.rank())?;
            let iname = c.out_name(n, 1);
            let (v, i) = gpu_reduce::top_k(&mut c.b, [&name, &iname], &x, axis, *k, *largest)?;
            c.set(n, 0, v)?;
            c.set(n, 1, i)
        }
        other => Err(gpu_wrong_family(other, "reduce")),
    }
}

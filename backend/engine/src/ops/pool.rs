//! Pooling: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::{pool, reduce};
use crate::ir::{AutoPad, ReduceOp};
use crate::wgpu::kernels::pool::{self as gpu_pool, PoolGeom, PoolKind};
use crate::wgpu::kernels::reduce::{self as gpu_reduce, Reduction};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("MaxPool", 1, convert, &FAMILY),
    OnnxOp::new("AveragePool", 7, convert, &FAMILY),
    OnnxOp::new("GlobalAveragePool", 1, convert, &FAMILY),
    OnnxOp::new("GlobalMaxPool", 1, convert, &FAMILY),
];

/// The IR ops of this module: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.
pub(super) static FAMILY: Family = Family {
    name: "pool",
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
        "MaxPool" => Ok(Converted::Node(
            Op::MaxPool {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                ceil_mode: a.int("ceil_mode", 0)? != 0,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
                storage_order_col: a.int("storage_order", 0)? != 0,
            },
            ins,
        )),
        "AveragePool" => Ok(Converted::Node(
            Op::AveragePool {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                ceil_mode: a.int("ceil_mode", 0)? != 0,
                count_include_pad: a.int("count_include_pad", 0)? != 0,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
            },
            ins,
        )),
        "GlobalAveragePool" => Ok(Converted::Node(Op::GlobalAveragePool, ins)),
        "GlobalMaxPool" => Ok(Converted::Node(Op::GlobalMaxPool, ins)),
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    match op {
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
            storage_order_col,
        } => {
            let x = req(ins, 0, "X")?;
            if x.shape.len() < 3 || kernel_shape.len() != x.shape.len() - 2 {
                return Err(EngineError::invalid(format!(
                    "MaxPool: kernel {kernel_shape:?} does not fit X {:?}",
                    x.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let (spatial, pads) = window(
                &x.shape[2..],
                kernel_shape,
                &strides,
                pads,
                &dilations,
                *auto_pad,
                *ceil_mode,
            )?;
            let mut out = x.shape[..2].to_vec();
            out.extend(spatial);
            let mut outs = vec![(x.dtype, out.clone())];
            if n_out > 1 {
                outs.push((DataType::I64, out));
            }
            Ok(concrete(
                Op::MaxPool {
                    kernel_shape: kernel_shape.clone(),
                    strides,
                    pads,
                    dilations,
                    ceil_mode: *ceil_mode,
                    auto_pad: AutoPad::NotSet,
                    storage_order_col: *storage_order_col,
                },
                1,
                outs,
            ))
        }
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            count_include_pad,
            auto_pad,
        } => {
            let x = req(ins, 0, "X")?;
            if x.shape.len() < 3 || kernel_shape.len() != x.shape.len() - 2 {
                return Err(EngineError::invalid(format!(
                    "AveragePool: kernel {kernel_shape:?} does not fit X {:?}",
                    x.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let (spatial, pads) = window(
                &x.shape[2..],
                kernel_shape,
                &strides,
                pads,
                &dilations,
                *auto_pad,
                *ceil_mode,
            )?;
            let mut out = x.shape[..2].to_vec();
            out.extend(spatial);
            Ok(concrete(
                Op::AveragePool {
                    kernel_shape: kernel_shape.clone(),
                    strides,
                    pads,
                    dilations,
                    ceil_mode: *ceil_mode,
                    count_include_pad: *count_include_pad,
                    auto_pad: AutoPad::NotSet,
                },
                1,
                vec![(x.dtype, out)],
            ))
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let x = req(ins, 0, "X")?;
            if x.shape.len() < 2 {
                return Err(EngineError::invalid("global pooling needs rank ≥ 2"));
            }
            let mut out = x.shape[..2].to_vec();
            out.extend(std::iter::repeat_n(1, x.shape.len() - 2));
            Ok(concrete(op.clone(), 1, vec![(x.dtype, out)]))
        }
        other => Err(wrong_family(other, "pool")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let out0 = || outs.first().map(|o| o.1.as_slice()).unwrap_or(&[]);
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            storage_order_col,
            ..
        } => {
            let (x, sx) = arg(ins, 0)?;
            let o = out0();
            let g = pool::PoolGeom {
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            let planes = sx[0] * sx[1];
            // 8-bit codes (a QDQ model's, once the QDQ pass has taken the pair away) pooled as they are
            if outs.len() == 1 {
                let codes = match x {
                    Buf::U8(v) => pool::max_pool_codes(v, planes, &g).map(Buf::U8),
                    Buf::I8(v) => pool::max_pool_codes(v, planes, &g).map(Buf::I8),
                    _ => None,
                };
                if let Some(y) = codes {
                    return one(y);
                }
            }
            let xv = f32_of(x);
            let (y, idx) = pool::max_pool(&xv, planes, &g, *storage_order_col, outs.len() > 1);
            let y = match x {
                Buf::F32(_) | Buf::F16(_) | Buf::BF16(_) | Buf::F64(_) => back(x.dtype(), y),
                Buf::U8(_) => Buf::U8(y.into_iter().map(|v| v as u8).collect()),
                Buf::I8(_) => Buf::I8(y.into_iter().map(|v| v as i8).collect()),
                other => return Err(EngineError::unsupported(format!("MaxPool on {}", other.dtype()))),
            };
            let mut res = vec![y];
            if outs.len() > 1 {
                res.push(Buf::I64(idx));
            }
            Ok(res)
        }
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            count_include_pad,
            ..
        } => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), "AveragePool")?;
            let o = out0();
            let g = pool::PoolGeom {
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            one(back(
                x.dtype(),
                pool::avg_pool(&f32_of(x), sx[0] * sx[1], &g, *count_include_pad),
            ))
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let (x, sx) = arg(ins, 0)?;
            float_only(x.dtype(), op.name())?;
            let axes: Vec<usize> = (2..sx.len()).collect();
            let rop = if matches!(op, Op::GlobalAveragePool) {
                ReduceOp::Mean
            } else {
                ReduceOp::Max
            };
            one(back(x.dtype(), reduce::reduce_f32(&f32_of(x), sx, &axes, rop)))
        }
        other => Err(wrong_family(other, "pool")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            storage_order_col,
            ..
        } => {
            let x = c.input(n, 0)?;
            let out_shape = c.out_shape(n, 0)?;
            let geom = PoolGeom {
                kernel: kernel_shape.clone(),
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
            };
            let kind = PoolKind::Max {
                indices: n.output(1).is_some(),
                col_major: *storage_order_col,
            };
            let idx_name = c.out_name(n, 1);
            let (y, idx) = gpu_pool::pool(&mut c.b, [&name, &idx_name], &x, &geom, kind, &out_shape)?;
            c.set(n, 0, y)?;
            if let Some(idx) = idx {
                c.set(n, 1, idx)?;
            }
            Ok(())
        }
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            count_include_pad,
            ..
        } => {
            let x = c.input(n, 0)?;
            let out_shape = c.out_shape(n, 0)?;
            let geom = PoolGeom {
                kernel: kernel_shape.clone(),
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
            };
            let kind = PoolKind::Average {
                count_include_pad: *count_include_pad,
            };
            let (y, _) = gpu_pool::pool(&mut c.b, [&name, "-"], &x, &geom, kind, &out_shape)?;
            c.set(n, 0, y)
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let x = c.input(n, 0)?;
            let axes: Vec<usize> = (2..x.rank()).collect();
            let op = if matches!(n.op, Op::GlobalMaxPool) {
                Reduction::Max
            } else {
                Reduction::Mean
            };
            let y = gpu_reduce::reduce(&mut c.b, &name, &x, op, &axes, true)?;
            c.set(n, 0, y)
        }
        other => Err(gpu_wrong_family(other, "pool")),
    }
}

//! Dispatch of one concrete node to its kernel.
// The dtype macros instantiate the same code for Copy and non-Copy (string) elements.
#![allow(clippy::clone_on_copy)]

use std::borrow::Cow;

use crate::cpu::buf::{Buf, map_same, visit};
use crate::cpu::conv::{ConvGeom, conv_f32, conv_transpose_f32};
use crate::cpu::elementwise::{binary, cast, unary, where_};
use crate::cpu::epilogue::Epi;
use crate::cpu::matmul::{GemmC, gemm_f32, matmul_f32};
use crate::cpu::mm::{PackedA, PackedB};
use crate::cpu::{movement, norm, pool, reduce, rnn};
use crate::error::{EngineError, Result};
use crate::ir::{Op, ReduceOp};
use crate::tensor::DataType;

/// One input of a node: buffer and shape.
pub(crate) type In<'a> = Option<(&'a Buf, &'a [usize])>;

fn req<'a>(ins: &[In<'a>], i: usize) -> Result<(&'a Buf, &'a [usize])> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::internal(format!("missing input {i}")))
}

fn f32_of(b: &Buf) -> Cow<'_, [f32]> {
    match b {
        Buf::F32(v) => Cow::Borrowed(v.as_slice()),
        other => Cow::Owned(other.to_f32()),
    }
}

/// Wrap f32 results back into the dtype of the op (floats only).
fn back(dtype: DataType, v: Vec<f32>) -> Buf {
    Buf::from_f32(dtype, v)
}

fn float_only(dtype: DataType, what: &str) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(EngineError::unsupported(format!("{what} on {dtype} tensors")))
    }
}

/// Constant operands of a node converted once, when its plan is built.
pub(crate) enum Prepared {
    /// a Conv's weights, per group, packed as the A operand
    ConvWeights(Vec<PackedA>),
    /// a MatMul's or Gemm's constant B, packed
    Rhs(PackedB),
}

/// Run one concrete op. `outs` are the output dtypes and shapes; `wanted[i]` false skips output i
/// when the kernel can.
pub(crate) fn exec(op: &Op, ins: &[In<'_>], outs: &[(DataType, Vec<usize>)]) -> Result<Vec<Buf>> {
    exec_prepared(op, ins, outs, None)
}

/// [`exec`] with the node's [`Prepared`] operands, if its plan made any.
pub(crate) fn exec_prepared(
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
        Op::Unary(u) => one(unary(*u, req(ins, 0)?.0)?),
        Op::Binary(b) => {
            let (x, sx) = req(ins, 0)?;
            let (y, sy) = req(ins, 1)?;
            one(binary(*b, x, sx, y, sy, out0())?)
        }
        Op::Where => {
            let (c, sc) = req(ins, 0)?;
            let (x, sx) = req(ins, 1)?;
            let (y, sy) = req(ins, 2)?;
            one(where_(c, sc, x, sx, y, sy, out0())?)
        }
        Op::Cast { to } => one(cast(req(ins, 0)?.0, *to)?),
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => one(req(ins, 0)?.0.clone()),
        Op::MatMul {
            trans_a,
            trans_b,
            epilogue,
        } => {
            let (a, sa) = req(ins, 0)?;
            let (b, sb) = req(ins, 1)?;
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
                crate::specialise::broadcast_shapes(ba, bb)?
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
            let (a, sa) = req(ins, 0)?;
            let (b, sb) = req(ins, 1)?;
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
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            activation,
            ..
        } => {
            let (x, sx) = req(ins, 0)?;
            let (w, sw) = req(ins, 1)?;
            float_only(x.dtype(), "Conv")?;
            let bias = ins.get(2).copied().flatten().map(|(b, _)| f32_of(b));
            let o = out0();
            let g = ConvGeom {
                n: sx[0],
                c: sx[1],
                m: sw[0],
                group: *group,
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            let epi = Epi::new(activation, ins, o, 2)?;
            let packed = match prep {
                Some(Prepared::ConvWeights(p)) => Some(p.as_slice()),
                _ => None,
            };
            let y = conv_f32(&f32_of(x), &f32_of(w), bias.as_deref(), &g, &epi, packed)?;
            one(back(x.dtype(), y))
        }
        Op::ConvTranspose {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            ..
        } => {
            let (x, sx) = req(ins, 0)?;
            let (w, sw) = req(ins, 1)?;
            float_only(x.dtype(), "ConvTranspose")?;
            let bias = ins.get(2).copied().flatten().map(|(b, _)| f32_of(b));
            let o = out0();
            let g = ConvGeom {
                n: sx[0],
                c: sx[1],
                m: sw[1] * group,
                group: *group,
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            one(back(
                x.dtype(),
                conv_transpose_f32(&f32_of(x), &f32_of(w), bias.as_deref(), &g)?,
            ))
        }
        Op::BatchNormalization { epsilon } => {
            let (x, sx) = req(ins, 0)?;
            float_only(x.dtype(), "BatchNormalization")?;
            let p: Vec<Vec<f32>> = (1..5)
                .map(|i| req(ins, i).map(|(b, _)| b.to_f32()))
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
            let (x, sx) = req(ins, 0)?;
            float_only(x.dtype(), "InstanceNormalization")?;
            let s = req(ins, 1)?.0.to_f32();
            let b = req(ins, 2)?.0.to_f32();
            let inner: usize = sx[2..].iter().product();
            one(back(
                x.dtype(),
                norm::instance_norm(&f32_of(x), sx[1], inner, &s, &b, *epsilon),
            ))
        }
        Op::LayerNormalization { axis, epsilon } => {
            let (x, sx) = req(ins, 0)?;
            float_only(x.dtype(), "LayerNormalization")?;
            let s = req(ins, 1)?.0.to_f32();
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
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            storage_order_col,
            ..
        } => {
            let (x, sx) = req(ins, 0)?;
            let o = out0();
            let g = pool::PoolGeom {
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            let xv = f32_of(x);
            let (y, idx) = pool::max_pool(&xv, sx[0] * sx[1], &g, *storage_order_col, outs.len() > 1);
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
            let (x, sx) = req(ins, 0)?;
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
            let (x, sx) = req(ins, 0)?;
            float_only(x.dtype(), op.name())?;
            let axes: Vec<usize> = (2..sx.len()).collect();
            let rop = if matches!(op, Op::GlobalAveragePool) {
                ReduceOp::Mean
            } else {
                ReduceOp::Max
            };
            one(back(x.dtype(), reduce::reduce_f32(&f32_of(x), sx, &axes, rop)))
        }
        Op::Reduce { op: rop, axes, .. } => {
            let (x, sx) = req(ins, 0)?;
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
            let (x, sx) = req(ins, 0)?;
            one(Buf::I64(reduce::arg_reduce(
                &x.to_f64(),
                sx,
                *axis as usize,
                *max,
                *select_last_index,
            )))
        }
        Op::Softmax { axis, log, coerce_2d } => {
            let (x, sx) = req(ins, 0)?;
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
                reduce::softmax_f32(&f32_of(x), outer, d, inner, *log),
            ))
        }
        Op::TopK { axis, k, largest, .. } => {
            let (x, sx) = req(ins, 0)?;
            let (src, idx) = reduce::topk(&x.to_f64(), sx, *axis as usize, *k, *largest);
            let vals = map_same!(x, v => src.iter().map(|&i| v[i].clone()).collect());
            Ok(vec![vals, Buf::I64(idx)])
        }
        Op::Transpose { perm } => {
            let (x, sx) = req(ins, 0)?;
            one(map_same!(x, v => movement::transpose(v, sx, perm)))
        }
        Op::Concat { axis } => {
            let first = req(ins, 0)?.0;
            let parts: Vec<(&Buf, &[usize])> = ins
                .iter()
                .map(|i| i.ok_or_else(|| EngineError::internal("Concat input")))
                .collect::<Result<_>>()?;
            let a = *axis as usize;
            macro_rules! cat {
                ($var:ident) => {{
                    let mut ps = Vec::with_capacity(parts.len());
                    for (b, s) in &parts {
                        let Buf::$var(v) = b else {
                            return Err(EngineError::invalid("Concat inputs have different types"));
                        };
                        ps.push((v.as_slice(), *s));
                    }
                    Buf::$var(movement::concat(&ps, a, out0()))
                }};
            }
            one(match first {
                Buf::F32(_) => cat!(F32),
                Buf::F64(_) => cat!(F64),
                Buf::F16(_) => cat!(F16),
                Buf::BF16(_) => cat!(BF16),
                Buf::I8(_) => cat!(I8),
                Buf::I16(_) => cat!(I16),
                Buf::I32(_) => cat!(I32),
                Buf::I64(_) => cat!(I64),
                Buf::U8(_) => cat!(U8),
                Buf::U16(_) => cat!(U16),
                Buf::U32(_) => cat!(U32),
                Buf::U64(_) => cat!(U64),
                Buf::Bool(_) => cat!(Bool),
                Buf::Str(_) => cat!(Str),
            })
        }
        Op::Split { axis, sizes } => {
            let (x, sx) = req(ins, 0)?;
            let a = *axis as usize;
            Ok(visit!(x, v => {
                let parts = movement::split(v, sx, a, sizes);
                let mut res = Vec::with_capacity(parts.len());
                for p in parts {
                    let mut b = x.clone();
                    set_same(&mut b, p);
                    res.push(b);
                }
                res
            }))
        }
        Op::Slice { starts, steps } => {
            let (x, sx) = req(ins, 0)?;
            one(map_same!(x, v => movement::slice(v, sx, starts, steps, out0())))
        }
        Op::Gather { axis } => {
            let (x, sx) = req(ins, 0)?;
            let idx = req(ins, 1)?.0.to_i64();
            let a = *axis as usize;
            Ok(vec![match x {
                Buf::F32(v) => Buf::F32(movement::gather(v, sx, a, &idx)?),
                _ => {
                    let mut err = None;
                    let r = map_same!(x, v => match movement::gather(v, sx, a, &idx) { Ok(r) => r, Err(e) => { err = Some(e); Vec::new() } });
                    if let Some(e) = err {
                        return Err(e);
                    }
                    r
                }
            }])
        }
        Op::GatherElements { axis } => {
            let (x, sx) = req(ins, 0)?;
            let (i, si) = req(ins, 1)?;
            let idx = i.to_i64();
            let a = *axis as usize;
            let mut err = None;
            let r = map_same!(x, v => match movement::gather_elements(v, sx, a, &idx, si) { Ok(r) => r, Err(e) => { err = Some(e); Vec::new() } });
            if let Some(e) = err {
                return Err(e);
            }
            one(r)
        }
        Op::Expand => {
            let (x, sx) = req(ins, 0)?;
            one(map_same!(x, v => movement::expand(v, sx, out0())))
        }
        Op::Tile { .. } => {
            let (x, sx) = req(ins, 0)?;
            one(map_same!(x, v => movement::tile(v, sx, out0())))
        }
        Op::Pad { mode, pads, value } => {
            let (x, sx) = req(ins, 0)?;
            let fill = cast(&Buf::F64(vec![*value]), x.dtype())?;
            let mut err = None;
            let r = crate::cpu::buf::pair_same!(x, &fill, (v, f) => match movement::pad(v, sx, pads, *mode, f[0].clone(), out0()) {
                Ok(r) => r,
                Err(e) => { err = Some(e); Vec::new() }
            })
            .ok_or_else(|| EngineError::internal("pad value type"))?;
            if let Some(e) = err {
                return Err(e);
            }
            one(r)
        }
        Op::DepthToSpace { blocksize, crd } => {
            let (x, sx) = req(ins, 0)?;
            one(map_same!(x, v => movement::depth_to_space(v, sx, *blocksize, *crd)))
        }
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            extrapolation_value,
            scales,
            roi,
            ..
        } => {
            let (x, sx) = req(ins, 0)?;
            let p = movement::ResizeParams {
                mode: *mode,
                coord: *coord,
                nearest: *nearest,
                cubic_a: *cubic_coeff_a,
                exclude_outside: *exclude_outside,
                extrapolation: *extrapolation_value,
                scales,
                roi,
            };
            let y = movement::resize_f32(&f32_of(x), sx, out0(), &p);
            one(if x.dtype().is_float() {
                back(x.dtype(), y)
            } else {
                cast(&Buf::F32(y), x.dtype())?
            })
        }
        Op::Lstm { attrs, input_forget } => rnn_exec(attrs, ins, outs, 4, *input_forget, false),
        Op::Gru {
            attrs,
            linear_before_reset,
        } => rnn_exec(attrs, ins, outs, 3, false, *linear_before_reset),
        Op::Shape { .. } | Op::Size | Op::ConstantOfShape { .. } | Op::Range | Op::If { .. } => Err(
            EngineError::internal(format!("{} reached the CPU executor", op.name())),
        ),
    }
}

/// Replace the vector inside `b` with `v` of the same element type.
fn set_same<T: 'static>(b: &mut Buf, v: Vec<T>) {
    let mut v = Some(v);
    visit!(b, inner => {
        let any: &mut dyn std::any::Any = inner;
        if let (Some(slot), Some(v)) = (any.downcast_mut::<Vec<T>>(), v.take()) {
            *slot = v;
        }
    })
}

fn rnn_exec(
    attrs: &crate::ir::RnnAttrs,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    gates: usize,
    input_forget: bool,
    lbr: bool,
) -> Result<Vec<Buf>> {
    let (x, sx) = req(ins, 0)?;
    float_only(x.dtype(), "RNN")?;
    let mut xv = x.to_f32();
    let (seq, batch) = if attrs.batch_major {
        (sx[1], sx[0])
    } else {
        (sx[0], sx[1])
    };
    if attrs.batch_major {
        xv = movement::transpose(&xv, sx, &[1, 0, 2]);
    }
    let get = |i: usize| ins.get(i).copied().flatten().map(|(b, _)| b.to_f32());
    let w = req(ins, 1)?.0.to_f32();
    let r = req(ins, 2)?.0.to_f32();
    let b = get(3);
    let lens = ins
        .get(4)
        .copied()
        .flatten()
        .map(|(b, _)| b.to_i64().into_iter().map(|v| v.max(0) as usize).collect());
    let mut h0 = get(5);
    let mut c0 = if gates == 4 { get(6) } else { None };
    let p = if gates == 4 { get(7) } else { None };
    let dirs = if attrs.direction == crate::ir::RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let h = attrs.hidden_size;
    if attrs.batch_major {
        h0 = h0.map(|v| movement::transpose(&v, &[batch, dirs, h], &[1, 0, 2]));
        c0 = c0.map(|v| movement::transpose(&v, &[batch, dirs, h], &[1, 0, 2]));
    }
    let inp = rnn::RnnInputs {
        x: &xv,
        seq,
        batch,
        input: sx[2],
        w: &w,
        r: &r,
        b: b.as_deref(),
        lens,
        h0: h0.as_deref(),
        c0: c0.as_deref(),
        p: p.as_deref(),
    };
    let o = rnn::run(attrs, &inp, gates, input_forget, lbr)?;
    let (mut y, mut yh, mut yc) = (o.y, o.yh, o.yc);
    if attrs.batch_major {
        y = movement::transpose(&y, &[seq, dirs, batch, h], &[2, 0, 1, 3]);
        yh = movement::transpose(&yh, &[dirs, batch, h], &[1, 0, 2]);
        yc = movement::transpose(&yc, &[dirs, batch, h], &[1, 0, 2]);
    }
    let dt = x.dtype();
    let mut res = vec![back(dt, y), back(dt, yh)];
    if gates == 4 {
        res.push(back(dt, yc));
    }
    res.truncate(outs.len().max(1));
    Ok(res)
}

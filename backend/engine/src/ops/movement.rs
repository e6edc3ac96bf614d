//! Data movement: Transpose, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad, DepthToSpace.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

// The dtype macros instantiate the same code for Copy and non-Copy (string) elements.
#![allow(clippy::clone_on_copy)]

use super::prelude::*;
use crate::cpu::buf::{map_same, visit};
use crate::cpu::elementwise::cast;
use crate::cpu::movement;
use crate::ir::PadMode;
use crate::wgpu::kernels::copy;
use crate::wgpu::kernels::gather::{self, PadKind};
use crate::wgpu::usize_axis;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("Transpose", 1, convert, &FAMILY),
    OnnxOp::new("Concat", 4, convert, &FAMILY),
    OnnxOp::new("Split", 2, convert, &FAMILY),
    OnnxOp::new("Slice", 1, convert, &FAMILY),
    OnnxOp::new("Gather", 1, convert, &FAMILY),
    OnnxOp::new("GatherElements", 11, convert, &FAMILY),
    OnnxOp::new("Expand", 8, convert, &FAMILY),
    OnnxOp::new("Tile", 6, convert, &FAMILY),
    OnnxOp::new("Pad", 2, convert, &FAMILY),
    OnnxOp::new("DepthToSpace", 1, convert, &FAMILY),
    OnnxOp::new("SpaceToDepth", 1, convert, &FAMILY),
];

/// The IR ops of this module: Transpose, Concat, Split, Slice, Gather, GatherElements, Expand, Tile, Pad,
/// DepthToSpace.
pub(super) static FAMILY: Family = Family {
    name: "movement",
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
        "Transpose" => Ok(Converted::Node(
            Op::Transpose {
                perm: a.usizes("perm")?,
            },
            ins,
        )),
        "Concat" => Ok(Converted::Node(
            Op::Concat {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "Split" => {
            let sizes = a.usizes("split")?;
            let n_out = n.output.len();
            if a.has("num_outputs") && a.int("num_outputs", 0)? as usize != n_out {
                return Err(EngineError::invalid(
                    "num_outputs differs from the number of outputs",
                ));
            }
            Ok(Converted::Node(
                Op::Split {
                    axis: a.int("axis", 0)?,
                    sizes,
                },
                ins,
            ))
        }
        "Slice" => {
            let mut ins = ins;
            if opset < 10 {
                let starts = a.ints("starts")?.unwrap_or_default();
                let ends = a.ints("ends")?.unwrap_or_default();
                let s = cx.constant(name, ints_const(&starts));
                let e = cx.constant(name, ints_const(&ends));
                ins.truncate(1);
                ins.push(Some(s));
                ins.push(Some(e));
                if let Some(axes) = a.ints("axes")? {
                    ins.push(Some(cx.constant(name, ints_const(&axes))));
                }
            }
            Ok(Converted::Node(
                Op::Slice {
                    starts: Vec::new(),
                    steps: Vec::new(),
                },
                ins,
            ))
        }
        "Gather" => Ok(Converted::Node(
            Op::Gather {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "GatherElements" => Ok(Converted::Node(
            Op::GatherElements {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "Expand" => Ok(Converted::Node(Op::Expand, ins)),
        "Tile" => Ok(Converted::Node(Op::Tile { repeats: Vec::new() }, ins)),
        "Pad" => {
            let mode = match a.string("mode", "constant")?.as_str() {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                "wrap" => PadMode::Wrap,
                m => return Err(EngineError::invalid(format!("unknown Pad mode '{m}'"))),
            };
            let mut ins = ins;
            let mut value = 0.0;
            if opset < 11 {
                let pads = a.ints("pads")?.unwrap_or_default();
                value = f64::from(a.float("value", 0.0)?);
                ins.truncate(1);
                ins.push(Some(cx.constant(name, ints_const(&pads))));
            }
            Ok(Converted::Node(
                Op::Pad {
                    mode,
                    pads: Vec::new(),
                    value,
                },
                ins,
            ))
        }
        "DepthToSpace" => Ok(Converted::Node(
            Op::DepthToSpace {
                blocksize: a.int("blocksize", 0)?.max(1) as usize,
                crd: a.string("mode", "DCR")? == "CRD",
            },
            ins,
        )),
        "SpaceToDepth" => Ok(Converted::Node(
            Op::SpaceToDepth {
                blocksize: a.int("blocksize", 0)?.max(1) as usize,
            },
            ins,
        )),
        other => Err(not_registered(other)),
    }
}

fn param_input(op: &Op, i: usize) -> bool {
    match op {
        Op::Expand | Op::Tile { .. } | Op::Split { .. } => i == 1,
        Op::Slice { .. } | Op::Pad { .. } => i >= 1,
        _ => false,
    }
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::Transpose { perm } => {
            let x = req(ins, 0, "data")?;
            let r = x.shape.len();
            let perm: Vec<usize> = if perm.is_empty() {
                (0..r).rev().collect()
            } else {
                perm.clone()
            };
            let mut seen = vec![false; r];
            if perm.len() != r
                || perm
                    .iter()
                    .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
            {
                return Err(EngineError::invalid(format!(
                    "Transpose perm {perm:?} is not a permutation of rank {r}"
                )));
            }
            let out = perm.iter().map(|&p| x.shape[p]).collect();
            Ok(concrete(Op::Transpose { perm }, 1, vec![(x.dtype, out)]))
        }
        Op::Concat { axis } => {
            let first = req(ins, 0, "inputs")?;
            let ax = norm_axis(*axis, first.shape.len(), "axis")?;
            let mut out = first.shape.to_vec();
            out[ax] = 0;
            for (i, v) in ins.iter().enumerate() {
                let v = v.ok_or_else(|| EngineError::invalid("Concat input missing"))?;
                if v.shape.len() != out.len()
                    || v.shape
                        .iter()
                        .zip(first.shape.iter())
                        .enumerate()
                        .any(|(d, (a, b))| d != ax && a != b)
                {
                    return Err(EngineError::invalid(format!(
                        "Concat input {i} has shape {:?}, incompatible with {:?} on axis {ax}",
                        v.shape, first.shape
                    )));
                }
                out[ax] += v.shape[ax];
            }
            Ok(concrete(
                Op::Concat { axis: ax as i64 },
                n_in,
                vec![(first.dtype, out)],
            ))
        }
        Op::Split { axis, sizes } => {
            let x = req(ins, 0, "input")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            let dim = x.shape[ax];
            let sizes: Vec<usize> = if let Some(v) = opt(ins, 1) {
                host_ints(v, "Split sizes")?
                    .into_iter()
                    .map(|s| s.max(0) as usize)
                    .collect()
            } else if !sizes.is_empty() {
                sizes.clone()
            } else {
                let chunk = dim.div_ceil(n_out.max(1));
                (0..n_out)
                    .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                    .collect()
            };
            if sizes.len() != n_out || sizes.iter().sum::<usize>() != dim {
                return Err(EngineError::invalid(format!(
                    "Split sizes {sizes:?} do not add up to dim {dim} over {n_out} outputs"
                )));
            }
            let outs = sizes
                .iter()
                .map(|&s| {
                    let mut o = x.shape.to_vec();
                    o[ax] = s;
                    (x.dtype, o)
                })
                .collect();
            Ok(Resolved::Op {
                op: Op::Split {
                    axis: ax as i64,
                    sizes,
                },
                inputs: vec![Some(0)],
                outputs: outs,
            })
        }
        Op::Slice { .. } => {
            let x = req(ins, 0, "data")?;
            let starts = host_ints(req(ins, 1, "starts")?, "Slice starts")?;
            let ends = host_ints(req(ins, 2, "ends")?, "Slice ends")?;
            let r = x.shape.len();
            let axes: Vec<i64> = match opt(ins, 3) {
                Some(v) => host_ints(v, "Slice axes")?,
                None => (0..starts.len() as i64).collect(),
            };
            let steps: Vec<i64> = match opt(ins, 4) {
                Some(v) => host_ints(v, "Slice steps")?,
                None => vec![1; starts.len()],
            };
            if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
                return Err(EngineError::invalid(
                    "Slice starts/ends/axes/steps differ in length",
                ));
            }
            let mut st = vec![0i64; r];
            let mut sp = vec![1i64; r];
            let mut out = x.shape.to_vec();
            for i in 0..starts.len() {
                let a = norm_axis(axes[i], r, "axis")?;
                let d = x.shape[a] as i64;
                let step = steps[i];
                if step == 0 {
                    return Err(EngineError::invalid("Slice step 0"));
                }
                let mut s = starts[i];
                let mut e = ends[i];
                if s < 0 {
                    s += d;
                }
                if e < 0 {
                    e = e.saturating_add(d);
                }
                let count;
                if step > 0 {
                    s = s.clamp(0, d);
                    e = e.clamp(0, d);
                    count = if e > s { (e - s + step - 1) / step } else { 0 };
                } else {
                    s = s.clamp(0, d - 1);
                    e = e.clamp(-1, d - 1);
                    count = if s > e { (s - e + (-step) - 1) / (-step) } else { 0 };
                }
                st[a] = s;
                sp[a] = step;
                out[a] = count.max(0) as usize;
            }
            Ok(Resolved::Op {
                op: Op::Slice {
                    starts: st,
                    steps: sp,
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        Op::Gather { axis } => {
            let x = req(ins, 0, "data")?;
            let idx = req(ins, 1, "indices")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            if !matches!(idx.dtype, DataType::I64 | DataType::I32) {
                return Err(EngineError::invalid(format!(
                    "Gather indices must be INT32/INT64, got {}",
                    idx.dtype
                )));
            }
            let mut out = x.shape[..ax].to_vec();
            out.extend_from_slice(idx.shape);
            out.extend_from_slice(&x.shape[ax + 1..]);
            Ok(concrete(Op::Gather { axis: ax as i64 }, 2, vec![(x.dtype, out)]))
        }
        Op::GatherElements { axis } => {
            let x = req(ins, 0, "data")?;
            let idx = req(ins, 1, "indices")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            if idx.shape.len() != x.shape.len() {
                return Err(EngineError::invalid(
                    "GatherElements indices must have the data's rank",
                ));
            }
            Ok(concrete(
                Op::GatherElements { axis: ax as i64 },
                2,
                vec![(x.dtype, idx.shape.to_vec())],
            ))
        }
        Op::Expand => {
            let x = req(ins, 0, "input")?;
            let s = host_ints(req(ins, 1, "shape")?, "Expand shape")?;
            let s: Vec<usize> = s.iter().map(|&d| d.max(0) as usize).collect();
            let out = broadcast_shapes(x.shape, &s)?;
            if out == x.shape {
                return Ok(Resolved::Alias(0));
            }
            Ok(Resolved::Op {
                op: Op::Expand,
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        Op::Tile { .. } => {
            let x = req(ins, 0, "input")?;
            let r = host_ints(req(ins, 1, "repeats")?, "Tile repeats")?;
            if r.len() != x.shape.len() || r.iter().any(|&v| v < 0) {
                return Err(EngineError::invalid(format!(
                    "Tile repeats {r:?} do not match rank {}",
                    x.shape.len()
                )));
            }
            let repeats: Vec<usize> = r.iter().map(|&v| v as usize).collect();
            let out: Vec<usize> = x
                .shape
                .iter()
                .zip(&repeats)
                .map(|(a, b)| a.saturating_mul(*b))
                .collect();
            checked_elements(&out)?;
            Ok(Resolved::Op {
                op: Op::Tile { repeats },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        Op::Pad { mode, pads, value } => {
            let x = req(ins, 0, "data")?;
            let r = x.shape.len();
            let p = match opt(ins, 1) {
                Some(v) => host_ints(v, "Pad pads")?,
                None => pads.clone(),
            };
            let mut val = *value;
            if let Some(v) = opt(ins, 2) {
                val = host_f64(v, "Pad constant_value")?.first().copied().unwrap_or(0.0);
            }
            let axes: Vec<usize> = match opt(ins, 3) {
                Some(v) => host_ints(v, "Pad axes")?
                    .iter()
                    .map(|&a| norm_axis(a, r, "axis"))
                    .collect::<Result<_>>()?,
                None => (0..r).collect(),
            };
            if p.len() != 2 * axes.len() {
                return Err(EngineError::invalid(format!(
                    "Pad pads {p:?} need {} entries",
                    2 * axes.len()
                )));
            }
            let mut full = vec![0i64; 2 * r];
            for (k, &a) in axes.iter().enumerate() {
                full[a] = p[k];
                full[a + r] = p[k + axes.len()];
            }
            let mut out = Vec::with_capacity(r);
            for i in 0..r {
                let d = x.shape[i] as i64 + full[i] + full[i + r];
                if d < 0 {
                    return Err(EngineError::invalid(format!("Pad makes dim {i} negative")));
                }
                out.push(d as usize);
            }
            Ok(Resolved::Op {
                op: Op::Pad {
                    mode: *mode,
                    pads: full,
                    value: val,
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        Op::DepthToSpace { blocksize, crd } => {
            let x = req(ins, 0, "input")?;
            let b = *blocksize;
            if x.shape.len() != 4 || x.shape[1] % (b * b) != 0 {
                return Err(EngineError::invalid(format!(
                    "DepthToSpace needs [N, C, H, W] with C divisible by {}",
                    b * b
                )));
            }
            let out = vec![x.shape[0], x.shape[1] / (b * b), x.shape[2] * b, x.shape[3] * b];
            Ok(concrete(
                Op::DepthToSpace {
                    blocksize: b,
                    crd: *crd,
                },
                1,
                vec![(x.dtype, out)],
            ))
        }
        Op::SpaceToDepth { blocksize } => {
            let x = req(ins, 0, "input")?;
            let b = *blocksize;
            if x.shape.len() != 4 || x.shape[2] % b != 0 || x.shape[3] % b != 0 {
                return Err(EngineError::invalid(format!(
                    "SpaceToDepth needs [N, C, H, W] with H and W divisible by the blocksize {b}, got {:?}",
                    x.shape
                )));
            }
            let out = vec![x.shape[0], x.shape[1] * b * b, x.shape[2] / b, x.shape[3] / b];
            Ok(concrete(
                Op::SpaceToDepth { blocksize: b },
                1,
                vec![(x.dtype, out)],
            ))
        }
        other => Err(wrong_family(other, "movement")),
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
        Op::Transpose { perm } => {
            let (x, sx) = arg(ins, 0)?;
            match x {
                Buf::F32(v) => one(Buf::F32(movement::transpose_f32(v, sx, perm))),
                _ => one(map_same!(x, v => movement::transpose(v, sx, perm))),
            }
        }
        Op::Concat { axis } => {
            let first = arg(ins, 0)?.0;
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
            let (x, sx) = arg(ins, 0)?;
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
            let (x, sx) = arg(ins, 0)?;
            one(map_same!(x, v => movement::slice(v, sx, starts, steps, out0())))
        }
        Op::Gather { axis } => {
            let (x, sx) = arg(ins, 0)?;
            let idx = arg(ins, 1)?.0.to_i64();
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
            let (x, sx) = arg(ins, 0)?;
            let (i, si) = arg(ins, 1)?;
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
            let (x, sx) = arg(ins, 0)?;
            one(map_same!(x, v => movement::expand(v, sx, out0())))
        }
        Op::Tile { .. } => {
            let (x, sx) = arg(ins, 0)?;
            one(map_same!(x, v => movement::tile(v, sx, out0())))
        }
        Op::Pad { mode, pads, value } => {
            let (x, sx) = arg(ins, 0)?;
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
            let (x, sx) = arg(ins, 0)?;
            one(map_same!(x, v => movement::depth_to_space(v, sx, *blocksize, *crd)))
        }
        Op::SpaceToDepth { blocksize } => {
            let (x, sx) = arg(ins, 0)?;
            let (view, perm) = space_to_depth_view(sx, *blocksize)?;
            one(map_same!(x, v => movement::transpose(v, &view, &perm)))
        }
        other => Err(wrong_family(other, "movement")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::Transpose { perm } => {
            let x = c.input(n, 0)?;
            let perm = if perm.is_empty() {
                (0..x.rank()).rev().collect()
            } else {
                perm.clone()
            };
            let y = copy::transpose(&mut c.b, &name, &x, &perm)?;
            c.set(n, 0, y)
        }
        Op::Concat { axis } => {
            let xs = (0..n.inputs.len())
                .filter(|&i| n.input(i).is_some())
                .map(|i| c.input(n, i))
                .collect::<GpuResult<Vec<_>>>()?;
            let out_shape = c.out_shape(n, 0)?;
            let axis = usize_axis(*axis, out_shape.len())?;
            let refs: Vec<&DTensor> = xs.iter().collect();
            let y = copy::concat(&mut c.b, &name, &refs, axis, &out_shape)?;
            c.set(n, 0, y)
        }
        Op::Split { axis, sizes } => {
            let x = c.input(n, 0)?;
            let axis = usize_axis(*axis, x.rank())?;
            let names: Vec<String> = (0..sizes.len()).map(|i| c.out_name(n, i)).collect();
            let parts = copy::split(&mut c.b, &names, &x, axis, sizes)?;
            for (i, p) in parts.into_iter().enumerate() {
                c.set(n, i, p)?;
            }
            Ok(())
        }
        Op::Slice { starts, steps } => {
            let x = c.input(n, 0)?;
            let out_shape = c.out_shape(n, 0)?;
            let y = copy::slice(&mut c.b, &name, &x, starts, steps, &out_shape)?;
            c.set(n, 0, y)
        }
        Op::Gather { axis } => {
            let x = c.input(n, 0)?;
            let idx = c.input(n, 1)?;
            let axis = usize_axis(*axis, x.rank())?;
            let y = gather::gather(&mut c.b, &name, &x, &idx, axis)?;
            c.set(n, 0, y)
        }
        Op::GatherElements { axis } => {
            let x = c.input(n, 0)?;
            let idx = c.input(n, 1)?;
            let axis = usize_axis(*axis, x.rank())?;
            let y = gather::gather_elements(&mut c.b, &name, &x, &idx, axis)?;
            c.set(n, 0, y)
        }
        Op::Expand => {
            let x = c.input(n, 0)?;
            let out_shape = c.out_shape(n, 0)?;
            let y = copy::expand(&mut c.b, &name, &x, &out_shape)?;
            c.set(n, 0, y)
        }
        Op::Tile { repeats } => {
            let x = c.input(n, 0)?;
            let y = copy::tile(&mut c.b, &name, &x, repeats)?;
            c.set(n, 0, y)
        }
        Op::Pad { mode, pads, value } => {
            let x = c.input(n, 0)?;
            let kind = match mode {
                PadMode::Constant => PadKind::Constant,
                PadMode::Reflect => PadKind::Reflect,
                PadMode::Edge => PadKind::Edge,
                PadMode::Wrap => PadKind::Wrap,
            };
            let y = gather::pad(&mut c.b, &name, &x, pads, kind, *value)?;
            c.set(n, 0, y)
        }
        Op::DepthToSpace { blocksize, crd } => {
            let x = c.input(n, 0)?;
            let y = copy::depth_to_space(&mut c.b, &name, &x, *blocksize, *crd)?;
            c.set(n, 0, y)
        }
        Op::SpaceToDepth { blocksize } => {
            let x = c.input(n, 0)?;
            let (view, perm) =
                space_to_depth_view(&x.shape, *blocksize).map_err(|e| GpuError::internal(e.to_string()))?;
            let v = c.b.alias(&x, &view)?;
            let y = copy::transpose(&mut c.b, &name, &v, &perm)?;
            c.set(n, 0, y)
        }
        other => Err(gpu_wrong_family(other, "movement")),
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

/// SpaceToDepth as a transpose: the 6-D view of `[N, C, H, W]` that splits H and W into blocks, and the
/// permutation that moves the block offsets in front of the channels.
fn space_to_depth_view(shape: &[usize], b: usize) -> Result<([usize; 6], [usize; 6])> {
    let [n, c, h, w] = <[usize; 4]>::try_from(shape)
        .map_err(|_| EngineError::internal(format!("SpaceToDepth on {shape:?}")))?;
    Ok(([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4]))
}

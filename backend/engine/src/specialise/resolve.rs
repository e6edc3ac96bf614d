//! Per-op shape/dtype inference and resolution of parameter inputs into attributes.

use crate::error::{EngineError, Result};
use crate::ir::{AutoPad, CoordTransform, Op, UnaryOp};
use crate::tensor::{DataType, Tensor};

/// What specialisation knows about one input.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InVal<'a> {
    pub(crate) dtype: DataType,
    pub(crate) shape: &'a [usize],
    pub(crate) host: Option<&'a Tensor>,
}

/// The outcome of resolving a node.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// Outputs computed here (Shape, Size, ConstantOfShape, Range).
    Host(Vec<Tensor>),
    /// Output 0 is input `i` unchanged.
    Alias(usize),
    /// A concrete op over the node inputs at these indices, with these output types.
    Op {
        op: Op,
        inputs: Vec<Option<usize>>,
        outputs: Vec<(DataType, Vec<usize>)>,
    },
}

/// True when input `i` of `op` is a parameter (its value, not just its shape, decides the plan).
pub(crate) fn is_param_input(op: &Op, i: usize) -> bool {
    match op {
        Op::Reshape { .. } | Op::Expand | Op::Tile { .. } | Op::TopK { .. } => i == 1,
        Op::Squeeze { .. } | Op::Unsqueeze { .. } | Op::Split { .. } | Op::Reduce { .. } => i == 1,
        Op::Slice { .. } | Op::Pad { .. } | Op::Resize { .. } => i >= 1,
        Op::Unary(UnaryOp::Clip { .. }) => i >= 1,
        Op::ConstantOfShape { .. } | Op::Range | Op::If { .. } => true,
        _ => false,
    }
}

fn req<'a>(ins: &[Option<InVal<'a>>], i: usize, what: &str) -> Result<InVal<'a>> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::invalid(format!("input {i} ({what}) is required")))
}

fn opt<'a>(ins: &[Option<InVal<'a>>], i: usize) -> Option<InVal<'a>> {
    ins.get(i).copied().flatten()
}

fn host_ints(v: InVal<'_>, what: &str) -> Result<Vec<i64>> {
    let t = v.host.ok_or_else(|| {
        EngineError::unsupported(format!(
            "{what} is computed from request data; it must be known when the plan is built \
             (a constant, an initializer, or derived from input shapes)"
        ))
    })?;
    t.to_i64_vec()
}

fn host_f64(v: InVal<'_>, what: &str) -> Result<Vec<f64>> {
    let t = v
        .host
        .ok_or_else(|| EngineError::unsupported(format!("{what} must be known when the plan is built")))?;
    t.to_f64_vec()
}

fn norm_axis(axis: i64, rank: usize, what: &str) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) && !(r == 0 && a == 0) {
        return Err(EngineError::invalid(format!(
            "{what} {axis} is out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// Numpy multidirectional broadcasting.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(EngineError::invalid(format!(
                "shapes {a:?} and {b:?} cannot be broadcast together (dim {i}: {x} vs {y})"
            )));
        };
    }
    Ok(out)
}

fn i64_tensor(shape: Vec<usize>, v: Vec<i64>) -> Result<Tensor> {
    Tensor::from_vec(shape, v)
}

fn concrete(op: Op, n_in: usize, outputs: Vec<(DataType, Vec<usize>)>) -> Resolved {
    Resolved::Op {
        op,
        inputs: (0..n_in).map(Some).collect(),
        outputs,
    }
}

fn defaults(v: &[usize], n: usize, d: usize) -> Vec<usize> {
    if v.is_empty() { vec![d; n] } else { v.to_vec() }
}

/// Window output sizes and final pads for Conv/pooling.
#[allow(clippy::too_many_arguments)]
fn window(
    input: &[usize],
    kernel: &[usize],
    strides: &[usize],
    pads: &[usize],
    dilations: &[usize],
    auto_pad: AutoPad,
    ceil_mode: bool,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let n = input.len();
    let mut pads = if pads.is_empty() {
        vec![0; 2 * n]
    } else {
        pads.to_vec()
    };
    if pads.len() != 2 * n || strides.len() != n || dilations.len() != n || kernel.len() != n {
        return Err(EngineError::invalid(format!(
            "kernel {kernel:?}, strides {strides:?}, pads {pads:?}, dilations {dilations:?} do not \
             match {n} spatial dims"
        )));
    }
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(EngineError::invalid("strides and dilations must be positive"));
    }
    let mut out = vec![0; n];
    for i in 0..n {
        let ek = (kernel[i] - 1) * dilations[i] + 1;
        match auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                let o = input[i].div_ceil(strides[i]);
                let total = ((o - 1) * strides[i] + ek).saturating_sub(input[i]);
                let small = total / 2;
                let (b, e) = if auto_pad == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = b;
                pads[i + n] = e;
                out[i] = o;
                continue;
            }
            AutoPad::Valid => {
                pads[i] = 0;
                pads[i + n] = 0;
            }
            AutoPad::NotSet => {}
        }
        let padded = input[i] + pads[i] + pads[i + n];
        if padded < ek {
            return Err(EngineError::invalid(format!(
                "spatial dim {i}: input {} (+ padding) is smaller than the kernel extent {ek}",
                input[i]
            )));
        }
        let span = padded - ek;
        let mut o = if ceil_mode {
            span.div_ceil(strides[i]) + 1
        } else {
            span / strides[i] + 1
        };
        if ceil_mode && (o - 1) * strides[i] >= input[i] + pads[i] {
            o -= 1;
        }
        out[i] = o;
    }
    Ok((out, pads))
}

/// Resolve `op` for inputs `ins`; `n_out` is the node's output count.
pub(crate) fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::Unary(u) => {
            let x = req(ins, 0, "X")?;
            let mut u = *u;
            if let UnaryOp::Clip { min, max } = &mut u {
                if let Some(v) = opt(ins, 1) {
                    *min = host_f64(v, "Clip min")?
                        .first()
                        .copied()
                        .unwrap_or(f64::NEG_INFINITY);
                }
                if let Some(v) = opt(ins, 2) {
                    *max = host_f64(v, "Clip max")?.first().copied().unwrap_or(f64::INFINITY);
                }
            }
            let dt = if u == UnaryOp::Not {
                DataType::Bool
            } else {
                x.dtype
            };
            if x.dtype == DataType::String {
                return Err(EngineError::unsupported("element-wise math on BYTES tensors"));
            }
            Ok(Resolved::Op {
                op: Op::Unary(u),
                inputs: vec![Some(0)],
                outputs: vec![(dt, x.shape.to_vec())],
            })
        }
        Op::Binary(b) => {
            let a = req(ins, 0, "A")?;
            let c = req(ins, 1, "B")?;
            let shape = broadcast_shapes(a.shape, c.shape)?;
            if a.dtype != c.dtype && !matches!(b, crate::ir::BinaryOp::Pow) {
                return Err(EngineError::invalid(format!(
                    "operands have different types {} and {}",
                    a.dtype, c.dtype
                )));
            }
            let dt = if b.is_comparison() {
                DataType::Bool
            } else {
                a.dtype
            };
            Ok(concrete(op.clone(), 2, vec![(dt, shape)]))
        }
        Op::Where => {
            let c = req(ins, 0, "condition")?;
            let x = req(ins, 1, "X")?;
            let y = req(ins, 2, "Y")?;
            let s = broadcast_shapes(&broadcast_shapes(c.shape, x.shape)?, y.shape)?;
            Ok(concrete(Op::Where, 3, vec![(x.dtype, s)]))
        }
        Op::Cast { to } => {
            let x = req(ins, 0, "input")?;
            if x.dtype == *to {
                return Ok(Resolved::Alias(0));
            }
            Ok(concrete(op.clone(), 1, vec![(*to, x.shape.to_vec())]))
        }
        Op::Identity => {
            req(ins, 0, "input")?;
            Ok(Resolved::Alias(0))
        }
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
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            activation,
        } => {
            let x = req(ins, 0, "X")?;
            let w = req(ins, 1, "W")?;
            if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
                return Err(EngineError::invalid(format!(
                    "Conv needs X [N, C, spatial…] and W of the same rank, got {:?} and {:?}",
                    x.shape, w.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let c = x.shape[1];
            if *group == 0 || c % group != 0 || w.shape[0] % group != 0 || w.shape[1] * group != c {
                return Err(EngineError::invalid(format!(
                    "Conv: X has {c} channels, W {:?} with group {group} expects {}",
                    w.shape,
                    w.shape[1] * group
                )));
            }
            if let Some(b) = opt(ins, 2)
                && b.shape != [w.shape[0]]
            {
                return Err(EngineError::invalid(format!(
                    "Conv: bias shape {:?}, expected [{}]",
                    b.shape, w.shape[0]
                )));
            }
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let (spatial, pads) = window(
                &x.shape[2..],
                &kernel,
                &strides,
                pads,
                &dilations,
                *auto_pad,
                false,
            )?;
            let mut out = vec![x.shape[0], w.shape[0]];
            out.extend(spatial);
            check_epilogue(activation, ins, &out)?;
            Ok(concrete(
                Op::Conv {
                    kernel_shape: kernel,
                    strides,
                    pads,
                    dilations,
                    group: *group,
                    auto_pad: AutoPad::NotSet,
                    activation: activation.clone(),
                },
                n_in,
                vec![(x.dtype, out)],
            ))
        }
        Op::ConvTranspose {
            kernel_shape,
            strides,
            pads,
            dilations,
            output_padding,
            output_shape,
            group,
            auto_pad,
        } => {
            let x = req(ins, 0, "X")?;
            let w = req(ins, 1, "W")?;
            if x.shape.len() < 3 || w.shape.len() != x.shape.len() || w.shape[0] != x.shape[1] {
                return Err(EngineError::invalid(format!(
                    "ConvTranspose needs X [N, C, …] and W [C, M/group, …], got {:?} and {:?}",
                    x.shape, w.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let opad = defaults(output_padding, ns, 0);
            let mut pads = if pads.is_empty() {
                vec![0; 2 * ns]
            } else {
                pads.clone()
            };
            if kernel.len() != ns
                || strides.len() != ns
                || dilations.len() != ns
                || opad.len() != ns
                || pads.len() != 2 * ns
            {
                return Err(EngineError::invalid(
                    "ConvTranspose attributes do not match the spatial rank",
                ));
            }
            let mut spatial = vec![0; ns];
            for i in 0..ns {
                let full = strides[i] * (x.shape[i + 2] - 1) + opad[i] + (kernel[i] - 1) * dilations[i] + 1;
                let target = if !output_shape.is_empty() {
                    let os = if output_shape.len() == ns {
                        output_shape[i]
                    } else {
                        output_shape[output_shape.len() - ns + i]
                    };
                    Some(os)
                } else if matches!(auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
                    Some(x.shape[i + 2] * strides[i])
                } else {
                    None
                };
                if let Some(t) = target {
                    // A target beyond the full output extends it at the end (as the ONNX reference).
                    let total = full.saturating_sub(t);
                    if *auto_pad == AutoPad::SameUpper {
                        pads[i] = total / 2;
                        pads[i + ns] = total - total / 2;
                    } else {
                        pads[i] = total - total / 2;
                        pads[i + ns] = total / 2;
                    }
                    spatial[i] = t;
                } else {
                    if *auto_pad == AutoPad::Valid {
                        pads[i] = 0;
                        pads[i + ns] = 0;
                    }
                    spatial[i] = full.checked_sub(pads[i] + pads[i + ns]).ok_or_else(|| {
                        EngineError::invalid("ConvTranspose pads are larger than the output")
                    })?;
                }
            }
            let mut out = vec![x.shape[0], w.shape[1] * group];
            out.extend(spatial);
            Ok(concrete(
                Op::ConvTranspose {
                    kernel_shape: kernel,
                    strides,
                    pads,
                    dilations,
                    output_padding: opad,
                    output_shape: Vec::new(),
                    group: *group,
                    auto_pad: AutoPad::NotSet,
                },
                n_in.min(3),
                vec![(x.dtype, out)],
            ))
        }
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
        Op::Softmax { axis, log, coerce_2d } => {
            let x = req(ins, 0, "input")?;
            let ax = norm_axis(*axis, x.shape.len(), "axis")?;
            Ok(concrete(
                Op::Softmax {
                    axis: ax as i64,
                    log: *log,
                    coerce_2d: *coerce_2d,
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
        Op::Reshape { allowzero } => {
            let x = req(ins, 0, "data")?;
            let spec = host_ints(req(ins, 1, "shape")?, "Reshape's target shape")?;
            let total: usize = x.shape.iter().product();
            let mut out = Vec::with_capacity(spec.len());
            let mut infer = None;
            for (i, &d) in spec.iter().enumerate() {
                if d == -1 {
                    if infer.replace(i).is_some() {
                        return Err(EngineError::invalid(format!(
                            "Reshape target {spec:?} has more than one -1"
                        )));
                    }
                    out.push(1);
                } else if d == 0 && !allowzero {
                    out.push(*x.shape.get(i).ok_or_else(|| {
                        EngineError::invalid(format!(
                            "Reshape target {spec:?}: 0 at {i} but the input has rank {}",
                            x.shape.len()
                        ))
                    })?);
                } else if d < 0 {
                    return Err(EngineError::invalid(format!(
                        "Reshape target {spec:?} has a negative dim"
                    )));
                } else {
                    out.push(d as usize);
                }
            }
            if let Some(i) = infer {
                let rest: usize = out
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, d)| d)
                    .product();
                if rest == 0 || !total.is_multiple_of(rest) {
                    return Err(EngineError::invalid(format!(
                        "cannot reshape {:?} ({total} elements) to {spec:?}",
                        x.shape
                    )));
                }
                out[i] = total / rest;
            }
            reshape_to(x, out)
        }
        Op::Flatten { axis } => {
            let x = req(ins, 0, "input")?;
            let r = x.shape.len() as i64;
            let a = if *axis < 0 { axis + r } else { *axis };
            if a < 0 || a > r {
                return Err(EngineError::invalid(format!(
                    "Flatten axis {axis} out of range for rank {r}"
                )));
            }
            let a = a as usize;
            reshape_to(
                x,
                vec![x.shape[..a].iter().product(), x.shape[a..].iter().product()],
            )
        }
        Op::Squeeze { axes } => {
            let x = req(ins, 0, "data")?;
            let ax = match (axes, opt(ins, 1)) {
                (Some(a), _) => a.clone(),
                (None, Some(v)) => host_ints(v, "Squeeze axes")?,
                (None, None) => Vec::new(),
            };
            let rank = x.shape.len();
            let norm: Vec<usize> = ax
                .iter()
                .map(|&a| norm_axis(a, rank, "axis"))
                .collect::<Result<_>>()?;
            let mut out = Vec::new();
            for (i, &d) in x.shape.iter().enumerate() {
                let squeeze = if norm.is_empty() {
                    d == 1
                } else {
                    norm.contains(&i)
                };
                if squeeze && d != 1 {
                    return Err(EngineError::invalid(format!(
                        "Squeeze axis {i} has size {d}, not 1"
                    )));
                }
                if !squeeze {
                    out.push(d);
                }
            }
            reshape_to(x, out)
        }
        Op::Unsqueeze { axes } => {
            let x = req(ins, 0, "data")?;
            let ax = match (axes, opt(ins, 1)) {
                (Some(a), _) => a.clone(),
                (None, Some(v)) => host_ints(v, "Unsqueeze axes")?,
                (None, None) => return Err(EngineError::invalid("Unsqueeze without axes")),
            };
            let rank = x.shape.len() + ax.len();
            let mut norm: Vec<usize> = ax
                .iter()
                .map(|&a| norm_axis(a, rank, "axis"))
                .collect::<Result<_>>()?;
            norm.sort_unstable();
            let mut out = Vec::with_capacity(rank);
            let mut it = x.shape.iter();
            for i in 0..rank {
                if norm.contains(&i) {
                    out.push(1);
                } else {
                    out.push(
                        *it.next()
                            .ok_or_else(|| EngineError::invalid("Unsqueeze axes repeat"))?,
                    );
                }
            }
            reshape_to(x, out)
        }
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
            let out = x.shape.iter().zip(&repeats).map(|(a, b)| a * b).collect();
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
        Op::Shape { start, end } => {
            let x = req(ins, 0, "data")?;
            let r = x.shape.len() as i64;
            let clamp = |v: i64| if v < 0 { (v + r).clamp(0, r) } else { v.clamp(0, r) };
            let s = clamp(*start) as usize;
            let e = clamp(end.unwrap_or(r)) as usize;
            let dims: Vec<i64> = if s < e {
                x.shape[s..e].iter().map(|&d| d as i64).collect()
            } else {
                Vec::new()
            };
            Ok(Resolved::Host(vec![i64_tensor(vec![dims.len()], dims)?]))
        }
        Op::Size => {
            let x = req(ins, 0, "data")?;
            Ok(Resolved::Host(vec![i64_tensor(
                vec![],
                vec![x.shape.iter().product::<usize>() as i64],
            )?]))
        }
        Op::ConstantOfShape { value } => {
            let s = host_ints(req(ins, 0, "shape")?, "ConstantOfShape shape")?;
            if s.iter().any(|&d| d < 0) {
                return Err(EngineError::invalid(format!(
                    "ConstantOfShape shape {s:?} has a negative dim"
                )));
            }
            let shape: Vec<usize> = s.iter().map(|&d| d as usize).collect();
            let n: usize = shape.iter().product();
            let mut data = Vec::with_capacity(n * value.data.len());
            for _ in 0..n {
                data.extend_from_slice(&value.data);
            }
            Ok(Resolved::Host(vec![Tensor {
                dtype: value.dtype,
                shape,
                data: data.into(),
            }]))
        }
        Op::Range => {
            let s = req(ins, 0, "start")?;
            let l = req(ins, 1, "limit")?;
            let d = req(ins, 2, "delta")?;
            let (sv, lv, dv) = (
                host_f64(s, "Range start")?,
                host_f64(l, "Range limit")?,
                host_f64(d, "Range delta")?,
            );
            let (sv, lv, dv) = (sv[0], lv[0], dv[0]);
            if dv == 0.0 {
                return Err(EngineError::invalid("Range delta is 0"));
            }
            let n = ((lv - sv) / dv).ceil().max(0.0) as usize;
            if n > 1 << 28 {
                return Err(EngineError::invalid("Range produces too many elements"));
            }
            let t = match s.dtype {
                DataType::F32 => {
                    let (s0, d0) = (sv as f32, dv as f32);
                    Tensor::from_vec(vec![n], (0..n).map(|i| s0 + i as f32 * d0).collect())?
                }
                DataType::F64 => Tensor::from_vec(vec![n], (0..n).map(|i| sv + i as f64 * dv).collect())?,
                DataType::I64 => {
                    let (s0, d0) = (
                        s.host.map(|t| t.to_i64_vec()).transpose()?.unwrap_or_default()[0],
                        d.host.map(|t| t.to_i64_vec()).transpose()?.unwrap_or_default()[0],
                    );
                    Tensor::from_vec(vec![n], (0..n as i64).map(|i| s0 + i * d0).collect())?
                }
                DataType::I32 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| sv as i32 + i as i32 * dv as i32).collect(),
                )?,
                DataType::I16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| sv as i16 + i as i16 * dv as i16).collect(),
                )?,
                DataType::F16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| half::f16::from_f64(sv + i as f64 * dv)).collect(),
                )?,
                DataType::BF16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| half::bf16::from_f64(sv + i as f64 * dv)).collect(),
                )?,
                other => return Err(EngineError::unsupported(format!("Range of {other}"))),
            };
            Ok(Resolved::Host(vec![t]))
        }
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            extrapolation_value,
            keep_aspect_ratio_policy,
            axes,
            ..
        } => {
            let x = req(ins, 0, "X")?;
            let r = x.shape.len();
            let axes: Vec<usize> = if axes.is_empty() {
                (0..r).collect()
            } else {
                axes.iter()
                    .map(|&a| norm_axis(a, r, "axis"))
                    .collect::<Result<_>>()?
            };
            let mut scales = vec![1f32; r];
            let mut out = x.shape.to_vec();
            let roi_in = match opt(ins, 1) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => host_f64(v, "Resize roi")?,
                _ => Vec::new(),
            };
            let sizes = match opt(ins, 3) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => Some(host_ints(v, "Resize sizes")?),
                _ => None,
            };
            let sc = match opt(ins, 2) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => Some(host_f64(v, "Resize scales")?),
                _ => None,
            };
            if let Some(sizes) = sizes {
                if sizes.len() != axes.len() {
                    return Err(EngineError::invalid(format!(
                        "Resize sizes {sizes:?} need {} entries",
                        axes.len()
                    )));
                }
                if *keep_aspect_ratio_policy != 0 {
                    let ratios: Vec<f64> = axes
                        .iter()
                        .zip(&sizes)
                        .map(|(&a, &s)| s as f64 / x.shape[a] as f64)
                        .collect();
                    let s = if *keep_aspect_ratio_policy == 1 {
                        ratios.iter().copied().fold(f64::INFINITY, f64::min)
                    } else {
                        ratios.iter().copied().fold(0.0, f64::max)
                    };
                    for &a in &axes {
                        scales[a] = s as f32;
                        out[a] = (x.shape[a] as f64 * s + 0.5).floor() as usize;
                    }
                } else {
                    for (&a, &s) in axes.iter().zip(&sizes) {
                        out[a] = s.max(0) as usize;
                        scales[a] = out[a] as f32 / x.shape[a] as f32;
                    }
                }
            } else if let Some(sc) = sc {
                if sc.len() != axes.len() {
                    return Err(EngineError::invalid(format!(
                        "Resize scales {sc:?} need {} entries",
                        axes.len()
                    )));
                }
                for (&a, &s) in axes.iter().zip(&sc) {
                    if s <= 0.0 {
                        return Err(EngineError::invalid("Resize scales must be positive"));
                    }
                    scales[a] = s as f32;
                    out[a] = (x.shape[a] as f64 * s).floor() as usize;
                }
            } else {
                return Err(EngineError::invalid("Resize needs scales or sizes"));
            }
            let mut roi = Vec::new();
            if *coord == CoordTransform::TfCropAndResize {
                roi = vec![0f32; r];
                roi.extend(std::iter::repeat_n(1f32, r));
                if roi_in.len() == 2 * axes.len() {
                    for (k, &a) in axes.iter().enumerate() {
                        roi[a] = roi_in[k] as f32;
                        roi[a + r] = roi_in[k + axes.len()] as f32;
                    }
                }
            }
            Ok(Resolved::Op {
                op: Op::Resize {
                    mode: *mode,
                    coord: *coord,
                    nearest: *nearest,
                    cubic_coeff_a: *cubic_coeff_a,
                    exclude_outside: *exclude_outside,
                    extrapolation_value: *extrapolation_value,
                    scales,
                    roi,
                    keep_aspect_ratio_policy: 0,
                    axes: Vec::new(),
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
        Op::Lstm { attrs, input_forget } => {
            let (a, outs) = rnn_shapes(attrs, ins, 4, n_out)?;
            Ok(concrete(
                Op::Lstm {
                    attrs: a,
                    input_forget: *input_forget,
                },
                n_in,
                outs,
            ))
        }
        Op::Gru {
            attrs,
            linear_before_reset,
        } => {
            let (a, outs) = rnn_shapes(attrs, ins, 3, n_out)?;
            Ok(concrete(
                Op::Gru {
                    attrs: a,
                    linear_before_reset: *linear_before_reset,
                },
                n_in,
                outs,
            ))
        }
        Op::If { .. } => Err(EngineError::internal("If reached resolve")),
    }
}

fn reshape_to(x: InVal<'_>, out: Vec<usize>) -> Result<Resolved> {
    if out.iter().product::<usize>() != x.shape.iter().product::<usize>() {
        return Err(EngineError::invalid(format!(
            "cannot reshape {:?} to {out:?}",
            x.shape
        )));
    }
    Ok(Resolved::Op {
        op: Op::Reshape { allowzero: false },
        inputs: vec![Some(0)],
        outputs: vec![(x.dtype, out)],
    })
}

fn check_epilogue(e: &crate::ir::Epilogue, ins: &[Option<InVal<'_>>], out: &[usize]) -> Result<()> {
    for s in &e.steps {
        if let crate::ir::EpilogueStep::Binary { input, .. } = s {
            let v = req(ins, *input, "epilogue operand")?;
            if broadcast_shapes(v.shape, out)? != out {
                return Err(EngineError::invalid(format!(
                    "fused operand of shape {:?} does not broadcast to the output {out:?}",
                    v.shape
                )));
            }
        }
    }
    Ok(())
}

type Outs = Vec<(DataType, Vec<usize>)>;

fn rnn_shapes(
    attrs: &crate::ir::RnnAttrs,
    ins: &[Option<InVal<'_>>],
    gates: usize,
    n_out: usize,
) -> Result<(crate::ir::RnnAttrs, Outs)> {
    let x = req(ins, 0, "X")?;
    let w = req(ins, 1, "W")?;
    let r = req(ins, 2, "R")?;
    if x.shape.len() != 3 || w.shape.len() != 3 || r.shape.len() != 3 {
        return Err(EngineError::invalid("RNN inputs X, W, R must be 3-D"));
    }
    let dirs = if attrs.direction == crate::ir::RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let h = if attrs.hidden_size > 0 {
        attrs.hidden_size
    } else {
        r.shape[2]
    };
    let (seq, batch) = if attrs.batch_major {
        (x.shape[1], x.shape[0])
    } else {
        (x.shape[0], x.shape[1])
    };
    if w.shape != [dirs, gates * h, x.shape[2]] || r.shape != [dirs, gates * h, h] {
        return Err(EngineError::invalid(format!(
            "RNN weights W {:?} / R {:?} do not match {dirs} direction(s), hidden {h}, input {}",
            w.shape, r.shape, x.shape[2]
        )));
    }
    let mut a = attrs.clone();
    a.hidden_size = h;
    let y = if attrs.batch_major {
        vec![batch, seq, dirs, h]
    } else {
        vec![seq, dirs, batch, h]
    };
    let yh = if attrs.batch_major {
        vec![batch, dirs, h]
    } else {
        vec![dirs, batch, h]
    };
    let mut outs = vec![(x.dtype, y)];
    for _ in 1..n_out {
        outs.push((x.dtype, yh.clone()));
    }
    Ok((a, outs))
}

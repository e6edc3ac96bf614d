//! Shape inference: what resolving a node yields, and the helpers every family's `resolve` shares.

use crate::error::{EngineError, Result};
use crate::ir::{AutoPad, Op};
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

pub(crate) fn req<'a>(ins: &[Option<InVal<'a>>], i: usize, what: &str) -> Result<InVal<'a>> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::invalid(format!("input {i} ({what}) is required")))
}

pub(crate) fn opt<'a>(ins: &[Option<InVal<'a>>], i: usize) -> Option<InVal<'a>> {
    ins.get(i).copied().flatten()
}

pub(crate) fn host_ints(v: InVal<'_>, what: &str) -> Result<Vec<i64>> {
    let t = v.host.ok_or_else(|| {
        EngineError::unsupported(format!(
            "{what} is computed from request data; it must be known when the plan is built \
             (a constant, an initializer, or derived from input shapes)"
        ))
    })?;
    t.to_i64_vec()
}

pub(crate) fn host_f64(v: InVal<'_>, what: &str) -> Result<Vec<f64>> {
    let t = v
        .host
        .ok_or_else(|| EngineError::unsupported(format!("{what} must be known when the plan is built")))?;
    t.to_f64_vec()
}

pub(crate) fn norm_axis(axis: i64, rank: usize, what: &str) -> Result<usize> {
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

pub(crate) fn i64_tensor(shape: Vec<usize>, v: Vec<i64>) -> Result<Tensor> {
    Tensor::from_vec(shape, v)
}

pub(crate) fn concrete(op: Op, n_in: usize, outputs: Vec<(DataType, Vec<usize>)>) -> Resolved {
    Resolved::Op {
        op,
        inputs: (0..n_in).map(Some).collect(),
        outputs,
    }
}

pub(crate) fn defaults(v: &[usize], n: usize, d: usize) -> Vec<usize> {
    if v.is_empty() { vec![d; n] } else { v.to_vec() }
}

/// Window output sizes and final pads for Conv/pooling.
#[allow(clippy::too_many_arguments)]
pub(crate) fn window(
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

/// Checks that every fused binary operand of an epilogue broadcasts to the output.
pub(crate) fn check_epilogue(
    e: &crate::ir::Epilogue,
    ins: &[Option<InVal<'_>>],
    out: &[usize],
) -> Result<()> {
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

//! The CPU side of the registry: running one concrete op through its family, evaluating host-side
//! nodes during specialisation, and the helpers every family's `cpu` shares.

use std::borrow::Cow;

use crate::cpu::Buf;
pub(crate) use crate::cpu::buf::In;
pub(crate) use crate::cpu::weights::Prepared;
use crate::error::{EngineError, Result};
use crate::ir::Op;
use crate::tensor::{DataType, Tensor};

/// Run one concrete op on the CPU. `outs` are the output dtypes and shapes; `prep` holds the node's
/// [`Prepared`] operands, if its plan made any.
pub(crate) fn run_cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    (super::family(op).cpu)(op, ins, outs, prep)
}

/// Evaluate one concrete op on host tensors (constant folding and shape subgraphs).
pub(crate) fn eval_host(
    op: &Op,
    host_ins: &[Option<&Tensor>],
    outputs: &[(DataType, Vec<usize>)],
    wanted: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    let bufs: Vec<Option<Buf>> = host_ins
        .iter()
        .map(|t| t.map(Buf::from_tensor).transpose())
        .collect::<Result<_>>()?;
    let ins: Vec<In<'_>> = bufs
        .iter()
        .zip(host_ins)
        .map(|(b, t)| match (b, t) {
            (Some(b), Some(t)) => Some((b, t.shape.as_slice())),
            _ => None,
        })
        .collect();
    let res = run_cpu(op, &ins, outputs, None)?;
    let mut out = Vec::with_capacity(outputs.len());
    for (i, (dt, shape)) in outputs.iter().enumerate() {
        match res.get(i) {
            Some(b) if wanted.get(i).copied().unwrap_or(true) => {
                if b.dtype() != *dt {
                    return Err(EngineError::internal(format!(
                        "{} produced {} for a {dt} output",
                        op.name(),
                        b.dtype()
                    )));
                }
                out.push(Some(b.to_tensor(shape.clone())?));
            }
            _ => out.push(None),
        }
    }
    Ok(out)
}

/// Input `i`, which the concrete op requires.
pub(crate) fn arg<'a>(ins: &[In<'a>], i: usize) -> Result<(&'a Buf, &'a [usize])> {
    ins.get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::internal(format!("missing input {i}")))
}

/// The buffer as f32, borrowed when it already is.
pub(crate) fn f32_of(b: &Buf) -> Cow<'_, [f32]> {
    match b {
        Buf::F32(v) => Cow::Borrowed(v.as_slice()),
        other => Cow::Owned(other.to_f32()),
    }
}

/// Wrap f32 results back into the dtype of the op (floats only).
pub(crate) fn back(dtype: DataType, v: Vec<f32>) -> Buf {
    Buf::from_f32(dtype, v)
}

/// Refuses non-float element types for a float-only kernel.
pub(crate) fn float_only(dtype: DataType, what: &str) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(EngineError::unsupported(format!("{what} on {dtype} tensors")))
    }
}

/// The error when an op reaches a family that does not implement it (a bug in [`super::family`]).
pub(crate) fn wrong_family(op: &Op, family: &str) -> EngineError {
    EngineError::internal(format!("{} reached the {family} operators", op.name()))
}

/// The CPU entry of a family whose ops specialisation computes or inlines: they never reach an executor.
pub(crate) fn plan_time_cpu(
    op: &Op,
    _ins: &[In<'_>],
    _outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    Err(EngineError::internal(format!(
        "{} reached the CPU executor (specialisation computes or inlines it)",
        op.name()
    )))
}

/// The wgpu entry of a family whose ops specialisation computes or inlines.
pub(crate) fn plan_time_wgpu(
    _c: &mut crate::wgpu::Compiler<'_>,
    n: &crate::ir::Node,
) -> crate::wgpu::GpuResult<()> {
    Err(crate::wgpu::GpuError::internal(format!(
        "{} reached the wgpu executor (specialisation computes or inlines it)",
        n.op.name()
    )))
}

//! NonZero: the coordinates of the non-zero elements of a tensor.
//!
//! Its output shape depends on the input's values, and plans fix every shape before they run. So
//! NonZero is computed while the plan is built: its input is a parameter. A constant input folds
//! once at load, and a graph input becomes a *host input* (each plan is specialised for its value).
//! An input computed from request data cuts the model into stages (`crate::stages`): the stage
//! before computes it, and NonZero runs on the host between the stages. The executors never see it.

use super::prelude::*;
use crate::cpu::indexed;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("NonZero", 9, convert, &FAMILY)];

/// The IR ops of this module: NonZero.
pub(super) static FAMILY: Family = Family {
    name: "nonzero",
    plan_time: true,
    value_dependent_shapes: true,
    param_input,
    resolve,
    cpu: plan_time_cpu,
    wgpu: plan_time_wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    _a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    match n.op_type.as_str() {
        "NonZero" => Ok(Converted::Node(Op::NonZero, inputs.to_vec())),
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, i: usize) -> bool {
    i == 0
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::NonZero => {
            let x = req(ins, 0, "X")?;
            let t = x.host.ok_or_else(|| {
                EngineError::unsupported(
                    "NonZero over a value that is not known when the plan is built: its output shape \
                     depends on those values, and the engine fixes every shape before a plan runs",
                )
            })?;
            let (shape, coords) = indexed::non_zero(&Buf::from_tensor(t)?, &t.shape)?;
            Ok(Resolved::Host(vec![i64_tensor(shape, coords)?]))
        }
        other => Err(wrong_family(other, "nonzero")),
    }
}

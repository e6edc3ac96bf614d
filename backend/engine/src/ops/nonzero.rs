//! NonZero: the coordinates of the non-zero elements of a tensor.
//!
//! Its output shape depends on the input's values, and plans fix every shape before they run. So
//! NonZero is computed while the plan is built, as the engine does for every data-dependent shape:
//! its input is a parameter, and the graph inputs it is computed from become *host inputs*, so each
//! plan is specialised for their values (a constant input is folded once at load). The executors
//! never see it. A model whose NonZero depends on request data therefore builds a plan per distinct
//! request value; that is correct, and the cost is documented in `docs/engine.md`.

use super::prelude::*;
use crate::cpu::indexed;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("NonZero", 9, convert, &FAMILY)];

/// The IR ops of this module: NonZero.
pub(super) static FAMILY: Family = Family {
    name: "nonzero",
    plan_time: true,
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

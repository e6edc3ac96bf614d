//! Control flow: If. The loader converts both branches; specialisation inlines the branch taken
//! when the condition is known on the host, so If never reaches an executor.

use super::prelude::*;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("If", 1, convert, &FAMILY)];

/// The IR ops of this module: If.
pub(super) static FAMILY: Family = Family {
    name: "control",
    plan_time: true,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu: plan_time_cpu,
    wgpu: plan_time_wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    _n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    _inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let t = a
        .graph("then_branch")?
        .ok_or_else(|| EngineError::invalid("If without then_branch"))?;
    let e = a
        .graph("else_branch")?
        .ok_or_else(|| EngineError::invalid("If without else_branch"))?;
    Ok(Converted::If(t.clone(), e.clone()))
}

/// The condition decides the plan (the branch is inlined).
fn param_input(_op: &Op, _i: usize) -> bool {
    true
}

/// Specialisation inlines If before resolving nodes.
fn resolve(op: &Op, _ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    Err(EngineError::internal(format!("{} reached resolve", op.name())))
}

//! Control flow: If, Loop and Scan. The loader converts their subgraphs; specialisation inlines the
//! If branch taken when the condition is known on the host and unrolls Loop and Scan
//! (`specialise/unroll.rs`), so none of them reaches an executor.

use super::prelude::*;
use crate::onnx::proto::GraphProto;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("If", 1, convert_if, &FAMILY),
    OnnxOp::new("Loop", 1, convert_loop, &FAMILY),
    OnnxOp::new("Scan", 8, convert_scan, &FAMILY),
];

/// The IR ops of this module: If, Loop, Scan.
pub(super) static FAMILY: Family = Family {
    name: "control",
    plan_time: true,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu: plan_time_cpu,
    wgpu: plan_time_wgpu,
};

fn convert_if(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let t = a
        .graph("then_branch")?
        .ok_or_else(|| EngineError::invalid("If without then_branch"))?;
    let e = a
        .graph("else_branch")?
        .ok_or_else(|| EngineError::invalid("If without else_branch"))?;
    for (which, g) in [("then_branch", t), ("else_branch", e)] {
        counts(which, g, 0, n.output.len())?;
    }
    let op = Op::If {
        then_branch: Box::default(),
        else_branch: Box::default(),
    };
    Ok(Converted::WithSubgraphs(
        op,
        inputs.to_vec(),
        vec![t.clone(), e.clone()],
    ))
}

fn convert_loop(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let body = a
        .graph("body")?
        .ok_or_else(|| EngineError::invalid("Loop without a body"))?;
    let carried = inputs.len().checked_sub(2).ok_or_else(|| {
        EngineError::invalid(
            "Loop needs inputs M and cond (either may be empty) before its loop-carried values",
        )
    })?;
    if n.output.len() < carried {
        return Err(EngineError::invalid(format!(
            "Loop has {carried} loop-carried inputs but only {} outputs",
            n.output.len()
        )));
    }
    // body: [iteration_num, cond, v…] → [cond, v…, scan outputs…]
    counts("body", body, 2 + carried, 1 + n.output.len())?;
    let op = Op::Loop { body: Box::default() };
    Ok(Converted::WithSubgraphs(op, inputs.to_vec(), vec![body.clone()]))
}

fn convert_scan(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let body = a
        .graph("body")?
        .ok_or_else(|| EngineError::invalid("Scan without a body"))?;
    let batched = cx.opset < 9;
    let m = usize::try_from(a.int("num_scan_inputs", 0)?)
        .ok()
        .filter(|&m| m > 0)
        .ok_or_else(|| EngineError::invalid("Scan needs a positive num_scan_inputs attribute"))?;
    let lead = usize::from(batched);
    let states = inputs.len().checked_sub(lead + m).ok_or_else(|| {
        EngineError::invalid(format!("Scan has {m} scan inputs but {} inputs", inputs.len()))
    })?;
    let k = n.output.len().checked_sub(states).ok_or_else(|| {
        EngineError::invalid(format!(
            "Scan has {states} state inputs but only {} outputs",
            n.output.len()
        ))
    })?;
    counts("body", body, states + m, states + k)?;
    let per = |name: &str, len: usize| -> Result<Vec<i64>> {
        match a.ints(name)? {
            None => Ok(vec![0; len]),
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(EngineError::invalid(format!(
                "Scan attribute '{name}' has {} entries, expected {len}",
                v.len()
            ))),
        }
    };
    let (input_axes, input_dirs, output_axes, output_dirs) = if batched {
        (vec![0; m], per("directions", m)?, vec![0; k], vec![0; k])
    } else {
        (
            per("scan_input_axes", m)?,
            per("scan_input_directions", m)?,
            per("scan_output_axes", k)?,
            per("scan_output_directions", k)?,
        )
    };
    let reverse = |d: Vec<i64>, name: &str| -> Result<Vec<bool>> {
        d.into_iter()
            .map(|x| match x {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(EngineError::invalid(format!(
                    "Scan {name} must be 0 or 1, got {x}"
                ))),
            })
            .collect()
    };
    let op = Op::Scan {
        body: Box::default(),
        num_scan_inputs: m,
        input_axes,
        input_reverse: reverse(input_dirs, "scan input direction")?,
        output_axes,
        output_reverse: reverse(output_dirs, "scan output direction")?,
        batched,
    };
    Ok(Converted::WithSubgraphs(op, inputs.to_vec(), vec![body.clone()]))
}

/// Checks a subgraph's input and output counts against what its node needs.
fn counts(which: &str, g: &GraphProto, n_in: usize, n_out: usize) -> Result<()> {
    if g.input.len() != n_in || g.output.len() != n_out {
        return Err(EngineError::invalid(format!(
            "subgraph {which} has {} inputs and {} outputs, the node needs {n_in} and {n_out}",
            g.input.len(),
            g.output.len()
        )));
    }
    Ok(())
}

/// If's condition and Loop's trip count and condition decide the plan (the branch is inlined, the
/// loop unrolled); Scan's inputs are data (its iteration count is a shape).
fn param_input(op: &Op, i: usize) -> bool {
    match op {
        Op::If { .. } => true,
        Op::Loop { .. } => i < 2,
        _ => false,
    }
}

/// Specialisation inlines If and unrolls Loop and Scan before resolving nodes.
fn resolve(op: &Op, _ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    Err(EngineError::internal(format!("{} reached resolve", op.name())))
}

//! Operators that reinterpret a buffer without moving data: Identity (and inference-mode Dropout), Reshape,
//! Flatten, Squeeze, Unsqueeze.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("Identity", 1, convert, &FAMILY),
    OnnxOp::new("Dropout", 7, convert, &FAMILY),
    OnnxOp::new("Reshape", 5, convert, &FAMILY),
    OnnxOp::new("Flatten", 1, convert, &FAMILY),
    OnnxOp::new("Squeeze", 1, convert, &FAMILY),
    OnnxOp::new("Unsqueeze", 1, convert, &FAMILY),
];

/// The IR ops of this module: Identity, Reshape, Flatten, Squeeze, Unsqueeze.
pub(super) static FAMILY: Family = Family {
    name: "reshape",
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
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let ins = inputs.to_vec();
    let op = n.op_type.as_str();
    match op {
        "Identity" => Ok(Converted::Node(Op::Identity, ins)),
        "Dropout" => {
            let x = need(&ins, 0, "data")?;
            let training = a.int("training_mode", 0)? != 0
                || ins.get(2).copied().flatten().is_some_and(|t| {
                    cx.graph
                        .constants
                        .get(&t)
                        .is_none_or(|c| c.to_f64_vec().map_or(true, |v| v.iter().any(|&b| b != 0.0)))
                });
            if training {
                return Err(EngineError::unsupported(
                    "Dropout in training mode (random masks); export the model in inference mode",
                ));
            }
            if n.output.get(1).is_some_and(|o| !o.is_empty()) {
                return Ok(Converted::DropoutWithMask(x));
            }
            Ok(Converted::Node(Op::Identity, vec![Some(x)]))
        }
        "Reshape" => Ok(Converted::Node(
            Op::Reshape {
                allowzero: a.int("allowzero", 0)? != 0,
            },
            ins,
        )),
        "Flatten" => Ok(Converted::Node(
            Op::Flatten {
                axis: a.int("axis", 1)?,
            },
            ins,
        )),
        "Squeeze" => Ok(Converted::Node(
            Op::Squeeze {
                axes: a.ints("axes")?,
            },
            ins,
        )),
        "Unsqueeze" => Ok(Converted::Node(
            Op::Unsqueeze {
                axes: a.ints("axes")?,
            },
            ins,
        )),
        other => Err(not_registered(other)),
    }
}

fn param_input(op: &Op, i: usize) -> bool {
    matches!(op, Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }) && i == 1
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::Identity => {
            req(ins, 0, "input")?;
            Ok(Resolved::Alias(0))
        }
        Op::Reshape { allowzero } => {
            let x = req(ins, 0, "data")?;
            let spec = host_ints(req(ins, 1, "shape")?, "Reshape's target shape")?;
            let total = checked_elements(x.shape)?;
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
                // The inferred dim holds 1 so far: the product is that of the others.
                let rest = checked_elements(&out)?;
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
        other => Err(wrong_family(other, "reshape")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    _outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => one(arg(ins, 0)?.0.clone()),
        other => Err(wrong_family(other, "reshape")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    match &n.op {
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => {
            let x = c.input(n, 0)?;
            c.set(n, 0, x)
        }
        other => Err(gpu_wrong_family(other, "reshape")),
    }
}

fn reshape_to(x: InVal<'_>, out: Vec<usize>) -> Result<Resolved> {
    if checked_elements(&out)? != checked_elements(x.shape)? {
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

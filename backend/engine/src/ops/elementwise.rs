//! Element-wise operators: one-input functions, broadcast binary functions, Where and Cast.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::elementwise as kernel;
use crate::ir::{BinaryOp, UnaryOp};
use crate::wgpu::expr::{EwNode, EwProgram};
use crate::wgpu::{ew_binary, ew_unary, host_type};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("Abs", 6, convert, &FAMILY),
    OnnxOp::new("Neg", 6, convert, &FAMILY),
    OnnxOp::new("Sqrt", 6, convert, &FAMILY),
    OnnxOp::new("Exp", 6, convert, &FAMILY),
    OnnxOp::new("Log", 6, convert, &FAMILY),
    OnnxOp::new("Reciprocal", 6, convert, &FAMILY),
    OnnxOp::new("Floor", 6, convert, &FAMILY),
    OnnxOp::new("Ceil", 6, convert, &FAMILY),
    OnnxOp::new("Round", 11, convert, &FAMILY),
    OnnxOp::new("Erf", 9, convert, &FAMILY),
    OnnxOp::new("Tanh", 6, convert, &FAMILY),
    OnnxOp::new("Sigmoid", 6, convert, &FAMILY),
    OnnxOp::new("Sin", 7, convert, &FAMILY),
    OnnxOp::new("Cos", 7, convert, &FAMILY),
    OnnxOp::new("Not", 1, convert, &FAMILY),
    OnnxOp::new("IsNaN", 9, convert, &FAMILY),
    OnnxOp::new("IsInf", 10, convert, &FAMILY),
    OnnxOp::new("Relu", 6, convert, &FAMILY),
    OnnxOp::new("Softplus", 1, convert, &FAMILY),
    OnnxOp::new("HardSwish", 14, convert, &FAMILY),
    OnnxOp::new("LeakyRelu", 6, convert, &FAMILY),
    OnnxOp::new("Elu", 6, convert, &FAMILY),
    OnnxOp::new("Selu", 6, convert, &FAMILY),
    OnnxOp::new("HardSigmoid", 6, convert, &FAMILY),
    OnnxOp::new("Gelu", 20, convert, &FAMILY),
    OnnxOp::new("Clip", 6, convert, &FAMILY),
    OnnxOp::new("Add", 7, convert, &FAMILY),
    OnnxOp::new("Sub", 7, convert, &FAMILY),
    OnnxOp::new("Mul", 7, convert, &FAMILY),
    OnnxOp::new("Div", 7, convert, &FAMILY),
    OnnxOp::new("Pow", 7, convert, &FAMILY),
    OnnxOp::new("Mod", 10, convert, &FAMILY),
    OnnxOp::new("Equal", 7, convert, &FAMILY),
    OnnxOp::new("Less", 7, convert, &FAMILY),
    OnnxOp::new("Greater", 7, convert, &FAMILY),
    OnnxOp::new("LessOrEqual", 12, convert, &FAMILY),
    OnnxOp::new("GreaterOrEqual", 12, convert, &FAMILY),
    OnnxOp::new("And", 7, convert, &FAMILY),
    OnnxOp::new("Or", 7, convert, &FAMILY),
    OnnxOp::new("PRelu", 7, convert, &FAMILY),
    OnnxOp::new("Sum", 6, convert, &FAMILY),
    OnnxOp::new("Min", 6, convert, &FAMILY),
    OnnxOp::new("Max", 6, convert, &FAMILY),
    OnnxOp::new("Mean", 6, convert, &FAMILY),
    OnnxOp::new("Where", 9, convert, &FAMILY),
    OnnxOp::new("Cast", 6, convert, &FAMILY),
    OnnxOp::new("CastLike", 15, convert, &FAMILY),
    OnnxOp::new("Sign", 9, convert, &FAMILY),
    OnnxOp::new("Mish", 18, convert, &FAMILY),
];

/// The IR ops of this module: Unary, Binary, Where, Cast.
pub(super) static FAMILY: Family = Family {
    name: "elementwise",
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
    let unary = |u: UnaryOp| Ok(Converted::Node(Op::Unary(u), ins.clone()));
    let binary = |b: BinaryOp| Ok(Converted::Node(Op::Binary(b), ins.clone()));
    let op = n.op_type.as_str();
    match op {
        "Abs" => unary(UnaryOp::Abs),
        "Neg" => unary(UnaryOp::Neg),
        "Sqrt" => unary(UnaryOp::Sqrt),
        "Exp" => unary(UnaryOp::Exp),
        "Log" => unary(UnaryOp::Log),
        "Reciprocal" => unary(UnaryOp::Reciprocal),
        "Floor" => unary(UnaryOp::Floor),
        "Ceil" => unary(UnaryOp::Ceil),
        "Round" => unary(UnaryOp::Round),
        "Erf" => unary(UnaryOp::Erf),
        "Tanh" => unary(UnaryOp::Tanh),
        "Sigmoid" => unary(UnaryOp::Sigmoid),
        "Sin" => unary(UnaryOp::Sin),
        "Cos" => unary(UnaryOp::Cos),
        "Not" => unary(UnaryOp::Not),
        "IsNaN" => unary(UnaryOp::IsNaN),
        "IsInf" => unary(UnaryOp::IsInf {
            negative: a.int("detect_negative", 1)? != 0,
            positive: a.int("detect_positive", 1)? != 0,
        }),
        "Relu" => unary(UnaryOp::Relu),
        "Softplus" => unary(UnaryOp::Softplus),
        "Sign" => unary(UnaryOp::Sign),
        "Mish" => unary(UnaryOp::Mish),
        "HardSwish" => unary(UnaryOp::HardSwish),
        "LeakyRelu" => unary(UnaryOp::LeakyRelu {
            alpha: a.float("alpha", 0.01)?,
        }),
        "Elu" => unary(UnaryOp::Elu {
            alpha: a.float("alpha", 1.0)?,
        }),
        "Selu" => unary(UnaryOp::Selu {
            alpha: a.float("alpha", 1.673_263_2)?,
            gamma: a.float("gamma", 1.050_701)?,
        }),
        "HardSigmoid" => unary(UnaryOp::HardSigmoid {
            alpha: a.float("alpha", 0.2)?,
            beta: a.float("beta", 0.5)?,
        }),
        "Gelu" => unary(UnaryOp::Gelu {
            tanh: a.string("approximate", "none")? == "tanh",
        }),
        "Clip" => {
            if opset < 11 {
                Ok(Converted::Node(
                    Op::Unary(UnaryOp::Clip {
                        min: f64::from(a.float("min", f32::MIN)?),
                        max: f64::from(a.float("max", f32::MAX)?),
                    }),
                    vec![ins.first().copied().flatten()],
                ))
            } else {
                Ok(Converted::Node(
                    Op::Unary(UnaryOp::Clip {
                        min: f64::NEG_INFINITY,
                        max: f64::INFINITY,
                    }),
                    ins,
                ))
            }
        }
        "Add" => binary(BinaryOp::Add),
        "Sub" => binary(BinaryOp::Sub),
        "Mul" => binary(BinaryOp::Mul),
        "Div" => binary(BinaryOp::Div),
        "Pow" => binary(BinaryOp::Pow),
        "Mod" => match a.int("fmod", 0)? {
            0 => binary(BinaryOp::Mod),
            1 => binary(BinaryOp::Fmod),
            other => Err(EngineError::invalid(format!(
                "Mod: attribute fmod is {other}; it must be 0 (sign of the divisor) or 1 (sign of the dividend)"
            ))),
        },
        "Equal" => binary(BinaryOp::Equal),
        "Less" => binary(BinaryOp::Less),
        "Greater" => binary(BinaryOp::Greater),
        "LessOrEqual" => binary(BinaryOp::LessOrEqual),
        "GreaterOrEqual" => binary(BinaryOp::GreaterOrEqual),
        "And" => binary(BinaryOp::And),
        "Or" => binary(BinaryOp::Or),
        "PRelu" => binary(BinaryOp::PRelu),
        "Sum" | "Min" | "Max" | "Mean" => {
            let b = match op {
                "Min" => BinaryOp::Min,
                "Max" => BinaryOp::Max,
                _ => BinaryOp::Add,
            };
            let present: Vec<ValueId> = ins.iter().flatten().copied().collect();
            if present.is_empty() {
                return Err(EngineError::invalid(format!("{op} needs at least one input")));
            }
            let mut pre = Vec::new();
            let mut acc = present[0];
            let last_is_final = op != "Mean";
            if present.len() == 1 {
                if op == "Mean" {
                    return Ok(Converted::Node(Op::Identity, vec![Some(acc)]));
                }
                return Ok(Converted::Node(Op::Identity, vec![Some(acc)]));
            }
            let steps = present.len() - 1;
            for (k, &v) in present[1..].iter().enumerate() {
                if k + 1 == steps && last_is_final {
                    return Ok(Converted::Chain(pre, Op::Binary(b), vec![Some(acc), Some(v)]));
                }
                let t = cx.temp(name);
                pre.push(Node {
                    name: format!("{name}/acc{k}"),
                    op: Op::Binary(b),
                    inputs: vec![Some(acc), Some(v)],
                    outputs: vec![Some(t)],
                });
                acc = t;
            }
            // Mean: divide by the count (the constant is cast to x's dtype at specialisation).
            let count = cx.constant(name, Tensor::scalar_f32(present.len() as f32));
            Ok(Converted::Chain(
                pre,
                Op::Binary(BinaryOp::Div),
                vec![Some(acc), Some(count)],
            ))
        }
        "Where" => Ok(Converted::Node(Op::Where, ins)),
        "Cast" => {
            let to = a.int("to", 0)?;
            if let Some(wide) = crate::onnx::int4::widened(to as i32) {
                return super::four_bit_cast::cast(cx, name, need(inputs, 0, "input")?, wide);
            }
            let to = DataType::from_onnx(to as i32).ok_or_else(|| {
                EngineError::unsupported(format!(
                    "Cast to {} is not supported",
                    crate::onnx::tensor::onnx_type_name(to as i32)
                ))
            })?;
            Ok(Converted::Node(Op::Cast { to }, ins))
        }
        // `saturate` only changes float8 conversions, which the engine does not have.
        "CastLike" => match inputs.get(1).copied().flatten() {
            Some(like) if cx.four_bit.contains(&like) => match cx.graph.values[like.0].dtype {
                Some(wide) => super::four_bit_cast::cast(cx, name, need(inputs, 0, "input")?, wide),
                None => Err(EngineError::internal("a 4-bit value without its carrying type")),
            },
            _ => Ok(Converted::Node(Op::CastLike, ins)),
        },
        other => Err(not_registered(other)),
    }
}

fn param_input(op: &Op, i: usize) -> bool {
    matches!(op, Op::Unary(UnaryOp::Clip { .. })) && i >= 1
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
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
            if u.tests_floats() && !x.dtype.is_float() {
                return Err(EngineError::invalid(format!(
                    "{u:?} takes a float tensor, not {} (ONNX defines it for floats)",
                    x.dtype
                )));
            }
            let dt = match u {
                _ if u.is_predicate() => DataType::Bool,
                UnaryOp::QuantizeDequantize { .. } => DataType::F32,
                _ => x.dtype,
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
        Op::CastLike => {
            let x = req(ins, 0, "input")?;
            let like = req(ins, 1, "target_type")?;
            if x.dtype == like.dtype {
                return Ok(Resolved::Alias(0));
            }
            Ok(Resolved::Op {
                op: Op::Cast { to: like.dtype },
                inputs: vec![Some(0)],
                outputs: vec![(like.dtype, x.shape.to_vec())],
            })
        }
        other => Err(wrong_family(other, "elementwise")),
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
        Op::Unary(u) => one(kernel::unary(*u, arg(ins, 0)?.0)?),
        Op::Binary(b) => {
            let (x, sx) = arg(ins, 0)?;
            let (y, sy) = arg(ins, 1)?;
            one(kernel::binary(*b, x, sx, y, sy, out0())?)
        }
        Op::Where => {
            let (c, sc) = arg(ins, 0)?;
            let (x, sx) = arg(ins, 1)?;
            let (y, sy) = arg(ins, 2)?;
            one(kernel::where_(c, sc, x, sx, y, sy, out0())?)
        }
        Op::Cast { to } => one(kernel::cast(arg(ins, 0)?.0, *to)?),
        other => Err(wrong_family(other, "elementwise")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    match &n.op {
        Op::Unary(op) => c.ew(
            n,
            EwProgram {
                nodes: vec![EwNode::Operand(0), EwNode::Unary(ew_unary(*op), 0)],
            },
            &[0],
        ),
        Op::Binary(op) => c.ew(
            n,
            EwProgram {
                nodes: vec![
                    EwNode::Operand(0),
                    EwNode::Operand(1),
                    EwNode::Binary(ew_binary(*op), 0, 1),
                ],
            },
            &[0, 1],
        ),
        Op::Where => c.ew(
            n,
            EwProgram {
                nodes: vec![
                    EwNode::Operand(0),
                    EwNode::Operand(1),
                    EwNode::Operand(2),
                    EwNode::Where(0, 1, 2),
                ],
            },
            &[0, 1, 2],
        ),
        Op::Cast { to } => {
            let to = host_type(*to, "Cast")?.device(c.b.has_f16());
            c.ew(
                n,
                EwProgram {
                    nodes: vec![EwNode::Operand(0), EwNode::Cast(to, 0)],
                },
                &[0],
            )
        }
        other => Err(gpu_wrong_family(other, "elementwise")),
    }
}

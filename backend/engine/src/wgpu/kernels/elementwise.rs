//! Element-wise kernels: any [`EwProgram`] over broadcast operands, one invocation per output element.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::GpuResult;
use crate::wgpu::expr::{self, EwProgram, OperandInfo};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::Template;

/// The kernel file.
pub(crate) const WGSL: &str = include_str!("elementwise.wgsl");

/// Evaluates `program` over `operands` (broadcast to `out_shape`) into a new tensor of type `out`.
pub(crate) fn elementwise(
    b: &mut PlanBuilder,
    name: &str,
    program: &EwProgram,
    operands: &[&DTensor],
    out: DType,
    out_shape: &[usize],
) -> GpuResult<DTensor> {
    let infos = operands
        .iter()
        .map(|t| OperandInfo::broadcast(t.dtype, &t.shape, out_shape))
        .collect::<GpuResult<Vec<_>>>()?;
    let code = expr::generate(program, &infos, out, out_shape, 2)?;
    let kernel = Template::new("elementwise", WGSL)
        .alias("TO", out.wgsl())
        .region("ew", code.wgsl)
        .build()?;
    let y = b.temp(name, out, out_shape)?;
    let table = match code.table {
        Some(t) => Some(b.constant_u32(&format!("{name}.ew_table"), &t)?),
        None => None,
    };
    let mut binds = vec![Bind::W(&y)];
    if let Some(t) = &table {
        binds.push(Bind::R(t));
    }
    binds.extend(operands.iter().map(|t| Bind::R(t)));
    let n = y.numel();
    b.dispatch(
        &kernel,
        Params::new().u4([n as u32, 0, 0, 0]),
        &binds,
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// Representative specialisations for the naga test: every unary and binary op, each output type.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<crate::wgpu::template::KernelSource>> {
    use crate::wgpu::expr::{BinaryOp, EwNode, UnaryOp};
    let mut out = Vec::new();
    let f = OperandInfo::broadcast(DType::F32, &[3], &[2, 3])?;
    let h = OperandInfo::broadcast(DType::F16, &[2, 3], &[2, 3])?;
    let i = OperandInfo::broadcast(DType::I32, &[1], &[2, 3])?;
    let bo = OperandInfo::broadcast(DType::Bool, &[2, 1], &[2, 3])?;
    let unary = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Reciprocal,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Erf,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Softplus,
        UnaryOp::HardSwish,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::LeakyRelu(0.1),
        UnaryOp::Elu(1.0),
        UnaryOp::Selu(1.6, 1.05),
        UnaryOp::HardSigmoid(0.2, 0.5),
        UnaryOp::Clip(0.0, 6.0),
    ];
    for (k, op) in unary.iter().enumerate() {
        let prog = EwProgram {
            nodes: vec![EwNode::Operand(0), EwNode::Unary(*op, 0)],
        };
        let ops = [f.clone(), h.clone()];
        let out_t = if k % 2 == 0 { DType::F32 } else { DType::F16 };
        let code = expr::generate(&prog, &ops[k % 2..k % 2 + 1], out_t, &[2, 3], 2)?;
        out.push(
            Template::new("elementwise", WGSL)
                .alias("TO", out_t.wgsl())
                .region("ew", code.wgsl)
                .build()?,
        );
    }
    let binary = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Mod,
        BinaryOp::Fmod,
        BinaryOp::Pow,
        BinaryOp::Min,
        BinaryOp::Max,
        BinaryOp::Equal,
        BinaryOp::Less,
        BinaryOp::Greater,
        BinaryOp::LessOrEqual,
        BinaryOp::GreaterOrEqual,
        BinaryOp::PRelu,
    ];
    for op in binary {
        for (ops, out_t) in [
            (vec![f.clone(), h.clone()], DType::F32),
            (vec![i.clone(), i.clone()], DType::I32),
        ] {
            let prog = EwProgram {
                nodes: vec![EwNode::Operand(0), EwNode::Operand(1), EwNode::Binary(op, 0, 1)],
            };
            let code = expr::generate(&prog, &ops, out_t, &[2, 3], 2)?;
            out.push(
                Template::new("elementwise", WGSL)
                    .alias("TO", out_t.wgsl())
                    .region("ew", code.wgsl)
                    .build()?,
            );
        }
    }
    for op in [BinaryOp::And, BinaryOp::Or] {
        let prog = EwProgram {
            nodes: vec![
                EwNode::Operand(0),
                EwNode::Operand(1),
                EwNode::Binary(op, 0, 1),
                EwNode::Unary(UnaryOp::Not, 2),
            ],
        };
        let code = expr::generate(&prog, &[bo.clone(), bo.clone()], DType::Bool, &[2, 3], 2)?;
        out.push(
            Template::new("elementwise", WGSL)
                .alias("TO", "i32")
                .region("ew", code.wgsl)
                .build()?,
        );
    }
    let prog = EwProgram {
        nodes: vec![
            EwNode::Operand(0),
            EwNode::Operand(1),
            EwNode::Operand(2),
            EwNode::Where(0, 1, 2),
            EwNode::Cast(DType::I32, 3),
            EwNode::Cast(DType::F16, 4),
        ],
    };
    let code = expr::generate(&prog, &[bo, f.clone(), f], DType::F16, &[2, 3], 2)?;
    out.push(
        Template::new("elementwise", WGSL)
            .alias("TO", "f16")
            .region("ew", code.wgsl)
            .build()?,
    );
    Ok(out)
}

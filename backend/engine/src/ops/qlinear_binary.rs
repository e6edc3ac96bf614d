//! onnxruntime's quantized element-wise operators (`com.microsoft`) QLinearAdd and QLinearMul: what
//! `onnxruntime.quantization` writes for an Add or a Mul between quantized tensors, and what the QDQ
//! pass (`passes/qdq.rs`) makes of a QDQ model's `Q(DQ(a) + DQ(b))` (a ResNet's residual adds).
//!
//! Both compute `QuantizeLinear(DequantizeLinear(A) ∘ DequantizeLinear(B), C_scale, C_zero_point)`
//! with numpy broadcasting, the numbers of the float graph a QDQ model writes. The CPU runs operands
//! of one shape in one pass over their codes (`cpu/quant/binary.rs`), others through FP32 tensors;
//! wgpu runs one element-wise kernel. onnxruntime's kernels fold the three scales into f32 ratios
//! before rounding, so a value within an f32 rounding error of a half step may round to the
//! neighbouring step: results agree with onnxruntime within one quantization step (exactly on the
//! contrib test graphs).

use super::prelude::*;
use super::quant::{first_f32, first_int, int8, scale_shape, zero_point_or_zero, zero_point_shape};
use crate::cpu::elementwise as kernel;
use crate::cpu::quant::binary::{BinaryCodes, qlinear_binary};
use crate::cpu::quant::linear::{self, Layout, int_range};
use crate::ir::{BinaryOp, QuantOp};
use crate::wgpu::expr::{self, EwNode, EwProgram};
use crate::wgpu::{DType, ew_binary};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::microsoft("QLinearAdd", convert, &FAMILY),
    OnnxOp::microsoft("QLinearMul", convert, &FAMILY),
];

/// The IR ops of this module: [`QuantOp::QLinearBinary`].
pub(super) static FAMILY: Family = Family {
    name: "qlinear_binary",
    plan_time: false,
    value_dependent_shapes: false,
    param_input: no_params,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    _a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let op = match n.op_type.as_str() {
        "QLinearAdd" => BinaryOp::Add,
        "QLinearMul" => BinaryOp::Mul,
        other => return Err(not_registered(other)),
    };
    for (i, what) in [(0, "A"), (1, "A_scale"), (3, "B"), (4, "B_scale"), (6, "C_scale")] {
        need(inputs, i, what)?;
    }
    Ok(Converted::Node(
        Op::Quant(QuantOp::QLinearBinary(op)),
        inputs.to_vec(),
    ))
}

fn no_params(_op: &Op, _i: usize) -> bool {
    false
}

/// The operation of a QLinearBinary node.
fn operation(op: &Op) -> Result<BinaryOp> {
    match op {
        Op::Quant(QuantOp::QLinearBinary(b @ (BinaryOp::Add | BinaryOp::Mul))) => Ok(*b),
        other => Err(wrong_family(other, "qlinear_binary")),
    }
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let name = match operation(op)? {
        BinaryOp::Mul => "QLinearMul",
        _ => "QLinearAdd",
    };
    let a = int8(req(ins, 0, "A")?, &format!("{name} input A"))?;
    let b = req(ins, 3, "B")?;
    if b.dtype != a.dtype {
        return Err(EngineError::invalid(format!(
            "{name} inputs A and B are {} and {}; they must have one type",
            a.dtype, b.dtype
        )));
    }
    for (i, what) in [(1, "A_scale"), (4, "B_scale"), (6, "C_scale")] {
        scale_shape(req(ins, i, what)?, &[], &format!("{name} {what}"), "")?;
    }
    for (i, what) in [(2, "A_zero_point"), (5, "B_zero_point")] {
        zero_point_shape(opt(ins, i), a.dtype, &[], &format!("{name} {what}"), "")?;
    }
    let c_dtype = opt(ins, 7).map_or(a.dtype, |z| z.dtype);
    int8(
        InVal {
            dtype: c_dtype,
            shape: &[],
            host: None,
        },
        &format!("{name} C_zero_point"),
    )?;
    zero_point_shape(opt(ins, 7), c_dtype, &[], &format!("{name} C_zero_point"), "")?;
    let shape = broadcast_shapes(a.shape, b.shape)?;
    Ok(concrete(op.clone(), ins.len(), vec![(c_dtype, shape)]))
}

/// A scale and zero point (absent = 0) of the node's inputs at `[scale, zero_point]`.
fn scale_and_zero(ins: &[In<'_>], [s, z]: [usize; 2]) -> Result<(f32, i32)> {
    let zero = match ins.get(z).copied().flatten() {
        Some((b, _)) => first_int(b)?,
        None => 0,
    };
    Ok((first_f32(arg(ins, s)?.0)?, zero))
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let bop = operation(op)?;
    let (a, sa) = arg(ins, 0)?;
    let (b, sb) = arg(ins, 3)?;
    let (dtype, shape) = outs
        .first()
        .ok_or_else(|| EngineError::internal("QLinearBinary without an output"))?;
    let p = BinaryCodes {
        multiply: bop == BinaryOp::Mul,
        signed: *dtype == DataType::I8,
        a: scale_and_zero(ins, [1, 2])?,
        b: scale_and_zero(ins, [4, 5])?,
        c: scale_and_zero(ins, [6, 7])?,
        range: int_range(*dtype)?,
    };
    // one shape, and codes of the output's type: one pass over the codes
    match (a, b, dtype) {
        (Buf::U8(x), Buf::U8(y), DataType::U8) if sa == sb => {
            return Ok(vec![Buf::U8(qlinear_binary(x, y, &p))]);
        }
        (Buf::I8(x), Buf::I8(y), DataType::I8) if sa == sb => {
            let codes = qlinear_binary(bytemuck::cast_slice(x), bytemuck::cast_slice(y), &p);
            return Ok(vec![Buf::I8(bytemuck::cast_vec(codes))]);
        }
        _ => {}
    }
    // broadcast: through FP32 tensors, as the float graph runs it
    let real = |x: &Buf, (scale, zero): (f32, i32)| {
        linear::dequantize_8bit(x, &[scale], Some(&[zero]), Layout::PerTensor)
            .map(Buf::F32)
            .ok_or_else(|| EngineError::internal(format!("QLinearBinary codes of {}", x.dtype())))
    };
    let sum = kernel::binary(bop, &real(a, p.a)?, sa, &real(b, p.b)?, sb, shape)?;
    let (scale, zero) = p.c;
    let codes = linear::quantize_8bit(&f32_of(&sum), &[scale], Some(&[zero]), Layout::PerTensor, *dtype);
    Ok(vec![codes.ok_or_else(|| {
        EngineError::internal(format!("QLinearBinary writing {dtype}"))
    })?])
}

/// One element-wise kernel: each operand's `(code − zero_point) · scale`, their sum or product,
/// and its code `clip(round(v / C_scale) + C_zero_point)`.
fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let bop = operation(&n.op).map_err(|e| GpuError::internal(e.to_string()))?;
    let name = c.out_name(n, 0);
    let out_id = Compiler::out_id(n, 0)?;
    let (lo, hi) = int_range(c.g.value(out_id).dtype).map_err(|e| GpuError::invalid(e.to_string()))?;
    let mut operands = Vec::with_capacity(8);
    for i in 0..8 {
        operands.push(match i {
            2 | 5 | 7 => zero_point_or_zero(c, n, i, &name)?,
            _ => c.input(n, i)?,
        });
    }
    let out = c.dev_type(out_id)?;
    let mut p = Program::default();
    let fa = p.dequantized([0, 1, 2]);
    let fb = p.dequantized([3, 4, 5]);
    let v = p.push(EwNode::Binary(ew_binary(bop), fa, fb));
    let scale = p.push(EwNode::Operand(6));
    let q = p.push(EwNode::Binary(expr::BinaryOp::Div, v, scale));
    let q = p.push(EwNode::Unary(expr::UnaryOp::Round, q));
    let zero = p.real(7);
    let q = p.push(EwNode::Binary(expr::BinaryOp::Add, q, zero));
    let q = p.push(EwNode::Unary(expr::UnaryOp::Clip(lo as f32, hi as f32), q));
    p.push(EwNode::Cast(out, q));
    let nodes = p.nodes;
    let refs: Vec<&DTensor> = operands.iter().collect();
    let shape = c.out_shape(n, 0)?;
    let y = crate::wgpu::kernels::elementwise::elementwise(
        &mut c.b,
        &name,
        &EwProgram { nodes },
        &refs,
        out,
        &shape,
    )?;
    c.set(n, 0, y)
}

/// An element-wise program under construction: each node refers to earlier ones by index.
#[derive(Default)]
struct Program {
    nodes: Vec<EwNode>,
}

impl Program {
    /// Appends `node`; its index.
    fn push(&mut self, node: EwNode) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Operand `i` (integer codes on the device) as FP32.
    fn real(&mut self, i: usize) -> usize {
        let v = self.push(EwNode::Operand(i));
        self.push(EwNode::Cast(DType::F32, v))
    }

    /// DequantizeLinear of operands `[codes, scale, zero_point]`: `(code − zero_point) · scale`.
    fn dequantized(&mut self, [x, s, z]: [usize; 3]) -> usize {
        let (code, zero) = (self.real(x), self.real(z));
        let centred = self.push(EwNode::Binary(expr::BinaryOp::Sub, code, zero));
        let scale = self.push(EwNode::Operand(s));
        self.push(EwNode::Binary(expr::BinaryOp::Mul, centred, scale))
    }
}

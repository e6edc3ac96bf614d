//! The compiler from a [`ConcreteGraph`] to a [`Plan`]: one launcher call per node, in graph order.
//!
//! Each node is lowered by its operator family (`crate::ops`); this file holds what they share: value
//! lookup, output binding, fused epilogues. Values the specialiser computed on the host (constants,
//! shape subgraphs, host-input values) become weights.

use std::sync::Arc;

use super::context::GpuContext;
use super::dtype::{DType, HostType};
use super::error::{GpuError, GpuResult};
use super::expr::{self, EwNode, EwProgram};
use super::kernels::elementwise;
use super::plan::{DTensor, Plan, PlanBuilder};
use crate::ir::{self, BinaryOp, ConcreteGraph, EpilogueStep, Node, UnaryOp, ValueId};
use crate::tensor::DataType;

/// The host type of an engine dtype, or an error for types the device cannot hold.
pub(crate) fn host_type(dt: DataType, what: &str) -> GpuResult<HostType> {
    Ok(match dt {
        DataType::F32 => HostType::F32,
        DataType::F16 => HostType::F16,
        DataType::BF16 => HostType::BF16,
        DataType::F64 => HostType::F64,
        DataType::I8 => HostType::I8,
        DataType::I16 => HostType::I16,
        DataType::I32 => HostType::I32,
        DataType::I64 => HostType::I64,
        DataType::U8 => HostType::U8,
        DataType::U16 => HostType::U16,
        DataType::U32 => HostType::U32,
        DataType::U64 => HostType::U64,
        DataType::Bool => HostType::Bool,
        DataType::String => {
            return Err(GpuError::unsupported(format!(
                "{what}: string tensors cannot live on a GPU; use the CPU executor for this model"
            )));
        }
    })
}

/// The engine dtype of a host type.
pub(crate) fn data_type(h: HostType) -> DataType {
    match h {
        HostType::F32 => DataType::F32,
        HostType::F16 => DataType::F16,
        HostType::BF16 => DataType::BF16,
        HostType::F64 => DataType::F64,
        HostType::I8 => DataType::I8,
        HostType::I16 => DataType::I16,
        HostType::I32 => DataType::I32,
        HostType::I64 => DataType::I64,
        HostType::U8 => DataType::U8,
        HostType::U16 => DataType::U16,
        HostType::U32 => DataType::U32,
        HostType::U64 => DataType::U64,
        HostType::Bool => DataType::Bool,
    }
}

/// The state of compiling one graph; each operator family's `wgpu` lowering adds its node's launches.
pub(crate) struct Compiler<'g> {
    /// The graph being compiled.
    pub(crate) g: &'g ConcreteGraph,
    /// The plan being built.
    pub(crate) b: PlanBuilder,
    vals: Vec<Option<DTensor>>,
}

/// Compiles `g` into a plan on `ctx`. Blocking (creates pipelines and buffers).
pub(crate) fn compile(ctx: Arc<GpuContext>, g: &ConcreteGraph) -> GpuResult<Plan> {
    let mut c = Compiler {
        g,
        b: PlanBuilder::new(ctx),
        vals: vec![None; g.values.len()],
    };
    let mut uploaded = Vec::with_capacity(g.inputs.len());
    for id in &g.inputs {
        let upload = !g.constants.contains_key(id) && c.vals[id.0].is_none();
        uploaded.push(upload);
        if !upload {
            continue;
        }
        let v = g.value(*id);
        let host = host_type(v.dtype, &format!("input '{}'", v.name))?;
        let t = c.b.input(&v.name, host, &v.shape)?;
        c.vals[id.0] = Some(t);
    }
    for node in &g.nodes {
        c.node(node).map_err(|e| {
            GpuError::new(
                e.kind,
                format!("node '{}' ({}): {}", node.name, node.op.name(), e.message),
            )
        })?;
    }
    for id in &g.outputs {
        let t = c.get(*id)?;
        let v = g.value(*id);
        let host = host_type(v.dtype, &format!("output '{}'", v.name))?;
        c.b.output(&v.name, host, &t);
    }
    let mut plan = c.b.finish()?;
    plan.uploaded = uploaded;
    Ok(plan)
}

/// An axis normalised against `rank`.
pub(crate) fn usize_axis(a: i64, rank: usize) -> GpuResult<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || (n >= r && r > 0) {
        return Err(GpuError::invalid(format!(
            "axis {a} out of range for rank {rank}"
        )));
    }
    Ok(n as usize)
}

/// The kernel expression of an IR unary function.
pub(crate) fn ew_unary(op: UnaryOp) -> expr::UnaryOp {
    use expr::UnaryOp as E;
    match op {
        UnaryOp::Abs => E::Abs,
        UnaryOp::Neg => E::Neg,
        UnaryOp::Sqrt => E::Sqrt,
        UnaryOp::Exp => E::Exp,
        UnaryOp::Log => E::Log,
        UnaryOp::Reciprocal => E::Reciprocal,
        UnaryOp::Floor => E::Floor,
        UnaryOp::Ceil => E::Ceil,
        UnaryOp::Round => E::Round,
        UnaryOp::Erf => E::Erf,
        UnaryOp::Tanh => E::Tanh,
        UnaryOp::Sigmoid => E::Sigmoid,
        UnaryOp::Sin => E::Sin,
        UnaryOp::Cos => E::Cos,
        UnaryOp::Not => E::Not,
        UnaryOp::IsNaN => E::IsNaN,
        UnaryOp::IsInf { negative, positive } => E::IsInf { negative, positive },
        UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        } => E::QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        },
        UnaryOp::Relu => E::Relu,
        UnaryOp::LeakyRelu { alpha } => E::LeakyRelu(alpha),
        UnaryOp::Elu { alpha } => E::Elu(alpha),
        UnaryOp::Selu { alpha, gamma } => E::Selu(alpha, gamma),
        UnaryOp::HardSigmoid { alpha, beta } => E::HardSigmoid(alpha, beta),
        UnaryOp::HardSwish => E::HardSwish,
        UnaryOp::Silu => E::Silu,
        UnaryOp::Softplus => E::Softplus,
        UnaryOp::Sign => E::Sign,
        UnaryOp::Mish => E::Mish,
        UnaryOp::Gelu { tanh: false } => E::Gelu,
        UnaryOp::Gelu { tanh: true } => E::GeluTanh,
        UnaryOp::Clip { min, max } => E::Clip(min as f32, max as f32),
    }
}

/// The kernel expression of an IR binary function.
pub(crate) fn ew_binary(op: BinaryOp) -> expr::BinaryOp {
    use expr::BinaryOp as E;
    match op {
        BinaryOp::Add => E::Add,
        BinaryOp::Sub => E::Sub,
        BinaryOp::Mul => E::Mul,
        BinaryOp::Div => E::Div,
        BinaryOp::Mod => E::Mod,
        BinaryOp::Fmod => E::Fmod,
        BinaryOp::Pow => E::Pow,
        BinaryOp::Min => E::Min,
        BinaryOp::Max => E::Max,
        BinaryOp::Equal => E::Equal,
        BinaryOp::Less => E::Less,
        BinaryOp::Greater => E::Greater,
        BinaryOp::LessOrEqual => E::LessOrEqual,
        BinaryOp::GreaterOrEqual => E::GreaterOrEqual,
        BinaryOp::And => E::And,
        BinaryOp::Or => E::Or,
        BinaryOp::PRelu => E::PRelu,
    }
}

impl Compiler<'_> {
    pub(crate) fn dev_type(&self, id: ValueId) -> GpuResult<DType> {
        let v = self.g.value(id);
        Ok(host_type(v.dtype, &format!("value '{}'", v.name))?.device(self.b.has_f16()))
    }

    /// The device tensor of a value, uploading constants on first use.
    pub(crate) fn get(&mut self, id: ValueId) -> GpuResult<DTensor> {
        if let Some(t) = &self.vals[id.0] {
            return Ok(t.clone());
        }
        let v = self.g.value(id);
        let Some(c) = self.g.constants.get(&id) else {
            return Err(GpuError::internal(format!(
                "value '{}' is read before it is computed",
                v.name
            )));
        };
        let host = host_type(c.dtype, &format!("constant '{}'", v.name))?;
        let t = self.b.constant(&v.name, host, &c.shape, &c.data)?;
        self.vals[id.0] = Some(t.clone());
        Ok(t)
    }

    pub(crate) fn input(&mut self, n: &Node, i: usize) -> GpuResult<DTensor> {
        let id = n
            .input(i)
            .ok_or_else(|| GpuError::invalid(format!("input {i} is missing")))?;
        self.get(id)
    }

    pub(crate) fn opt_input(&mut self, n: &Node, i: usize) -> GpuResult<Option<DTensor>> {
        match n.input(i) {
            Some(id) => Ok(Some(self.get(id)?)),
            None => Ok(None),
        }
    }

    pub(crate) fn out_id(n: &Node, i: usize) -> GpuResult<ValueId> {
        n.output(i)
            .ok_or_else(|| GpuError::internal(format!("output {i} is missing")))
    }

    pub(crate) fn out_shape(&self, n: &Node, i: usize) -> GpuResult<Vec<usize>> {
        Ok(self.g.value(Self::out_id(n, i)?).shape.clone())
    }

    pub(crate) fn out_name(&self, n: &Node, i: usize) -> String {
        n.output(i)
            .map(|id| self.g.value(id).name.clone())
            .unwrap_or_else(|| format!("{}:{i}", n.name))
    }

    /// Binds a produced tensor to output `i` (aliasing to the value's shape, converting its type if a
    /// launcher produced another device type).
    pub(crate) fn set(&mut self, n: &Node, i: usize, t: DTensor) -> GpuResult<()> {
        let Some(id) = n.output(i) else {
            return Ok(());
        };
        let v = self.g.value(id);
        let shape = v.shape.clone();
        if t.numel() != v.len() {
            return Err(GpuError::internal(format!(
                "produced {:?} for output '{}' of shape {:?}",
                t.shape, v.name, v.shape
            )));
        }
        let want = self.dev_type(id)?;
        let mut t = self.b.alias(&t, &shape)?;
        if t.dtype != want {
            let prog = EwProgram {
                nodes: vec![EwNode::Operand(0), EwNode::Cast(want, 0)],
            };
            let name = format!("{}.cast", v.name);
            t = elementwise::elementwise(&mut self.b, &name, &prog, &[&t], want, &shape)?;
        }
        self.vals[id.0] = Some(t);
        Ok(())
    }

    /// Converts an IR epilogue into a program (starting from `prefix`) and its operands.
    pub(crate) fn epilogue(
        &mut self,
        n: &Node,
        prefix: EwProgram,
        mut operands: Vec<DTensor>,
        ep: &ir::Epilogue,
    ) -> GpuResult<(EwProgram, Vec<DTensor>)> {
        let mut prog = prefix;
        for step in &ep.steps {
            let last = prog.nodes.len() - 1;
            match step {
                EpilogueStep::Unary(op) => prog.nodes.push(EwNode::Unary(ew_unary(*op), last)),
                EpilogueStep::Binary {
                    op,
                    input,
                    operand_first,
                } => {
                    let t = self.input(n, *input)?;
                    operands.push(t);
                    prog.nodes.push(EwNode::Operand(operands.len() - 1));
                    let o = prog.nodes.len() - 1;
                    let (a, b) = if *operand_first { (o, last) } else { (last, o) };
                    prog.nodes.push(EwNode::Binary(ew_binary(*op), a, b));
                }
            }
        }
        Ok((prog, operands))
    }

    pub(crate) fn ew(&mut self, n: &Node, prog: EwProgram, inputs: &[usize]) -> GpuResult<()> {
        let ops = inputs
            .iter()
            .map(|&i| self.input(n, i))
            .collect::<GpuResult<Vec<_>>>()?;
        let refs: Vec<&DTensor> = ops.iter().collect();
        let id = Self::out_id(n, 0)?;
        let out = self.dev_type(id)?;
        let shape = self.out_shape(n, 0)?;
        let name = self.out_name(n, 0);
        let y = elementwise::elementwise(&mut self.b, &name, &prog, &refs, out, &shape)?;
        self.set(n, 0, y)
    }

    fn node(&mut self, n: &Node) -> GpuResult<()> {
        // Nothing to compute for empty outputs: they are empty constants.
        let outs: Vec<ValueId> = n.outputs.iter().flatten().copied().collect();
        if !outs.is_empty() && outs.iter().all(|o| self.g.value(*o).is_empty()) {
            for o in outs {
                let v = self.g.value(o);
                let host = host_type(v.dtype, &v.name)?;
                let t = self.b.constant(&v.name, host, &v.shape, &[])?;
                self.vals[o.0] = Some(t);
            }
            return Ok(());
        }
        crate::ops::lower(self, n)
    }
}

/// The error when an op reaches a family that does not implement it (a bug in `ops::family`).
pub(crate) fn gpu_wrong_family(op: &ir::Op, family: &str) -> GpuError {
    GpuError::internal(format!("{} reached the {family} operators", op.name()))
}

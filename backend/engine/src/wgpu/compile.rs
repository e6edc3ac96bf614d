//! The compiler from a [`ConcreteGraph`] to a [`Plan`]: one launcher call per node, in graph order.
//!
//! Pure shape manipulation (Reshape, Flatten, Squeeze, Unsqueeze, Identity) becomes a buffer alias. Values
//! the specialiser computed on the host (constants, shape subgraphs, host-input values) become weights.

use std::sync::Arc;

use super::context::GpuContext;
use super::dtype::{DType, HostType};
use super::error::{GpuError, GpuResult};
use super::expr::{self, EwNode, EwProgram};
use super::kernels::conv::{self, ConvGeom};
use super::kernels::gather::{self, PadKind};
use super::kernels::matmul::{self, Epilogue};
use super::kernels::pool::{self, PoolGeom, PoolKind, ResizeSpec};
use super::kernels::reduce::{self, Reduction};
use super::kernels::rnn::{self, Act, Cell, RnnInputs, RnnSpec};
use super::kernels::{copy, elementwise};
use super::plan::{DTensor, Plan, PlanBuilder};
use crate::ir::{
    self, BinaryOp, ConcreteGraph, CoordTransform, EpilogueStep, NearestMode, Node, Op, PadMode, ReduceOp,
    ResizeMode, RnnActivation, RnnDirection, UnaryOp, ValueId,
};
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

struct Compiler<'g> {
    g: &'g ConcreteGraph,
    b: PlanBuilder,
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

fn usize_axis(a: i64, rank: usize) -> GpuResult<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || (n >= r && r > 0) {
        return Err(GpuError::invalid(format!(
            "axis {a} out of range for rank {rank}"
        )));
    }
    Ok(n as usize)
}

fn unary(op: UnaryOp) -> expr::UnaryOp {
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
        UnaryOp::Relu => E::Relu,
        UnaryOp::LeakyRelu { alpha } => E::LeakyRelu(alpha),
        UnaryOp::Elu { alpha } => E::Elu(alpha),
        UnaryOp::Selu { alpha, gamma } => E::Selu(alpha, gamma),
        UnaryOp::HardSigmoid { alpha, beta } => E::HardSigmoid(alpha, beta),
        UnaryOp::HardSwish => E::HardSwish,
        UnaryOp::Softplus => E::Softplus,
        UnaryOp::Gelu { tanh: false } => E::Gelu,
        UnaryOp::Gelu { tanh: true } => E::GeluTanh,
        UnaryOp::Clip { min, max } => E::Clip(min as f32, max as f32),
    }
}

fn binary(op: BinaryOp) -> expr::BinaryOp {
    use expr::BinaryOp as E;
    match op {
        BinaryOp::Add => E::Add,
        BinaryOp::Sub => E::Sub,
        BinaryOp::Mul => E::Mul,
        BinaryOp::Div => E::Div,
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

fn act(a: RnnActivation) -> Act {
    match a {
        RnnActivation::Sigmoid => Act::Sigmoid,
        RnnActivation::Tanh => Act::Tanh,
        RnnActivation::Relu => Act::Relu,
        RnnActivation::HardSigmoid { alpha, beta } => Act::HardSigmoid(alpha, beta),
        RnnActivation::LeakyRelu { alpha } => Act::LeakyRelu(alpha),
        RnnActivation::ScaledTanh { alpha, beta } => Act::ScaledTanh(alpha, beta),
        RnnActivation::Affine { alpha, beta } => Act::Affine(alpha, beta),
        RnnActivation::Elu { alpha } => Act::Elu(alpha),
        RnnActivation::Softsign => Act::Softsign,
        RnnActivation::Softplus => Act::Softplus,
        RnnActivation::ThresholdedRelu { alpha } => Act::ThresholdedRelu(alpha),
    }
}

impl Compiler<'_> {
    fn dev_type(&self, id: ValueId) -> GpuResult<DType> {
        let v = self.g.value(id);
        Ok(host_type(v.dtype, &format!("value '{}'", v.name))?.device(self.b.has_f16()))
    }

    /// The device tensor of a value, uploading constants on first use.
    fn get(&mut self, id: ValueId) -> GpuResult<DTensor> {
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

    fn input(&mut self, n: &Node, i: usize) -> GpuResult<DTensor> {
        let id = n
            .input(i)
            .ok_or_else(|| GpuError::invalid(format!("input {i} is missing")))?;
        self.get(id)
    }

    fn opt_input(&mut self, n: &Node, i: usize) -> GpuResult<Option<DTensor>> {
        match n.input(i) {
            Some(id) => Ok(Some(self.get(id)?)),
            None => Ok(None),
        }
    }

    fn out_id(n: &Node, i: usize) -> GpuResult<ValueId> {
        n.output(i)
            .ok_or_else(|| GpuError::internal(format!("output {i} is missing")))
    }

    fn out_shape(&self, n: &Node, i: usize) -> GpuResult<Vec<usize>> {
        Ok(self.g.value(Self::out_id(n, i)?).shape.clone())
    }

    fn out_name(&self, n: &Node, i: usize) -> String {
        n.output(i)
            .map(|id| self.g.value(id).name.clone())
            .unwrap_or_else(|| format!("{}:{i}", n.name))
    }

    /// Binds a produced tensor to output `i` (aliasing to the value's shape, converting its type if a
    /// launcher produced another device type).
    fn set(&mut self, n: &Node, i: usize, t: DTensor) -> GpuResult<()> {
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
    fn epilogue(
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
                EpilogueStep::Unary(op) => prog.nodes.push(EwNode::Unary(unary(*op), last)),
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
                    prog.nodes.push(EwNode::Binary(binary(*op), a, b));
                }
            }
        }
        Ok((prog, operands))
    }

    fn ew(&mut self, n: &Node, prog: EwProgram, inputs: &[usize]) -> GpuResult<()> {
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
        let name = self.out_name(n, 0);
        match &n.op {
            Op::Unary(op) => self.ew(
                n,
                EwProgram {
                    nodes: vec![EwNode::Operand(0), EwNode::Unary(unary(*op), 0)],
                },
                &[0],
            ),
            Op::Binary(op) => self.ew(
                n,
                EwProgram {
                    nodes: vec![
                        EwNode::Operand(0),
                        EwNode::Operand(1),
                        EwNode::Binary(binary(*op), 0, 1),
                    ],
                },
                &[0, 1],
            ),
            Op::Where => self.ew(
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
                let to = host_type(*to, "Cast")?.device(self.b.has_f16());
                self.ew(
                    n,
                    EwProgram {
                        nodes: vec![EwNode::Operand(0), EwNode::Cast(to, 0)],
                    },
                    &[0],
                )
            }
            Op::Identity
            | Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. } => {
                let x = self.input(n, 0)?;
                self.set(n, 0, x)
            }
            Op::MatMul {
                trans_a,
                trans_b,
                epilogue,
            } => {
                let mut a = self.input(n, 0)?;
                let mut bm = self.input(n, 1)?;
                if a.rank() == 1 {
                    a = self.b.alias(&a, &[1, a.shape[0]])?;
                }
                if bm.rank() == 1 {
                    bm = self.b.alias(&bm, &[bm.shape[0], 1])?;
                }
                let out_dt = self.dev_type(Self::out_id(n, 0)?)?;
                let out_shape = self.out_shape(n, 0)?;
                let (prog, ops) = self.epilogue(
                    n,
                    EwProgram {
                        nodes: vec![EwNode::Acc],
                    },
                    Vec::new(),
                    epilogue,
                )?;
                let refs: Vec<&DTensor> = ops.iter().collect();
                let ep = Epilogue {
                    program: (!epilogue.is_empty()).then_some(prog),
                    operands: refs,
                    shape: Some(out_shape),
                };
                let y = matmul::matmul(&mut self.b, &name, &a, &bm, *trans_a, *trans_b, out_dt, &ep)?;
                self.set(n, 0, y)
            }
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
                epilogue,
            } => {
                let a = self.input(n, 0)?;
                let bm = self.input(n, 1)?;
                let c = self.opt_input(n, 2)?;
                let out_dt = self.dev_type(Self::out_id(n, 0)?)?;
                let prefix = matmul::gemm_prologue(*alpha, *beta, c.is_some());
                let used_c = prefix.nodes.iter().any(|x| matches!(x, EwNode::Operand(0)));
                let operands = if used_c {
                    c.into_iter().collect()
                } else {
                    Vec::new()
                };
                let trivial = prefix.nodes.len() == 1 && epilogue.is_empty();
                let (prog, ops) = self.epilogue(n, prefix, operands, epilogue)?;
                let refs: Vec<&DTensor> = ops.iter().collect();
                let ep = Epilogue {
                    program: (!trivial).then_some(prog),
                    operands: refs,
                    shape: None,
                };
                let y = matmul::matmul(&mut self.b, &name, &a, &bm, *trans_a, *trans_b, out_dt, &ep)?;
                self.set(n, 0, y)
            }
            Op::Conv {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                activation,
                ..
            } => {
                let x = self.input(n, 0)?;
                let w = self.input(n, 1)?;
                let out_shape = self.out_shape(n, 0)?;
                let kernel = if kernel_shape.is_empty() {
                    w.shape[2..].to_vec()
                } else {
                    kernel_shape.clone()
                };
                let geom = ConvGeom {
                    kernel,
                    strides: strides.clone(),
                    pads: pads.clone(),
                    dilations: dilations.clone(),
                    group: *group,
                };
                self.conv_like(n, &name, x, w, geom, out_shape, activation, false)
            }
            Op::ConvTranspose {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                ..
            } => {
                let x = self.input(n, 0)?;
                let w = self.input(n, 1)?;
                let out_shape = self.out_shape(n, 0)?;
                let kernel = if kernel_shape.is_empty() {
                    w.shape[2..].to_vec()
                } else {
                    kernel_shape.clone()
                };
                let geom = ConvGeom {
                    kernel,
                    strides: strides.clone(),
                    pads: pads.clone(),
                    dilations: dilations.clone(),
                    group: *group,
                };
                self.conv_like(n, &name, x, w, geom, out_shape, &ir::Epilogue::default(), true)
            }
            Op::BatchNormalization { epsilon } => {
                let x = self.input(n, 0)?;
                let mut ops = vec![x.clone()];
                for i in 1..5 {
                    let t = self.input(n, i)?;
                    let mut shape = vec![t.numel()];
                    shape.extend(std::iter::repeat_n(1, x.rank().saturating_sub(2)));
                    ops.push(self.b.alias(&t, &shape)?);
                }
                // (x - mean) * scale / sqrt(var + eps) + bias
                let prog = EwProgram {
                    nodes: vec![
                        EwNode::Operand(0),
                        EwNode::Operand(3),
                        EwNode::Binary(expr::BinaryOp::Sub, 0, 1),
                        EwNode::Operand(4),
                        EwNode::Const(*epsilon),
                        EwNode::Binary(expr::BinaryOp::Add, 3, 4),
                        EwNode::Unary(expr::UnaryOp::Sqrt, 5),
                        EwNode::Operand(1),
                        EwNode::Binary(expr::BinaryOp::Div, 7, 6),
                        EwNode::Binary(expr::BinaryOp::Mul, 2, 8),
                        EwNode::Operand(2),
                        EwNode::Binary(expr::BinaryOp::Add, 9, 10),
                    ],
                };
                let refs: Vec<&DTensor> = ops.iter().collect();
                let out = self.dev_type(Self::out_id(n, 0)?)?;
                let y = elementwise::elementwise(&mut self.b, &name, &prog, &refs, out, &x.shape)?;
                self.set(n, 0, y)
            }
            Op::InstanceNormalization { epsilon } => {
                let x = self.input(n, 0)?;
                let s = self.input(n, 1)?;
                let bias = self.input(n, 2)?;
                let r = reduce::normalise(&mut self.b, &name, &x, &s, Some(&bias), 2, *epsilon, true, false)?;
                self.set(n, 0, r.y)
            }
            Op::LayerNormalization { axis, epsilon } => {
                let x = self.input(n, 0)?;
                let axis = usize_axis(*axis, x.rank())?;
                let norm_shape = x.shape[axis..].to_vec();
                let l: usize = norm_shape.iter().product();
                let mut s = self.input(n, 1)?;
                if s.numel() != l {
                    s = copy::expand(&mut self.b, &format!("{name}.scale"), &s, &norm_shape)?;
                }
                let mut bias = self.opt_input(n, 2)?;
                if let Some(bt) = &bias
                    && bt.numel() != l
                {
                    bias = Some(copy::expand(
                        &mut self.b,
                        &format!("{name}.bias"),
                        bt,
                        &norm_shape,
                    )?);
                }
                let want_stats = n.output(1).is_some() || n.output(2).is_some();
                let r = reduce::normalise(
                    &mut self.b,
                    &name,
                    &x,
                    &s,
                    bias.as_ref(),
                    axis,
                    *epsilon,
                    false,
                    want_stats,
                )?;
                self.set(n, 0, r.y)?;
                if let Some(stats) = r.stats {
                    let rows: usize = x.shape[..axis].iter().product();
                    let st = self.b.alias(&stats, &[2, rows])?;
                    for (k, out) in [(0usize, 1usize), (1, 2)] {
                        if n.output(out).is_some() {
                            let nm = self.out_name(n, out);
                            let part =
                                copy::slice(&mut self.b, &nm, &st, &[k as i64, 0], &[1, 1], &[1, rows])?;
                            self.set(n, out, part)?;
                        }
                    }
                }
                Ok(())
            }
            Op::MaxPool {
                kernel_shape,
                strides,
                pads,
                dilations,
                storage_order_col,
                ..
            } => {
                let x = self.input(n, 0)?;
                let out_shape = self.out_shape(n, 0)?;
                let geom = PoolGeom {
                    kernel: kernel_shape.clone(),
                    strides: strides.clone(),
                    pads: pads.clone(),
                    dilations: dilations.clone(),
                };
                let kind = PoolKind::Max {
                    indices: n.output(1).is_some(),
                    col_major: *storage_order_col,
                };
                let idx_name = self.out_name(n, 1);
                let (y, idx) = pool::pool(&mut self.b, [&name, &idx_name], &x, &geom, kind, &out_shape)?;
                self.set(n, 0, y)?;
                if let Some(idx) = idx {
                    self.set(n, 1, idx)?;
                }
                Ok(())
            }
            Op::AveragePool {
                kernel_shape,
                strides,
                pads,
                dilations,
                count_include_pad,
                ..
            } => {
                let x = self.input(n, 0)?;
                let out_shape = self.out_shape(n, 0)?;
                let geom = PoolGeom {
                    kernel: kernel_shape.clone(),
                    strides: strides.clone(),
                    pads: pads.clone(),
                    dilations: dilations.clone(),
                };
                let kind = PoolKind::Average {
                    count_include_pad: *count_include_pad,
                };
                let (y, _) = pool::pool(&mut self.b, [&name, "-"], &x, &geom, kind, &out_shape)?;
                self.set(n, 0, y)
            }
            Op::GlobalAveragePool | Op::GlobalMaxPool => {
                let x = self.input(n, 0)?;
                let axes: Vec<usize> = (2..x.rank()).collect();
                let op = if matches!(n.op, Op::GlobalMaxPool) {
                    Reduction::Max
                } else {
                    Reduction::Mean
                };
                let y = reduce::reduce(&mut self.b, &name, &x, op, &axes, true)?;
                self.set(n, 0, y)
            }
            Op::Reduce {
                op, axes, keepdims, ..
            } => {
                let x = self.input(n, 0)?;
                let mut ax = axes
                    .iter()
                    .map(|&a| usize_axis(a, x.rank()))
                    .collect::<GpuResult<Vec<_>>>()?;
                if ax.is_empty() {
                    ax = (0..x.rank()).collect();
                }
                ax.sort_unstable();
                ax.dedup();
                let op = match op {
                    ReduceOp::Mean => Reduction::Mean,
                    ReduceOp::Sum => Reduction::Sum,
                    ReduceOp::Max => Reduction::Max,
                    ReduceOp::Min => Reduction::Min,
                    ReduceOp::Prod => Reduction::Prod,
                    ReduceOp::L2 => Reduction::L2,
                    ReduceOp::L1 => Reduction::L1,
                    ReduceOp::SumSquare => Reduction::SumSquare,
                    ReduceOp::LogSum => Reduction::LogSum,
                    ReduceOp::LogSumExp => Reduction::LogSumExp,
                };
                let y = reduce::reduce(&mut self.b, &name, &x, op, &ax, *keepdims)?;
                self.set(n, 0, y)
            }
            Op::ArgReduce {
                max,
                axis,
                keepdims,
                select_last_index,
            } => {
                let x = self.input(n, 0)?;
                let axis = usize_axis(*axis, x.rank())?;
                let y =
                    reduce::arg_reduce(&mut self.b, &name, &x, axis, *max, *keepdims, *select_last_index)?;
                self.set(n, 0, y)
            }
            Op::Softmax { axis, log, coerce_2d } => {
                let x = self.input(n, 0)?;
                let axis = usize_axis(*axis, x.rank())?;
                let y = reduce::softmax(&mut self.b, &name, &x, axis, *log, *coerce_2d)?;
                self.set(n, 0, y)
            }
            Op::TopK { axis, k, largest, .. } => {
                let x = self.input(n, 0)?;
                let axis = usize_axis(*axis, x.rank())?;
                let iname = self.out_name(n, 1);
                let (v, i) = reduce::top_k(&mut self.b, [&name, &iname], &x, axis, *k, *largest)?;
                self.set(n, 0, v)?;
                self.set(n, 1, i)
            }
            Op::Transpose { perm } => {
                let x = self.input(n, 0)?;
                let perm = if perm.is_empty() {
                    (0..x.rank()).rev().collect()
                } else {
                    perm.clone()
                };
                let y = copy::transpose(&mut self.b, &name, &x, &perm)?;
                self.set(n, 0, y)
            }
            Op::Concat { axis } => {
                let xs = (0..n.inputs.len())
                    .filter(|&i| n.input(i).is_some())
                    .map(|i| self.input(n, i))
                    .collect::<GpuResult<Vec<_>>>()?;
                let out_shape = self.out_shape(n, 0)?;
                let axis = usize_axis(*axis, out_shape.len())?;
                let refs: Vec<&DTensor> = xs.iter().collect();
                let y = copy::concat(&mut self.b, &name, &refs, axis, &out_shape)?;
                self.set(n, 0, y)
            }
            Op::Split { axis, sizes } => {
                let x = self.input(n, 0)?;
                let axis = usize_axis(*axis, x.rank())?;
                let names: Vec<String> = (0..sizes.len()).map(|i| self.out_name(n, i)).collect();
                let parts = copy::split(&mut self.b, &names, &x, axis, sizes)?;
                for (i, p) in parts.into_iter().enumerate() {
                    self.set(n, i, p)?;
                }
                Ok(())
            }
            Op::Slice { starts, steps } => {
                let x = self.input(n, 0)?;
                let out_shape = self.out_shape(n, 0)?;
                let y = copy::slice(&mut self.b, &name, &x, starts, steps, &out_shape)?;
                self.set(n, 0, y)
            }
            Op::Gather { axis } => {
                let x = self.input(n, 0)?;
                let idx = self.input(n, 1)?;
                let axis = usize_axis(*axis, x.rank())?;
                let y = gather::gather(&mut self.b, &name, &x, &idx, axis)?;
                self.set(n, 0, y)
            }
            Op::GatherElements { axis } => {
                let x = self.input(n, 0)?;
                let idx = self.input(n, 1)?;
                let axis = usize_axis(*axis, x.rank())?;
                let y = gather::gather_elements(&mut self.b, &name, &x, &idx, axis)?;
                self.set(n, 0, y)
            }
            Op::Expand => {
                let x = self.input(n, 0)?;
                let out_shape = self.out_shape(n, 0)?;
                let y = copy::expand(&mut self.b, &name, &x, &out_shape)?;
                self.set(n, 0, y)
            }
            Op::Tile { repeats } => {
                let x = self.input(n, 0)?;
                let y = copy::tile(&mut self.b, &name, &x, repeats)?;
                self.set(n, 0, y)
            }
            Op::Pad { mode, pads, value } => {
                let x = self.input(n, 0)?;
                let kind = match mode {
                    PadMode::Constant => PadKind::Constant,
                    PadMode::Reflect => PadKind::Reflect,
                    PadMode::Edge => PadKind::Edge,
                    PadMode::Wrap => PadKind::Wrap,
                };
                let y = gather::pad(&mut self.b, &name, &x, pads, kind, *value)?;
                self.set(n, 0, y)
            }
            Op::Resize {
                mode,
                coord,
                nearest,
                extrapolation_value,
                scales,
                roi,
                cubic_coeff_a,
                exclude_outside,
                ..
            } => {
                let x = self.input(n, 0)?;
                let out_shape = self.out_shape(n, 0)?;
                let mode = match mode {
                    ResizeMode::Nearest => 0,
                    ResizeMode::Linear => 1,
                    ResizeMode::Cubic => 2,
                };
                let spec = ResizeSpec {
                    mode,
                    coord: match coord {
                        CoordTransform::HalfPixel => 0,
                        CoordTransform::PytorchHalfPixel => 1,
                        CoordTransform::AlignCorners => 2,
                        CoordTransform::Asymmetric => 3,
                        CoordTransform::TfCropAndResize => 4,
                        CoordTransform::HalfPixelSymmetric => 5,
                    },
                    nearest: match nearest {
                        NearestMode::RoundPreferFloor => 0,
                        NearestMode::RoundPreferCeil => 1,
                        NearestMode::Floor => 2,
                        NearestMode::Ceil => 3,
                    },
                    extrapolation: *extrapolation_value,
                    cubic_a: *cubic_coeff_a,
                    exclude_outside: *exclude_outside,
                };
                let y = pool::resize(&mut self.b, &name, &x, spec, scales, roi, &out_shape)?;
                self.set(n, 0, y)
            }
            Op::DepthToSpace { blocksize, crd } => {
                let x = self.input(n, 0)?;
                let y = copy::depth_to_space(&mut self.b, &name, &x, *blocksize, *crd)?;
                self.set(n, 0, y)
            }
            Op::Lstm { attrs, input_forget } => self.rnn(
                n,
                &name,
                attrs,
                Cell::Lstm {
                    input_forget: *input_forget,
                },
            ),
            Op::Gru {
                attrs,
                linear_before_reset,
            } => self.rnn(
                n,
                &name,
                attrs,
                Cell::Gru {
                    linear_before_reset: *linear_before_reset,
                },
            ),
            Op::Shape { .. } | Op::Size | Op::ConstantOfShape { .. } | Op::Range | Op::If { .. } => {
                Err(GpuError::internal(
                    "host-only op reached the wgpu executor (specialisation should have computed it)",
                ))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn conv_like(
        &mut self,
        n: &Node,
        name: &str,
        x: DTensor,
        w: DTensor,
        geom: ConvGeom,
        out_shape: Vec<usize>,
        activation: &ir::Epilogue,
        transpose: bool,
    ) -> GpuResult<()> {
        let bias = self.opt_input(n, 2)?;
        let (prefix, operands) = match bias {
            Some(bt) => {
                let mut shape = vec![bt.numel()];
                shape.extend(std::iter::repeat_n(1, out_shape.len().saturating_sub(2)));
                let bt = self.b.alias(&bt, &shape)?;
                (
                    EwProgram {
                        nodes: vec![
                            EwNode::Acc,
                            EwNode::Operand(0),
                            EwNode::Binary(expr::BinaryOp::Add, 0, 1),
                        ],
                    },
                    vec![bt],
                )
            }
            None => (
                EwProgram {
                    nodes: vec![EwNode::Acc],
                },
                Vec::new(),
            ),
        };
        let trivial = prefix.nodes.len() == 1 && activation.is_empty();
        let (prog, ops) = self.epilogue(n, prefix, operands, activation)?;
        let refs: Vec<&DTensor> = ops.iter().collect();
        let ep = Epilogue {
            program: (!trivial).then_some(prog),
            operands: refs,
            shape: None,
        };
        let out_dt = self.dev_type(Self::out_id(n, 0)?)?;
        let y = if transpose {
            conv::conv_transpose(&mut self.b, name, &x, &w, &geom, &out_shape, out_dt, &ep)?
        } else {
            conv::conv(&mut self.b, name, &x, &w, &geom, &out_shape, out_dt, &ep)?
        };
        self.set(n, 0, y)
    }

    fn rnn(&mut self, n: &Node, name: &str, attrs: &ir::RnnAttrs, cell: Cell) -> GpuResult<()> {
        let x = self.input(n, 0)?;
        let w = self.input(n, 1)?;
        let r = self.input(n, 2)?;
        let bias = self.opt_input(n, 3)?;
        let lens = self.opt_input(n, 4)?;
        let init_h = self.opt_input(n, 5)?;
        let (init_c, peep) = match cell {
            Cell::Lstm { .. } => (self.opt_input(n, 6)?, self.opt_input(n, 7)?),
            Cell::Gru { .. } => (None, None),
        };
        let reverse = match attrs.direction {
            RnnDirection::Forward => vec![false],
            RnnDirection::Reverse => vec![true],
            RnnDirection::Bidirectional => vec![false, true],
        };
        let per_dir = if matches!(cell, Cell::Lstm { .. }) { 3 } else { 2 };
        let mut acts: Vec<Act> = attrs.activations.iter().map(|a| act(*a)).collect();
        if acts.is_empty() {
            let one: &[Act] = if per_dir == 3 {
                &[Act::Sigmoid, Act::Tanh, Act::Tanh]
            } else {
                &[Act::Sigmoid, Act::Tanh]
            };
            for _ in 0..reverse.len() {
                acts.extend_from_slice(one);
            }
        } else if acts.len() == per_dir && reverse.len() == 2 {
            let again = acts.clone();
            acts.extend(again);
        }
        let spec = RnnSpec {
            cell,
            hidden: attrs.hidden_size,
            reverse,
            activations: acts,
            clip: attrs.clip,
            batch_major: attrs.batch_major,
        };
        // Sequence lengths equal to the full length everywhere need no masking.
        let lens = match (&lens, n.input(4)) {
            (Some(_), Some(id)) => match self.g.constants.get(&id) {
                Some(t) => {
                    let full = if attrs.batch_major { x.shape[1] } else { x.shape[0] };
                    let all_full = t
                        .to_i64_vec()
                        .map(|v| v.iter().all(|&l| l == full as i64))
                        .unwrap_or(false);
                    if all_full { None } else { lens }
                }
                None => lens,
            },
            _ => lens,
        };
        let inputs = RnnInputs {
            bias: bias.as_ref(),
            lens: lens.as_ref(),
            init_h: init_h.as_ref(),
            init_c: init_c.as_ref(),
            peepholes: peep.as_ref(),
        };
        let out = rnn::rnn(&mut self.b, name, &x, &w, &r, inputs, &spec)?;
        self.set(n, 0, out.y)?;
        self.set(n, 1, out.y_h)?;
        if let Some(c) = out.y_c {
            self.set(n, 2, c)?;
        }
        Ok(())
    }
}

//! One place per operator: each module holds one operator family's ONNX conversion (attributes,
//! opset range, domain), shape inference, CPU execution and wgpu lowering.
//!
//! The IR stays data ([`crate::ir::Op`] is an enum); behaviour lives here. Two tables connect them:
//! [`registry`] lists every ONNX operator the loader converts, by (domain, op_type, opset range),
//! and [`family`] maps each IR variant to the [`Family`] that infers, runs and lowers it. Adding an
//! operator touches its module, one line of each table, and its tests (see `docs/engine.md`).

mod attention;
mod chain;
mod constant;
mod contrib;
mod control;
mod conv;
mod dynamic_quantize_lstm;
mod dynamic_quantize_matmul;
mod einsum;
mod elementwise;
mod embed_norm;
mod exec;
mod four_bit_cast;
mod fused_conv;
mod fused_matmul;
mod grid_sample;
mod group_norm;
mod group_query_attention;
mod indexed;
mod infer;
mod lrn;
mod matmul;
mod matmul_n_bits;
mod movement;
mod nms;
mod nonzero;
mod norm;
mod onnx;
mod onnx_attention;
mod pool;
mod prelude;
mod qlinear_binary;
mod quant;
mod reduce;
mod reshape;
mod resize;
mod rnn;
mod roi_align;
mod rotary;
mod simple_rnn;
mod skip_norm;

pub(crate) use exec::{In, Prepared, eval_host, run_cpu};
pub(crate) use infer::{InVal, Resolved, broadcast_shapes};
pub(crate) use onnx::{Converted, Ctx, OnnxOp, lookup};

use crate::cpu::Buf;
use crate::error::Result;
use crate::ir::{Node, Op, QuantOp};
use crate::tensor::DataType;
use crate::wgpu::{Compiler, GpuResult};

/// Runs one concrete op on the CPU: inputs, output dtypes and shapes, prepared constant operands.
pub(crate) type CpuFn = fn(&Op, &[In<'_>], &[(DataType, Vec<usize>)], Option<&Prepared>) -> Result<Vec<Buf>>;

/// What the engine does with the IR ops of one module. Every function receives only the variants
/// [`family`] maps to this family.
pub(crate) struct Family {
    /// The module name, for messages and the generated operator list.
    pub(crate) name: &'static str,
    /// True when the ops are computed (or inlined) while the plan is built and never reach an executor.
    #[cfg_attr(not(test), allow(dead_code))] // read by the generated operator list (`tests.rs`)
    pub(crate) plan_time: bool,
    /// True when the ops' output *shapes* depend on their inputs' values (NonZero,
    /// NonMaxSuppression). Where those values are computed from request data, the model runs in
    /// stages and these ops run on the host between them ([`crate::stages`]).
    pub(crate) value_dependent_shapes: bool,
    /// True when input `i` is a *parameter*: its value, not only its shape, decides the plan.
    pub(crate) param_input: fn(&Op, usize) -> bool,
    /// Output dtypes and shapes for concrete inputs; parameter inputs become attributes.
    pub(crate) resolve: fn(&Op, &[Option<InVal<'_>>], usize) -> Result<Resolved>,
    /// Runs one concrete op on the CPU (also constant folding during specialisation).
    pub(crate) cpu: CpuFn,
    /// Lowers one concrete node to wgpu kernel launches.
    pub(crate) wgpu: fn(&mut Compiler<'_>, &Node) -> GpuResult<()>,
}

/// Every ONNX operator the loader converts, grouped by module.
pub(crate) fn registry() -> impl Iterator<Item = &'static OnnxOp> {
    [
        elementwise::ONNX,
        reshape::ONNX,
        constant::ONNX,
        control::ONNX,
        matmul::ONNX,
        conv::ONNX,
        norm::ONNX,
        pool::ONNX,
        reduce::ONNX,
        movement::ONNX,
        resize::ONNX,
        rnn::ONNX,
        simple_rnn::ONNX,
        quant::ONNX,
        indexed::ONNX,
        nonzero::ONNX,
        nms::ONNX,
        roi_align::ONNX,
        grid_sample::ONNX,
        lrn::ONNX,
        group_norm::ONNX,
        einsum::ONNX,
        contrib::ONNX,
        skip_norm::ONNX,
        attention::ONNX,
        onnx_attention::ONNX,
        group_query_attention::ONNX,
        embed_norm::ONNX,
        fused_conv::ONNX,
        fused_matmul::ONNX,
        rotary::ONNX,
        qlinear_binary::ONNX,
        dynamic_quantize_matmul::ONNX,
        matmul_n_bits::ONNX,
        dynamic_quantize_lstm::ONNX,
    ]
    .into_iter()
    .flatten()
}

/// The family that implements an IR op.
pub(crate) fn family(op: &Op) -> &'static Family {
    match op {
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } | Op::CastLike => &elementwise::FAMILY,
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Squeeze { .. }
        | Op::Unsqueeze { .. } => &reshape::FAMILY,
        Op::Shape { .. } | Op::Size | Op::ConstantOfShape { .. } | Op::Range => &constant::FAMILY,
        Op::If { .. } | Op::Loop { .. } | Op::Scan { .. } => &control::FAMILY,
        Op::MatMul { .. } | Op::Gemm { .. } => &matmul::FAMILY,
        Op::Conv { .. } | Op::ConvTranspose { .. } => &conv::FAMILY,
        Op::BatchNormalization { .. } | Op::InstanceNormalization { .. } | Op::LayerNormalization { .. } => {
            &norm::FAMILY
        }
        Op::MaxPool { .. } | Op::AveragePool { .. } | Op::GlobalAveragePool | Op::GlobalMaxPool => {
            &pool::FAMILY
        }
        Op::Reduce { .. } | Op::ArgReduce { .. } | Op::Softmax { .. } | Op::TopK { .. } => &reduce::FAMILY,
        Op::Transpose { .. }
        | Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice { .. }
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::Expand
        | Op::Tile { .. }
        | Op::Pad { .. }
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. } => &movement::FAMILY,
        Op::Resize { .. } => &resize::FAMILY,
        Op::Lstm { .. } | Op::Gru { .. } => &rnn::FAMILY,
        Op::Quant(QuantOp::QLinearBinary(_)) => &qlinear_binary::FAMILY,
        Op::Quant(_) => &quant::FAMILY,
        Op::CumSum { .. }
        | Op::Trilu { .. }
        | Op::OneHot { .. }
        | Op::GatherNd { .. }
        | Op::ScatterNd { .. }
        | Op::ScatterElements { .. } => &indexed::FAMILY,
        Op::NonZero => &nonzero::FAMILY,
        Op::NonMaxSuppression { .. } => &nms::FAMILY,
        Op::RoiAlign { .. } => &roi_align::FAMILY,
        Op::GridSample { .. } => &grid_sample::FAMILY,
    }
}

/// The message when the wgpu executor cannot run `op` whatever its shapes (an operator with a CPU
/// kernel only), so that a wgpu session refuses the model when it is created, not at its first
/// request. The operator list in `docs/engine.md` shows these as "CPU".
pub(crate) fn wgpu_refusal(op: &Op) -> Option<&'static str> {
    let f = family(op);
    let cpu_only = std::ptr::eq(f, &indexed::FAMILY) && indexed::CPU_ONLY.contains(&op.name());
    cpu_only.then_some(
        "runs on the CPU executor only; serve this model with a KIND_CPU instance group (or the CPU \
         executor)",
    )
}

/// Resolve `op` for inputs `ins`; `n_out` is the node's output count.
pub(crate) fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    (family(op).resolve)(op, ins, n_out)
}

/// True when `op`'s output shapes depend on its inputs' values (see [`Family::value_dependent_shapes`]).
pub(crate) fn has_value_dependent_shapes(op: &Op) -> bool {
    family(op).value_dependent_shapes
}

/// True when input `i` of `op` is a parameter (its value decides the plan).
pub(crate) fn is_param_input(op: &Op, i: usize) -> bool {
    (family(op).param_input)(op, i)
}

/// Lower one concrete node to wgpu.
pub(crate) fn lower(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    (family(&n.op).wgpu)(c, n)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod refusal_tests;

#[cfg(test)]
mod four_bit_tests;

#[cfg(test)]
mod scatter_nd_tests;

//! What every operator module imports.

pub(super) use super::Family;
pub(super) use super::exec::{
    In, Prepared, arg, back, f32_of, float_only, plan_time_cpu, plan_time_wgpu, wrong_family,
};
pub(super) use super::infer::{
    InVal, Resolved, broadcast_shapes, check_epilogue, concrete, defaults, host_f64, host_ints, i64_tensor,
    norm_axis, opt, req, window,
};
pub(super) use super::onnx::{Converted, Ctx, OnnxOp, auto_pad, ints_const, need, not_registered};
pub(super) use crate::cpu::Buf;
pub(super) use crate::error::{EngineError, Result};
pub(super) use crate::ir::{Node, Op, ValueId};
pub(super) use crate::onnx::attrs::Attrs;
pub(super) use crate::onnx::proto::NodeProto;
pub(super) use crate::tensor::{DataType, Tensor, checked_elements};
pub(super) use crate::wgpu::{Compiler, DTensor, GpuError, GpuResult, gpu_wrong_family};

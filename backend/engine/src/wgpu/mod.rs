//! The wgpu executor: a model's concrete graph compiled into plans of WGSL compute dispatches.
//!
//! See `docs/engine-wgpu.md` for adapter selection, plan structure, the buffer pool and the kernels.

mod adapter;
pub(crate) mod compile;
mod context;
mod dtype;
pub(crate) mod error;
mod executor;
pub(crate) mod expr;
mod fault;
pub(crate) mod kernels;
mod memory;
pub(crate) mod plan;
mod pool;
mod template;

#[cfg(test)]
mod tests;

pub use adapter::AdapterChoice;
pub(crate) use compile::{Compiler, ew_binary, ew_unary, gpu_wrong_family, host_type, usize_axis};
pub(crate) use dtype::DType;
pub(crate) use error::{GpuError, GpuResult};
pub(crate) use executor::WgpuExecutor;
pub use memory::{DeviceMemory, device_memory};
pub(crate) use plan::DTensor;

//! The wgpu executor: a model's concrete graph compiled into plans of WGSL compute dispatches.
//!
//! See `docs/engine-wgpu.md` for adapter selection, plan structure, the buffer pool and the kernels.

mod adapter;
mod compile;
mod context;
mod dtype;
mod error;
mod executor;
mod expr;
mod kernels;
mod plan;
mod pool;
mod template;

#[cfg(test)]
mod tests;

pub(crate) use executor::WgpuExecutor;

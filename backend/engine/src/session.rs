//! Running a model: a [`Session`] owns an executor and its compiled plans.

use std::sync::Arc;

use crate::cpu::CpuExecutor;
use crate::error::Result;
use crate::model::Model;
use crate::tensor::Tensor;
pub use crate::wgpu::AdapterChoice;

/// Which executor a session runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ExecutorKind {
    /// The CPU executor (Triton `KIND_CPU`).
    #[default]
    Cpu,
    /// wgpu compute shaders on the chosen adapter.
    Wgpu(AdapterChoice),
}

/// Options of a [`Session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// Executor.
    pub executor: ExecutorKind,
    /// CPU threads for the CPU executor (`None` = all cores).
    pub threads: Option<usize>,
    /// How many specialised plans (distinct input shapes) are kept.
    pub plan_cache_size: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            executor: ExecutorKind::Cpu,
            threads: None,
            plan_cache_size: 16,
        }
    }
}

enum Executor {
    Cpu(CpuExecutor),
    Wgpu(crate::wgpu::WgpuExecutor),
}

/// A model ready to run on one executor. `Send + Sync`; runs may overlap.
pub struct Session {
    model: Arc<Model>,
    executor: Executor,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("signature", self.model.signature())
            .finish()
    }
}

impl Session {
    /// Create a session.
    pub fn new(model: Arc<Model>, options: SessionOptions) -> Result<Session> {
        let executor = match &options.executor {
            ExecutorKind::Cpu => Executor::Cpu(CpuExecutor::new(
                model.clone(),
                options.threads,
                options.plan_cache_size,
            )?),
            ExecutorKind::Wgpu(choice) => Executor::Wgpu(crate::wgpu::WgpuExecutor::new(
                model.clone(),
                options.plan_cache_size,
                choice,
            )?),
        };
        Ok(Session { model, executor })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Run the model. Inputs by name (any order); outputs in signature order. Does not block the
    /// async runtime: the work runs on the executor's own threads.
    pub async fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let inputs = self.model.check_inputs(inputs)?;
        let outputs = match &self.executor {
            Executor::Cpu(cpu) => cpu.run(inputs).await?,
            Executor::Wgpu(gpu) => gpu.run(inputs).await?,
        };
        Ok(self.name_outputs(outputs))
    }

    /// Blocking variant of [`Session::run`] for tools, tests and benchmarks.
    pub fn run_blocking(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let inputs = self.model.check_inputs(inputs)?;
        let outputs = match &self.executor {
            Executor::Cpu(cpu) => cpu.run_blocking(inputs)?,
            Executor::Wgpu(gpu) => gpu.run_blocking(inputs)?,
        };
        Ok(self.name_outputs(outputs))
    }

    /// Bytes of device memory held by this session's plans (0 for the CPU executor).
    pub fn device_memory_bytes(&self) -> u64 {
        match &self.executor {
            Executor::Cpu(_) => 0,
            Executor::Wgpu(gpu) => gpu.device_memory_bytes(),
        }
    }

    /// Why this session cannot run any more because its GPU device was lost (`None` while it can, and
    /// always for the CPU executor). A lost session never recovers: create a new one, which takes a new
    /// device once the adapter is back.
    pub fn device_lost(&self) -> Option<String> {
        match &self.executor {
            Executor::Cpu(_) => None,
            Executor::Wgpu(gpu) => gpu.device_lost(),
        }
    }

    fn name_outputs(&self, outputs: Vec<Tensor>) -> Vec<(String, Tensor)> {
        self.model
            .signature()
            .outputs
            .iter()
            .map(|s| s.name.clone())
            .zip(outputs)
            .collect()
    }
}

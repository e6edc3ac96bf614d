//! Running a model: a [`Session`] owns an executor and its compiled plans.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::cpu::CpuExecutor;
use crate::error::{EngineError, Result};
use crate::ir::Graph;
use crate::model::Model;
use crate::stages::Stages;
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
    /// A model in stages, each part on its own executor.
    Staged(Box<StagedRun>),
    /// A stage whose every input is a host input (a detector's post-processing after a cut that
    /// sits in an If branch): each request's values would specialise a plan of its own, all folded
    /// on the host, so it is evaluated directly, with no plan kept for values unlikely to recur.
    OnHost(Arc<Graph>),
}

impl Executor {
    /// The executor for `model`. CPU executors take `pool` when one is started already (the
    /// parts of a staged model share one) and leave theirs there otherwise.
    fn new(
        model: &Arc<Model>,
        options: &SessionOptions,
        pool: &mut Option<Arc<rayon::ThreadPool>>,
    ) -> Result<Self> {
        if let Some(stages) = &model.stages {
            let mut part = |m: &Option<Arc<Model>>| {
                m.as_ref()
                    .map(|m| {
                        let all_host = m.stages.is_none() && m.host_inputs().len() == m.graph().inputs.len();
                        if all_host {
                            Ok(Executor::OnHost(Arc::new(m.graph().clone())))
                        } else {
                            Executor::new(m, options, pool)
                        }
                    })
                    .transpose()
            };
            let first = part(&stages.first)?;
            let rest = part(&stages.rest)?;
            return Ok(Executor::Staged(Box::new(StagedRun {
                stages: Arc::clone(stages),
                first,
                rest,
            })));
        }
        Ok(match &options.executor {
            ExecutorKind::Cpu => {
                let cpu = match pool {
                    Some(p) => CpuExecutor::on_pool(model.clone(), Arc::clone(p), options.plan_cache_size),
                    None => CpuExecutor::new(model.clone(), options.threads, options.plan_cache_size)?,
                };
                *pool = Some(cpu.pool());
                Executor::Cpu(cpu)
            }
            ExecutorKind::Wgpu(choice) => Executor::Wgpu(crate::wgpu::WgpuExecutor::new(
                model.clone(),
                options.plan_cache_size,
                choice,
            )?),
        })
    }

    /// Runs with inputs and outputs in signature order.
    fn run(&self, inputs: Vec<Tensor>) -> BoxFuture<'_, Result<Vec<Tensor>>> {
        Box::pin(async move {
            match self {
                Executor::Cpu(cpu) => cpu.run(inputs).await,
                Executor::Wgpu(gpu) => gpu.run(inputs).await,
                Executor::Staged(staged) => staged.run(inputs).await,
                Executor::OnHost(graph) => evaluate_on_host(Arc::clone(graph), inputs).await,
            }
        })
    }

    fn run_blocking(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        match self {
            Executor::Cpu(cpu) => cpu.run_blocking(inputs),
            Executor::Wgpu(gpu) => gpu.run_blocking(inputs),
            Executor::Staged(staged) => pollster::block_on(staged.run(inputs)),
            Executor::OnHost(graph) => crate::specialise::evaluate(graph, &inputs),
        }
    }

    fn parts(&self) -> Vec<&Executor> {
        match self {
            Executor::Staged(s) => s.first.iter().chain(&s.rest).flat_map(|e| e.parts()).collect(),
            _ => vec![self],
        }
    }

    fn device_memory_bytes(&self) -> u64 {
        self.parts()
            .into_iter()
            .map(|e| match e {
                Executor::Wgpu(gpu) => gpu.device_memory_bytes(),
                _ => 0,
            })
            .sum()
    }

    fn device_lost(&self) -> Option<String> {
        self.parts().into_iter().find_map(|e| match e {
            Executor::Wgpu(gpu) => gpu.device_lost(),
            _ => None,
        })
    }
}

/// A staged model's run: the first stage, the host nodes between, then the rest.
struct StagedRun {
    stages: Arc<Stages>,
    first: Option<Executor>,
    rest: Option<Executor>,
}

impl StagedRun {
    async fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let mut values = self.stages.start(inputs);
        if let (Some(model), Some(first)) = (&self.stages.first, &self.first) {
            let outputs = first.run(values.inputs_of(model.graph())?).await?;
            values.record(model.graph(), outputs);
        }
        let between = self.stages.between();
        if !between.nodes.is_empty() {
            let inputs = values.inputs_of(between)?;
            let outputs = evaluate_on_host(Arc::clone(between), inputs).await?;
            values.record(between, outputs);
        }
        if let (Some(model), Some(rest)) = (&self.stages.rest, &self.rest) {
            let outputs = rest.run(values.inputs_of(model.graph())?).await?;
            values.record(model.graph(), outputs);
        }
        self.stages.finish(values)
    }
}

/// Evaluates `graph` for these inputs on the host, off the async runtime's threads when there is one.
async fn evaluate_on_host(graph: Arc<Graph>, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(move || crate::specialise::evaluate(&graph, &inputs))
            .await
            .map_err(|e| EngineError::internal(format!("a host step of a staged model stopped: {e}")))?,
        Err(_) => crate::specialise::evaluate(&graph, &inputs),
    }
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
        let executor = Executor::new(&model, &options, &mut None)?;
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
        let outputs = self.executor.run(inputs).await?;
        Ok(self.name_outputs(outputs))
    }

    /// Blocking variant of [`Session::run`] for tools, tests and benchmarks.
    pub fn run_blocking(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let inputs = self.model.check_inputs(inputs)?;
        let outputs = self.executor.run_blocking(inputs)?;
        Ok(self.name_outputs(outputs))
    }

    /// Bytes of device memory held by this session's plans (0 for the CPU executor).
    pub fn device_memory_bytes(&self) -> u64 {
        self.executor.device_memory_bytes()
    }

    /// Why this session cannot run any more because its GPU device was lost (`None` while it can, and
    /// always for the CPU executor). A lost session never recovers: create a new one, which takes a new
    /// device once the adapter is back.
    pub fn device_lost(&self) -> Option<String> {
        self.executor.device_lost()
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

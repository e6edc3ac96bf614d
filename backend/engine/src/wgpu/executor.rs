//! The executor a [`crate::Session`] holds for `ExecutorKind::Wgpu`: plans cached per input shapes (one per
//! batch-size bucket), compiled off the async runtime, executed on the device's submission thread.

use std::sync::Arc;

use bytes::Bytes;

use super::adapter::{AdapterChoice, AdapterKind, AdapterRequest};
use super::compile::{self, data_type, host_type};
use super::context::GpuContext;
use super::error::{GpuError, GpuErrorKind};
use super::plan::{self, HostTensor, Plan};
use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::plan_cache::{PlanCache, plan_key};
use crate::tensor::Tensor;

impl From<GpuError> for EngineError {
    fn from(e: GpuError) -> Self {
        match e.kind {
            GpuErrorKind::InvalidInput => EngineError::InvalidInput(e.message),
            GpuErrorKind::Unsupported => EngineError::Unsupported(e.message),
            GpuErrorKind::ResourceExhausted => EngineError::ResourceExhausted(e.message),
            GpuErrorKind::DeviceLost => EngineError::DeviceLost(e.message),
            GpuErrorKind::Internal => EngineError::Internal(e.message),
        }
    }
}

/// The adapter request for a session's choice (the environment is applied by the context registry).
pub(crate) fn request(choice: &AdapterChoice) -> AdapterRequest {
    match choice {
        AdapterChoice::Auto => AdapterRequest::default(),
        AdapterChoice::Hardware => AdapterRequest {
            kind: AdapterKind::Gpu,
            ..Default::default()
        },
        AdapterChoice::Software => AdapterRequest {
            kind: AdapterKind::Cpu,
            ..Default::default()
        },
        AdapterChoice::Named(name) => AdapterRequest {
            name: Some(name.clone()),
            ..Default::default()
        },
    }
}

/// Runs a model on one wgpu device.
pub(crate) struct WgpuExecutor {
    model: Arc<Model>,
    ctx: Arc<GpuContext>,
    plans: PlanCache<Plan>,
}

impl std::fmt::Debug for WgpuExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuExecutor")
            .field("adapter", &self.ctx.dev.info.name)
            .finish()
    }
}

impl WgpuExecutor {
    /// Opens (or shares) the device for `choice`.
    pub(crate) fn new(model: Arc<Model>, plan_cache_size: usize, choice: &AdapterChoice) -> Result<Self> {
        // a model with an operator this executor never runs is refused now, when it is loaded,
        // rather than at its first request
        if let Some((n, why)) = model
            .graph()
            .nodes
            .iter()
            .find_map(|n| crate::ops::wgpu_refusal(&n.op).map(|why| (n, why)))
        {
            return Err(EngineError::unsupported(format!(
                "node '{}' ({}) {why}",
                n.name,
                n.op.name()
            )));
        }
        let ctx = GpuContext::shared(&request(choice))?;
        tracing::debug!(adapter = %ctx.dev.info.name, ?choice, "wgpu session");
        Ok(Self {
            model,
            ctx,
            plans: PlanCache::new(plan_cache_size),
        })
    }

    /// Specialises and compiles a plan for these inputs. Blocking.
    fn compile(model: &Model, ctx: &Arc<GpuContext>, inputs: &[Tensor]) -> Result<Arc<Plan>> {
        let graph = model.specialise_for(inputs)?;
        let started = std::time::Instant::now();
        let plan = compile::compile(Arc::clone(ctx), &graph)?;
        ctx.save_pipeline_cache();
        tracing::debug!(
            nodes = graph.nodes.len(),
            dispatches = plan.dispatch_count(),
            pool_buffers = plan.pool_slots(),
            device_bytes = plan.device_bytes(),
            pipelines = ctx.pipeline_count(),
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "wgpu plan compiled"
        );
        Ok(Arc::new(plan))
    }

    async fn plan(&self, inputs: &[Tensor]) -> Result<Arc<Plan>> {
        let key = plan_key(&self.model, inputs);
        if let Some(p) = self.plans.get(&key)? {
            return Ok(p);
        }
        let plan = match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let (model, ctx, ins) = (Arc::clone(&self.model), Arc::clone(&self.ctx), inputs.to_vec());
                handle
                    .spawn_blocking(move || Self::compile(&model, &ctx, &ins))
                    .await
                    .map_err(|e| EngineError::internal(format!("wgpu plan compilation stopped: {e}")))??
            }
            Err(_) => Self::compile(&self.model, &self.ctx, inputs)?,
        };
        self.plans.insert(key, Arc::clone(&plan))?;
        Ok(plan)
    }

    /// Runs with inputs in signature order; outputs in signature order.
    pub(crate) async fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.ctx.dev.check_alive()?;
        let plan = self.plan(&inputs).await?;
        let host = to_host(&plan, inputs)?;
        let outs = plan::run(&self.ctx, plan, host).await?;
        outs.into_iter().map(from_host).collect()
    }

    /// Blocking variant for tools and tests.
    pub(crate) fn run_blocking(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        pollster::block_on(self.run(inputs))
    }

    /// Device memory held by the cached plans.
    pub(crate) fn device_memory_bytes(&self) -> u64 {
        self.plans.sum(Plan::device_bytes)
    }

    /// Why the session's device is gone, once it is.
    pub(crate) fn device_lost(&self) -> Option<String> {
        self.ctx.dev.check_alive().err().map(|e| e.message)
    }
}

/// The inputs the plan uploads (those not folded into it as host-input constants), as host tensors.
fn to_host(plan: &Plan, inputs: Vec<Tensor>) -> Result<Vec<HostTensor>> {
    let mut out = Vec::with_capacity(inputs.len());
    for (t, &upload) in inputs.into_iter().zip(&plan.uploaded) {
        if !upload {
            continue;
        }
        let host = host_type(t.dtype, "input")?;
        out.push(HostTensor {
            host,
            shape: t.shape,
            data: t.data.to_vec(),
        });
    }
    Ok(out)
}

fn from_host(t: HostTensor) -> Result<Tensor> {
    Tensor::new(data_type(t.host), t.shape, Bytes::from(t.data))
}

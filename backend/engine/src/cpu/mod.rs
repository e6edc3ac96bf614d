//! The CPU executor: runs concrete graphs with our own kernels (gemm crate for matrix products,
//! rayon for parallelism).

use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::session::SessionOptions;
use crate::tensor::Tensor;

/// Executes a model's concrete plans on the CPU.
#[derive(Debug)]
pub struct CpuExecutor {
    model: Arc<Model>,
}

impl CpuExecutor {
    /// A CPU executor for `model`.
    pub fn new(model: Arc<Model>, options: &SessionOptions) -> Result<CpuExecutor> {
        let _ = options;
        Ok(CpuExecutor { model })
    }

    /// Run with inputs in signature order.
    pub async fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        self.run_blocking(inputs)
    }

    /// Run on the calling thread (uses the rayon pool inside).
    pub fn run_blocking(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let _ = (&self.model, inputs);
        Err(EngineError::unsupported("the CPU executor is being written"))
    }
}

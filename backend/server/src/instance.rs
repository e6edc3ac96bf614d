//! One model instance: an engine session that executes whole batches for the batcher.

use std::sync::Arc;
use std::time::Instant;

use infergate_engine::{EngineError, ErrorKind, Session, Tensor};
use infergate_protocol::ServeError;

use crate::batcher::{BatchExecutor, BatchItem};
use crate::stats::{PhaseTimes, VersionStats};
use crate::tensor_ops::{concat_rows, split_rows};

/// One request's inputs, checked against the model and in signature order.
#[derive(Debug)]
pub struct InferItem {
    /// Input tensors in signature order (batch dimension first when the model batches).
    pub inputs: Vec<Tensor>,
    /// Rows along the batch dimension (1 when the model does not batch).
    pub rows: usize,
}

impl BatchItem for InferItem {
    fn rows(&self) -> usize {
        self.rows
    }

    /// Requests share a batch only when every input has the same dims after the batch dimension
    /// (different sizes along a dynamic dimension are never mixed).
    fn can_batch_with(&self, other: &Self) -> bool {
        self.inputs.len() == other.inputs.len()
            && self.inputs.iter().zip(&other.inputs).all(|(a, b)| {
                a.dtype == b.dtype && a.shape.len() == b.shape.len() && a.shape.get(1..) == b.shape.get(1..)
            })
    }
}

/// One request's outputs.
#[derive(Debug)]
pub struct ItemOutput {
    /// Output tensors in signature order.
    pub outputs: Vec<Tensor>,
    /// Time the batch spent in each phase.
    pub phases: PhaseTimes,
}

/// An engine session as a batch executor.
pub struct Instance {
    session: Arc<Session>,
    input_names: Arc<[String]>,
    batched: bool,
    stats: Arc<VersionStats>,
}

impl Instance {
    /// Wraps a session; `batched` = the model config's `max_batch_size > 0`.
    pub fn new(
        session: Arc<Session>,
        input_names: Arc<[String]>,
        batched: bool,
        stats: Arc<VersionStats>,
    ) -> Self {
        Instance {
            session,
            input_names,
            batched,
            stats,
        }
    }

    /// Runs one set of inputs outside the batcher (warmup).
    pub async fn run_once(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, ServeError> {
        let named = self.input_names.iter().cloned().zip(inputs).collect();
        let out = self.session.run(named).await.map_err(engine_error)?;
        Ok(out.into_iter().map(|(_, t)| t).collect())
    }
}

impl BatchExecutor for Instance {
    type Item = InferItem;
    type Output = ItemOutput;
    type Error = ServeError;

    async fn execute(&self, batch: Vec<InferItem>) -> Result<Vec<ItemOutput>, ServeError> {
        let t0 = Instant::now();
        let rows: Vec<usize> = batch.iter().map(|i| i.rows).collect();
        let total_rows: usize = rows.iter().sum();
        let inputs: Vec<Tensor> = if batch.len() == 1 || !self.batched {
            // The batcher never joins requests of a model without batching.
            batch.into_iter().next().map(|i| i.inputs).unwrap_or_default()
        } else {
            (0..self.input_names.len())
                .map(|k| {
                    let parts: Vec<&Tensor> = batch.iter().map(|i| &i.inputs[k]).collect();
                    concat_rows(&parts)
                })
                .collect::<Result<_, _>>()
                .map_err(|e| ServeError::internal(format!("joining the batch: {e}")))?
        };
        let named = self.input_names.iter().cloned().zip(inputs).collect();
        let t1 = Instant::now();
        let outputs = self.session.run(named).await.map_err(engine_error)?;
        let t2 = Instant::now();
        let mut per_item: Vec<Vec<Tensor>> = rows.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
        for (name, t) in outputs {
            let parts =
                split_rows(&t, &rows).map_err(|e| ServeError::internal(format!("output '{name}': {e}")))?;
            for (slot, part) in per_item.iter_mut().zip(parts) {
                slot.push(part);
            }
        }
        let t3 = Instant::now();
        let phases = PhaseTimes {
            input: t1 - t0,
            infer: t2 - t1,
            output: t3 - t2,
        };
        self.stats
            .record_execution(if self.batched { total_rows } else { 1 }, phases);
        Ok(per_item
            .into_iter()
            .map(|outputs| ItemOutput { outputs, phases })
            .collect())
    }
}

/// The one mapping from engine errors to protocol errors (by kind, never by message).
pub fn engine_error(e: EngineError) -> ServeError {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::InvalidInput => ServeError::invalid_argument(message),
        ErrorKind::Unsupported => ServeError::unsupported(message),
        ErrorKind::ResourceExhausted => ServeError::resource_exhausted(message),
        ErrorKind::DeviceLost => ServeError::unavailable(format!("{message} (the GPU device was lost)")),
        ErrorKind::Internal => ServeError::internal(message),
    }
}

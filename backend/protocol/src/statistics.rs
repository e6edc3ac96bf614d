//! The statistics extension (`GET /v2/models/{m}/stats`, `ModelStatistics`), with every field
//! perf_analyzer reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A cumulative count and duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatisticDuration {
    /// Number of times it happened.
    pub count: u64,
    /// Total time, nanoseconds.
    pub ns: u64,
}

/// Request-level statistics of one model version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferStatistics {
    /// Successful requests, end-to-end time inside the server.
    pub success: StatisticDuration,
    /// Failed requests.
    pub fail: StatisticDuration,
    /// Time spent queued (batcher and scheduling queues).
    pub queue: StatisticDuration,
    /// Time preparing inputs (copies to the device included).
    pub compute_input: StatisticDuration,
    /// Time executing the model.
    pub compute_infer: StatisticDuration,
    /// Time extracting outputs (copies from the device included).
    pub compute_output: StatisticDuration,
    /// Response-cache hits (always zero here: no response cache), present because perf_analyzer reads it.
    pub cache_hit: StatisticDuration,
    /// Response-cache misses (always zero here).
    pub cache_miss: StatisticDuration,
}

/// Statistics of executions with one batch size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferBatchStatistics {
    /// The batch size.
    pub batch_size: u64,
    /// Input preparation at this batch size.
    pub compute_input: StatisticDuration,
    /// Execution at this batch size.
    pub compute_infer: StatisticDuration,
    /// Output extraction at this batch size.
    pub compute_output: StatisticDuration,
}

/// Memory held by a model version on one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    /// Memory kind: `"CPU"`, `"CPU_PINNED"` or `"GPU"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Device id.
    pub id: i64,
    /// Bytes in use.
    pub byte_size: u64,
}

/// Per-response statistics (decoupled models); keyed by response index in [`ModelStatistics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferResponseStatistics {
    /// Execution time until the response.
    pub compute_infer: StatisticDuration,
    /// Output extraction for the response.
    pub compute_output: StatisticDuration,
    /// Successful responses.
    pub success: StatisticDuration,
    /// Failed responses.
    pub fail: StatisticDuration,
    /// Empty responses.
    pub empty_response: StatisticDuration,
    /// Cancelled responses.
    pub cancel: StatisticDuration,
}

/// Statistics of one model version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatistics {
    /// Model name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Time of the last inference, milliseconds since the Unix epoch (0 = never).
    pub last_inference: u64,
    /// Successful inferences, counting each batch element.
    pub inference_count: u64,
    /// Model executions (one per batch run).
    pub execution_count: u64,
    /// Request-level statistics.
    pub inference_stats: InferStatistics,
    /// Per-response statistics (empty for non-decoupled models).
    pub response_stats: BTreeMap<String, InferResponseStatistics>,
    /// Per-batch-size statistics, ascending batch size.
    pub batch_stats: Vec<InferBatchStatistics>,
    /// Memory in use per device.
    pub memory_usage: Vec<MemoryUsage>,
}

/// The body of `GET /v2/models[/{m}[/versions/{v}]]/stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatisticsResponse {
    /// One entry per model version.
    pub model_stats: Vec<ModelStatistics>,
}

//! Per-version counters behind both the statistics extension and the Prometheus metrics.
//!
//! Triton derives its `nv_inference_*` metrics from the same numbers its statistics extension reports;
//! so do we: one [`VersionStats`] per loaded model version, updated with atomics on the request path.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use infergate_protocol::{
    InferBatchStatistics, InferStatistics, MemoryUsage, ModelStatistics, StatisticDuration,
};

/// Why a request failed, as Triton's `nv_inference_request_failure{reason}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Refused by the queue policy (full queue, timeout).
    Rejected,
    /// The caller went away.
    Canceled,
    /// The model execution failed.
    Backend,
    /// Anything else (bad input, …).
    Other,
}

impl FailureReason {
    /// Every reason, in label order.
    pub const ALL: [FailureReason; 4] = [
        FailureReason::Rejected,
        FailureReason::Canceled,
        FailureReason::Backend,
        FailureReason::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Rejected => "REJECTED",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
        }
    }
}

/// A cumulative count and total nanoseconds.
#[derive(Debug, Default)]
pub struct DurationCounter {
    count: AtomicU64,
    ns: AtomicU64,
}

impl DurationCounter {
    /// Adds one occurrence.
    pub fn add(&self, d: Duration) {
        self.add_n(1, d);
    }

    /// Adds `n` occurrences that took `d` in total.
    pub fn add_n(&self, n: u64, d: Duration) {
        self.count.fetch_add(n, Ordering::Relaxed);
        self.ns.fetch_add(duration_ns(d), Ordering::Relaxed);
    }

    /// The protocol value.
    pub fn get(&self) -> StatisticDuration {
        StatisticDuration {
            count: self.count.load(Ordering::Relaxed),
            ns: self.ns.load(Ordering::Relaxed),
        }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A Prometheus histogram with fixed upper bounds: one atomic per bucket, a sum and a count.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    /// Sum in millionths of the unit, so an atomic integer can hold it.
    sum_micro: AtomicU64,
    count: AtomicU64,
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound, cumulative count) per bucket, `+Inf` excluded.
    pub buckets: Vec<(f64, u64)>,
    /// Sum of observed values.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

/// Latency buckets in seconds: 100 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Batch-size buckets (rows per execution).
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

impl Histogram {
    /// An empty histogram with these upper bounds (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micro: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micro
            .fetch_add((v.max(0.0) * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Cumulative bucket counts, sum and count.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cum = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.buckets)
            .map(|(&b, c)| {
                cum += c.load(Ordering::Relaxed);
                (b, cum)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            sum: self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6,
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// Time spent in the three phases of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Preparing inputs (concatenation, copies to the device).
    pub input: Duration,
    /// Running the model.
    pub infer: Duration,
    /// Extracting outputs (copies back, splitting).
    pub output: Duration,
}

#[derive(Debug, Default)]
struct BatchCounters {
    input: DurationCounter,
    infer: DurationCounter,
    output: DurationCounter,
}

/// Counters of one model version.
#[derive(Debug)]
pub struct VersionStats {
    success: DurationCounter,
    fail: DurationCounter,
    queue: DurationCounter,
    compute_input: DurationCounter,
    compute_infer: DurationCounter,
    compute_output: DurationCounter,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    failures: [AtomicU64; 4],
    batches: Mutex<BTreeMap<u64, BatchCounters>>,
    /// End-to-end latency of successful requests, seconds.
    pub request_latency: Histogram,
    /// Queue time of executed requests, seconds.
    pub queue_latency: Histogram,
    /// Rows per execution.
    pub batch_size: Histogram,
    load_duration: Mutex<Option<Duration>>,
}

impl Default for VersionStats {
    fn default() -> Self {
        VersionStats {
            success: DurationCounter::default(),
            fail: DurationCounter::default(),
            queue: DurationCounter::default(),
            compute_input: DurationCounter::default(),
            compute_infer: DurationCounter::default(),
            compute_output: DurationCounter::default(),
            inference_count: AtomicU64::new(0),
            execution_count: AtomicU64::new(0),
            last_inference_ms: AtomicU64::new(0),
            failures: Default::default(),
            batches: Mutex::new(BTreeMap::new()),
            request_latency: Histogram::new(LATENCY_BUCKETS),
            queue_latency: Histogram::new(LATENCY_BUCKETS),
            batch_size: Histogram::new(BATCH_BUCKETS),
            load_duration: Mutex::new(None),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl VersionStats {
    /// One execution of `rows` rows finished.
    pub fn record_execution(&self, rows: usize, phases: PhaseTimes) {
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.batch_size.observe(rows as f64);
        let mut b = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        let c = b.entry(rows as u64).or_default();
        c.input.add(phases.input);
        c.infer.add(phases.infer);
        c.output.add(phases.output);
    }

    /// One request of `rows` rows succeeded after `total` in the server, `queue` of it queued.
    pub fn record_success(&self, rows: usize, total: Duration, queue: Duration, phases: PhaseTimes) {
        self.success.add(total);
        self.queue.add(queue);
        self.compute_input.add(phases.input);
        self.compute_infer.add(phases.infer);
        self.compute_output.add(phases.output);
        self.inference_count.fetch_add(rows as u64, Ordering::Relaxed);
        self.last_inference_ms.store(now_ms(), Ordering::Relaxed);
        self.request_latency.observe(total.as_secs_f64());
        self.queue_latency.observe(queue.as_secs_f64());
    }

    /// One request failed after `total`.
    pub fn record_failure(&self, reason: FailureReason, total: Duration) {
        self.fail.add(total);
        self.failures[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.last_inference_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// How long the version took to load (for `nv_model_load_duration_secs`).
    pub fn set_load_duration(&self, d: Duration) {
        *self.load_duration.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
    }

    /// Load duration, once loaded.
    pub fn load_duration(&self) -> Option<Duration> {
        *self.load_duration.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Failed requests with this reason.
    pub fn failures(&self, reason: FailureReason) -> u64 {
        self.failures[reason as usize].load(Ordering::Relaxed)
    }

    /// Successful inferences counting batch rows (`nv_inference_count`).
    pub fn inference_count(&self) -> u64 {
        self.inference_count.load(Ordering::Relaxed)
    }

    /// Executions (`nv_inference_exec_count`).
    pub fn execution_count(&self) -> u64 {
        self.execution_count.load(Ordering::Relaxed)
    }

    /// The statistics extension's request-level numbers.
    pub fn infer_statistics(&self) -> InferStatistics {
        InferStatistics {
            success: self.success.get(),
            fail: self.fail.get(),
            queue: self.queue.get(),
            compute_input: self.compute_input.get(),
            compute_infer: self.compute_infer.get(),
            compute_output: self.compute_output.get(),
            cache_hit: StatisticDuration::default(),
            cache_miss: StatisticDuration::default(),
        }
    }

    /// The statistics extension's entry for this version.
    pub fn model_statistics(&self, name: &str, version: u64, memory: Vec<MemoryUsage>) -> ModelStatistics {
        let batch_stats = self
            .batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(&size, c)| InferBatchStatistics {
                batch_size: size,
                compute_input: c.input.get(),
                compute_infer: c.infer.get(),
                compute_output: c.output.get(),
            })
            .collect();
        ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: self.last_inference_ms.load(Ordering::Relaxed),
            inference_count: self.inference_count(),
            execution_count: self.execution_count(),
            inference_stats: self.infer_statistics(),
            response_stats: BTreeMap::new(),
            batch_stats,
            memory_usage: memory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_add_up_per_request_and_per_batch_size() {
        let s = VersionStats::default();
        let p = PhaseTimes {
            input: Duration::from_micros(1),
            infer: Duration::from_micros(10),
            output: Duration::from_micros(2),
        };
        s.record_execution(3, p);
        for _ in 0..3 {
            s.record_success(1, Duration::from_micros(20), Duration::from_micros(5), p);
        }
        s.record_failure(FailureReason::Rejected, Duration::from_micros(7));
        let m = s.model_statistics("m", 2, vec![]);
        assert_eq!((m.inference_count, m.execution_count), (3, 1));
        assert_eq!(
            m.inference_stats.success,
            StatisticDuration { count: 3, ns: 60_000 }
        );
        assert_eq!(
            m.inference_stats.queue,
            StatisticDuration { count: 3, ns: 15_000 }
        );
        assert_eq!(m.inference_stats.fail, StatisticDuration { count: 1, ns: 7_000 });
        assert_eq!(m.batch_stats.len(), 1);
        assert_eq!(m.batch_stats[0].batch_size, 3);
        assert_eq!(
            m.batch_stats[0].compute_infer,
            StatisticDuration { count: 1, ns: 10_000 }
        );
        assert_eq!(s.failures(FailureReason::Rejected), 1);
        assert!(m.last_inference > 0);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(BATCH_BUCKETS);
        for v in [1.0, 3.0, 4.0, 2000.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], (1.0, 1));
        assert_eq!(s.buckets[2], (4.0, 3));
        assert_eq!(s.buckets.last().map(|b| b.1), Some(3), "2000 only falls in +Inf");
        assert!((s.sum - 2008.0).abs() < 1e-6);
    }
}

//! What one control window of the adaptive batcher saw: the latencies of its requests and how its batches
//! left the queue, summed up once the window is complete.

use std::time::Duration;

use tokio::time::Instant;

/// Why a batch left the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// It reached the batch-size cap or a preferred size, or the next request could not join it:
    /// waiting longer would not have made it larger.
    Full,
    /// Under-filled, after its oldest request waited out the queue delay while an instance was free.
    Deadline,
    /// Under-filled, after its oldest request waited longer than the queue delay because every
    /// instance was busy.
    Backlog,
}

/// One executed batch as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchReport {
    /// Rows it held.
    pub(crate) rows: usize,
    /// Its execution time.
    pub(crate) exec: Duration,
    /// How it left the queue.
    pub(crate) release: Release,
    /// How long its oldest request had waited when it started.
    pub(crate) oldest_wait: Duration,
    /// From its oldest request's arrival to its newest's.
    pub(crate) span: Duration,
    /// When it finished.
    pub(crate) done: Instant,
}

/// How the under-filled rows of a window left the queue, if most did not leave full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// At least 90% of the rows left in full batches.
    Full,
    /// Most under-filled batches waited for an instance past their delay.
    Backlog,
    /// Most under-filled batches waited out their delay with an instance free.
    Deadline,
}

/// The batches and request latencies of one window, as they come.
#[derive(Debug, Default)]
pub(crate) struct Window {
    started: Option<Instant>,
    latencies: Vec<Duration>,
    batches: usize,
    rows: usize,
    full_rows: usize,
    deadline_spans: Vec<Duration>,
    backlog_waits: Vec<Duration>,
    busy: Duration,
    /// Each batch's execution time and rows.
    execs: Vec<(Duration, usize)>,
}

/// A complete window, summed up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    /// p99 of the request latencies (queue + execution).
    pub(crate) p99: Duration,
    /// How most rows left the queue.
    pub(crate) verdict: Verdict,
    /// Share of the window's wall time the instances spent executing (0..=1 per instance, averaged).
    pub(crate) utilisation: f64,
    /// 90th percentile of the arrival spans of batches released by their deadline.
    pub(crate) deadline_span_p90: Duration,
    /// Lower quartile of the waits of batches that waited for an instance.
    pub(crate) backlog_wait_p25: Duration,
    /// Median batch execution time: what a batch typically costs, whatever a few slow ones did.
    pub(crate) exec_p50: Duration,
    /// 90th percentile of the batch execution times: the slow batches, without the one or two
    /// outliers a noisy machine produces in any window (the single slowest batch is mostly noise).
    pub(crate) slow_exec: Duration,
    /// Rows of the batch at that percentile (at least 1).
    pub(crate) slow_rows: usize,
}

/// The `q` quantile (0 < q ≤ 1) of `v`, which it sorts; zero when empty.
fn quantile(v: &mut [Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    let idx = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[idx]
}

impl Window {
    /// An empty window with room for `requests` latencies.
    pub(crate) fn with_capacity(requests: usize) -> Self {
        Window {
            latencies: Vec::with_capacity(requests),
            ..Window::default()
        }
    }

    /// Adds one finished batch and the latencies of its requests.
    pub(crate) fn record(&mut self, batch: &BatchReport, latencies: impl IntoIterator<Item = Duration>) {
        if self.started.is_none() {
            self.started = Some(batch.done.checked_sub(batch.exec).unwrap_or(batch.done));
        }
        self.latencies.extend(latencies);
        self.batches += 1;
        self.rows += batch.rows;
        self.busy += batch.exec;
        match batch.release {
            Release::Full => self.full_rows += batch.rows,
            Release::Deadline => self.deadline_spans.push(batch.span),
            Release::Backlog => self.backlog_waits.push(batch.oldest_wait),
        }
        self.execs.push((batch.exec, batch.rows.max(1)));
    }

    /// Whether the window holds at least `requests` latencies and `batches` batches.
    pub(crate) fn is_complete(&self, requests: usize, batches: usize) -> bool {
        self.latencies.len() >= requests && self.batches >= batches
    }

    /// Sums the window up at `now` (the end of its last batch) for `instances` instances, and empties
    /// it for the next one (keeping its allocation).
    pub(crate) fn close(&mut self, now: Instant, instances: usize) -> Summary {
        let mut latencies = std::mem::take(&mut self.latencies);
        let mut w = std::mem::take(self);
        let p99 = quantile(&mut latencies, 0.99);
        latencies.clear();
        self.latencies = latencies;
        let elapsed = now.saturating_duration_since(w.started.unwrap_or(now));
        let utilisation = if elapsed.is_zero() {
            1.0
        } else {
            w.busy.as_secs_f64() / (elapsed.as_secs_f64() * instances.max(1) as f64)
        };
        let under_filled = w.rows - w.full_rows;
        let verdict = if under_filled * 10 <= w.rows {
            Verdict::Full
        } else if w.backlog_waits.len() >= w.deadline_spans.len() {
            Verdict::Backlog
        } else {
            Verdict::Deadline
        };
        w.execs.sort_unstable();
        let exec_at = |q: f64| {
            let n = w.execs.len();
            if n == 0 {
                return (Duration::ZERO, 1);
            }
            w.execs[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
        };
        let (exec_p50, _) = exec_at(0.5);
        let (slow_exec, slow_rows) = exec_at(0.9);
        Summary {
            p99,
            verdict,
            utilisation,
            deadline_span_p90: quantile(&mut w.deadline_spans, 0.9),
            backlog_wait_p25: quantile(&mut w.backlog_waits, 0.25),
            exec_p50,
            slow_exec,
            slow_rows: slow_rows.max(1),
        }
    }
}

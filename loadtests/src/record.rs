//! What one run measured: per caller, an HDR histogram of latencies, errors by kind, the model versions
//! that answered, and a timeline in fixed intervals (for the plots and for invariants that look at time).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Why a request failed, as a user would sort failures.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// An HTTP response other than 200.
    Status(u16),
    /// A gRPC status other than OK (the code's number).
    Grpc(i32),
    /// The connection could not be opened.
    Connect,
    /// No answer within the request timeout.
    Timeout,
    /// The connection failed after it was opened, or the answer could not be read.
    Io,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Status(s) => write!(f, "status_{s}"),
            ErrorKind::Grpc(c) => write!(f, "grpc_{c}"),
            ErrorKind::Connect => f.write_str("connect"),
            ErrorKind::Timeout => f.write_str("timeout"),
            ErrorKind::Io => f.write_str("io"),
        }
    }
}

/// The result of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered; the model version the response names, when it names one.
    Ok(Option<String>),
    /// Failed.
    Err(ErrorKind),
}

/// One interval of the timeline.
#[derive(Debug, Clone, Default)]
struct Bucket {
    ok: u64,
    errors: u64,
    versions: BTreeMap<String, u64>,
    latency: Option<Histogram<u64>>,
}

/// Collects the samples of one caller. Latencies are kept in microseconds from 1 µs to 10 minutes with three
/// significant digits.
#[derive(Debug, Clone)]
pub struct Recorder {
    latency: Histogram<u64>,
    ok: u64,
    errors: BTreeMap<ErrorKind, u64>,
    versions: BTreeMap<String, u64>,
    /// Per version, when it answered first and last (since the measured start).
    version_seen: BTreeMap<String, (Duration, Duration)>,
    interval: Duration,
    timeline: Vec<Bucket>,
    /// Each failure's send and completion time, for invariants about an instant (a kill, a SIGTERM): was a
    /// failed request sent before it or after it? Capped at [`MAX_FAILURES_KEPT`]; the counts stay exact.
    failures: Vec<Failure>,
}

/// Failures whose times are kept per recorder: enough for any drill, bounded for a server that fails everything.
pub const MAX_FAILURES_KEPT: usize = 100_000;

/// One failed request, in time since the measured start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// When it was sent (for open-loop load, when it was meant to be sent).
    pub sent: Duration,
    /// When it failed.
    pub done: Duration,
    /// Why.
    pub kind: ErrorKind,
}

#[allow(clippy::expect_used)]
fn histogram() -> Histogram<u64> {
    // Constant bounds that hdrhistogram accepts (low ≥ 1, high ≥ 2·low, 3 digits ≤ 5): this cannot fail, and
    // the unit test below constructs it.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid")
}

impl Recorder {
    /// A recorder with a timeline in `interval` steps.
    pub fn new(interval: Duration) -> Self {
        Self {
            latency: histogram(),
            ok: 0,
            errors: BTreeMap::new(),
            versions: BTreeMap::new(),
            version_seen: BTreeMap::new(),
            interval: interval.max(Duration::from_millis(10)),
            timeline: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Records one request that completed `at` after the measured start and took `latency`.
    pub fn record(&mut self, at: Duration, latency: Duration, outcome: &Outcome) {
        self.record_sent(at, latency, at.saturating_sub(latency), outcome);
    }

    /// [`Recorder::record`] for a request whose latency is counted from an earlier time than it was sent at
    /// (open loop: from when it was meant to be sent); `sent` is when it actually left.
    pub fn record_sent(&mut self, at: Duration, latency: Duration, sent: Duration, outcome: &Outcome) {
        let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
        let idx = (at.as_nanos() / self.interval.as_nanos().max(1)) as usize;
        if self.timeline.len() <= idx {
            self.timeline.resize_with(idx + 1, Bucket::default);
        }
        let bucket = &mut self.timeline[idx];
        match outcome {
            Outcome::Ok(version) => {
                self.ok += 1;
                bucket.ok += 1;
                // Latency percentiles describe answered requests; errors are counted by kind.
                self.latency.saturating_record(us);
                bucket.latency.get_or_insert_with(histogram).saturating_record(us);
                let v = version.clone().unwrap_or_else(|| "-".to_owned());
                *bucket.versions.entry(v.clone()).or_default() += 1;
                *self.versions.entry(v.clone()).or_default() += 1;
                let seen = self.version_seen.entry(v).or_insert((at, at));
                seen.0 = seen.0.min(at);
                seen.1 = seen.1.max(at);
            }
            Outcome::Err(kind) => {
                bucket.errors += 1;
                *self.errors.entry(kind.clone()).or_default() += 1;
                if self.failures.len() < MAX_FAILURES_KEPT {
                    self.failures.push(Failure {
                        sent,
                        done: at,
                        kind: kind.clone(),
                    });
                }
            }
        }
    }

    /// Adds another recorder's samples (same interval).
    pub fn merge(&mut self, other: &Recorder) {
        let _ = self.latency.add(&other.latency);
        self.ok += other.ok;
        for (k, n) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &other.versions {
            *self.versions.entry(k.clone()).or_default() += n;
        }
        for (k, (first, last)) in &other.version_seen {
            let seen = self.version_seen.entry(k.clone()).or_insert((*first, *last));
            seen.0 = seen.0.min(*first);
            seen.1 = seen.1.max(*last);
        }
        let room = MAX_FAILURES_KEPT.saturating_sub(self.failures.len());
        self.failures.extend(other.failures.iter().take(room).cloned());
        if self.timeline.len() < other.timeline.len() {
            self.timeline.resize_with(other.timeline.len(), Bucket::default);
        }
        for (mine, theirs) in self.timeline.iter_mut().zip(&other.timeline) {
            mine.ok += theirs.ok;
            mine.errors += theirs.errors;
            for (k, n) in &theirs.versions {
                *mine.versions.entry(k.clone()).or_default() += n;
            }
            if let Some(h) = &theirs.latency {
                let _ = mine.latency.get_or_insert_with(histogram).add(h);
            }
        }
    }

    /// The failed requests with their times (the first [`MAX_FAILURES_KEPT`]).
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Requests that completed from `from` to `to` (since the measured start), counted by whole timeline
    /// intervals: those that start at or after `from` and before `to`.
    pub fn window(&self, from: Duration, to: Duration) -> Window {
        let mut w = Window::default();
        let mut h = histogram();
        for (i, b) in self.timeline.iter().enumerate() {
            let start = self.interval.as_nanos() * i as u128;
            if start < from.as_nanos() || start >= to.as_nanos() {
                continue;
            }
            w.requests += b.ok + b.errors;
            w.failed += b.errors;
            if let Some(l) = &b.latency {
                let _ = h.add(l);
            }
        }
        if !h.is_empty() {
            w.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
        }
        w
    }

    /// The figures of this recorder over a measured time of `elapsed`.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let errors: u64 = self.errors.values().sum();
        let requests = self.ok + errors;
        let secs = elapsed.as_secs_f64().max(1e-9);
        let q = |p: f64| -> f64 {
            if self.ok == 0 {
                0.0
            } else {
                self.latency.value_at_quantile(p) as f64 / 1000.0
            }
        };
        Summary {
            requests,
            ok: self.ok,
            errors: self.errors.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            error_share: if requests == 0 {
                0.0
            } else {
                errors as f64 / requests as f64
            },
            throughput_rps: requests as f64 / secs,
            latency_ms: Percentiles {
                p50: q(0.50),
                p90: q(0.90),
                p99: q(0.99),
                p999: q(0.999),
                max: if self.ok == 0 {
                    0.0
                } else {
                    self.latency.max() as f64 / 1000.0
                },
                mean: if self.ok == 0 {
                    0.0
                } else {
                    self.latency.mean() / 1000.0
                },
            },
            versions: self.versions.clone(),
            version_last_seen_s: self
                .version_seen
                .iter()
                .map(|(k, (_, last))| (k.clone(), last.as_secs_f64()))
                .collect(),
            timeline: self
                .timeline
                .iter()
                .enumerate()
                .map(|(i, b)| Point {
                    t_s: (i as f64 + 1.0) * self.interval.as_secs_f64(),
                    ok: b.ok,
                    errors: b.errors,
                    throughput_rps: (b.ok + b.errors) as f64 / self.interval.as_secs_f64(),
                    p50_ms: b
                        .latency
                        .as_ref()
                        .map_or(0.0, |h| h.value_at_quantile(0.5) as f64 / 1000.0),
                    p90_ms: b
                        .latency
                        .as_ref()
                        .map_or(0.0, |h| h.value_at_quantile(0.9) as f64 / 1000.0),
                    p99_ms: b
                        .latency
                        .as_ref()
                        .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1000.0),
                    versions: b.versions.clone(),
                })
                .collect(),
        }
    }
}

/// What a part of the run measured ([`Recorder::window`]).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Window {
    /// Requests that completed in it.
    pub requests: u64,
    /// Of which failed.
    pub failed: u64,
    /// 99th percentile of the answered ones (ms; 0 when none).
    pub p99_ms: f64,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// One timeline interval, as reported.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Point {
    /// End of the interval, seconds since the measured start.
    pub t_s: f64,
    /// Answered requests.
    pub ok: u64,
    /// Failed requests.
    pub errors: u64,
    /// Requests per second in the interval.
    pub throughput_rps: f64,
    /// Median latency of the interval (ms).
    pub p50_ms: f64,
    /// 90th percentile (ms).
    pub p90_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// Answers per model version.
    pub versions: BTreeMap<String, u64>,
}

/// The figures of a caller or of a whole run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Requests measured (warm-up excluded).
    pub requests: u64,
    /// Answered with success.
    pub ok: u64,
    /// Failures by kind (`status_429`, `grpc_14`, `connect`, `timeout`, `io`).
    pub errors: BTreeMap<String, u64>,
    /// Failed / all.
    pub error_share: f64,
    /// Requests per second over the measured time.
    pub throughput_rps: f64,
    /// Latency of answered requests (ms).
    pub latency_ms: Percentiles,
    /// Answers per model version (`-` when the response names none).
    pub versions: BTreeMap<String, u64>,
    /// Per version, when it last answered (seconds since the measured start).
    pub version_last_seen_s: BTreeMap<String, f64>,
    /// The run in intervals.
    pub timeline: Vec<Point>,
}

impl Summary {
    /// The share of answers that came from `version`.
    pub fn version_share(&self, version: &str) -> f64 {
        let total: u64 = self.versions.values().sum();
        if total == 0 {
            0.0
        } else {
            self.versions.get(version).copied().unwrap_or(0) as f64 / total as f64
        }
    }

    /// The share of requests that failed with `kind` (as printed, e.g. `status_429`).
    pub fn error_kind_share(&self, kind: &str) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors.get(kind).copied().unwrap_or(0) as f64 / self.requests as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_errors_and_versions_are_counted_apart() {
        let mut r = Recorder::new(Duration::from_secs(1));
        for i in 1..=100u64 {
            let v = if i % 10 == 0 { "2" } else { "1" };
            r.record(
                Duration::from_millis(i * 10),
                Duration::from_millis(i),
                &Outcome::Ok(Some(v.into())),
            );
        }
        r.record(
            Duration::from_millis(1500),
            Duration::from_secs(9),
            &Outcome::Err(ErrorKind::Status(429)),
        );
        let s = r.summary(Duration::from_secs(2));
        assert_eq!(s.requests, 101);
        assert_eq!(s.errors.get("status_429"), Some(&1));
        assert!((s.latency_ms.p50 - 50.0).abs() < 0.1, "{:?}", s.latency_ms);
        assert!((s.latency_ms.p99 - 99.0).abs() < 0.1, "{:?}", s.latency_ms);
        // The failed request's 9 s does not reach the percentiles of answered requests.
        assert!(s.latency_ms.max < 101.0);
        assert!((s.version_share("2") - 0.1).abs() < 1e-9);
        assert_eq!(s.timeline.len(), 2);
        assert_eq!(s.timeline[1].errors, 1);
        assert!((s.version_last_seen_s["2"] - 1.0).abs() < 1e-9);
        let first = r.window(Duration::ZERO, Duration::from_secs(1));
        assert_eq!((first.requests, first.failed), (99, 0));
        let second = r.window(Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!((second.requests, second.failed), (2, 1));
    }
}

//! The load itself. Closed loop: each caller keeps `concurrency` requests in flight, the next one sent when
//! one answers. Open loop: each caller sends at a fixed rate whatever the answers do, and a request's latency
//! runs from the moment it was *meant* to be sent, so a server that stalls is charged for the requests that
//! queued behind the stall (coordinated omission corrected). Requests sent during the warm-up are not recorded.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::payload::Payload;
use crate::record::{ErrorKind, Outcome, Recorder};

/// How one caller paces its requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Closed loop with this many requests in flight.
    Closed {
        /// Requests in flight.
        concurrency: u32,
    },
    /// Open loop at this many requests per second.
    Open {
        /// Requests per second.
        rate: f64,
        /// Where in its gap the schedule starts, as a share of the gap (0 ≤ phase < 1). Callers with one phase
        /// and rate send in step; independent callers get different phases from [`spread`], as real callers
        /// are not in step, and callers in step would queue behind one another on every send.
        phase: f64,
    },
}

/// The phase (a share of the gap) for the `index`-th independent open-loop caller: the golden-ratio sequence,
/// which spreads any number of callers over the gap with none landing on another, whatever their rates.
pub fn spread(index: usize) -> f64 {
    (index as f64 * 0.618_033_988_749_895).fract()
}

/// One caller: its `x-caller-id`, its pace and the models it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct CallerSpec {
    /// Sent as `x-caller-id`.
    pub name: String,
    /// Its pace.
    pub pace: Pace,
    /// The run's payloads (by index) its requests take in turn; empty: all of them.
    pub models: Vec<usize>,
}

/// What to send, for how long.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// The callers, all running at once.
    pub callers: Vec<CallerSpec>,
    /// Not recorded.
    pub warmup: Duration,
    /// Measured time (after the warm-up); with `requests`, whichever ends first.
    pub duration: Option<Duration>,
    /// Measured requests over all callers.
    pub requests: Option<u64>,
    /// Timeline step.
    pub interval: Duration,
    /// Requests one open-loop caller may have in flight; past it, sends wait (and their latency grows).
    pub max_in_flight: usize,
}

/// What a run recorded.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Per caller.
    pub callers: BTreeMap<String, Recorder>,
    /// Measured time.
    pub elapsed: Duration,
}

impl RunResult {
    /// All callers together.
    pub fn total(&self, interval: Duration) -> Recorder {
        let mut all = Recorder::new(interval);
        for r in self.callers.values() {
            all.merge(r);
        }
        all
    }
}

struct Shared {
    client: Client,
    /// One per model the requests name; request `i` goes to `payloads[i % len]`.
    payloads: Vec<Payload>,
    measure_start: Instant,
    end: Option<Instant>,
    limit: Option<u64>,
    issued: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    stop: AtomicBool,
    /// Requests sent and not yet answered, warm-up included (read by drills at the moment of a fault).
    in_flight: Arc<AtomicU64>,
}

impl Shared {
    /// Whether a request meant for `at` may still be sent; counts it against the request bound when measured.
    fn admit(&self, at: Instant) -> bool {
        if self.stop.load(Ordering::Relaxed) || self.end.is_some_and(|end| at >= end) {
            return false;
        }
        if at < self.measure_start {
            return true;
        }
        match self.limit {
            Some(limit) if self.issued.fetch_add(1, Ordering::Relaxed) >= limit => {
                self.stop.store(true, Ordering::Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Sends request `i` of a caller that takes the payloads `models` in turn (all when empty).
    async fn infer(&self, i: u64, id: &HeaderValue, models: &[usize]) -> Outcome {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let index = if models.is_empty() {
            i.checked_rem(self.payloads.len() as u64).map(|k| k as usize)
        } else {
            models.get((i % models.len() as u64) as usize).copied()
        };
        let outcome = match index.and_then(|k| self.payloads.get(k)) {
            Some(payload) => self.client.infer(payload, i, id).await,
            None => Outcome::Err(ErrorKind::Io),
        };
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        outcome
    }

    /// Records a request whose latency runs from `from` (its send, or in open loop its intended send) and
    /// that actually left at `sent`.
    fn record(&self, rec: &Mutex<Recorder>, from: Instant, sent: Instant, outcome: &Outcome) {
        if from < self.measure_start {
            return;
        }
        let now = Instant::now();
        self.done.fetch_add(1, Ordering::Relaxed);
        if matches!(outcome, Outcome::Err(_)) {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut r) = rec.lock() {
            r.record_sent(
                now - self.measure_start,
                now - from,
                sent.saturating_duration_since(self.measure_start),
                outcome,
            );
        }
    }
}

/// Runs `plan` from `start` (the warm-up begins then; measuring at `start + plan.warmup`). Shows a progress bar
/// on a terminal when `progress` is set.
pub async fn run(
    client: Client,
    payload: Payload,
    plan: &LoadPlan,
    start: Instant,
    progress: bool,
) -> RunResult {
    run_observed(client, vec![payload], plan, start, progress, Arc::default()).await
}

/// [`run`] over one or more models (request `i` names the model of `payloads[i % len]`; at least one),
/// keeping the number of requests in flight in `in_flight` as it goes, so that a fault injected during the run
/// can be judged against the requests it could have hit.
pub async fn run_observed(
    client: Client,
    payloads: Vec<Payload>,
    plan: &LoadPlan,
    start: Instant,
    progress: bool,
    in_flight: Arc<AtomicU64>,
) -> RunResult {
    let measure_start = start + plan.warmup;
    let shared = Arc::new(Shared {
        client,
        payloads,
        measure_start,
        end: plan.duration.map(|d| measure_start + d),
        limit: plan.requests,
        issued: AtomicU64::new(0),
        done: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        in_flight,
    });
    let bar = progress_bar(plan, progress && std::io::stderr().is_terminal());
    let mut recorders = BTreeMap::new();
    let mut tasks = JoinSet::new();
    let mut seq = 0u64;
    for caller in &plan.callers {
        let rec = Arc::new(Mutex::new(Recorder::new(plan.interval)));
        recorders.insert(caller.name.clone(), rec.clone());
        let id = HeaderValue::from_str(&caller.name)
            .unwrap_or_else(|_| HeaderValue::from_static("invalid-caller-name"));
        match caller.pace {
            Pace::Closed { concurrency } => {
                for _ in 0..concurrency.max(1) {
                    let (shared, rec, id) = (shared.clone(), rec.clone(), id.clone());
                    let models = caller.models.clone();
                    seq += 1;
                    let mut i = seq << 32;
                    tasks.spawn(async move {
                        tokio::time::sleep_until(start).await;
                        loop {
                            let sent = Instant::now();
                            if !shared.admit(sent) {
                                break;
                            }
                            let outcome = shared.infer(i, &id, &models).await;
                            shared.record(&rec, sent, sent, &outcome);
                            i += 1;
                        }
                    });
                }
            }
            Pace::Open { rate, phase } => {
                let (shared, rec, id) = (shared.clone(), rec.clone(), id.clone());
                let models: Arc<[usize]> = caller.models.clone().into();
                let gap = Duration::from_secs_f64(1.0 / rate.max(1e-3));
                let first = start + gap.mul_f64(phase.clamp(0.0, 1.0));
                let slots = Arc::new(Semaphore::new(plan.max_in_flight.max(1)));
                tasks.spawn(async move {
                    let mut inflight = JoinSet::new();
                    let mut n = 0u32;
                    loop {
                        // Intended send times are fixed by the schedule, never by the answers.
                        let intended = first + gap * n;
                        n += 1;
                        tokio::time::sleep_until(intended).await;
                        if !shared.admit(intended) {
                            break;
                        }
                        let Ok(permit) = slots.clone().acquire_owned().await else {
                            break;
                        };
                        let (shared, rec, id, models) =
                            (shared.clone(), rec.clone(), id.clone(), models.clone());
                        inflight.spawn(async move {
                            let sent = Instant::now();
                            let outcome = shared.infer(u64::from(n), &id, &models).await;
                            shared.record(&rec, intended, sent, &outcome);
                            drop(permit);
                        });
                        while inflight.try_join_next().is_some() {}
                    }
                    while inflight.join_next().await.is_some() {}
                });
            }
        }
    }
    let ticker = bar.clone().map(|bar| {
        let shared = shared.clone();
        let by_count = plan.requests.is_some() && plan.duration.is_none();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = Instant::now();
                if by_count {
                    bar.set_position(shared.done.load(Ordering::Relaxed));
                } else if now > shared.measure_start {
                    bar.set_position((now - shared.measure_start).as_millis() as u64);
                }
                bar.set_message(format!(
                    "{} answered, {} failed{}",
                    shared.done.load(Ordering::Relaxed),
                    shared.failed.load(Ordering::Relaxed),
                    if now < shared.measure_start {
                        " (warm-up)"
                    } else {
                        ""
                    }
                ));
            }
        })
    });
    while tasks.join_next().await.is_some() {}
    let elapsed = Instant::now().saturating_duration_since(measure_start);
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let callers = recorders
        .into_iter()
        .map(|(name, rec)| {
            let r = rec
                .lock()
                .map(|r| r.clone())
                .unwrap_or_else(|p| p.into_inner().clone());
            (name, r)
        })
        .collect();
    RunResult { callers, elapsed }
}

fn progress_bar(plan: &LoadPlan, show: bool) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let (len, template) = match (plan.duration, plan.requests) {
        (Some(d), _) => (
            d.as_millis() as u64,
            "{spinner} [{elapsed_precise}] {wide_bar} {msg}",
        ),
        (None, Some(n)) => (n, "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}"),
        (None, None) => (0, "{spinner} [{elapsed_precise}] {msg}"),
    };
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    Some(bar)
}

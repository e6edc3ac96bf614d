//! Automatic canary analysis: compare a route's canary destination with its baseline over a
//! sliding window, roll the canary back when it is worse, and optionally promote it step by step
//! while it is healthy.
//!
//! The state of one route lives in a [`CanaryState`], created by [`carry_over`] when a
//! config version is compiled and reused by later versions as long as the route's split and
//! analysis settings are unchanged (a changed config starts a fresh analysis: that is how an
//! operator clears a rollback). The pipeline calls [`CanaryState::weights`] before splitting and
//! [`CanaryState::record`] when a response ends; evaluation runs inline, at most once per window
//! slot, on whichever request crosses the slot boundary, so no background task is needed.
//!
//! A rollback is exposed three ways: [`CanaryState::report`] (serialised by the admin `/canary`
//! endpoint), the metrics `infergate_gateway_canary_phase{route}` /
//! `infergate_gateway_canary_rollbacks_total{route}` / `infergate_gateway_canary_weight{route,destination}`,
//! and a WARN log line with both sides' numbers.

pub mod window;

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio::time::Instant;

pub use window::{WindowStats, WindowSummary};

use crate::metrics as m;

/// Analysis settings of one route, in typed units.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryPolicy {
    /// Index of the baseline among the route's destinations.
    pub baseline: usize,
    /// Index of the canary among the route's destinations. Other destinations are neither judged
    /// nor reweighted.
    pub canary: usize,
    /// Sliding window length.
    pub window: Duration,
    /// The canary needs at least this many requests in the window before it is judged (and the
    /// baseline at least one, for the latency comparison).
    pub min_requests: u64,
    /// Roll back when `canary error rate - baseline error rate` exceeds this (0.05 = 5 points).
    pub max_error_rate_increase: Option<f64>,
    /// Roll back when `canary p99 > baseline p99 × this` (e.g. 1.5).
    pub max_p99_ratio: Option<f64>,
    /// Latency differences below this never trigger a p99 rollback (noise floor).
    pub p99_slack: Duration,
    /// Progressive promotion, if any.
    pub promotion: Option<Promotion>,
}

/// Progressive promotion: every `interval`, while the canary is healthy over a full window, its
/// share of the baseline + canary traffic moves to the next of `steps` (percent, increasing).
#[derive(Debug, Clone, PartialEq)]
pub struct Promotion {
    /// Canary share after each step, in percent (e.g. `[10, 25, 50, 100]`).
    pub steps: Vec<u32>,
    /// Time between steps.
    pub interval: Duration,
}

impl Default for CanaryPolicy {
    fn default() -> Self {
        Self {
            baseline: 0,
            canary: 1,
            window: Duration::from_secs(60),
            min_requests: 50,
            max_error_rate_increase: Some(0.05),
            max_p99_ratio: Some(1.5),
            p99_slack: Duration::from_millis(5),
            promotion: None,
        }
    }
}

/// Where the analysis of a route stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Watching; configured weights apply.
    Observing,
    /// Healthy and being stepped up.
    Promoting,
    /// Reached its final share.
    Promoted,
    /// Worse than the baseline: the canary gets no traffic until the config changes.
    RolledBack,
}

impl Phase {
    fn gauge(self) -> f64 {
        match self {
            Phase::Observing => 0.0,
            Phase::Promoting => 1.0,
            Phase::Promoted => 2.0,
            Phase::RolledBack => 3.0,
        }
    }
}

/// The decision that put the route in its current phase.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decision {
    /// What happened and why, with the numbers.
    pub reason: String,
    /// Wall-clock time of the decision, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// Baseline numbers at the time.
    pub baseline: WindowSummary,
    /// Canary numbers at the time.
    pub canary: WindowSummary,
}

/// What the admin `/canary` endpoint shows for one route.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CanaryReport {
    /// Route name.
    pub route: String,
    /// The canary destination's name.
    pub canary_destination: String,
    /// Current phase.
    pub phase: Phase,
    /// Weights in force, in destination order.
    pub weights: Vec<u32>,
    /// Weights as configured.
    pub configured_weights: Vec<u32>,
    /// Baseline over the current window.
    pub baseline: WindowSummary,
    /// Canary over the current window.
    pub canary: WindowSummary,
    /// The last decision, if any.
    pub last_decision: Option<Decision>,
}

struct Inner {
    phase: Phase,
    next_step: usize,
    canary_percent: f64,
    last_step: Instant,
    decision: Option<Decision>,
}

/// Live analysis state of one route. Shared (`Arc`) by every config version with the same
/// settings.
pub struct CanaryState {
    route: Arc<str>,
    /// Of the destinations and policy it was made for (see [`carry_over`]).
    fingerprint: u64,
    destinations: Vec<Arc<str>>,
    configured: Vec<u32>,
    policy: CanaryPolicy,
    baseline: WindowStats,
    canary: WindowStats,
    weights: ArcSwap<Vec<u32>>,
    epoch: Instant,
    next_eval_ns: AtomicU64,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for CanaryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanaryState")
            .field("route", &self.route)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

const SLOTS: usize = 10;

impl CanaryState {
    /// Fresh state for a route with these destination names and configured weights.
    pub fn new(
        route: &str,
        destinations: Vec<Arc<str>>,
        configured: Vec<u32>,
        policy: CanaryPolicy,
        now: Instant,
    ) -> Self {
        let cw = u64::from(configured.get(policy.canary).copied().unwrap_or(0));
        let pair = cw + u64::from(configured.get(policy.baseline).copied().unwrap_or(0));
        let canary_percent = if pair == 0 {
            0.0
        } else {
            100.0 * cw as f64 / pair as f64
        };
        let phase = if policy.promotion.is_some() {
            Phase::Promoting
        } else {
            Phase::Observing
        };
        let pairs: Vec<(Arc<str>, u32)> = destinations
            .iter()
            .cloned()
            .zip(configured.iter().copied())
            .collect();
        let s = Self {
            fingerprint: fingerprint(&pairs, &policy),
            route: route.into(),
            baseline: WindowStats::new(policy.window, SLOTS, true),
            canary: WindowStats::new(policy.window, SLOTS, true),
            weights: ArcSwap::from_pointee(configured.clone()),
            destinations,
            configured,
            epoch: now,
            next_eval_ns: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                phase,
                next_step: 0,
                canary_percent,
                last_step: now,
                decision: None,
            }),
            policy,
        };
        s.publish(phase);
        s
    }

    /// The weights to split with now (configured, promoted, or rolled back).
    pub fn weights(&self) -> arc_swap::Guard<Arc<Vec<u32>>> {
        self.weights.load()
    }

    /// The settings.
    pub fn policy(&self) -> &CanaryPolicy {
        &self.policy
    }

    /// Records one finished request to destination `dest` and evaluates when a window slot has
    /// passed since the last evaluation. `error`: see [`is_error`].
    pub fn record(&self, dest: usize, error: bool, latency: Duration, now: Instant) {
        let now_ns = self.ns(now);
        let side = if dest == self.policy.canary {
            &self.canary
        } else if dest == self.policy.baseline {
            &self.baseline
        } else {
            return;
        };
        side.record(now_ns, error, latency);
        let next = self.next_eval_ns.load(Ordering::Relaxed);
        if now_ns >= next {
            let step = u64::try_from(self.canary.slot_width().as_nanos()).unwrap_or(u64::MAX);
            if self
                .next_eval_ns
                .compare_exchange(
                    next,
                    now_ns.saturating_add(step),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                self.evaluate(now);
            }
        }
    }

    /// Evaluates the window now: rollback when a threshold is crossed, a promotion step when due.
    /// Called by [`CanaryState::record`]; callable from a timer as well.
    pub fn evaluate(&self, now: Instant) {
        let now_ns = self.ns(now);
        let base = self.baseline.summary(now_ns);
        let can = self.canary.summary(now_ns);
        let mut inner = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if inner.phase == Phase::RolledBack {
            return;
        }
        if can.requests < self.policy.min_requests.max(1) {
            return;
        }
        let mut failed = None;
        if let Some(max) = self.policy.max_error_rate_increase
            && can.error_rate - base.error_rate > max
        {
            failed = Some(format!(
                "canary error rate {:.2}% exceeds baseline {:.2}% by more than {:.2} points",
                can.error_rate * 100.0,
                base.error_rate * 100.0,
                max * 100.0
            ));
        }
        if failed.is_none()
            && let Some(ratio) = self.policy.max_p99_ratio
        {
            let slack_ms = self.policy.p99_slack.as_secs_f64() * 1000.0;
            if base.requests > 0 && can.p99_ms > base.p99_ms * ratio && can.p99_ms - base.p99_ms > slack_ms {
                failed = Some(format!(
                    "canary p99 {:.1} ms exceeds {ratio} x baseline p99 {:.1} ms",
                    can.p99_ms, base.p99_ms
                ));
            }
        }
        if let Some(reason) = failed {
            // The canary's share goes back to the baseline.
            let w = self.weights_for(0.0);
            self.weights.store(Arc::new(w));
            tracing::warn!(
                route = %self.route,
                canary = %self.destinations.get(self.policy.canary).map_or("?", |d| d),
                baseline_requests = base.requests,
                baseline_error_rate = base.error_rate,
                baseline_p99_ms = base.p99_ms,
                canary_requests = can.requests,
                canary_error_rate = can.error_rate,
                canary_p99_ms = can.p99_ms,
                "canary rolled back: {reason}"
            );
            metrics::counter!(m::CANARY_ROLLBACKS, "route" => self.route.to_string()).increment(1);
            inner.phase = Phase::RolledBack;
            inner.decision = Some(Decision {
                reason: format!("rolled back: {reason}"),
                at_unix_ms: unix_ms(),
                baseline: base,
                canary: can,
            });
            drop(inner);
            self.publish(Phase::RolledBack);
            return;
        }
        if let (Phase::Promoting, Some(p)) = (inner.phase, &self.policy.promotion)
            && now.saturating_duration_since(inner.last_step) >= p.interval
            && let Some(&step) = p.steps.get(inner.next_step)
        {
            inner.next_step += 1;
            inner.canary_percent = f64::from(step.min(100));
            inner.last_step = now;
            let w = self.weights_for(inner.canary_percent);
            self.weights.store(Arc::new(w));
            let done = inner.next_step >= p.steps.len();
            inner.phase = if done { Phase::Promoted } else { Phase::Promoting };
            let reason = format!("promoted: canary share now {:.0}%", inner.canary_percent);
            tracing::info!(route = %self.route, canary_percent = inner.canary_percent, canary_error_rate = can.error_rate, canary_p99_ms = can.p99_ms, baseline_error_rate = base.error_rate, baseline_p99_ms = base.p99_ms, "canary {reason}");
            inner.decision = Some(Decision {
                reason,
                at_unix_ms: unix_ms(),
                baseline: base,
                canary: can,
            });
            let phase = inner.phase;
            drop(inner);
            self.publish(phase);
        }
    }

    /// Weights giving the canary `percent` of the traffic the baseline and canary share between
    /// them (other destinations keep their configured share). Scaled by 100 for resolution.
    fn weights_for(&self, percent: f64) -> Vec<u32> {
        let (b, c) = (self.policy.baseline, self.policy.canary);
        let get = |i: usize| u64::from(self.configured.get(i).copied().unwrap_or(0));
        let mut pair = (get(b) + get(c)) * 100;
        let mut out: Vec<u32> = self.configured.iter().map(|&w| w.saturating_mul(100)).collect();
        if pair == 0 {
            pair = 100;
        }
        let canary = (pair as f64 * percent / 100.0).round() as u64;
        if let Some(x) = out.get_mut(c) {
            *x = u32::try_from(canary).unwrap_or(u32::MAX);
        }
        if let Some(x) = out.get_mut(b) {
            *x = u32::try_from(pair - canary.min(pair)).unwrap_or(u32::MAX);
        }
        out
    }

    /// The state for the admin API.
    pub fn report(&self, now: Instant) -> CanaryReport {
        let now_ns = self.ns(now);
        let inner = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        CanaryReport {
            route: self.route.to_string(),
            canary_destination: self
                .destinations
                .get(self.policy.canary)
                .map(|d| d.to_string())
                .unwrap_or_default(),
            phase: inner.phase,
            weights: self.weights.load().to_vec(),
            configured_weights: self.configured.clone(),
            baseline: self.baseline.summary(now_ns),
            canary: self.canary.summary(now_ns),
            last_decision: inner.decision.clone(),
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.inner
            .lock()
            .map_or_else(|p| p.into_inner().phase, |g| g.phase)
    }

    fn publish(&self, phase: Phase) {
        let route = self.route.to_string();
        metrics::gauge!(m::CANARY_PHASE, "route" => route.clone()).set(phase.gauge());
        for (d, w) in self.destinations.iter().zip(self.weights.load().iter()) {
            metrics::gauge!(m::CANARY_WEIGHT, "route" => route.clone(), "destination" => d.to_string())
                .set(f64::from(*w));
        }
    }

    fn ns(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether a finished request counts as a failure for canary analysis: an upstream failure (no
/// response), an HTTP 5xx, or a gRPC status that means the server failed (UNKNOWN, DEADLINE_EXCEEDED,
/// RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE, DATA_LOSS). Client errors (4xx, INVALID_ARGUMENT,
/// NOT_FOUND) are the caller's fault and do not count.
pub fn is_error(status: Option<http::StatusCode>, grpc_status: Option<u32>) -> bool {
    match status {
        None => true,
        Some(s) if s.is_server_error() => true,
        _ => matches!(grpc_status, Some(2 | 4 | 8 | 13 | 14 | 15)),
    }
}

/// The analysis state for a route in a new config version: the running version's state when the route's
/// destinations, weights and policy are unchanged (its windows and decisions carry over), else a fresh one.
/// Pure: nothing changes until the new version is swapped in.
pub fn carry_over(
    running: Option<&Arc<CanaryState>>,
    route: &str,
    destinations: &[(Arc<str>, u32)],
    policy: &CanaryPolicy,
    now: Instant,
) -> Arc<CanaryState> {
    let fingerprint = fingerprint(destinations, policy);
    if let Some(state) = running.filter(|s| s.fingerprint == fingerprint) {
        return Arc::clone(state);
    }
    Arc::new(CanaryState::new(
        route,
        destinations.iter().map(|(n, _)| n.clone()).collect(),
        destinations.iter().map(|(_, w)| *w).collect(),
        policy.clone(),
        now,
    ))
}

/// Reports for every route under analysis in `states`, sorted by route name (the admin `/canary` body).
pub fn reports<'a>(states: impl Iterator<Item = &'a Arc<CanaryState>>, now: Instant) -> Vec<CanaryReport> {
    let mut out: Vec<CanaryReport> = states.map(|s| s.report(now)).collect();
    out.sort_by(|a, b| a.route.cmp(&b.route));
    out
}

/// What identifies a route's analysis settings: the same fingerprint means the state carries over.
fn fingerprint(destinations: &[(Arc<str>, u32)], policy: &CanaryPolicy) -> u64 {
    let mut h = crate::stable_hash::StableHasher::default();
    h.write(format!("{destinations:?}{policy:?}").as_bytes());
    h.finish()
}

//! Adaptive batching: tunes the queue delay and the batch-size cap online towards a p99 latency target.
//!
//! The controller learns from how each batch left the queue ([`Release`]) rather than from comparing
//! the throughput or mean latency of one window with the next, which on a shared machine swing by more
//! than the differences it would be looking for. After each window of at least
//! [`AdaptiveConfig::window_requests`] requests and [`AdaptiveConfig::window_batches`] batches:
//!
//! - **p99 above target**: the delay is halved, and the delays from three quarters of the one that
//!   failed upwards are off limits until p99 has had headroom for a while. Once the delay is negligible
//!   and the slow batches (90th percentile of execution times) took more than half the target, the
//!   batch-size cap shrinks by a quarter — kept only if the next two windows' p99 are each clearly (15%)
//!   lower: when the tail is queueing, smaller batches lengthen it, and a few percent is noise.
//! - **p99 within target**, on the rows of the window:
//!   - at least 90% left in **full** batches (cap or preferred size reached): the delay costs nothing,
//!     it stays (it also lets a late request catch up with its batch);
//!   - under-filled batches mostly **waited for an instance** past their delay: no delay below that wait
//!     holds anything back; the delay moves to 1.25× the lower quartile of those waits, so the next
//!     batch is held until the requests arriving just after it (in a closed loop, the callers of the
//!     batch that was running) can join — but no further than 1.25× a typical execution (median,
//!     smoothed over windows): the waits behind slow executions are noise, not a reason to wait longer;
//!   - under-filled batches mostly **waited for their delay** with an instance free: when requests stopped
//!     joining well before the deadline (90% of batches got their last request in the first half of the
//!     wait), or the instance idles more than 70% of the time, the delay shrinks (÷1.5, not below twice
//!     that joining span); when requests still joined near the deadline, the instance is busy at least
//!     half the time and p99 is under 80% of the target, it grows ×1.5 (two windows in a row must agree
//!     either way).
//!
//! Every increase of the delay is on trial: two windows in a row over the target after it undo it. The
//! delay stays within half the target. The batch-size cap grows back by a quarter (never past
//! `max_batch_size`) while p99 is under 80% of the target and the slow batches, scaled to the larger
//! cap, would still fit twice in it. After any change the controller skips a window's worth of batches
//! (those still formed under the old setting) before it measures the new one.
//!
//! The window statistics are gathered in [`window`]; this file holds the decisions.

use std::time::Duration;

use tokio::time::Instant;

mod window;

pub(crate) use window::{BatchReport, Release};
use window::{Summary, Verdict, Window};

/// Adaptive mode settings (model parameter `infergate.adaptive_p99_us`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// The p99 latency (queue + execution inside the server) to stay under.
    pub p99_target: Duration,
    /// Fewest requests in one control window.
    pub window_requests: usize,
    /// Fewest batches in one control window.
    pub window_batches: usize,
}

impl AdaptiveConfig {
    /// Defaults for a target: windows of at least 400 requests and 20 batches (a p99 from 400 requests
    /// is the fourth-slowest of them, so one stall does not move it).
    pub fn new(p99_target: Duration) -> Self {
        AdaptiveConfig {
            p99_target,
            window_requests: 400,
            window_batches: 20,
        }
    }
}

/// The controller's current choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSnapshot {
    /// Queue delay in force.
    pub delay: Duration,
    /// Batch-size cap in force.
    pub max_batch_rows: usize,
    /// p99 of the last full window.
    pub last_p99: Option<Duration>,
    /// Control steps taken so far.
    pub steps: u64,
}

/// A smaller batch-size cap on trial: kept only when [`CapTrial::WINDOWS`] windows in a row show a
/// p99 clearly lower than before it.
#[derive(Debug, Clone, Copy)]
struct CapTrial {
    /// The cap before the cut.
    cap_before: usize,
    /// The p99 of the window that asked for the cut.
    p99_before: Duration,
    /// Windows so far whose p99 was clearly lower.
    agreed: u32,
}

impl CapTrial {
    /// Windows in a row that must agree before a cut is kept: one window's p99 swings by more than
    /// a few percent on a noisy machine, two in a row by a clear margin rarely do by chance.
    const WINDOWS: u32 = 2;
    /// How much lower than before each of those windows' p99 must be.
    const MARGIN: f64 = 0.85;
}

/// A longer delay on trial: undone (back to where the increases started) when [`DelayTrial::WINDOWS`]
/// windows in a row after it have a p99 over the target.
#[derive(Debug, Clone, Copy)]
struct DelayTrial {
    /// The delay before the increase.
    before: Duration,
    /// Windows in a row since the increase whose p99 was over the target.
    over: u32,
}

impl DelayTrial {
    /// Windows over the target that undo an increase: the first window after a change can be the
    /// change settling in, or one window's noise; two in a row are the change.
    const WINDOWS: u32 = 2;
}

/// The online tuner (one per batcher).
#[derive(Debug)]
pub(crate) struct AdaptiveController {
    cfg: AdaptiveConfig,
    max_batch: usize,
    instances: usize,
    delay: Duration,
    cap: usize,
    /// Highest delay allowed now: half the target, lowered after a violation, recovering with headroom.
    ceiling: Duration,
    /// A cap reduction waiting for its verdict.
    cap_trial: Option<CapTrial>,
    /// The last increase of the delay, while it waits for its verdict.
    delay_trial: Option<DelayTrial>,
    /// The cap may not shrink below this (a reduction that did not help).
    cap_floor: usize,
    /// A typical batch execution: the windows' median execution times, averaged over windows
    /// (exponentially, a quarter of weight to the newest) so that one noisy window moves it little.
    typical_exec: Option<Duration>,
    /// Consecutive windows that asked for a shorter delay.
    shrink_votes: u32,
    /// Consecutive windows that asked for a longer delay (requests still joining at the deadline).
    grow_votes: u32,
    /// Batches still to ignore after a change (the move from one pattern of batches to the next).
    settling: usize,
    window: Window,
    last_p99: Option<Duration>,
    steps: u64,
}

impl AdaptiveController {
    /// Starts from the configured delay (bounded by half the target) and the full batch size, for a
    /// batcher with `instances` model instances.
    pub(crate) fn new(
        cfg: AdaptiveConfig,
        max_batch: usize,
        instances: usize,
        initial_delay: Duration,
    ) -> Self {
        let bound = cfg.p99_target / 2;
        AdaptiveController {
            window: Window::with_capacity(cfg.window_requests),
            max_batch: max_batch.max(1),
            instances: instances.max(1),
            delay: initial_delay.min(bound),
            cap: max_batch.max(1),
            ceiling: bound,
            cap_trial: None,
            delay_trial: None,
            cap_floor: 1,
            typical_exec: None,
            shrink_votes: 0,
            grow_votes: 0,
            settling: 0,
            last_p99: None,
            steps: 0,
            cfg,
        }
    }

    /// The delay and cap in force, and the last window's p99.
    pub(crate) fn snapshot(&self) -> AdaptiveSnapshot {
        AdaptiveSnapshot {
            delay: self.delay,
            max_batch_rows: self.cap,
            last_p99: self.last_p99,
            steps: self.steps,
        }
    }

    /// Records one finished batch and the latencies (queue + execution) of its requests; after the last
    /// batch of a window, takes a control step.
    pub(crate) fn observe_batch(
        &mut self,
        batch: BatchReport,
        latencies: impl IntoIterator<Item = Duration>,
    ) {
        if self.settling > 0 {
            self.settling -= 1;
            return;
        }
        self.window.record(&batch, latencies);
        if self
            .window
            .is_complete(self.cfg.window_requests, self.cfg.window_batches)
        {
            self.step(batch.done);
        }
    }

    fn step(&mut self, now: Instant) {
        self.steps += 1;
        let summary = self.window.close(now, self.instances);
        self.last_p99 = Some(summary.p99);
        let before = (self.delay, self.cap);
        self.decide(&summary);
        tracing::debug!(
            step = self.steps,
            p99_us = summary.p99.as_micros() as u64,
            verdict = ?summary.verdict,
            utilisation = summary.utilisation,
            delay_us = self.delay.as_micros() as u64,
            cap = self.cap,
            "adaptive batcher window"
        );
        if (self.delay, self.cap) != before {
            // The batches right after a change still follow the old pattern: judge the new setting
            // on a window of its own.
            self.settling = self.cfg.window_batches.max(2 * self.instances);
        }
    }

    fn decide(&mut self, w: &Summary) {
        let p99 = w.p99;
        let utilisation = w.utilisation;
        let target = self.cfg.p99_target;
        let bound = target / 2;
        let min_step = (target / 100).max(Duration::from_micros(20));

        // What a batch typically costs, smoothed over windows: the backlog rule below sizes the delay
        // by it, so it must not follow one window's slow executions.
        let typical_exec = match self.typical_exec {
            Some(t) => t.mul_f64(0.75) + w.exec_p50.mul_f64(0.25),
            None => w.exec_p50,
        };
        self.typical_exec = Some(typical_exec);
        // An increase of the delay still waiting for its verdict, after one window over the target.
        let mut delay_pending = None;
        if let Some(mut trial) = self.delay_trial.take()
            && p99 > target
        {
            trial.over += 1;
            if trial.over < DelayTrial::WINDOWS {
                // One window over the target right after a longer delay may be the change settling
                // in, or noise: judge the increase on the next window too. The rules below still
                // apply (a further increase joins the same trial).
                delay_pending = Some(trial);
            } else {
                // Still over the target: the increase broke it. Undo it, whatever else this window
                // says (it was formed under the setting that failed), and as after any violation keep
                // delays from three quarters of the one that failed upwards off limits until p99 has
                // had headroom for a while.
                let failed = self.delay;
                self.delay = trial.before;
                self.ceiling = self
                    .ceiling
                    .min(failed.mul_f64(0.75))
                    .max(trial.before)
                    .max(min_step);
                self.shrink_votes = 0;
                self.grow_votes = 0;
                return;
            }
        }
        if let Some(mut trial) = self.cap_trial.take() {
            if p99.as_secs_f64() > trial.p99_before.as_secs_f64() * CapTrial::MARGIN {
                // Smaller batches did not clearly shorten the tail: it is queueing (too little
                // throughput), which smaller batches only lengthen, or the window's noise. A p99 a
                // few percent lower is what noise alone produces, so it does not count.
                self.cap = trial.cap_before;
                self.cap_floor = trial.cap_before;
            } else {
                trial.agreed += 1;
                if trial.agreed < CapTrial::WINDOWS {
                    self.cap_trial = Some(trial);
                }
            }
        }
        let delay_before = self.delay;

        let verdict = w.verdict;
        let over = p99 > target;
        let headroom = p99 < target.mul_f64(0.8);
        // Headroom: let the delay ceiling recover, and grow the cap back by a quarter.
        if headroom {
            self.ceiling = self.ceiling.mul_f64(1.02).clamp(min_step, bound);
            self.cap_floor = 1;
            if self.cap < self.max_batch {
                let grown = (self.cap + (self.cap / 4).max(1)).min(self.max_batch);
                // Pessimistic: execution time proportional to rows. The slow batches (90th
                // percentile), not the slowest one: on a noisy machine that one is an outlier.
                let predicted = w.slow_exec.mul_f64(grown as f64 / w.slow_rows as f64);
                if predicted * 2 <= target {
                    self.cap = grown;
                }
            }
        }
        if verdict != Verdict::Deadline {
            self.shrink_votes = 0;
            self.grow_votes = 0;
        }
        match verdict {
            Verdict::Full => {
                // Batches leave full: the delay costs nothing (and lets a late request catch up with
                // its batch). A tail over the target is the batches' own execution or queueing.
                // A request may wait for one running batch, then run in its own: batches slower than
                // half the target cannot meet it.
                if over {
                    self.try_smaller_cap(w);
                }
            }
            Verdict::Backlog => {
                // Under-filled batches waited for an instance longer than the delay, so the delay held
                // nothing back; holding the next ones up to that wait lets the requests that arrive
                // just after join them (in a closed loop, the callers of the batch that was running).
                // Larger batches mean more throughput and less queueing, over the target or not (an
                // increase that leaves p99 over the target for two windows is undone, above).
                //
                // Those waits last as long as the batch that was running: a slow execution (noise on
                // a shared machine) makes long waits, and chasing them ratchets the delay towards
                // its ceiling. So the delay follows the wait only up to 1.25x a typical execution
                // (the time the callers of a running batch need to come back), and no further.
                let one_exec = typical_exec.mul_f64(1.25).max(min_step);
                let wanted = w
                    .backlog_wait_p25
                    .mul_f64(1.25)
                    .min(one_exec)
                    .max(min_step)
                    .min(self.ceiling);
                if wanted > self.delay {
                    self.delay = wanted;
                } else if self.delay > one_exec.mul_f64(1.5) {
                    // Raised earlier on slow executions that have since sped up: batches still wait
                    // for the instance, so the delay holds nothing back above a typical execution.
                    // (The margin of 1.5 keeps it from following every window's noise.)
                    self.delay = one_exec;
                }
            }
            Verdict::Deadline if over => {
                // Batches waited out their delay with an instance free: that wait is the cost.
                self.shrink_votes = 0;
                self.grow_votes = 0;
                let old = self.delay;
                if old > min_step {
                    self.delay = old / 2;
                    self.ceiling = self.ceiling.min(old.mul_f64(0.75));
                } else {
                    // No delay left to give up: the batches themselves are too slow, if anything.
                    self.delay = Duration::ZERO;
                    self.try_smaller_cap(w);
                }
            }
            Verdict::Deadline => {
                let span = w.deadline_span_p90;
                let stopped_joining = span < self.delay / 2;
                if stopped_joining || utilisation < 0.3 {
                    // The end of the wait was idle, or the instance is: a shorter delay loses nothing.
                    self.shrink_votes += 1;
                    self.grow_votes = 0;
                    if self.shrink_votes >= 2 {
                        self.shrink_votes = 0;
                        self.delay = if stopped_joining {
                            // Long enough for what did join, with margin; never zero, which would
                            // send the first request of every batch alone.
                            (span * 2).max(min_step).max(self.delay / 4)
                        } else if self.delay.div_f64(1.5) < min_step {
                            Duration::ZERO
                        } else {
                            self.delay.div_f64(1.5)
                        };
                    }
                } else {
                    self.shrink_votes = 0;
                    if span >= self.delay.mul_f64(0.75) && headroom && utilisation >= 0.5 {
                        // Requests were still joining at the deadline and the instance is busy:
                        // larger batches are worth a longer wait. Two windows in a row must agree:
                        // on a noisy machine one such window among windows that waited for the
                        // instance is chance, and growing on it makes the delay swing.
                        self.grow_votes += 1;
                        if self.grow_votes >= 2 {
                            self.grow_votes = 0;
                            self.delay = self.delay.mul_f64(1.5).max(min_step).min(self.ceiling);
                        }
                    } else {
                        self.grow_votes = 0;
                    }
                }
            }
        }
        if self.delay > delay_before {
            // Judge the longer delay on the next windows; a trial already running keeps its start
            // and count, so a run of increases over the target is undone as a whole.
            self.delay_trial = Some(delay_pending.unwrap_or(DelayTrial {
                before: delay_before,
                over: 0,
            }));
        } else if self.delay == delay_before {
            self.delay_trial = delay_pending;
        }
    }

    /// A request may wait for one running batch, then run in its own: when the slow batches (90th
    /// percentile) took more than half the target, tries a cap a quarter smaller (judged on the next
    /// windows, see [`CapTrial`]). One trial at a time.
    fn try_smaller_cap(&mut self, w: &Summary) {
        if self.cap_trial.is_none() && w.slow_exec * 2 > self.cfg.p99_target && self.cap > self.cap_floor {
            self.cap_trial = Some(CapTrial {
                cap_before: self.cap,
                p99_before: w.p99,
                agreed: 0,
            });
            self.cap = (self.cap * 3 / 4).max(self.cap_floor).max(1);
        }
    }
}

#[cfg(test)]
mod tests;

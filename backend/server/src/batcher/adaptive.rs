//! Adaptive batching: tunes the queue delay and the batch-size cap online towards a p99 latency target.
//!
//! The controller learns from how each batch left the queue ([`Release`]) rather than from comparing
//! the throughput or mean latency of one window with the next, which on a shared machine swing by more
//! than the differences it would be looking for. After each window of at least
//! [`AdaptiveConfig::window_requests`] requests and [`AdaptiveConfig::window_batches`] batches:
//!
//! - **p99 above target**: the delay is halved, and the delays from three quarters of the one that
//!   failed upwards are off limits until p99 has had headroom for a while. Once the delay is negligible
//!   and the slowest batch took more than half the target, the batch-size cap shrinks by a quarter —
//!   kept only if the next window's p99 is lower (when the tail is queueing, smaller batches lengthen it).
//! - **p99 within target**, on the rows of the window:
//!   - at least 90% left in **full** batches (cap or preferred size reached): the delay costs nothing,
//!     it stays (it also lets a late request catch up with its batch);
//!   - under-filled batches mostly **waited for an instance** past their delay: no delay below that wait
//!     holds anything back; the delay jumps to 1.25× the lower quartile of those waits (at least ×1.5),
//!     so the next batch is held until the requests arriving just after it (in a closed loop, the callers
//!     of the batch that was running) can join;
//!   - under-filled batches mostly **waited for their delay** with an instance free: when requests stopped
//!     joining well before the deadline (90% of batches got their last request in the first half of the
//!     wait), or the instance idles more than 70% of the time, the delay shrinks (÷1.5, not below twice
//!     that joining span; two windows in a row must agree); when requests still joined near the
//!     deadline, the instance is busy at least half the time and p99 is under 80% of the target, it
//!     grows ×1.5.
//!
//! The delay stays within half the target. The batch-size cap grows back by a quarter (never past
//! `max_batch_size`) while p99 is under 80% of the target and the slowest batch, scaled to the larger
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
    /// A cap reduction waiting for its verdict: (cap before, p99 before).
    cap_trial: Option<(usize, Duration)>,
    /// The cap may not shrink below this (a reduction that did not help).
    cap_floor: usize,
    /// Consecutive windows that asked for a shorter delay.
    shrink_votes: u32,
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
            cap_floor: 1,
            shrink_votes: 0,
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

        if let Some((cap_before, p99_before)) = self.cap_trial.take()
            && p99.as_secs_f64() > p99_before.as_secs_f64() * 0.95
        {
            // Smaller batches did not shorten the tail: it is queueing (too little throughput), which
            // smaller batches only lengthen.
            self.cap = cap_before;
            self.cap_floor = cap_before;
        }

        let verdict = w.verdict;
        let over = p99 > target;
        let headroom = p99 < target.mul_f64(0.8);
        // Headroom: let the delay ceiling recover, and grow the cap back by a quarter.
        if headroom {
            self.ceiling = self.ceiling.mul_f64(1.02).clamp(min_step, bound);
            self.cap_floor = 1;
            if self.cap < self.max_batch {
                let grown = (self.cap + (self.cap / 4).max(1)).min(self.max_batch);
                // Pessimistic: execution time proportional to rows.
                let predicted = w.slowest_exec.mul_f64(grown as f64 / w.slowest_rows as f64);
                if predicted * 2 <= target {
                    self.cap = grown;
                }
            }
        }
        if verdict != Verdict::Deadline {
            self.shrink_votes = 0;
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
                // Larger batches mean more throughput and less queueing, over the target or not.
                let wait = w.backlog_wait_p25;
                let wanted = wait
                    .mul_f64(1.25)
                    .max(self.delay.mul_f64(1.5))
                    .max(min_step)
                    .min(self.ceiling);
                if wanted > self.delay {
                    self.delay = wanted;
                }
            }
            Verdict::Deadline if over => {
                // Batches waited out their delay with an instance free: that wait is the cost.
                self.shrink_votes = 0;
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
                        // larger batches are worth a longer wait.
                        self.delay = self.delay.mul_f64(1.5).max(min_step).min(self.ceiling);
                    }
                }
            }
        }
    }

    /// A request may wait for one running batch, then run in its own: when the slowest batch took
    /// more than half the target, tries a cap a quarter smaller (judged on the next window).
    fn try_smaller_cap(&mut self, w: &Summary) {
        if w.slowest_exec * 2 > self.cfg.p99_target && self.cap > self.cap_floor {
            self.cap_trial = Some((self.cap, w.p99));
            self.cap = (self.cap * 3 / 4).max(self.cap_floor).max(1);
        }
    }
}

#[cfg(test)]
mod tests;

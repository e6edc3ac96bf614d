//! Adaptive batching: tunes the queue delay and the batch-size cap online towards a p99 latency target.
//!
//! The controller watches the latency (queue + execution) of every request in windows of at least
//! [`AdaptiveConfig::window_requests`] requests and [`AdaptiveConfig::window_batches`] batches, and after
//! each window:
//!
//! - **p99 above target**: the delay is halved. Once it is negligible, the batch-size cap shrinks by a
//!   quarter, but only when execution itself is the problem (the slowest batch took more than half the
//!   target: a request may wait for one running batch, then run in its own). When the queue is the
//!   problem (overload), smaller batches would only lower throughput and lengthen the queue, so the cap
//!   stays.
//! - **p99 within target**: the cap grows again by a quarter while p99 is below 80% of the target and the
//!   slowest batch, scaled to the larger cap, would still fit twice in the target; the delay moves one step
//!   (×1.5 or ÷1.5) in the direction that lowered the mean latency in the previous window, turning back
//!   when the mean got worse. The delay never exceeds half the target, and never grows while p99 is
//!   within 10% of the target.
//!
//! Why the mean latency: with a fixed number of clients (closed loop) throughput = clients / mean latency,
//! and with a fixed arrival rate (open loop) throughput is set by the callers and lower latency is the
//! only gain; so the delay that minimises the mean latency is the one that maximises throughput, and the
//! p99 rule keeps the tail within the target.

use std::time::Duration;

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
    /// Defaults for a target: windows of at least 200 requests and 20 batches.
    pub fn new(p99_target: Duration) -> Self {
        AdaptiveConfig {
            p99_target,
            window_requests: 200,
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
    delay: Duration,
    cap: usize,
    latencies: Vec<Duration>,
    batches: usize,
    slowest_exec: Duration,
    slowest_rows: usize,
    prev_mean: Option<f64>,
    growing: bool,
    last_p99: Option<Duration>,
    steps: u64,
}

impl AdaptiveController {
    /// Starts from the configured delay (bounded by half the target) and the full batch size.
    pub(crate) fn new(cfg: AdaptiveConfig, max_batch: usize, initial_delay: Duration) -> Self {
        let delay = initial_delay.min(cfg.p99_target / 2);
        AdaptiveController {
            latencies: Vec::with_capacity(cfg.window_requests),
            cfg,
            max_batch: max_batch.max(1),
            delay,
            cap: max_batch.max(1),
            batches: 0,
            slowest_exec: Duration::ZERO,
            slowest_rows: 1,
            prev_mean: None,
            growing: true,
            last_p99: None,
            steps: 0,
        }
    }

    pub(crate) fn snapshot(&self) -> AdaptiveSnapshot {
        AdaptiveSnapshot {
            delay: self.delay,
            max_batch_rows: self.cap,
            last_p99: self.last_p99,
            steps: self.steps,
        }
    }

    /// Records one finished batch: its rows, its execution time and the latencies (queue + execution) of
    /// its requests.
    pub(crate) fn observe_batch(
        &mut self,
        rows: usize,
        exec: Duration,
        latencies: impl IntoIterator<Item = Duration>,
    ) {
        self.latencies.extend(latencies);
        self.batches += 1;
        if exec > self.slowest_exec {
            self.slowest_exec = exec;
            self.slowest_rows = rows.max(1);
        }
        if self.latencies.len() >= self.cfg.window_requests && self.batches >= self.cfg.window_batches {
            self.step();
        }
    }

    fn step(&mut self) {
        self.steps += 1;
        let mut lat = std::mem::take(&mut self.latencies);
        self.batches = 0;
        lat.sort_unstable();
        let idx = ((lat.len() as f64 * 0.99).ceil() as usize).clamp(1, lat.len()) - 1;
        let p99 = lat[idx];
        let mean = lat.iter().map(|d| d.as_secs_f64()).sum::<f64>() / lat.len() as f64;
        self.latencies = lat;
        self.latencies.clear();
        let (slowest, slowest_rows) = (self.slowest_exec, self.slowest_rows);
        self.slowest_exec = Duration::ZERO;
        self.slowest_rows = 1;
        self.last_p99 = Some(p99);
        let target = self.cfg.p99_target;
        let min_step = target / 100;
        if p99 > target {
            if self.delay > min_step {
                self.delay /= 2;
            } else {
                self.delay = Duration::ZERO;
                if slowest * 2 > target {
                    self.cap = (self.cap * 3 / 4).max(1);
                }
            }
            self.growing = false;
            self.prev_mean = None;
            return;
        }
        if p99 < target.mul_f64(0.8) && self.cap < self.max_batch {
            let grown = (self.cap + (self.cap / 4).max(1)).min(self.max_batch);
            // Pessimistic: execution time proportional to rows.
            let predicted = slowest.mul_f64(grown as f64 / slowest_rows as f64);
            if predicted * 2 <= target {
                self.cap = grown;
            }
        }
        if let Some(prev) = self.prev_mean
            && mean > prev * 1.02
        {
            self.growing = !self.growing;
        }
        self.prev_mean = Some(mean);
        let headroom = p99 < target.mul_f64(0.9);
        if self.growing && headroom {
            self.delay = self.delay.mul_f64(1.5).max(min_step).min(target / 2);
        } else if !self.growing {
            self.delay = self.delay.div_f64(1.5);
            if self.delay < min_step / 2 {
                self.delay = Duration::ZERO;
                // At zero the only way is up again next time.
                self.growing = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(target_us: u64) -> AdaptiveController {
        let cfg = AdaptiveConfig {
            p99_target: Duration::from_micros(target_us),
            window_requests: 10,
            window_batches: 1,
        };
        AdaptiveController::new(cfg, 32, Duration::from_micros(1000))
    }

    fn window(c: &mut AdaptiveController, latency_us: u64) {
        // Batches of 8 rows that take 40% of the latency to execute.
        c.observe_batch(
            8,
            Duration::from_micros(latency_us * 2 / 5),
            std::iter::repeat_n(Duration::from_micros(latency_us), 10),
        );
    }

    #[test]
    fn a_p99_above_target_halves_the_delay_then_shrinks_the_batch_cap() {
        let mut c = ctl(10_000);
        window(&mut c, 20_000);
        assert_eq!(c.snapshot().delay, Duration::from_micros(500));
        for _ in 0..10 {
            window(&mut c, 20_000);
        }
        let s = c.snapshot();
        assert_eq!(s.delay, Duration::ZERO);
        assert!(
            s.max_batch_rows < 32,
            "cap should shrink under a persistent violation: {s:?}"
        );
        assert_eq!(s.last_p99, Some(Duration::from_micros(20_000)));
    }

    #[test]
    fn the_delay_never_exceeds_half_the_target_and_the_cap_recovers() {
        let mut c = ctl(10_000);
        for _ in 0..12 {
            window(&mut c, 30_000);
        }
        let shrunk = c.snapshot().max_batch_rows;
        // Latency falls steadily (each window better than the last): keep growing the delay up to its bound.
        for i in 0..60 {
            c.observe_batch(
                1,
                Duration::from_micros(100),
                std::iter::repeat_n(Duration::from_micros(4_000 - i * 10), 10),
            );
        }
        let s = c.snapshot();
        assert!(s.max_batch_rows > shrunk && s.max_batch_rows == 32, "{s:?}");
        assert_eq!(s.delay, Duration::from_micros(5_000));
    }

    #[test]
    fn an_overload_does_not_shrink_the_batches() {
        let mut c = ctl(10_000);
        for _ in 0..20 {
            // Latency is all queueing: batches execute in 1 ms.
            c.observe_batch(
                32,
                Duration::from_millis(1),
                std::iter::repeat_n(Duration::from_millis(50), 10),
            );
        }
        assert_eq!(c.snapshot().max_batch_rows, 32);
        assert_eq!(c.snapshot().delay, Duration::ZERO);
    }

    #[test]
    fn a_worse_mean_turns_the_delay_search_around() {
        let mut c = ctl(100_000);
        window(&mut c, 1_000);
        let d1 = c.snapshot().delay;
        window(&mut c, 2_000);
        let d2 = c.snapshot().delay;
        assert!(d1 > Duration::from_micros(1000), "first step grows: {d1:?}");
        assert!(d2 < d1, "a worse mean reverses the direction: {d1:?} -> {d2:?}");
    }
}

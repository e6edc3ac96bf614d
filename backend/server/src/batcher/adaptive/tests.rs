//! The controller's rules, one window at a time (the closed-loop behaviour is tested in
//! `batcher/tests.rs` on tokio's paused clock).

use super::*;

const TARGET_US: u64 = 10_000;

/// Windows of one batch of 10 requests, on a 10 ms target, starting at `delay_us`.
struct Sim {
    c: AdaptiveController,
    now: Instant,
}

impl Sim {
    fn new(delay_us: u64) -> Self {
        let cfg = AdaptiveConfig {
            p99_target: Duration::from_micros(TARGET_US),
            window_requests: 10,
            window_batches: 1,
        };
        Sim {
            c: AdaptiveController::new(cfg, 32, 1, Duration::from_micros(delay_us)),
            now: Instant::now(),
        }
    }

    /// One control step: batches of `rows` that left as `release`, executed in `exec_us` after their
    /// oldest request waited `wait_us`, whose requests arrived over `span_us`; every request took
    /// `latency_us`. Batches are fed until the controller steps (after a change it ignores a few).
    fn window(
        &mut self,
        rows: usize,
        release: Release,
        exec_us: u64,
        wait_us: u64,
        span_us: u64,
        latency_us: u64,
    ) {
        let steps = self.c.snapshot().steps;
        for _ in 0..100 {
            // Back-to-back batches: the instance is busy all the time.
            self.now += Duration::from_micros(exec_us);
            self.c.observe_batch(
                BatchReport {
                    rows,
                    exec: Duration::from_micros(exec_us),
                    release,
                    oldest_wait: Duration::from_micros(wait_us),
                    span: Duration::from_micros(span_us),
                    done: self.now,
                },
                std::iter::repeat_n(Duration::from_micros(latency_us), 10),
            );
            if self.c.snapshot().steps > steps {
                return;
            }
        }
        panic!("the controller took no step in 100 batches");
    }

    fn delay_us(&self) -> u64 {
        self.c.snapshot().delay.as_micros() as u64
    }

    fn cap(&self) -> usize {
        self.c.snapshot().max_batch_rows
    }
}

#[test]
fn a_p99_above_target_halves_the_delay_then_tries_a_smaller_batch_cap() {
    let mut s = Sim::new(4_000);
    s.window(8, Release::Deadline, 6_000, 4_000, 3_000, 20_000);
    assert_eq!(s.delay_us(), 2_000);
    for i in 0..10 {
        // Each smaller cap lowers p99 a little (but not yet under the target), so each is kept.
        s.window(8, Release::Deadline, 6_000, 0, 0, 20_000 - i * 1_000);
    }
    assert_eq!(s.delay_us(), 0);
    assert!(
        s.cap() <= 18,
        "a persistent violation by slow batches shrinks the cap: {:?}",
        s.c.snapshot()
    );
    assert_eq!(s.c.snapshot().last_p99, Some(Duration::from_micros(11_000)));
}

#[test]
fn a_smaller_batch_cap_that_does_not_shorten_the_tail_is_undone() {
    let mut s = Sim::new(0);
    // Slow batches and a p99 over target: the first violation tries a cap of 24.
    s.window(32, Release::Full, 8_000, 0, 0, 30_000);
    assert_eq!(s.cap(), 24);
    // p99 did not improve (the tail is queueing): back to 32, and no new attempt.
    for _ in 0..5 {
        s.window(24, Release::Full, 8_000, 0, 0, 30_000);
    }
    assert_eq!(s.cap(), 32);
}

#[test]
fn batches_that_leave_full_keep_the_delay() {
    let mut s = Sim::new(3_000);
    for _ in 0..20 {
        s.window(32, Release::Full, 4_000, 1_000, 800, 6_000);
    }
    assert_eq!(s.delay_us(), 3_000);
}

#[test]
fn batches_that_waited_for_an_instance_raise_the_delay_past_their_wait() {
    let mut s = Sim::new(0);
    // Under-filled batches whose oldest request waited 4 ms for the instance (the delay was 0).
    s.window(16, Release::Backlog, 4_000, 4_000, 500, 8_000);
    assert_eq!(s.delay_us(), 5_000, "1.25 x the wait");
    // Once batches leave full the delay stays.
    for _ in 0..10 {
        s.window(32, Release::Full, 5_000, 1_000, 500, 7_000);
    }
    assert_eq!(s.delay_us(), 5_000);
}

#[test]
fn batches_whose_requests_stopped_joining_early_lower_the_delay_to_twice_their_span() {
    let mut s = Sim::new(5_000);
    // Under-filled, waited out the delay, every request in within 1 ms of the oldest.
    s.window(8, Release::Deadline, 4_000, 5_000, 1_000, 9_000);
    assert_eq!(
        s.delay_us(),
        5_000,
        "one window is not enough to shorten the delay"
    );
    for _ in 0..20 {
        s.window(8, Release::Deadline, 4_000, 5_000, 1_000, 9_000);
    }
    assert_eq!(s.delay_us(), 2_000);
}

#[test]
fn requests_still_joining_at_the_deadline_grow_the_delay_while_p99_has_headroom() {
    let mut s = Sim::new(1_000);
    s.window(8, Release::Deadline, 4_000, 1_000, 900, 5_000);
    assert_eq!(s.delay_us(), 1_500);
    // No headroom (p99 at 85% of the target): no growth.
    s.window(8, Release::Deadline, 4_000, 1_500, 1_400, 8_500);
    assert_eq!(s.delay_us(), 1_500);
}

#[test]
fn after_a_violation_the_delay_stays_below_the_one_that_failed() {
    let mut s = Sim::new(4_000);
    s.window(8, Release::Deadline, 4_000, 4_000, 3_900, 12_000);
    assert_eq!(s.delay_us(), 2_000);
    // Batches wait for the instance again and p99 is fine: the delay grows, but not back to 4 ms.
    for _ in 0..5 {
        s.window(8, Release::Backlog, 4_000, 8_000, 500, 8_500);
    }
    assert_eq!(s.delay_us(), 3_000, "three quarters of the delay that failed");
}

#[test]
fn the_delay_never_exceeds_half_the_target() {
    let mut s = Sim::new(100_000);
    assert_eq!(s.delay_us(), 5_000);
    for _ in 0..10 {
        s.window(8, Release::Backlog, 4_000, 50_000, 500, 7_000);
    }
    assert_eq!(s.delay_us(), 5_000);
}

#[test]
fn the_batch_cap_grows_back_with_headroom_but_never_past_max_batch_size() {
    let mut s = Sim::new(0);
    // Slow full batches over the target: the cap shrinks, and the lower p99 keeps it shrunk.
    s.window(32, Release::Full, 8_000, 0, 0, 30_000);
    s.window(24, Release::Full, 6_000, 0, 0, 9_000);
    assert_eq!(s.cap(), 24);
    // Fast batches and plenty of headroom: the cap climbs back by quarters, up to 32 and no further.
    let mut caps = Vec::new();
    for _ in 0..20 {
        s.window(s.cap(), Release::Full, 1_000, 0, 0, 3_000);
        caps.push(s.cap());
    }
    assert_eq!(caps[0], 30, "a quarter of 24 more: {caps:?}");
    assert!(caps.iter().all(|&c| c <= 32), "{caps:?}");
    assert_eq!(*caps.last().unwrap_or(&0), 32, "{caps:?}");
}

#[test]
fn the_batch_cap_does_not_grow_when_the_larger_batch_would_not_fit_twice_in_the_target() {
    let mut s = Sim::new(0);
    s.window(32, Release::Full, 8_000, 0, 0, 30_000);
    s.window(24, Release::Full, 6_000, 0, 0, 9_000);
    assert_eq!(s.cap(), 24);
    // Headroom, but 24 rows take 4.5 ms: 30 rows would take 5.6 ms, more than half the 10 ms target.
    for _ in 0..5 {
        s.window(24, Release::Full, 4_500, 0, 0, 7_000);
    }
    assert_eq!(s.cap(), 24);
}

#[test]
fn an_overload_that_smaller_batches_do_not_help_keeps_the_full_batch_size() {
    let mut s = Sim::new(0);
    // Every window over target and no better with a smaller cap: queueing, not execution.
    for _ in 0..10 {
        s.window(s.cap(), Release::Full, 6_000, 0, 0, 40_000);
    }
    assert_eq!(s.cap(), 32);
    assert_eq!(s.delay_us(), 0);
}

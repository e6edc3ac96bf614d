//! Batcher semantics on tokio's paused clock with an executor that records every batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::*;

#[derive(Debug, Clone)]
struct Item {
    id: usize,
    rows: usize,
    shape: usize,
}

impl BatchItem for Item {
    fn rows(&self) -> usize {
        self.rows
    }
    fn can_batch_with(&self, other: &Self) -> bool {
        self.shape == other.shape
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    instance: usize,
    ids: Vec<usize>,
    at: Duration,
}

/// Records each batch (instance, request ids, start time) and takes `base + per_row * rows` to run it.
#[derive(Clone)]
struct Exec {
    instance: usize,
    log: Arc<Mutex<Vec<Record>>>,
    base: Duration,
    per_row: Duration,
    fail: bool,
    origin: Instant,
    slow_id: Option<(usize, Duration)>,
    panic_id: Option<usize>,
}

impl BatchExecutor for Exec {
    type Item = Item;
    type Output = (usize, usize);
    type Error = String;

    async fn execute(&self, batch: Vec<Item>) -> Result<Vec<(usize, usize)>, String> {
        let ids: Vec<usize> = batch.iter().map(|i| i.id).collect();
        let rows: usize = batch.iter().map(|i| i.rows).sum();
        self.log.lock().unwrap().push(Record {
            instance: self.instance,
            ids: ids.clone(),
            at: self.origin.elapsed(),
        });
        let mut cost = self.base + self.per_row * rows as u32;
        if let Some((slow, extra)) = self.slow_id
            && ids.contains(&slow)
        {
            cost += extra;
        }
        tokio::time::sleep(cost).await;
        if self.panic_id.is_some_and(|p| ids.contains(&p)) {
            panic!("instance {} panicked", self.instance);
        }
        if self.fail {
            return Err(format!("instance {} failed", self.instance));
        }
        Ok(ids.into_iter().map(|id| (self.instance, id)).collect())
    }
}

type TestTicket = Ticket<(usize, usize), String>;

struct Harness {
    batcher: Batcher<Exec>,
    log: Arc<Mutex<Vec<Record>>>,
    next_id: usize,
}

impl Harness {
    fn new(config: BatcherConfig, instances: usize, base_ms: u64) -> Self {
        Self::with(config, instances, |e| e.base = Duration::from_millis(base_ms))
    }

    fn with(config: BatcherConfig, instances: usize, tweak: impl Fn(&mut Exec)) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let origin = Instant::now();
        let execs = (0..instances)
            .map(|instance| {
                let mut e = Exec {
                    instance,
                    log: log.clone(),
                    base: Duration::from_millis(10),
                    per_row: Duration::ZERO,
                    fail: false,
                    origin,
                    slow_id: None,
                    panic_id: None,
                };
                tweak(&mut e);
                e
            })
            .collect();
        Harness {
            batcher: Batcher::new(config, execs),
            log,
            next_id: 0,
        }
    }

    fn submit(&mut self, shape: usize, options: SubmitOptions) -> (usize, Result<TestTicket, SubmitError>) {
        let id = self.next_id;
        self.next_id += 1;
        (id, self.batcher.submit(Item { id, rows: 1, shape }, options))
    }

    fn send(&mut self) -> (usize, Ticket<(usize, usize), String>) {
        let (id, t) = self.submit(0, SubmitOptions::default());
        (id, t.unwrap())
    }

    fn batches(&self) -> Vec<Vec<usize>> {
        self.log.lock().unwrap().iter().map(|r| r.ids.clone()).collect()
    }

    fn records(&self) -> Vec<Record> {
        self.log.lock().unwrap().clone()
    }
}

fn batching(max: usize, delay_ms: u64) -> BatcherConfig {
    BatcherConfig {
        enabled: true,
        max_batch_size: max,
        max_queue_delay: Duration::from_millis(delay_ms),
        ..BatcherConfig::default()
    }
}

/// Lets spawned tasks run without moving the paused clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn without_dynamic_batching_every_request_executes_alone() {
    let mut h = Harness::new(
        BatcherConfig {
            max_batch_size: 8,
            ..BatcherConfig::default()
        },
        1,
        10,
    );
    let tickets: Vec<_> = (0..4).map(|_| h.send().1).collect();
    for t in tickets {
        assert!(t.await.result.is_ok());
    }
    assert_eq!(h.batches(), vec![vec![0], vec![1], vec![2], vec![3]]);
}

#[tokio::test(start_paused = true)]
async fn batches_hold_at_most_max_batch_size_rows_and_form_while_one_executes() {
    let mut h = Harness::new(batching(4, 0), 1, 10);
    let mut tickets = vec![h.send().1];
    settle().await; // request 0 starts alone: nothing else is queued and the delay is 0
    tickets.extend((0..9).map(|_| h.send().1));
    for t in tickets {
        let c = t.await;
        assert!(c.result.is_ok());
    }
    assert_eq!(
        h.batches(),
        vec![vec![0], vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9]]
    );
    // The second batch left the moment the instance came back (t = 10 ms), not later.
    assert_eq!(h.records()[1].at, Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn a_lone_request_waits_for_the_queue_delay_and_a_full_batch_leaves_at_once() {
    let mut h = Harness::new(batching(4, 100), 1, 1);
    let (_, t) = h.send();
    let c = t.await;
    assert_eq!(c.queue_time, Duration::from_millis(100));
    assert_eq!(h.records()[0].at, Duration::from_millis(100));

    let tickets: Vec<_> = (0..4).map(|_| h.send().1).collect();
    let start = Instant::now();
    for t in tickets {
        let c = t.await;
        assert_eq!(c.batch_rows, 4);
        assert_eq!(c.queue_time, Duration::ZERO);
    }
    assert!(
        start.elapsed() < Duration::from_millis(10),
        "a full batch must not wait for the delay"
    );
}

#[tokio::test(start_paused = true)]
async fn a_preferred_size_leaves_at_once_and_the_rest_waits() {
    let mut cfg = batching(8, 1000);
    cfg.preferred_batch_sizes = vec![2, 4];
    let mut h = Harness::new(cfg, 1, 1);
    let tickets: Vec<_> = (0..3).map(|_| h.send().1).collect();
    let mut times = Vec::new();
    for t in tickets {
        times.push(t.await.queue_time);
    }
    assert_eq!(h.batches(), vec![vec![0, 1], vec![2]]);
    assert_eq!(
        times,
        vec![Duration::ZERO, Duration::ZERO, Duration::from_millis(1000)]
    );
}

#[tokio::test(start_paused = true)]
async fn requests_with_different_shapes_are_never_mixed() {
    let mut h = Harness::new(batching(8, 0), 1, 10);
    let first = h.send().1;
    settle().await;
    let shapes = [1, 1, 2, 1, 2];
    let tickets: Vec<_> = shapes
        .iter()
        .map(|&s| h.submit(s, SubmitOptions::default()).1.unwrap())
        .collect();
    first.await.result.unwrap();
    for t in tickets {
        t.await.result.unwrap();
    }
    assert_eq!(h.batches(), vec![vec![0], vec![1, 2], vec![3], vec![4], vec![5]]);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_with_exceeds_maximum_queue_size() {
    let mut cfg = batching(1, 0);
    cfg.default_queue_policy.max_queue_size = 2;
    let mut h = Harness::new(cfg, 1, 50);
    let running = h.send().1;
    settle().await; // request 0 executes; the queue is empty again
    let a = h.send().1;
    let b = h.send().1;
    let (_, refused) = h.submit(0, SubmitOptions::default());
    let err = refused.err().unwrap();
    assert_eq!(err, SubmitError::QueueFull);
    assert_eq!(err.to_string(), "Exceeds maximum queue size");
    assert_eq!(h.batcher.pending(), 2);
    for t in [running, a, b] {
        t.await.result.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn timeouts_reject_or_delay_as_the_policy_says() {
    let mut cfg = batching(1, 0);
    cfg.priority_levels = 2;
    cfg.default_priority_level = 1;
    cfg.priority_queue_policy.insert(
        1,
        QueuePolicy {
            timeout_action: TimeoutAction::Reject,
            default_timeout: Some(Duration::from_millis(20)),
            ..QueuePolicy::default()
        },
    );
    cfg.priority_queue_policy.insert(
        2,
        QueuePolicy {
            timeout_action: TimeoutAction::Delay,
            default_timeout: Some(Duration::from_millis(20)),
            ..QueuePolicy::default()
        },
    );
    // Request 0 runs for 30 ms: the queued ones time out at 20 ms.
    let mut h = Harness::new(cfg, 1, 30);
    let running = h.send().1;
    settle().await;
    let (_, rejected) = h.submit(
        0,
        SubmitOptions {
            priority: 1,
            timeout: None,
        },
    );
    let (delayed_id, delayed) = h.submit(
        0,
        SubmitOptions {
            priority: 2,
            timeout: None,
        },
    );
    let rejected = rejected.unwrap().await;
    assert_eq!(rejected.result, Err(Rejected::Timeout));
    assert_eq!(
        rejected.queue_time,
        Duration::from_millis(20),
        "rejected when the timeout expires, not later"
    );
    assert_eq!(Rejected::<String>::Timeout.to_string(), "Request timeout expired");
    // A request queued after the delayed one, at its level, is served first.
    let (fresh_id, fresh) = h.submit(
        0,
        SubmitOptions {
            priority: 2,
            timeout: None,
        },
    );
    running.await.result.unwrap();
    fresh.unwrap().await.result.unwrap();
    assert!(delayed.unwrap().await.result.is_ok(), "DELAY keeps the request");
    let order: Vec<usize> = h.batches().into_iter().flatten().collect();
    assert_eq!(order, vec![0, fresh_id, delayed_id]);
}

#[tokio::test(start_paused = true)]
async fn a_request_timeout_override_can_only_lower_the_default() {
    let mut cfg = batching(1, 0);
    cfg.default_queue_policy = QueuePolicy {
        default_timeout: Some(Duration::from_millis(40)),
        allow_timeout_override: true,
        ..QueuePolicy::default()
    };
    let mut h = Harness::new(cfg, 1, 100);
    let running = h.send().1;
    settle().await;
    let (_, short) = h.submit(
        0,
        SubmitOptions {
            priority: 0,
            timeout: Some(Duration::from_millis(10)),
        },
    );
    let (_, long) = h.submit(
        0,
        SubmitOptions {
            priority: 0,
            timeout: Some(Duration::from_millis(500)),
        },
    );
    let short = short.unwrap().await;
    let long = long.unwrap().await;
    assert_eq!(
        (short.result.clone().err(), short.queue_time),
        (Some(Rejected::Timeout), Duration::from_millis(10))
    );
    assert_eq!(
        (long.result.clone().err(), long.queue_time),
        (Some(Rejected::Timeout), Duration::from_millis(40))
    );
    running.await.result.unwrap();
}

#[tokio::test(start_paused = true)]
async fn higher_priority_requests_are_served_first_and_unknown_levels_are_refused() {
    let mut cfg = batching(1, 0);
    cfg.priority_levels = 3;
    cfg.default_priority_level = 2;
    let mut h = Harness::new(cfg, 1, 10);
    let running = h.send().1;
    settle().await;
    let (low, t_low) = h.submit(
        0,
        SubmitOptions {
            priority: 3,
            timeout: None,
        },
    );
    let (mid, t_mid) = h.submit(0, SubmitOptions::default());
    let (high, t_high) = h.submit(
        0,
        SubmitOptions {
            priority: 1,
            timeout: None,
        },
    );
    let (_, bad) = h.submit(
        0,
        SubmitOptions {
            priority: 4,
            timeout: None,
        },
    );
    assert_eq!(
        bad.err(),
        Some(SubmitError::InvalidPriority { given: 4, levels: 3 })
    );
    for t in [running, t_low.unwrap(), t_mid.unwrap(), t_high.unwrap()] {
        t.await.result.unwrap();
    }
    let order: Vec<usize> = h.batches().into_iter().flatten().collect();
    assert_eq!(order, vec![0, high, mid, low]);
}

#[tokio::test(start_paused = true)]
async fn batches_spread_over_instances_and_preserve_ordering_holds_back_early_finishers() {
    for preserve in [false, true] {
        let mut cfg = batching(1, 0);
        cfg.preserve_ordering = preserve;
        // Request 0 takes 100 ms, the others 10 ms.
        let mut h = Harness::with(cfg, 2, |e| {
            e.base = Duration::from_millis(10);
            e.slow_id = Some((0, Duration::from_millis(90)));
        });
        let (t0, t1) = (h.send().1, h.send().1);
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut joins = Vec::new();
        for (i, t) in [t0, t1].into_iter().enumerate() {
            let done = done.clone();
            joins.push(tokio::spawn(async move {
                let c = t.await;
                done.lock()
                    .unwrap()
                    .push((i, c.result.unwrap().0, Instant::now()));
            }));
        }
        for j in joins {
            j.await.unwrap();
        }
        let done = done.lock().unwrap().clone();
        let instances: std::collections::BTreeSet<usize> = done.iter().map(|d| d.1).collect();
        assert_eq!(instances.len(), 2, "two instances were both used");
        let order: Vec<usize> = done.iter().map(|d| d.0).collect();
        if preserve {
            assert_eq!(
                order,
                vec![0, 1],
                "with preserve_ordering request 1 waits for request 0"
            );
        } else {
            assert_eq!(order, vec![1, 0], "without it the fast request answers first");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_execution_error_reaches_every_request_of_the_batch() {
    let mut h = Harness::with(batching(4, 5), 1, |e| e.fail = true);
    let tickets: Vec<_> = (0..3).map(|_| h.send().1).collect();
    for t in tickets {
        let c = t.await;
        assert_eq!(
            c.result,
            Err(Rejected::Execution("instance 0 failed".to_string()))
        );
        assert_eq!(c.batch_rows, 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_instance_answers_its_batch_with_dropped_and_keeps_serving() {
    let mut h = Harness::with(batching(4, 5), 1, |e| e.panic_id = Some(1));
    let doomed: Vec<_> = (0..3).map(|_| h.send().1).collect();
    for t in doomed {
        let c = t.await;
        assert_eq!(c.result, Err(Rejected::Dropped));
        assert_eq!(c.batch_rows, 3);
    }
    // The instance came back: the next batch runs on it.
    let (id, t) = h.send();
    assert_eq!(t.await.result, Ok((0, id)));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_drains_queued_requests_then_stops() {
    let mut h = Harness::new(batching(2, 1000), 1, 10);
    let tickets: Vec<_> = (0..3).map(|_| h.send().1).collect();
    let log = h.log.clone();
    drop(h);
    let start = Instant::now();
    for t in tickets {
        assert!(
            t.await.result.is_ok(),
            "queued work finishes after the handle is gone"
        );
    }
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "a closing batcher does not wait for the delay"
    );
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_retired_batcher_runs_its_queue_at_once_and_still_takes_late_requests() {
    let mut h = Harness::new(batching(8, 10_000), 1, 1);
    let queued = h.send().1;
    settle().await;
    h.batcher.drain_now();
    let c = queued.await;
    assert!(c.result.is_ok());
    assert_eq!(c.queue_time, Duration::ZERO, "no wait for the 10 s delay");
    let late = h.send().1.await;
    assert!(late.result.is_ok());
    assert_eq!(late.queue_time, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_caller_left_is_not_executed() {
    let mut h = Harness::new(batching(1, 0), 1, 10);
    let running = h.send().1;
    settle().await;
    let (_, gone) = h.submit(0, SubmitOptions::default());
    drop(gone);
    let kept = h.send().1;
    running.await.result.unwrap();
    kept.await.result.unwrap();
    assert_eq!(h.batches(), vec![vec![0], vec![2]]);
}

/// Closed-loop load: `clients` callers, each sending its next request `think` after its last answer.
/// Returns (requests per simulated second, p99 latency seen by the callers).
async fn closed_loop(
    config: BatcherConfig,
    clients: usize,
    think: Duration,
    total: Duration,
) -> (f64, Duration) {
    let h = Harness::with(config, 1, |e| {
        e.base = Duration::from_millis(4);
        e.per_row = Duration::from_micros(100);
    });
    let batcher = h.batcher.clone();
    let end = Instant::now() + total;
    let mut joins = Vec::new();
    for c in 0..clients {
        let b = batcher.clone();
        joins.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut id = c * 1_000_000;
            // Stagger the first requests a little, as real clients do.
            tokio::time::sleep(Duration::from_micros(37 * c as u64)).await;
            while Instant::now() < end {
                let t0 = Instant::now();
                id += 1;
                let c = b
                    .submit(
                        Item {
                            id,
                            rows: 1,
                            shape: 0,
                        },
                        SubmitOptions::default(),
                    )
                    .unwrap()
                    .await;
                c.result.unwrap();
                lat.push(t0.elapsed());
                tokio::time::sleep(think).await;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for j in joins {
        all.extend(j.await.unwrap());
    }
    all.sort();
    let p99 = all[(all.len() * 99).div_ceil(100) - 1];
    (all.len() as f64 / total.as_secs_f64(), p99)
}

#[tokio::test(start_paused = true)]
async fn adaptive_mode_meets_its_p99_target_near_the_best_fixed_delay_throughput() {
    let clients = 32;
    let think = Duration::from_micros(300);
    let total = Duration::from_secs(20);
    let mut best = 0.0f64;
    for delay_us in [0u64, 250, 500, 1000, 2000, 4000] {
        let (tput, p99) = closed_loop(batching(32, 0).with_delay_us(delay_us), clients, think, total).await;
        eprintln!("fixed delay {delay_us} us: {tput:.0}/s, p99 {p99:?}");
        best = best.max(tput);
    }
    let target = Duration::from_millis(30);
    let mut cfg = batching(32, 0);
    cfg.adaptive = Some(AdaptiveConfig::new(target));
    let (tput, p99) = closed_loop(cfg, clients, think, total).await;
    eprintln!("adaptive (target {target:?}): {tput:.0}/s, p99 {p99:?}");
    assert!(
        tput >= 0.9 * best,
        "adaptive {tput:.0}/s vs best fixed delay {best:.0}/s"
    );
    assert!(p99 <= target, "adaptive p99 {p99:?} above its target {target:?}");

    // A tight target forces smaller batches: p99 must still be met.
    let tight = Duration::from_millis(12);
    let mut cfg = batching(32, 0);
    cfg.adaptive = Some(AdaptiveConfig::new(tight));
    let (tput, p99) = closed_loop(cfg, clients, think, total).await;
    eprintln!("adaptive (target {tight:?}): {tput:.0}/s, p99 {p99:?}");
    assert!(
        p99 <= tight.mul_f64(1.1),
        "adaptive p99 {p99:?} with a {tight:?} target"
    );
}

impl BatcherConfig {
    fn with_delay_us(mut self, us: u64) -> Self {
        self.max_queue_delay = Duration::from_micros(us);
        self
    }
}

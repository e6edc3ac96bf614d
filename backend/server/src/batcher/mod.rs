//! Triton's dynamic batcher: a per-model queue that groups requests into batches and hands each batch to a
//! free model instance.
//!
//! The batcher knows nothing of tensors: it schedules [`BatchItem`]s (which say how many rows they carry
//! and whether they may share a batch with another item) onto [`BatchExecutor`] instances, which
//! concatenate, execute once and split back. Semantics (see `docs/backend.md`):
//!
//! - a batch holds at most `max_batch_size` rows; requests are taken in priority order (level 1 first),
//!   FIFO inside a level, and a batch stops at the first request that does not fit or cannot be mixed;
//! - a batch that reaches the maximum, or a preferred size, leaves at once; otherwise the batcher waits for
//!   more requests until the oldest one has waited `max_queue_delay`;
//! - the queue of a priority level holds at most `max_queue_size` requests (0 = unbounded); a request that
//!   waits longer than its timeout is rejected (`REJECT`) or moved behind the others of its level (`DELAY`);
//! - while one batch executes the next one forms; with `preserve_ordering` responses leave in the order the
//!   requests arrived even when several instances finish out of order;
//! - with an [`AdaptiveConfig`] the delay and the batch-size cap are tuned online (see [`adaptive`]).

pub mod adaptive;
mod queue;
#[cfg(test)]
mod tests;
mod timer;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub use adaptive::{AdaptiveConfig, AdaptiveSnapshot};
use adaptive::{AdaptiveController, BatchReport, Release};
use queue::{Queue, Queued};

/// One request as the batcher sees it.
pub trait BatchItem: Send + 'static {
    /// Rows along the batch dimension (1 for a model without batching).
    fn rows(&self) -> usize;
    /// Whether this request may share a batch with `other` (same shapes along dynamic non-batch dims).
    fn can_batch_with(&self, other: &Self) -> bool;
}

/// Something that runs a whole batch: one model instance.
pub trait BatchExecutor: Send + Sync + 'static {
    /// The request type.
    type Item: BatchItem;
    /// The answer for one request.
    type Output: Send + 'static;
    /// A failure of the whole batch, given to every request in it.
    type Error: Clone + Send + 'static;

    /// Runs `batch` once and returns one output per item, in order.
    fn execute(
        &self,
        batch: Vec<Self::Item>,
    ) -> impl Future<Output = Result<Vec<Self::Output>, Self::Error>> + Send;
}

/// What to do with a request whose queue timeout expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeoutAction {
    /// Answer it with [`Rejected::Timeout`].
    #[default]
    Reject,
    /// Keep it, behind every request of its level that has not timed out.
    Delay,
}

/// Queue policy of one priority level (Triton's `ModelQueuePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueuePolicy {
    /// What happens when a request's timeout expires.
    pub timeout_action: TimeoutAction,
    /// Timeout for requests that set none; `None` = no timeout.
    pub default_timeout: Option<Duration>,
    /// Whether a request may set its own timeout (it can only lower the default).
    pub allow_timeout_override: bool,
    /// Most requests waiting at this level; 0 = unbounded.
    pub max_queue_size: usize,
}

/// How a model's requests are batched.
#[derive(Debug, Clone, PartialEq)]
pub struct BatcherConfig {
    /// False: every request executes alone (no `dynamic_batching` in the config, or `max_batch_size` 0).
    pub enabled: bool,
    /// Most rows in one batch (`max_batch_size`; at least 1).
    pub max_batch_size: usize,
    /// Batch sizes that leave at once when reached (`preferred_batch_size`).
    pub preferred_batch_sizes: Vec<usize>,
    /// How long the oldest request may wait for a batch to fill (`max_queue_delay_microseconds`).
    pub max_queue_delay: Duration,
    /// Answer requests in arrival order even when instances finish out of order.
    pub preserve_ordering: bool,
    /// Number of priority levels (0 or 1 = one level); level 1 is served first.
    pub priority_levels: u32,
    /// Level of requests that name none (or 0).
    pub default_priority_level: u32,
    /// Policy of every level without its own entry.
    pub default_queue_policy: QueuePolicy,
    /// Per-level policies (`priority_queue_policy`).
    pub priority_queue_policy: BTreeMap<u32, QueuePolicy>,
    /// Online tuning of delay and batch size towards a p99 target.
    pub adaptive: Option<AdaptiveConfig>,
    /// Wait with a microsecond-precision timer thread instead of tokio's millisecond timer (the server
    /// sets it; off by default so tests can run on tokio's paused clock).
    pub precise_timer: bool,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            enabled: false,
            max_batch_size: 1,
            preferred_batch_sizes: Vec::new(),
            max_queue_delay: Duration::ZERO,
            preserve_ordering: false,
            priority_levels: 0,
            default_priority_level: 0,
            default_queue_policy: QueuePolicy::default(),
            priority_queue_policy: BTreeMap::new(),
            adaptive: None,
            precise_timer: false,
        }
    }
}

/// Per-request options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Priority level (1 = highest); 0 = the default level.
    pub priority: u32,
    /// Queue timeout asked by the request; honoured only when the level allows overrides, and never above
    /// the level's default timeout.
    pub timeout: Option<Duration>,
}

/// Why a request was refused before it was queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The level's queue is full.
    #[error("Exceeds maximum queue size")]
    QueueFull,
    /// The request named a priority level the model does not have.
    #[error(
        "invalid priority level {given}: the model has priority levels 1..={levels} (0 = the default level)"
    )]
    InvalidPriority {
        /// The level asked for.
        given: u32,
        /// The number of levels.
        levels: u32,
    },
    /// The model is being unloaded.
    #[error("the model version is being unloaded and accepts no new requests")]
    Closed,
}

/// Why a queued request got no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected<E> {
    /// Its queue timeout expired with the `REJECT` action.
    Timeout,
    /// The batch failed in the executor.
    Execution(E),
    /// The batcher stopped before running it (its executor task panicked or was aborted).
    Dropped,
}

impl<E: fmt::Display> fmt::Display for Rejected<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Timeout => f.write_str("Request timeout expired"),
            Rejected::Execution(e) => e.fmt(f),
            Rejected::Dropped => f.write_str("the request was dropped because its model instance stopped"),
        }
    }
}

/// The answer to one request and what it cost.
#[derive(Debug)]
pub struct Completion<O, E> {
    /// The output, or why there is none.
    pub result: Result<O, Rejected<E>>,
    /// Time spent queued (from submit to the start of its batch's execution, or to its rejection).
    pub queue_time: Duration,
    /// Rows of the batch it ran in (0 when it did not run).
    pub batch_rows: usize,
}

/// A handle on one model version's batcher. Cheap to clone; when the last clone is dropped the batcher
/// finishes the requests already queued, then stops and drops its executors.
pub struct Batcher<E: BatchExecutor> {
    shared: Arc<Shared<E>>,
    _closer: Arc<Closer<E>>,
}

impl<E: BatchExecutor> Clone for Batcher<E> {
    fn clone(&self) -> Self {
        Batcher {
            shared: self.shared.clone(),
            _closer: self._closer.clone(),
        }
    }
}

/// Future of one submitted request.
pub struct Ticket<O, E> {
    rx: oneshot::Receiver<Completion<O, E>>,
}

struct Shared<E: BatchExecutor> {
    config: BatcherConfig,
    state: Mutex<State<E>>,
    /// Wakes the scheduler task, which times queue delays and timeouts.
    wake: Notify,
    adaptive: Option<Mutex<AdaptiveController>>,
    instances: Vec<Arc<E>>,
}

struct State<E: BatchExecutor> {
    queue: Queue<E::Item, E::Output, E::Error>,
    free: Vec<usize>,
    /// When each instance last became free (how the adaptive mode tells a batch that waited for its
    /// delay from one that waited for an instance).
    free_since: Vec<Instant>,
    running: usize,
    closed: bool,
    draining: bool,
    next_batch_seq: u64,
    order: Reorder<E::Output, E::Error>,
}

type Waiter<O, E> = (oneshot::Sender<Completion<O, E>>, Completion<O, E>);

/// Responses of finished batches waiting for earlier batches (only with `preserve_ordering`).
struct Reorder<O, E> {
    next: u64,
    done: BTreeMap<u64, Vec<Waiter<O, E>>>,
}

struct Closer<E: BatchExecutor> {
    shared: Arc<Shared<E>>,
}

impl<E: BatchExecutor> Drop for Closer<E> {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.wake.notify_one();
    }
}

/// A batch taken from the queue, and the instance it runs on.
struct Dispatch<E: BatchExecutor> {
    instance: usize,
    seq: u64,
    release: Release,
    batch: Vec<Queued<E::Item, E::Output, E::Error>>,
}

/// What one look at the queue decided.
struct Step<E: BatchExecutor> {
    /// A batch to run now.
    dispatch: Option<Dispatch<E>>,
    /// When to look again if nothing happens first (a queue delay or a timeout running out).
    wake_at: Option<Instant>,
    /// Requests are still queued, or the batcher is closing: the scheduler has something to time.
    look_again: bool,
    /// Closed, with nothing queued or running: the scheduler may stop.
    finished: bool,
}

/// What the scheduler should do next.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Send the first `count` candidate requests now; `due` is when the queue delay of the oldest ran
    /// out, `None` when the batch is full (cap, preferred size, or the next request cannot join).
    Dispatch { count: usize, due: Option<Instant> },
    /// Wait for more requests, at most until this instant.
    Wait(Instant),
    /// Nothing queued.
    Idle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain queue data behind; serving on is better than
    // poisoning every later request.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<E: BatchExecutor> Batcher<E> {
    /// Starts a batcher over these instances (at least one) on the current tokio runtime.
    pub fn new(config: BatcherConfig, instances: Vec<E>) -> Self {
        let mut config = config;
        config.max_batch_size = config.max_batch_size.max(1);
        config
            .preferred_batch_sizes
            .retain(|&p| p >= 1 && p <= config.max_batch_size);
        config.preferred_batch_sizes.sort_unstable();
        config.preferred_batch_sizes.dedup();
        let levels = config.priority_levels.max(1) as usize;
        let policies = (1..=levels as u32)
            .map(|l| {
                config
                    .priority_queue_policy
                    .get(&l)
                    .copied()
                    .unwrap_or(config.default_queue_policy)
            })
            .collect();
        let adaptive = config.adaptive.clone().filter(|_| config.enabled).map(|a| {
            Mutex::new(AdaptiveController::new(
                a,
                config.max_batch_size,
                instances.len(),
                config.max_queue_delay,
            ))
        });
        let instances: Vec<Arc<E>> = instances.into_iter().map(Arc::new).collect();
        let started = Instant::now();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Queue::new(policies),
                free: (0..instances.len()).rev().collect(),
                free_since: vec![started; instances.len()],
                running: 0,
                closed: false,
                draining: false,
                next_batch_seq: 0,
                order: Reorder {
                    next: 0,
                    done: BTreeMap::new(),
                },
            }),
            config,
            wake: Notify::new(),
            adaptive,
            instances,
        });
        tokio::spawn(schedule(shared.clone()));
        Batcher {
            _closer: Arc::new(Closer {
                shared: shared.clone(),
            }),
            shared,
        }
    }

    /// The configuration in force (after normalisation).
    pub fn config(&self) -> &BatcherConfig {
        &self.shared.config
    }

    /// Queues one request. Fails at once when its level's queue is full or the priority is unknown.
    pub fn submit(
        &self,
        item: E::Item,
        options: SubmitOptions,
    ) -> Result<Ticket<E::Output, E::Error>, SubmitError> {
        let cfg = &self.shared.config;
        let levels = cfg.priority_levels.max(1);
        let level = match options.priority {
            0 => cfg.default_priority_level.clamp(1, levels),
            p if p <= levels => p,
            p if cfg.priority_levels == 0 => {
                // Triton ignores priorities on a model without levels.
                let _ = p;
                1
            }
            p => return Err(SubmitError::InvalidPriority { given: p, levels }),
        };
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let rows = item.rows();
        {
            let mut st = lock(&self.shared.state);
            if st.closed {
                return Err(SubmitError::Closed);
            }
            let policy = st.queue.policy(level);
            if policy.max_queue_size > 0 && st.queue.level_len(level) >= policy.max_queue_size {
                return Err(SubmitError::QueueFull);
            }
            let timeout = match (policy.default_timeout, options.timeout) {
                (d, Some(t)) if policy.allow_timeout_override => Some(d.map_or(t, |d| d.min(t))),
                (d, _) => d,
            };
            st.queue.push(
                level,
                Queued {
                    item,
                    rows,
                    enqueued: now,
                    deadline: timeout.map(|t| now + t),
                    action: policy.timeout_action,
                    tx,
                },
            );
        }
        // When an instance is free and the batch is due (no delay, or the request completed a batch),
        // start it from here: waking the scheduler task first would cost a task switch per request.
        self.shared.step_and_start(now);
        Ok(Ticket { rx })
    }

    /// The version left the serving set: run what is queued at once instead of waiting for batches to
    /// fill. Requests still arriving (from callers that picked this version just before) are taken.
    pub fn drain_now(&self) {
        lock(&self.shared.state).draining = true;
        self.shared.wake.notify_one();
    }

    /// Requests waiting in the queue (not yet executing).
    pub fn pending(&self) -> usize {
        lock(&self.shared.state).queue.len()
    }

    /// Batches executing now.
    pub fn running(&self) -> usize {
        lock(&self.shared.state).running
    }

    /// Current delay and batch-size cap when the adaptive mode is on.
    pub fn adaptive_snapshot(&self) -> Option<AdaptiveSnapshot> {
        self.shared.adaptive.as_ref().map(|a| lock(a).snapshot())
    }
}

impl<O, E> Future for Ticket<O, E> {
    type Output = Completion<O, E>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or(Completion {
                result: Err(Rejected::Dropped),
                queue_time: Duration::ZERO,
                batch_rows: 0,
            })
        })
    }
}

impl<E: BatchExecutor> Shared<E> {
    /// Effective (delay, max rows) now: the configured ones, or the adaptive controller's.
    fn limits(&self) -> (Duration, usize) {
        match &self.adaptive {
            Some(a) => {
                let s = lock(a).snapshot();
                (s.delay, s.max_batch_rows)
            }
            None => (self.config.max_queue_delay, self.config.max_batch_size),
        }
    }

    /// Looks at the queue at `now`: moves timed-out requests to `expired` and, when an instance is free
    /// and a batch is due, takes the batch and the instance.
    fn step(&self, now: Instant, expired: &mut Vec<Queued<E::Item, E::Output, E::Error>>) -> Step<E> {
        let (delay, cap) = self.limits();
        let mut st = lock(&self.state);
        loop {
            st.queue.expire(now, expired);
            let deadline = st.queue.next_deadline();
            let mut step = Step {
                dispatch: None,
                wake_at: deadline,
                look_again: false,
                finished: false,
            };
            if !st.free.is_empty() {
                // A closing or retired batcher gets no more requests: waiting for a batch to fill is
                // pointless.
                let delay = if st.closed || st.draining {
                    Duration::ZERO
                } else {
                    delay
                };
                match plan(&self.config, &st.queue, now, delay, cap) {
                    Plan::Dispatch { count, due } => {
                        let batch = st.queue.take(count);
                        if batch.is_empty() {
                            // Every request of it had been abandoned by its caller: plan again.
                            continue;
                        }
                        // `free` is non-empty (checked above).
                        let instance = st.free.pop().unwrap_or_default();
                        let release = match due {
                            None => Release::Full,
                            // The instance came back after the delay had run out: the batch waited
                            // for it, not for its delay.
                            Some(due) if st.free_since.get(instance).is_some_and(|&f| f > due) => {
                                Release::Backlog
                            }
                            Some(_) => Release::Deadline,
                        };
                        st.running += 1;
                        let seq = st.next_batch_seq;
                        st.next_batch_seq += 1;
                        step.dispatch = Some(Dispatch {
                            instance,
                            seq,
                            release,
                            batch,
                        });
                    }
                    Plan::Wait(t) => step.wake_at = Some(deadline.map_or(t, |d| d.min(t))),
                    Plan::Idle => step.finished = st.closed && st.running == 0,
                }
            }
            step.look_again = st.queue.len() > 0 || st.closed;
            return step;
        }
    }

    /// [`Shared::step`] from outside the scheduler task (a submit, a finished batch): starts the batch
    /// it took in a task of its own, and wakes the scheduler only when something is left to time.
    fn step_and_start(self: &Arc<Self>, now: Instant) {
        let mut expired = Vec::new();
        let step = self.step(now, &mut expired);
        respond_expired(expired, now);
        if step.look_again || step.finished {
            self.wake.notify_one();
        }
        if let Some(d) = step.dispatch {
            tokio::spawn(run_batches(self.clone(), d));
        }
    }
}

/// Decides what to do with the queue as it stands at `now`.
fn plan<I: BatchItem, O, E>(
    config: &BatcherConfig,
    queue: &Queue<I, O, E>,
    now: Instant,
    delay: Duration,
    cap: usize,
) -> Plan {
    let mut candidates = queue.iter();
    let Some(first) = candidates.next() else {
        return Plan::Idle;
    };
    if !config.enabled {
        return Plan::Dispatch { count: 1, due: None };
    }
    let cap = cap.clamp(1, config.max_batch_size);
    let mut rows = first.rows;
    let mut count = 1;
    let mut best_preferred = config.preferred_batch_sizes.contains(&rows).then_some(count);
    let mut blocked = rows >= cap;
    for q in candidates {
        if blocked {
            break;
        }
        if rows + q.rows > cap || !first.item.can_batch_with(&q.item) {
            blocked = true;
            break;
        }
        rows += q.rows;
        count += 1;
        if config.preferred_batch_sizes.contains(&rows) {
            best_preferred = Some(count);
        }
        if rows >= cap {
            blocked = true;
        }
    }
    if blocked || config.preferred_batch_sizes.contains(&rows) {
        return Plan::Dispatch { count, due: None };
    }
    if let Some(n) = best_preferred {
        return Plan::Dispatch { count: n, due: None };
    }
    let oldest = queue.oldest_enqueued().unwrap_or(first.enqueued);
    let due = oldest + delay;
    if due <= now {
        Plan::Dispatch {
            count,
            due: Some(due),
        }
    } else {
        Plan::Wait(due)
    }
}

/// The scheduler task of one batcher: it times queue delays and timeouts, and starts the batches they
/// release (batches that are due when a request arrives or a batch finishes start from there).
async fn schedule<E: BatchExecutor>(shared: Arc<Shared<E>>) {
    loop {
        let now = Instant::now();
        let mut expired = Vec::new();
        let step = shared.step(now, &mut expired);
        respond_expired(expired, now);
        if let Some(d) = step.dispatch {
            tokio::spawn(run_batches(shared.clone(), d));
            continue;
        }
        if step.finished {
            return;
        }
        match step.wake_at {
            Some(t) if shared.config.precise_timer => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = timer::sleep_until(t.into_std()) => {}
                }
            }
            Some(t) => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep_until(t) => {}
                }
            }
            None => shared.wake.notified().await,
        }
    }
}

fn respond_expired<I, O, E>(expired: Vec<Queued<I, O, E>>, now: Instant) {
    for q in expired {
        let _ = q.tx.send(Completion {
            result: Err(Rejected::Timeout),
            queue_time: now.saturating_duration_since(q.enqueued),
            batch_rows: 0,
        });
    }
}

/// Executes a batch on its instance, answers its requests and frees the instance; then, while another
/// batch is due, runs that one too (in this task: no hand-over to the scheduler between batches).
async fn run_batches<E: BatchExecutor>(shared: Arc<Shared<E>>, first: Dispatch<E>) {
    let mut next = Some(first);
    while let Some(d) = next.take() {
        let ready = run_batch(&shared, d).await;
        let now = Instant::now();
        let mut expired = Vec::new();
        let step = shared.step(now, &mut expired);
        if (step.look_again && step.dispatch.is_none()) || step.finished {
            shared.wake.notify_one();
        }
        for (tx, completion) in ready {
            let _ = tx.send(completion);
        }
        respond_expired(expired, now);
        next = step.dispatch;
    }
}

/// Executes one batch, frees its instance and returns the answers that may leave now (with
/// `preserve_ordering`, those of earlier batches that were waiting for this one too).
async fn run_batch<E: BatchExecutor>(shared: &Shared<E>, d: Dispatch<E>) -> Vec<Waiter<E::Output, E::Error>> {
    let Dispatch {
        instance,
        seq,
        release,
        batch,
    } = d;
    let exec = shared.instances[instance].clone();
    let start = Instant::now();
    let rows: usize = batch.iter().map(|q| q.rows).sum();
    let (oldest, newest) = batch.iter().fold((start, None::<Instant>), |(o, n), q| {
        (
            o.min(q.enqueued),
            Some(n.map_or(q.enqueued, |n| n.max(q.enqueued))),
        )
    });
    let mut senders = Vec::with_capacity(batch.len());
    let mut items = Vec::with_capacity(batch.len());
    for q in batch {
        senders.push((q.tx, start.saturating_duration_since(q.enqueued)));
        items.push(q.item);
    }
    let n = items.len();
    // A panic inside the executor answers the batch with `Dropped` instead of stranding the instance.
    let result = match AssertUnwindSafe(exec.execute(items)).catch_unwind().await {
        Ok(Ok(outputs)) if outputs.len() == n => Ok(outputs),
        Ok(Ok(outputs)) => {
            tracing::error!(
                expected = n,
                got = outputs.len(),
                "executor returned the wrong number of outputs"
            );
            Err(Rejected::Dropped)
        }
        Ok(Err(e)) => Err(Rejected::Execution(e)),
        Err(_) => {
            tracing::error!("a model instance panicked while executing a batch");
            Err(Rejected::Dropped)
        }
    };
    let done = Instant::now();
    let exec_time = done.saturating_duration_since(start);
    if let Some(a) = &shared.adaptive {
        lock(a).observe_batch(
            BatchReport {
                rows,
                exec: exec_time,
                release,
                oldest_wait: start.saturating_duration_since(oldest),
                span: newest.map_or(Duration::ZERO, |n| n.saturating_duration_since(oldest)),
                done,
            },
            senders.iter().map(|(_, queue_time)| *queue_time + exec_time),
        );
    }
    let mut waiters: Vec<Waiter<E::Output, E::Error>> = Vec::with_capacity(n);
    match result {
        Ok(outputs) => {
            for ((tx, queue_time), out) in senders.into_iter().zip(outputs) {
                waiters.push((
                    tx,
                    Completion {
                        result: Ok(out),
                        queue_time,
                        batch_rows: rows,
                    },
                ));
            }
        }
        Err(err) => {
            for (tx, queue_time) in senders {
                waiters.push((
                    tx,
                    Completion {
                        result: Err(err.clone()),
                        queue_time,
                        batch_rows: rows,
                    },
                ));
            }
        }
    }
    let mut st = lock(&shared.state);
    st.free.push(instance);
    if let Some(f) = st.free_since.get_mut(instance) {
        *f = Instant::now();
    }
    st.running -= 1;
    if !shared.config.preserve_ordering {
        return waiters;
    }
    st.order.done.insert(seq, waiters);
    let mut ready = Vec::new();
    loop {
        let next = st.order.next;
        match st.order.done.remove(&next) {
            Some(w) => {
                ready.extend(w);
                st.order.next += 1;
            }
            None => break,
        }
    }
    ready
}

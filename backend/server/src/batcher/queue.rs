//! The batcher's priority queue: one FIFO per priority level, plus a FIFO of delayed requests per level.

use std::collections::VecDeque;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Completion, QueuePolicy, TimeoutAction};

/// One waiting request.
pub(super) struct Queued<I, O, E> {
    pub(super) item: I,
    pub(super) rows: usize,
    pub(super) enqueued: Instant,
    pub(super) deadline: Option<Instant>,
    pub(super) action: TimeoutAction,
    pub(super) tx: oneshot::Sender<Completion<O, E>>,
}

struct Level<I, O, E> {
    policy: QueuePolicy,
    ready: VecDeque<Queued<I, O, E>>,
    delayed: VecDeque<Queued<I, O, E>>,
}

/// Every level's requests; level `l` (1-based) lives at index `l - 1`.
pub(super) struct Queue<I, O, E> {
    levels: Vec<Level<I, O, E>>,
    len: usize,
    /// Earliest timeout among queued requests (kept so that most scheduler wake-ups cost no scan).
    min_deadline: Option<Instant>,
}

impl<I, O, E> Queue<I, O, E> {
    pub(super) fn new(policies: Vec<QueuePolicy>) -> Self {
        Queue {
            levels: policies
                .into_iter()
                .map(|policy| Level {
                    policy,
                    ready: VecDeque::new(),
                    delayed: VecDeque::new(),
                })
                .collect(),
            len: 0,
            min_deadline: None,
        }
    }

    fn level(&self, level: u32) -> &Level<I, O, E> {
        let i = (level.max(1) as usize - 1).min(self.levels.len() - 1);
        &self.levels[i]
    }

    pub(super) fn policy(&self, level: u32) -> QueuePolicy {
        self.level(level).policy
    }

    pub(super) fn level_len(&self, level: u32) -> usize {
        let l = self.level(level);
        l.ready.len() + l.delayed.len()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, level: u32, q: Queued<I, O, E>) {
        let i = (level.max(1) as usize - 1).min(self.levels.len() - 1);
        if let Some(d) = q.deadline {
            self.min_deadline = Some(self.min_deadline.map_or(d, |m| m.min(d)));
        }
        self.levels[i].ready.push_back(q);
        self.len += 1;
    }

    /// Requests in the order batches take them: level 1 first; inside a level, FIFO, delayed ones last.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Queued<I, O, E>> {
        self.levels
            .iter()
            .flat_map(|l| l.ready.iter().chain(l.delayed.iter()))
    }

    /// Enqueue time of the request that has waited longest.
    pub(super) fn oldest_enqueued(&self) -> Option<Instant> {
        // Each deque is in enqueue order, so its front is its oldest.
        self.levels
            .iter()
            .flat_map(|l| [l.ready.front(), l.delayed.front()])
            .flatten()
            .map(|q| q.enqueued)
            .min()
    }

    /// Earliest timeout among requests that can still time out.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.min_deadline
    }

    fn recompute_deadline(&mut self) {
        self.min_deadline = self
            .levels
            .iter()
            .flat_map(|l| l.ready.iter())
            .filter_map(|q| q.deadline)
            .min();
    }

    /// Moves timed-out requests: `REJECT` ones into `rejected`, `DELAY` ones behind their level. Requests
    /// whose caller went away are dropped from the front of each queue (the rest when `take` meets them).
    /// Costs no scan unless a timeout is due.
    pub(super) fn expire(&mut self, now: Instant, rejected: &mut Vec<Queued<I, O, E>>) {
        let mut removed = 0;
        for level in &mut self.levels {
            while level.ready.front().is_some_and(|q| q.tx.is_closed()) {
                level.ready.pop_front();
                removed += 1;
            }
            while level.delayed.front().is_some_and(|q| q.tx.is_closed()) {
                level.delayed.pop_front();
                removed += 1;
            }
        }
        self.len -= removed;
        if self.min_deadline.is_none_or(|d| d > now) {
            return;
        }
        let mut removed = 0;
        for level in &mut self.levels {
            let mut keep = VecDeque::with_capacity(level.ready.len());
            for q in level.ready.drain(..) {
                match q.deadline {
                    Some(d) if d <= now => match q.action {
                        TimeoutAction::Reject => {
                            removed += 1;
                            rejected.push(q);
                        }
                        TimeoutAction::Delay => level.delayed.push_back(Queued { deadline: None, ..q }),
                    },
                    _ => keep.push_back(q),
                }
            }
            level.ready = keep;
        }
        self.len -= removed;
        self.recompute_deadline();
    }

    /// Removes the first `n` requests in batch order; those whose caller went away are dropped (so the
    /// batch may be smaller, or empty).
    pub(super) fn take(&mut self, n: usize) -> Vec<Queued<I, O, E>> {
        let mut out = Vec::with_capacity(n);
        let mut taken = 0;
        for level in &mut self.levels {
            while taken < n {
                match level.ready.pop_front().or_else(|| level.delayed.pop_front()) {
                    Some(q) => {
                        taken += 1;
                        if !q.tx.is_closed() {
                            out.push(q);
                        }
                    }
                    None => break,
                }
            }
        }
        self.len -= taken;
        if self.min_deadline.is_some() {
            self.recompute_deadline();
        }
        out
    }
}

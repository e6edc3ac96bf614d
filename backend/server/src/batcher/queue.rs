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
        self.levels
            .iter()
            .flat_map(|l| l.ready.iter())
            .filter_map(|q| q.deadline)
            .min()
    }

    /// Moves timed-out requests: `REJECT` ones into `rejected`, `DELAY` ones behind their level. Requests
    /// whose caller went away are dropped.
    pub(super) fn expire(&mut self, now: Instant, rejected: &mut Vec<Queued<I, O, E>>) {
        let stale = |q: &Queued<I, O, E>| q.tx.is_closed() || q.deadline.is_some_and(|d| d <= now);
        if !self
            .levels
            .iter()
            .any(|l| l.ready.iter().any(stale) || l.delayed.iter().any(|q| q.tx.is_closed()))
        {
            return;
        }
        let mut removed = 0;
        for level in &mut self.levels {
            let before = level.ready.len() + level.delayed.len();
            level.delayed.retain(|q| !q.tx.is_closed());
            let mut keep = VecDeque::with_capacity(level.ready.len());
            for q in level.ready.drain(..) {
                if q.tx.is_closed() {
                    continue;
                }
                match q.deadline {
                    Some(d) if d <= now => match q.action {
                        TimeoutAction::Reject => rejected.push(q),
                        TimeoutAction::Delay => level.delayed.push_back(Queued { deadline: None, ..q }),
                    },
                    _ => keep.push_back(q),
                }
            }
            level.ready = keep;
            removed += before - (level.ready.len() + level.delayed.len());
        }
        self.len -= removed;
    }

    /// Removes the first `n` requests in batch order.
    pub(super) fn take(&mut self, n: usize) -> Vec<Queued<I, O, E>> {
        let mut out = Vec::with_capacity(n);
        for level in &mut self.levels {
            while out.len() < n {
                match level.ready.pop_front().or_else(|| level.delayed.pop_front()) {
                    Some(q) => out.push(q),
                    None => break,
                }
            }
        }
        self.len -= out.len();
        out
    }
}

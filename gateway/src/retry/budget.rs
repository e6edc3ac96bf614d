//! The retry budget: retries may not exceed `ratio × requests + min_per_sec × ttl` over the last
//! `ttl`, so that retries cannot multiply an outage (Finagle/Linkerd's design). Lock-free
//! time-bucketed counters on tokio's clock (testable with a paused clock).

use std::time::Duration;

use tokio::time::Instant;

use crate::canary::WindowStats;

/// Budget settings of a route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSpec {
    /// Retries allowed per request over the window (0.2 = one retry per five requests).
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic (so a quiet route can still retry).
    pub min_per_sec: u32,
    /// Window over which requests and retries are counted.
    pub ttl: Duration,
}

impl Default for BudgetSpec {
    fn default() -> Self {
        Self {
            ratio: 0.2,
            min_per_sec: 10,
            ttl: Duration::from_secs(10),
        }
    }
}

/// One route's retry budget.
#[derive(Debug)]
pub struct RetryBudget {
    spec: BudgetSpec,
    requests: WindowStats,
    retries: WindowStats,
    epoch: Instant,
}

impl RetryBudget {
    /// A fresh budget.
    pub fn new(spec: BudgetSpec) -> Self {
        let ttl = spec.ttl.max(Duration::from_millis(10));
        Self {
            spec,
            requests: WindowStats::new(ttl, 10, false),
            retries: WindowStats::new(ttl, 10, false),
            epoch: Instant::now(),
        }
    }

    /// Counts one request (call once per request, not per try).
    pub fn deposit(&self, now: Instant) {
        self.requests.add(self.ns(now), 1);
    }

    /// Takes one retry from the budget; `false` when it is exhausted.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let ns = self.ns(now);
        let allowed = self.spec.ratio.max(0.0) * self.requests.requests(ns) as f64
            + f64::from(self.spec.min_per_sec) * self.spec.ttl.as_secs_f64();
        if (self.retries.requests(ns) + 1) as f64 <= allowed {
            self.retries.add(ns, 1);
            true
        } else {
            false
        }
    }

    /// The settings.
    pub fn spec(&self) -> BudgetSpec {
        self.spec
    }

    fn ns(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn floor_then_ratio_then_refill() {
        let b = RetryBudget::new(BudgetSpec {
            ratio: 0.5,
            min_per_sec: 1,
            ttl: Duration::from_secs(2),
        });
        let now = Instant::now();
        // Floor: 1/s × 2 s = 2 retries with no traffic.
        assert!(b.try_withdraw(now) && b.try_withdraw(now));
        assert!(!b.try_withdraw(now));
        for _ in 0..4 {
            b.deposit(now);
        }
        // 0.5 × 4 requests = 2 more.
        assert!(b.try_withdraw(now) && b.try_withdraw(now));
        assert!(!b.try_withdraw(now));
        // After the window everything is forgotten: the floor is back.
        let later = now + Duration::from_secs(3);
        assert!(b.try_withdraw(later));
    }
}

//! Lock-free sliding-window statistics: time-bucketed counters and a small log-linear latency
//! histogram. Approximate under contention (a slot being recycled may lose a few concurrent
//! increments), which is fine for rates and percentiles over thousands of requests.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Latency histogram buckets: 4 linear sub-buckets per power of two of microseconds, from 1 µs to
/// about 2^34 µs (4.7 hours); relative error under 25 %, enough to compare two p99s.
const SUB: u32 = 4;
const BUCKETS: usize = 4 + 33 * SUB as usize;

/// Histogram bucket of a latency in microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us < u64::from(SUB) {
        return us as usize;
    }
    let e = 63 - us.leading_zeros(); // floor(log2), >= 2
    let sub = (us >> (e - 2)) & u64::from(SUB - 1);
    (4 + (e - 2) * SUB + sub as u32).min(BUCKETS as u32 - 1) as usize
}

/// The largest latency (µs) that falls in bucket `b` (inclusive upper bound).
pub fn bucket_upper_us(b: usize) -> u64 {
    if b < SUB as usize {
        return b as u64;
    }
    let e = (b as u32 - 4) / SUB + 2;
    let sub = u64::from((b as u32 - 4) % SUB);
    ((SUB as u64 + sub + 1) << (e - 2)) - 1
}

struct Slot {
    epoch: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    hist: Box<[AtomicU32]>,
}

/// Requests, errors and latencies over the last `window`, kept in `slots` time buckets.
pub struct WindowStats {
    slot_ns: u64,
    slots: Box<[Slot]>,
    with_hist: bool,
}

/// A snapshot of one [`WindowStats`].
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct WindowSummary {
    /// Requests in the window.
    pub requests: u64,
    /// Of which failed.
    pub errors: u64,
    /// `errors / requests` (0 when there are no requests).
    pub error_rate: f64,
    /// 99th-percentile latency in milliseconds (bucket upper bound; 0 without requests).
    pub p99_ms: f64,
}

impl std::fmt::Debug for WindowStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowStats")
            .field("slot_ns", &self.slot_ns)
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl WindowStats {
    /// Counters over `window` split into `slots` buckets (at least 2). `with_hist` adds the
    /// latency histogram (about 0.5 KiB per slot).
    pub fn new(window: Duration, slots: usize, with_hist: bool) -> Self {
        let slots = slots.max(2);
        let slot_ns = (u64::try_from(window.as_nanos()).unwrap_or(u64::MAX) / slots as u64).max(1);
        let hist_len = if with_hist { BUCKETS } else { 0 };
        let slots = (0..slots)
            .map(|_| Slot {
                epoch: AtomicU64::new(u64::MAX),
                requests: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                hist: (0..hist_len).map(|_| AtomicU32::new(0)).collect(),
            })
            .collect();
        Self {
            slot_ns,
            slots,
            with_hist,
        }
    }

    /// The width of one slot.
    pub fn slot_width(&self) -> Duration {
        Duration::from_nanos(self.slot_ns)
    }

    fn slot(&self, now_ns: u64) -> &Slot {
        let epoch = now_ns / self.slot_ns;
        let slot = &self.slots[(epoch % self.slots.len() as u64) as usize];
        let seen = slot.epoch.load(Ordering::Acquire);
        if seen != epoch
            && slot
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            slot.requests.store(0, Ordering::Relaxed);
            slot.errors.store(0, Ordering::Relaxed);
            for h in slot.hist.iter() {
                h.store(0, Ordering::Relaxed);
            }
        }
        slot
    }

    /// Adds `n` to the request count (no error, no latency): the retry budget's deposits.
    pub fn add(&self, now_ns: u64, n: u64) {
        self.slot(now_ns).requests.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one finished request.
    pub fn record(&self, now_ns: u64, error: bool, latency: Duration) {
        let slot = self.slot(now_ns);
        slot.requests.fetch_add(1, Ordering::Relaxed);
        if error {
            slot.errors.fetch_add(1, Ordering::Relaxed);
        }
        if self.with_hist {
            let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            slot.hist[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Request count over the window ending at `now_ns`.
    pub fn requests(&self, now_ns: u64) -> u64 {
        self.live(now_ns)
            .map(|s| s.requests.load(Ordering::Relaxed))
            .sum()
    }

    fn live(&self, now_ns: u64) -> impl Iterator<Item = &Slot> {
        let cur = now_ns / self.slot_ns;
        let n = self.slots.len() as u64;
        self.slots.iter().filter(move |s| {
            let e = s.epoch.load(Ordering::Acquire);
            e <= cur && cur - e < n
        })
    }

    /// Requests, errors, error rate and p99 over the window ending at `now_ns`.
    pub fn summary(&self, now_ns: u64) -> WindowSummary {
        let mut requests = 0;
        let mut errors = 0;
        let mut hist = vec![0u64; if self.with_hist { BUCKETS } else { 0 }];
        for s in self.live(now_ns) {
            requests += s.requests.load(Ordering::Relaxed);
            errors += s.errors.load(Ordering::Relaxed);
            for (acc, h) in hist.iter_mut().zip(s.hist.iter()) {
                *acc += u64::from(h.load(Ordering::Relaxed));
            }
        }
        let total: u64 = hist.iter().sum();
        let mut p99_ms = 0.0;
        if total > 0 {
            let rank = total - total / 100; // the smallest count covering 99 %
            let mut seen = 0;
            for (b, c) in hist.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    p99_ms = bucket_upper_us(b) as f64 / 1000.0;
                    break;
                }
            }
        }
        let error_rate = if requests == 0 {
            0.0
        } else {
            errors as f64 / requests as f64
        };
        WindowSummary {
            requests,
            errors,
            error_rate,
            p99_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bound_their_values() {
        let mut last = 0;
        for us in [0u64, 1, 3, 4, 5, 7, 8, 100, 1000, 12_345, 1 << 30] {
            let b = bucket_of(us);
            assert!(b >= last);
            assert!(
                bucket_upper_us(b) >= us,
                "{us} in bucket {b} with upper {}",
                bucket_upper_us(b)
            );
            assert!(bucket_upper_us(b) as f64 <= (us as f64) * 1.25 + 1.0);
            last = b;
        }
    }

    #[test]
    fn window_forgets_old_slots() {
        let w = WindowStats::new(Duration::from_secs(10), 10, true);
        let s = 1_000_000_000u64;
        for i in 0..100 {
            w.record(
                s,
                i % 10 == 0,
                Duration::from_millis(if i == 99 { 500 } else { 10 }),
            );
        }
        let sum = w.summary(s);
        assert_eq!((sum.requests, sum.errors), (100, 10));
        assert!((sum.p99_ms - 10.0).abs() < 2.5, "p99 {}", sum.p99_ms);
        assert_eq!(w.summary(s + 9 * s).requests, 100);
        assert_eq!(w.summary(s + 10 * s).requests, 0);
    }
}

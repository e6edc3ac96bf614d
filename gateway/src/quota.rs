//! Per-caller, per-route quotas: token buckets with bounded memory.
//!
//! Each (route, caller) pair has a bucket of `burst` tokens refilled at `rate`. Buckets are stored
//! as GCRA "theoretical arrival times" (one `u64` each) in a sharded map ([`QuotaStore`]) that lives
//! across config reloads. Properties:
//!
//! - **Lossless idle eviction.** A bucket whose arrival time has passed is full, i.e. identical to
//!   a fresh one, so dropping it loses nothing. Shards drop idle buckets when they fill up and on
//!   [`QuotaStore::sweep`] (run it periodically, e.g. with [`QuotaStore::spawn_sweeper`]).
//! - **Bounded memory.** Each shard holds at most `capacity / shards` buckets. When it is full of
//!   *active* buckets (millions of distinct callers within one refill period) it evicts arbitrary
//!   buckets, which then restart full: memory stays bounded at the price of leniency toward the
//!   evicted callers. Evictions are counted (`infergate_gateway_quota_evictions_total`).
//! - **Hot reload.** A bucket remembers a fingerprint of the quota it was charged under. When a
//!   reload changes that caller's quota (rate, burst or override), its bucket restarts under the new
//!   quota on its next request; buckets whose quota did not change keep their state.
//! - **Keyed hashing.** Callers are keyed by a SipHash with per-process random keys, so a client
//!   cannot pick names that collide with another caller's bucket.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::caller::Caller;
use crate::metrics as m;
use crate::route_key::RouteKey;

/// A token-bucket quota: `tokens` per `per`, bursting up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuotaSpec {
    /// Tokens added per `per` (> 0).
    pub tokens: u32,
    /// The refill period for `tokens` (> 0).
    pub per: Duration,
    /// Bucket size: the most requests allowed at once (≥ 1).
    pub burst: u32,
}

impl QuotaSpec {
    /// A quota of `tokens` per `per` with bucket size `burst`; zeros are raised to the smallest
    /// meaningful value (1 token, 1 ns, burst 1) — validation in `infergate-config` rejects them.
    pub fn new(tokens: u32, per: Duration, burst: u32) -> Self {
        Self {
            tokens: tokens.max(1),
            per: per.max(Duration::from_nanos(1)),
            burst: burst.max(1),
        }
    }

    /// Nanoseconds between tokens.
    fn interval_ns(&self) -> u64 {
        let per = u64::try_from(self.per.as_nanos()).unwrap_or(u64::MAX);
        (per / u64::from(self.tokens.max(1))).max(1)
    }

    fn fingerprint(&self) -> u32 {
        let mut h = crate::stable_hash::StableHasher::default();
        h.write_u32(self.tokens);
        h.write_u64(u64::try_from(self.per.as_nanos()).unwrap_or(u64::MAX));
        h.write_u32(self.burst);
        h.finish() as u32
    }
}

/// The caller name under which requests without an identity share one bucket.
pub const ANONYMOUS: &str = "anonymous";

/// A route's quota: the default for callers without an override, and the overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteQuota {
    /// The route whose buckets these are.
    pub route: RouteKey,
    /// Quota for callers without an override (`None`: they are not limited).
    pub default: Option<QuotaSpec>,
    /// Overrides by caller name (header value or mTLS identity; `anonymous` for requests with no
    /// identity). `None`: unlimited.
    pub by_name: HashMap<Box<str>, Option<QuotaSpec>>,
    /// Overrides by peer IP address. `None`: unlimited.
    pub by_ip: HashMap<IpAddr, Option<QuotaSpec>>,
}

impl RouteQuota {
    /// A quota with only a default.
    pub fn new(route: RouteKey, default: Option<QuotaSpec>) -> Self {
        Self {
            route,
            default,
            by_name: HashMap::new(),
            by_ip: HashMap::new(),
        }
    }

    /// Adds an override for a caller name, or for an IP address when `caller` parses as one
    /// (`None`: the caller is unlimited).
    pub fn with_override(mut self, caller: &str, spec: Option<QuotaSpec>) -> Self {
        match caller.parse::<IpAddr>() {
            Ok(ip) => self.by_ip.insert(ip, spec),
            Err(_) => self.by_name.insert(caller.into(), spec),
        };
        self
    }

    /// The quota that applies to `caller` (`None`: unlimited).
    pub fn spec_for(&self, caller: &Caller<'_>) -> Option<&QuotaSpec> {
        let over = match caller {
            Caller::Header(n) | Caller::Identity(n) => self.by_name.get(*n),
            Caller::Peer(ip) => self.by_ip.get(ip),
            Caller::Anonymous => self.by_name.get(ANONYMOUS),
        };
        match over {
            Some(o) => o.as_ref(),
            None => self.default.as_ref(),
        }
    }
}

/// The outcome of charging one request to a bucket; carries what the `RateLimit-*`, `Retry-After`
/// headers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaDecision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The bucket size (`RateLimit-Limit`).
    pub limit: u32,
    /// Tokens left after this request (`RateLimit-Remaining`).
    pub remaining: u32,
    /// Time until the bucket is full again (`RateLimit-Reset`, in whole seconds rounded up).
    pub reset: Duration,
    /// When refused: time until one token is available (`Retry-After`); zero when allowed.
    pub retry_after: Duration,
}

impl QuotaDecision {
    /// `Retry-After` in whole seconds, rounded up, at least 1 when refused.
    pub fn retry_after_secs(&self) -> u64 {
        if self.allowed {
            0
        } else {
            ceil_secs(self.retry_after).max(1)
        }
    }

    /// `RateLimit-Reset` in whole seconds, rounded up.
    pub fn reset_secs(&self) -> u64 {
        ceil_secs(self.reset)
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Default bucket capacity of a [`QuotaStore`]: 262,144 (route, caller) pairs, about 10 MB.
pub const DEFAULT_CAPACITY: usize = 1 << 18;
const SHARDS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Theoretical arrival time, ns since the store's epoch.
    tat: u64,
    fingerprint: u32,
}

#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u128(&mut self, v: u128) {
        // Keys are already uniform (SipHash output mixed with the route key).
        self.0 = (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
    }
}

type Shard = HashMap<u128, Bucket, BuildHasherDefault<IdHasher>>;

/// Long-lived token-bucket storage for every route's quotas. One per gateway process; keep it
/// across config reloads. `Send + Sync`; share it behind an `Arc`.
pub struct QuotaStore {
    shards: Box<[Mutex<Shard>]>,
    cap_per_shard: AtomicUsize,
    hasher: RandomState,
    epoch: Instant,
    evicted_idle: AtomicU64,
    evicted_active: AtomicU64,
}

impl std::fmt::Debug for QuotaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaStore")
            .field("buckets", &self.len())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl Default for QuotaStore {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl QuotaStore {
    /// A store holding at most about `capacity` buckets (rounded up to a multiple of the shard
    /// count).
    pub fn with_capacity(capacity: usize) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Self {
            shards,
            cap_per_shard: AtomicUsize::new(per_shard(capacity)),
            hasher: RandomState::new(),
            epoch: Instant::now(),
            evicted_idle: AtomicU64::new(0),
            evicted_active: AtomicU64::new(0),
        }
    }

    /// Charges one request of `caller` on `quota`'s route at `now`. `None` when the caller is not
    /// limited on this route.
    pub fn check(&self, quota: &RouteQuota, caller: &Caller<'_>, now: Instant) -> Option<QuotaDecision> {
        let spec = quota.spec_for(caller)?;
        Some(self.check_spec(quota.route, caller.keyed_hash(&self.hasher), spec, now))
    }

    /// Charges one request to the bucket of (`route`, `caller_hash`) under `spec`. `caller_hash`
    /// should come from [`Caller::keyed_hash`] with this store's hasher; [`QuotaStore::check`] does it.
    pub fn check_spec(
        &self,
        route: RouteKey,
        caller_hash: u64,
        spec: &QuotaSpec,
        now: Instant,
    ) -> QuotaDecision {
        let now_ns = self.ns(now);
        let key = (u128::from(route.0) << 64) | u128::from(caller_hash);
        let shard_ix = (caller_hash ^ route.0.rotate_left(17)) as usize % self.shards.len();
        let t = spec.interval_ns();
        let tau = t.saturating_mul(u64::from(spec.burst));
        let fp = spec.fingerprint();
        let mut shard = match self.shards[shard_ix].lock() {
            Ok(g) => g,
            // A panic while holding a shard lock cannot leave a bucket half-written (plain stores);
            // keep serving with the data as it is.
            Err(poisoned) => poisoned.into_inner(),
        };
        let prev = match shard.get(&key) {
            Some(b) if b.fingerprint == fp => b.tat,
            _ => now_ns,
        };
        let tat = prev.max(now_ns);
        let new_tat = tat.saturating_add(t);
        let decision = if new_tat - now_ns > tau {
            QuotaDecision {
                allowed: false,
                limit: spec.burst,
                remaining: 0,
                reset: Duration::from_nanos(tat - now_ns),
                retry_after: Duration::from_nanos(new_tat - tau - now_ns),
            }
        } else {
            let cap = self.cap_per_shard.load(Ordering::Relaxed);
            if shard.len() >= cap && !shard.contains_key(&key) {
                self.make_room(&mut shard, now_ns, cap);
            }
            shard.insert(
                key,
                Bucket {
                    tat: new_tat,
                    fingerprint: fp,
                },
            );
            QuotaDecision {
                allowed: true,
                limit: spec.burst,
                remaining: ((tau - (new_tat - now_ns)) / t) as u32,
                reset: Duration::from_nanos(new_tat - now_ns),
                retry_after: Duration::ZERO,
            }
        };
        drop(shard);
        decision
    }

    /// Drops idle buckets; when that frees less than an eighth of the shard, drops arbitrary
    /// active buckets too (they restart full). Amortised: runs once per `cap/8` insertions at most.
    fn make_room(&self, shard: &mut Shard, now_ns: u64, cap: usize) {
        let before = shard.len();
        shard.retain(|_, b| b.tat > now_ns);
        let idle = before - shard.len();
        let target = cap - cap / 8;
        let mut active = 0usize;
        if shard.len() > target {
            let mut excess = shard.len() - target;
            shard.retain(|_, _| {
                if excess > 0 {
                    excess -= 1;
                    active += 1;
                    false
                } else {
                    true
                }
            });
        }
        self.count_evictions(idle, active);
    }

    fn count_evictions(&self, idle: usize, active: usize) {
        if idle > 0 {
            self.evicted_idle.fetch_add(idle as u64, Ordering::Relaxed);
            metrics::counter!(m::QUOTA_EVICTIONS, "kind" => "idle").increment(idle as u64);
        }
        if active > 0 {
            self.evicted_active.fetch_add(active as u64, Ordering::Relaxed);
            metrics::counter!(m::QUOTA_EVICTIONS, "kind" => "active").increment(active as u64);
        }
    }

    /// Drops every idle (full) bucket; returns how many. Lossless: an idle bucket equals a new one.
    pub fn sweep(&self, now: Instant) -> usize {
        let now_ns = self.ns(now);
        let mut total = 0;
        for shard in self.shards.iter() {
            let mut s = match shard.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            let before = s.len();
            s.retain(|_, b| b.tat > now_ns);
            total += before - s.len();
        }
        self.count_evictions(total, 0);
        total
    }

    /// Runs [`QuotaStore::sweep`] every `every` on the current tokio runtime until the store is
    /// dropped elsewhere (the task holds only a weak reference).
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { break };
                store.sweep(Instant::now());
            }
        })
    }

    /// Buckets currently held.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or_else(|p| p.into_inner().len(), |g| g.len()))
            .sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most buckets this store holds.
    pub fn capacity(&self) -> usize {
        self.cap_per_shard.load(Ordering::Relaxed) * self.shards.len()
    }

    /// Changes the capacity (a reload changed `callers.quota_buckets`). Buckets are kept; when the store
    /// shrinks, shards over the new limit drop idle buckets, then active ones, at once.
    pub fn set_capacity(&self, capacity: usize, now: Instant) {
        let cap = per_shard(capacity);
        if self.cap_per_shard.swap(cap, Ordering::Relaxed) <= cap {
            return;
        }
        let now_ns = self.ns(now);
        for shard in self.shards.iter() {
            let mut s = match shard.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if s.len() > cap {
                self.make_room(&mut s, now_ns, cap);
            }
        }
    }

    /// Buckets evicted so far: `(idle, active)`.
    pub fn evictions(&self) -> (u64, u64) {
        (
            self.evicted_idle.load(Ordering::Relaxed),
            self.evicted_active.load(Ordering::Relaxed),
        )
    }

    fn ns(&self, now: Instant) -> u64 {
        // Saturates (not panics) for instants before the epoch.
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Buckets per shard for a store of `capacity` buckets (at least 8).
fn per_shard(capacity: usize) -> usize {
    capacity.div_ceil(SHARDS).max(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_refills_at_rate() {
        let store = QuotaStore::default();
        let q = RouteQuota::new(RouteKey(1), Some(QuotaSpec::new(10, Duration::from_secs(1), 3)));
        let c = Caller::Header("a");
        let t0 = Instant::now();
        let ds: Vec<_> = (0..4).map(|_| store.check(&q, &c, t0).unwrap()).collect();
        assert_eq!(
            ds.iter().map(|d| (d.allowed, d.remaining)).collect::<Vec<_>>(),
            [(true, 2), (true, 1), (true, 0), (false, 0)]
        );
        assert_eq!(ds[3].retry_after, Duration::from_millis(100));
        assert_eq!(ds[3].retry_after_secs(), 1);
        assert_eq!(ds[2].reset, Duration::from_millis(300));
        // 100 ms later exactly one token is back.
        let t1 = t0 + Duration::from_millis(100);
        assert!(store.check(&q, &c, t1).unwrap().allowed);
        assert!(!store.check(&q, &c, t1).unwrap().allowed);
    }

    #[test]
    fn overrides_and_unlimited_callers() {
        let q = RouteQuota::new(RouteKey(1), None)
            .with_override("gold", Some(QuotaSpec::new(1, Duration::from_secs(1), 1)))
            .with_override("10.1.2.3", Some(QuotaSpec::new(1, Duration::from_secs(1), 2)))
            .with_override("vip", None);
        assert_eq!(q.spec_for(&Caller::Header("vip")), None);
        assert_eq!(q.spec_for(&Caller::Header("nobody")), None);
        assert_eq!(q.spec_for(&Caller::Identity("gold")).unwrap().burst, 1);
        assert_eq!(
            q.spec_for(&Caller::Peer("10.1.2.3".parse().unwrap()))
                .unwrap()
                .burst,
            2
        );
    }

    #[test]
    fn a_smaller_capacity_trims_the_store_at_once() {
        // 5,000 callers over 64 shards: about 78 a shard, but the busiest shard of a random spread goes
        // past 100 about one run in three. 200 a shard leaves room for any spread.
        let store = QuotaStore::with_capacity(64 * 200);
        let q = RouteQuota::new(RouteKey(1), Some(QuotaSpec::new(1, Duration::from_secs(60), 5)));
        let t0 = Instant::now();
        let names: Vec<String> = (0..5000).map(|i| format!("caller-{i}")).collect();
        for n in &names {
            assert!(store.check(&q, &Caller::Header(n), t0).unwrap().allowed);
        }
        assert_eq!(store.len(), 5000, "every active bucket fits");
        store.set_capacity(64 * 20, t0);
        assert_eq!(store.capacity(), 64 * 20);
        assert!(store.len() <= 64 * 20, "{} buckets after shrinking", store.len());
        assert!(store.evictions().1 > 0, "active buckets were dropped and counted");
        store.set_capacity(64 * 400, t0);
        assert_eq!(store.capacity(), 64 * 400);
    }
}

//! Quotas: a noisy caller is throttled while a quiet one is untouched, refill on tokio's paused
//! clock, bounded memory with eviction, and hot reload keeping or resetting buckets.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

use std::path::Path;
use std::time::Duration;

use infergate_gateway::caller::Caller;
use infergate_gateway::quota::{QuotaSpec, QuotaStore, RouteQuota};
use infergate_gateway::route::CompiledRoutes;
use infergate_gateway::route_key::RouteKey;
use tokio::time::Instant;

fn per_sec(tokens: u32, burst: u32) -> QuotaSpec {
    QuotaSpec::new(tokens, Duration::from_secs(1), burst)
}

#[tokio::test(start_paused = true)]
async fn noisy_caller_is_throttled_quiet_caller_untouched() {
    let store = QuotaStore::default();
    let q = RouteQuota::new(RouteKey::of("r"), Some(per_sec(10, 10)));
    let (noisy, quiet) = (Caller::Header("noisy"), Caller::Header("quiet"));
    let mut allowed = 0;
    let mut quiet_ok = 0;
    // 5 simulated seconds: the noisy caller sends 1000 req/s, the quiet one 5 req/s.
    for ms in 0..5000u64 {
        let now = Instant::now();
        if store.check(&q, &noisy, now).unwrap().allowed {
            allowed += 1;
        }
        if ms % 200 == 0 {
            let d = store.check(&q, &quiet, now).unwrap();
            assert!(d.allowed, "quiet caller refused at {ms} ms: {d:?}");
            quiet_ok += 1;
        }
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    // burst 10 + 10/s for 5 s (give or take the boundary token).
    assert!((59..=61).contains(&allowed), "noisy caller got {allowed}");
    assert_eq!(quiet_ok, 25);
    // (5 s is a refill boundary: one token may be back; the request after it is refused.)
    store.check(&q, &noisy, Instant::now());
    let refused = store.check(&q, &noisy, Instant::now()).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    assert_eq!(refused.limit, 10);
    assert!(refused.retry_after > Duration::ZERO && refused.retry_after <= Duration::from_millis(100));
    assert_eq!(refused.retry_after_secs(), 1);
}

#[tokio::test(start_paused = true)]
async fn memory_is_bounded_and_idle_buckets_go_first() {
    let store = QuotaStore::with_capacity(10_000);
    let q = RouteQuota::new(RouteKey::of("r"), Some(per_sec(1, 5)));
    let names: Vec<String> = (0..200_000).map(|i| format!("caller-{i}")).collect();
    for n in &names {
        store.check(&q, &Caller::Header(n), Instant::now());
    }
    assert!(
        store.len() <= store.capacity(),
        "{} buckets for capacity {}",
        store.len(),
        store.capacity()
    );
    let (_, active) = store.evictions();
    assert!(active > 0, "a full store of active buckets must evict");

    // After the buckets refill (5 s), every one of them is idle and a sweep empties the store.
    tokio::time::advance(Duration::from_secs(6)).await;
    let swept = store.sweep(Instant::now());
    assert!(swept > 0);
    assert_eq!(store.len(), 0);

    // When a shard fills up, idle buckets make room and active ones keep their state.
    let hot = Caller::Header("hot");
    for _ in 0..5 {
        assert!(store.check(&q, &hot, Instant::now()).unwrap().allowed);
    }
    tokio::time::advance(Duration::from_millis(10)).await;
    for n in names.iter().take(6_000) {
        store.check(&q, &Caller::Header(n), Instant::now());
    }
    tokio::time::advance(Duration::from_secs(2)).await; // those 6,000 are idle now; "hot" is not
    let (idle_before, _) = store.evictions();
    for n in names.iter().skip(100_000).take(6_000) {
        store.check(&q, &Caller::Header(n), Instant::now());
    }
    assert!(
        store.evictions().0 > idle_before,
        "full shards must drop idle buckets"
    );
    // Two tokens refilled since the burst: a fresh bucket would have 4 left after this request.
    let d = store.check(&q, &hot, Instant::now()).unwrap();
    assert!(
        d.allowed && d.remaining <= 1,
        "the hot caller's bucket was lost: {d:?}"
    );
}

fn rules(rate: &str, gold_rate: &str) -> String {
    format!(
        "\
upstreams:
  - name: up
    endpoints: [\"127.0.0.1:9\"]
callers:
  identify_by: {{ header: x-caller-id }}
  default_quota: {{ rate: {rate}, burst: 2 }}
  overrides:
    - {{ caller: gold, quota: {{ rate: {gold_rate}, burst: 4 }} }}
    - {{ caller: admin, unlimited: true }}
routes:
  - name: r
    destinations: [{{ upstream: up }}]
"
    )
}

#[tokio::test(start_paused = true)]
async fn hot_reload_keeps_unchanged_buckets_and_resets_changed_ones() {
    let quotas = QuotaStore::default();
    let parse = |t: &str| {
        infergate_config::parse_gateway_config(t, Path::new("routes.yaml"))
            .unwrap()
            .rules
    };
    let v1 = CompiledRoutes::compile(&parse(&rules("1/s", "1/s")), None).unwrap();
    let q1 = v1.get("r").unwrap().quota.clone().unwrap();
    let now = Instant::now();
    let (plain, gold, admin) = (
        Caller::Header("plain"),
        Caller::Header("gold"),
        Caller::Header("admin"),
    );
    assert!(quotas.check(&q1, &plain, now).unwrap().allowed);
    assert!(quotas.check(&q1, &plain, now).unwrap().allowed);
    assert!(!quotas.check(&q1, &plain, now).unwrap().allowed);
    for _ in 0..4 {
        assert!(quotas.check(&q1, &gold, now).unwrap().allowed);
    }
    assert!(!quotas.check(&q1, &gold, now).unwrap().allowed);
    assert!(quotas.check(&q1, &admin, now).is_none(), "admin is unlimited");

    // Reload: only gold's quota changes. The default bucket keeps its state (still empty);
    // gold's bucket restarts under the new quota.
    let v2 = CompiledRoutes::compile(&parse(&rules("1/s", "100/s")), Some(&v1)).unwrap();
    let q2 = v2.get("r").unwrap().quota.clone().unwrap();
    assert!(
        !quotas.check(&q2, &plain, now).unwrap().allowed,
        "reload must not refill unchanged buckets"
    );
    let g = quotas.check(&q2, &gold, now).unwrap();
    assert!(g.allowed && g.remaining == 3, "{g:?}");
}

#[tokio::test(start_paused = true)]
async fn quota_buckets_sizes_the_store_and_a_reload_resizes_it() {
    let quotas = QuotaStore::default();
    // What the gateway does when it swaps a version in.
    let adopt = |v: &CompiledRoutes| quotas.set_capacity(v.quota_buckets(), Instant::now());
    let parse = |t: &str| {
        infergate_config::parse_gateway_config(t, Path::new("routes.yaml"))
            .unwrap()
            .rules
    };
    let with_buckets =
        |n: u32| rules("1/min", "1/min").replace("callers:\n", &format!("callers:\n  quota_buckets: {n}\n"));
    let v1 = CompiledRoutes::compile(&parse(&rules("1/min", "1/min")), None).unwrap();
    adopt(&v1);
    assert_eq!(quotas.capacity(), 1 << 18, "the default capacity");
    let v = CompiledRoutes::compile(&parse(&with_buckets(6400)), Some(&v1)).unwrap();
    assert_eq!(quotas.capacity(), 1 << 18, "compiling alone changes nothing");
    adopt(&v);
    assert_eq!(quotas.capacity(), 6400);
    // 20,000 active callers in a 6,400-bucket store: memory stays bounded.
    let q = v.get("r").unwrap().quota.clone().unwrap();
    let names: Vec<String> = (0..20_000).map(|i| format!("c{i}")).collect();
    for n in &names {
        quotas.check(&q, &Caller::Header(n), Instant::now());
    }
    assert!(quotas.len() <= 6400, "{} buckets", quotas.len());
    // Shrinking on reload trims at once.
    adopt(&CompiledRoutes::compile(&parse(&with_buckets(640)), Some(&v)).unwrap());
    assert!(quotas.len() <= 640, "{} buckets", quotas.len());
}

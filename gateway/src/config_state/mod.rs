//! The running rules: one immutable [`Rules`] value per config version, swapped atomically (arc-swap), and
//! the long-lived state that outlives versions (upstream connections and outlier state, quota buckets, retry
//! budgets, canary windows, mirror limiters).

mod compile;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use infergate_config::RoutingRules;
use serde::Serialize;
use tokio::time::Instant;

use crate::quota::QuotaStore;
use crate::route::CompiledRoutes;
use crate::route::PolicyStores;
use crate::upstream::Upstream;

/// One version of the routing rules, compiled. Requests hold an `Arc` to the version they started on.
pub struct Rules {
    /// Routes in match order.
    pub routes: CompiledRoutes,
    /// Upstreams by name.
    pub upstreams: HashMap<Arc<str>, Arc<Upstream>>,
    /// The rules as configured (served by `/config`).
    pub source: Arc<RoutingRules>,
    /// Content hash of the file these rules came from.
    pub hash: String,
    /// When this version was applied.
    pub loaded_at: SystemTime,
}

/// The last rejected config.
#[derive(Debug, Clone, Serialize)]
pub struct Rejection {
    /// Every problem, one per line (`file:line:column: message`).
    pub error: String,
    /// Unix time of the rejection, seconds.
    pub at_unix: u64,
    /// Content hash of the rejected file, when known.
    pub hash: Option<String>,
}

/// State shared by the listener, the pipeline and the admin API.
pub struct RuntimeState {
    rules: ArcSwap<Rules>,
    stores: PolicyStores,
    max_request_body: u64,
    /// Data workers: each upstream endpoint keeps connections per worker.
    workers: usize,
    last_rejection: Mutex<Option<Rejection>>,
    warnings: Mutex<Vec<String>>,
}

impl RuntimeState {
    /// Compiles `rules` and starts with them, for a gateway running `workers` data workers.
    pub fn new(
        rules: &RoutingRules,
        hash: String,
        max_request_body: u64,
        workers: usize,
    ) -> Result<Arc<RuntimeState>, String> {
        let stores = PolicyStores::default();
        let compiled = build(rules, hash, None, &stores, workers)?;
        let state = Arc::new(RuntimeState {
            rules: ArcSwap::from_pointee(compiled),
            stores,
            max_request_body,
            workers,
            last_rejection: Mutex::new(None),
            warnings: Mutex::new(Vec::new()),
        });
        Ok(state)
    }

    /// Starts the background sweeper that evicts idle quota buckets (needs a Tokio runtime).
    pub fn spawn_maintenance(&self) {
        self.stores.quotas.spawn_sweeper(Duration::from_secs(10));
    }

    /// The running rules (one load per request; keep the `Arc` to the end of the request).
    pub fn snapshot(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// Compiles `rules` and swaps them in. Upstreams whose settings did not change keep their connections
    /// and outlier state; per-route state of unchanged routes carries over. On error nothing changes.
    pub fn apply(&self, rules: &RoutingRules, hash: String) -> Result<(), String> {
        let current = self.rules.load_full();
        let compiled = build(rules, hash, Some(&current), &self.stores, self.workers)?;
        self.rules.store(Arc::new(compiled));
        Ok(())
    }

    /// Records a rejected config (served by `/config/errors`).
    pub fn reject(&self, error: String, hash: Option<String>) {
        let at_unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Ok(mut r) = self.last_rejection.lock() {
            *r = Some(Rejection { error, at_unix, hash });
        }
    }

    /// The last rejection, if any.
    pub fn last_rejection(&self) -> Option<Rejection> {
        self.last_rejection.lock().ok().and_then(|r| r.clone())
    }

    /// Records warnings of the last applied config (e.g. restart-only changes).
    pub fn set_warnings(&self, w: Vec<String>) {
        if let Ok(mut cur) = self.warnings.lock() {
            *cur = w;
        }
    }

    /// Warnings of the last applied config.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The quota buckets.
    pub fn quotas(&self) -> &QuotaStore {
        &self.stores.quotas
    }

    /// Canary analysis reports for the admin API.
    pub fn canary_reports(&self) -> Vec<crate::canary::CanaryReport> {
        self.stores.canaries.reports(Instant::now())
    }

    /// The listener's body limit.
    pub fn max_request_body(&self) -> u64 {
        self.max_request_body
    }
}

fn build(
    rules: &RoutingRules,
    hash: String,
    previous: Option<&Rules>,
    stores: &PolicyStores,
    workers: usize,
) -> Result<Rules, String> {
    let mut upstreams = HashMap::new();
    for u in &rules.upstreams {
        let settings = compile::upstream_settings(u, workers)?;
        let reused = previous
            .and_then(|p| p.upstreams.get(u.name.as_str()))
            .filter(|old| *old.settings() == settings)
            .cloned();
        let up = reused.unwrap_or_else(|| Upstream::new(settings));
        upstreams.insert(Arc::from(u.name.as_str()), up);
    }
    let routes = CompiledRoutes::compile(rules, stores).map_err(|e| e.to_string())?;
    for r in routes.routes() {
        for d in r.split.destinations() {
            if !upstreams.contains_key(&d.upstream) {
                return Err(format!(
                    "route '{}' sends traffic to unknown upstream '{}'",
                    r.name, d.upstream
                ));
            }
        }
        if let Some(m) = &r.mirror
            && !upstreams.contains_key(&m.upstream)
        {
            return Err(format!(
                "route '{}' mirrors to unknown upstream '{}'",
                r.name, m.upstream
            ));
        }
    }
    register_metrics(&routes, &upstreams);
    Ok(Rules {
        routes,
        upstreams,
        source: Arc::new(rules.clone()),
        hash,
        loaded_at: SystemTime::now(),
    })
}

/// Registers, at zero, the series of every route, destination and upstream of a new rules version, so
/// dashboards and alerts see them before their first request (and `increase()` sees the first event).
fn register_metrics(routes: &CompiledRoutes, upstreams: &HashMap<Arc<str>, Arc<Upstream>>) {
    for r in routes.routes() {
        let destinations: Vec<(Arc<str>, u32)> = r
            .split
            .destinations()
            .iter()
            .zip(r.split.weights())
            .map(|(d, w)| (Arc::clone(&d.name), *w))
            .collect();
        crate::metrics::register_route(&r.name, &destinations);
        for d in r.metrics.iter() {
            d.register();
        }
    }
    for u in upstreams.values() {
        u.tries().register();
    }
}

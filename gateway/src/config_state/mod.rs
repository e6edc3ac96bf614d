//! The running rules. [`Rules`] is one config version compiled; [`load`] makes it from a file's text (parse →
//! validate → compile, a pure function of the text and the running version); [`RuntimeState`] holds the
//! one [`Live`] value the data plane reads, which every reload replaces through [`Live::apply`], and the
//! per-caller quota buckets, the only state that is not part of a version.

mod load;
mod upstream_settings;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use infergate_config::{GatewayConfig, Live, Observer, ReloadOutcome, ReloadStatus, Running};
use tokio::time::Instant;

pub use load::{load, loader};

use crate::quota::QuotaStore;
use crate::route::CompiledRoutes;
use crate::upstream::Upstream;

/// One version of the routing rules, compiled. Requests hold an `Arc` to the version they started on.
pub struct Rules {
    /// Routes in match order, each with its policies and their long-lived state.
    pub routes: CompiledRoutes,
    /// Upstreams by name (an unchanged upstream keeps its connections and outlier state across versions).
    pub upstreams: HashMap<Arc<str>, Arc<Upstream>>,
    /// The config as it runs: the listeners as started (a reload never changes them) and the rules as
    /// configured (served by `/config`).
    pub config: GatewayConfig,
}

/// A snapshot of the running rules with the hash, load time and warnings of the text they came from.
pub type Snapshot = Arc<Running<Rules>>;

/// State shared by the listener, the pipeline and the admin API.
pub struct RuntimeState {
    live: Arc<Live<Rules>>,
    quotas: Arc<QuotaStore>,
    max_request_body: u64,
}

impl RuntimeState {
    /// Loads `text` (as read from `file`, which reloads re-read); `workers` overrides the config's data worker
    /// count. `observer` sees every later reload attempt, after the swap.
    pub fn start(
        file: &std::path::Path,
        text: &str,
        workers: Option<usize>,
        observer: impl Fn(&ReloadOutcome, &Running<Rules>) + Send + Sync + 'static,
    ) -> Result<Arc<RuntimeState>, infergate_config::Diagnostics> {
        let quotas = Arc::new(QuotaStore::default());
        let on_reload: Observer<Rules> = {
            let quotas = Arc::clone(&quotas);
            Box::new(move |outcome, running| {
                if let ReloadOutcome::Applied { .. } = outcome {
                    adopt(&quotas, running);
                }
                observer(outcome, running);
            })
        };
        let live = Live::start(file, text, loader(workers), Some(on_reload))?;
        let first = live.current();
        adopt(&quotas, &first);
        let max_request_body = first.config.listeners.limits.max_request_body.bytes();
        Ok(Arc::new(RuntimeState {
            live: Arc::new(live),
            quotas,
            max_request_body,
        }))
    }

    /// Starts the background sweeper that evicts idle quota buckets (needs a Tokio runtime).
    pub fn spawn_maintenance(&self) {
        self.quotas.spawn_sweeper(Duration::from_secs(10));
    }

    /// The running rules (one load per request; keep the `Arc` to the end of the request).
    pub fn snapshot(&self) -> Snapshot {
        self.live.current()
    }

    /// The live value every reload goes through (for the file watcher).
    pub fn live(&self) -> &Arc<Live<Rules>> {
        &self.live
    }

    /// Where the config stands: hash, load time, warnings, reload counts and the last rejection.
    pub fn status(&self) -> ReloadStatus {
        self.live.status()
    }

    /// The quota buckets.
    pub fn quotas(&self) -> &QuotaStore {
        &self.quotas
    }

    /// Canary analysis reports of the running rules, for the admin API.
    pub fn canary_reports(&self) -> Vec<crate::canary::CanaryReport> {
        let rules = self.snapshot();
        crate::canary::reports(
            rules.routes.routes().iter().filter_map(|r| r.canary.as_ref()),
            Instant::now(),
        )
    }

    /// The listener's body limit (restart-only).
    pub fn max_request_body(&self) -> u64 {
        self.max_request_body
    }
}

/// What a version that has just been swapped in asks of the state outside it: the bucket store's size, and
/// the metric series of its routes, destinations and upstreams (registered at zero, so dashboards and alerts
/// see them before their first request, and `increase()` sees the first event).
fn adopt(quotas: &QuotaStore, rules: &Rules) {
    quotas.set_capacity(rules.routes.quota_buckets(), Instant::now());
    for r in rules.routes.routes() {
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
    for u in rules.upstreams.values() {
        u.tries().register();
    }
}

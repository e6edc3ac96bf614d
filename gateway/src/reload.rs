//! Live reload of the routes file: [`Gateway::watch`] points `infergate-config`'s [`ConfigWatcher`] at the
//! gateway's one [`infergate_config::Live`] value. The folder is watched (in-place writes, rename-over,
//! delete and recreate, the Kubernetes ConfigMap `..data` symlink swap), SIGHUP re-reads the file, bursts of
//! events are debounced; every re-read goes through the same `Live::apply` as [`Gateway::reload_text`], so
//! the two cannot disagree on what runs. Outcomes are counted in
//! `infergate_gateway_config_reloads_total{result}` and a refusal is served on `/config/errors`.

use std::sync::Arc;

use infergate_config::{ConfigWatcher, Diagnostics, WatchOptions};

use crate::config_state::Rules;
use crate::server::Gateway;

impl Gateway {
    /// Watches the config file the gateway started from and applies every valid new version of it. Keep the
    /// returned watcher for as long as reloads should happen (dropping it stops watching). Must be called
    /// inside a Tokio runtime.
    pub fn watch(self: &Arc<Self>, options: WatchOptions) -> Result<ConfigWatcher<Rules>, Diagnostics> {
        ConfigWatcher::watch(Arc::clone(self.state().live()), options)
    }
}

//! Live reload of the routes file through `infergate-config`'s [`ConfigWatcher`]: the file's folder is
//! watched (in-place writes, rename-over, delete and recreate, the Kubernetes ConfigMap `..data` symlink
//! swap), SIGHUP re-reads it, bursts of events are debounced. Each new version is parsed, validated and
//! compiled by [`Gateway::load`] inside the watcher, so a file that cannot be compiled (a TLS file gone, …) is
//! refused like an invalid one; outcomes are counted in `infergate_gateway_config_reloads_total{result}` and
//! a refusal is served on `/config/errors`.

use std::path::Path;
use std::sync::{Arc, Weak};

use infergate_config::{
    ConfigWatcher, Diagnostic, Diagnostics, GatewayConfig, Loaded, Loader, Pos, ReloadOutcome, WatchOptions,
};
use tokio::sync::broadcast;

use crate::server::Gateway;

impl Gateway {
    /// Watches `file` and applies every valid new version of it to this gateway. Keep the returned watcher
    /// for as long as reloads should happen (dropping it stops watching). Must be called inside a Tokio
    /// runtime.
    pub async fn watch(
        self: &Arc<Self>,
        file: &Path,
        options: WatchOptions,
    ) -> Result<ConfigWatcher<GatewayConfig>, Diagnostics> {
        let watcher = ConfigWatcher::start(file, loader(Arc::downgrade(self)), options).await?;
        tokio::spawn(count_outcomes(Arc::downgrade(self), watcher.subscribe()));
        // The watcher's first read went through `load` too: if the file changed since the gateway started,
        // that read applied it, and it is a reload like any other.
        let status = watcher.status();
        if status.content_hash != self.state().snapshot().hash {
            self.record_outcome(&ReloadOutcome::Applied {
                content_hash: status.content_hash,
                warnings: status.warnings,
            });
        }
        Ok(watcher)
    }
}

/// The watcher's loader: [`Gateway::load`] on the gateway, while it exists.
fn loader(gateway: Weak<Gateway>) -> Loader<GatewayConfig> {
    Arc::new(move |text: &str, file: &Path, _running: Option<&GatewayConfig>| {
        let Some(gw) = gateway.upgrade() else {
            return Err(Diagnostics::single(Diagnostic::error(
                file,
                Pos::default(),
                "the gateway has stopped; the file was not applied",
            )));
        };
        let (value, warnings) = gw.load(text, file, content_hash(text))?;
        Ok(Loaded { value, warnings })
    })
}

/// SHA-256 (hex) of a routes file's text: the content hash `/config` shows, the same the watcher computes.
pub fn content_hash(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// Feeds reload outcomes into the gateway's metrics and `/config/errors` until the watcher stops.
async fn count_outcomes(gateway: Weak<Gateway>, mut outcomes: broadcast::Receiver<ReloadOutcome>) {
    loop {
        let outcome = match outcomes.recv().await {
            Ok(o) => o,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "config reload outcomes came faster than they were counted"
                );
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(gw) = gateway.upgrade() else { return };
        gw.record_outcome(&outcome);
    }
}

//! Versions on a lost GPU device are rebuilt when the device is back.
//!
//! A wgpu device that is lost (driver reset, GPU fallen off the bus, `Device::destroy`) never works again,
//! and every session on it fails. Such a version fails its requests at once with UNAVAILABLE and reports
//! not ready (see `LoadedVersion::device_lost`); this task tries to rebuild it with new sessions, which take
//! a new device once the adapter is back. The rebuilt version replaces the lost one in the serving set in
//! one write, as a reload would; the model's other versions and every other model are untouched. The
//! first look comes a second after a loss; while rebuilds fail the wait doubles, up to 5 seconds (a
//! rebuild that fails costs an adapter lookup).

use std::sync::Arc;
use std::time::Duration;

use super::{Repository, lock_err};
use crate::version::LoadedVersion;

/// How often the task looks for lost versions while none is waiting to be rebuilt.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// The longest wait between rebuild attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What one pass found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildPass {
    /// Lost versions rebuilt and serving again.
    pub rebuilt: usize,
    /// Lost versions whose rebuild failed (the device is not back yet).
    pub still_lost: usize,
}

/// Keeps the task alive; dropping it stops the rebuilds.
pub struct DeviceWatch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DeviceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the task that rebuilds versions whose GPU device was lost.
pub fn watch_devices(repo: Arc<Repository>) -> DeviceWatch {
    let task = tokio::spawn(async move {
        let mut wait = CHECK_EVERY;
        loop {
            tokio::time::sleep(wait).await;
            let pass = repo.rebuild_lost_versions().await;
            wait = if pass.still_lost == 0 {
                CHECK_EVERY
            } else {
                wait.saturating_mul(2).min(MAX_BACKOFF)
            };
        }
    });
    DeviceWatch { task }
}

impl Repository {
    /// Rebuilds every serving version whose GPU device was lost, each under its model's load lock (a
    /// load or unload of the same model waits, and is waited for).
    pub async fn rebuild_lost_versions(&self) -> RebuildPass {
        let mut pass = RebuildPass::default();
        for name in self.models_with_lost_versions() {
            let lock = self.model_lock(&name);
            let _serialised = lock.lock().await;
            // Looked up again under the lock: a reload may have replaced the lost versions meanwhile.
            let lost: Vec<(u64, Arc<LoadedVersion>)> = lock_err(self.models.read())
                .get(&name)
                .map(|e| {
                    e.serving
                        .iter()
                        .filter(|(_, lv)| lv.device_lost().is_some())
                        .map(|(v, lv)| (*v, lv.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for (version, old) in lost {
                if self.rebuild_version(&name, version, &old).await {
                    pass.rebuilt += 1;
                } else {
                    pass.still_lost += 1;
                }
            }
        }
        pass
    }

    fn models_with_lost_versions(&self) -> Vec<String> {
        lock_err(self.models.read())
            .iter()
            .filter(|(_, e)| e.serving.values().any(|lv| lv.device_lost().is_some()))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Rebuilds one lost version and puts it in place; false while it stays lost (the rebuild failed, and
    /// was counted and logged).
    async fn rebuild_version(&self, name: &str, version: u64, old: &Arc<LoadedVersion>) -> bool {
        let why = old.device_lost().unwrap_or_default();
        tracing::warn!(model = %name, version, reason = %why, "GPU device lost: rebuilding the version's instances");
        let rebuilt = match old.rebuild(&self.opts.load).await {
            Ok(lv) => Arc::new(lv),
            Err(failure) => {
                *lock_err(self.load_failures.lock())
                    .entry((name.to_string(), Some(version), failure.kind))
                    .or_default() += 1;
                tracing::error!(
                    model = %name, version, kind = failure.kind.as_str(), reason = %failure,
                    "rebuild failed; the version stays unavailable and is tried again"
                );
                return false;
            }
        };
        let mut models = lock_err(self.models.write());
        let Some(e) = models.get_mut(name) else {
            return true;
        };
        if !e.serving.get(&version).is_some_and(|lv| Arc::ptr_eq(lv, old)) {
            // Unloaded or replaced while rebuilding: the new set stands and the rebuild is dropped; nothing
            // is lost any more.
            return true;
        }
        let mut serving = (*e.serving).clone();
        serving.insert(version, rebuilt);
        e.serving = Arc::new(serving);
        old.retire();
        e.draining.push((version, Arc::downgrade(old)));
        tracing::info!(model = %name, version, "version rebuilt on a new device; serving again");
        true
    }
}

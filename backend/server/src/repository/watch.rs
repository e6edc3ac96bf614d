//! Poll mode: a file watch on the repository folders (notify: inotify, FSEvents, ReadDirectoryChanges),
//! debounced, that reconciles the repository once changes settle. No timer polls the disk.

use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Repository;

/// Keeps the watch alive; dropping it stops following the repository.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching every repository folder. After a change, the repository is reconciled once no
/// further change arrived for `debounce` (a model being copied in produces many events).
pub fn watch(repo: Arc<Repository>, debounce: Duration) -> Result<WatchHandle, String> {
    let (tx, mut rx) = mpsc::channel::<()>(64);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        // Reading a model (our own loads) is not a change.
        Ok(e) if matches!(e.kind, EventKind::Access(_)) => {}
        // A full channel already holds a pending "something changed".
        Ok(_) => {
            let _ = tx.try_send(());
        }
        Err(e) => tracing::warn!(error = %e, "repository watch error"),
    })
    .map_err(|e| format!("cannot start the repository file watch: {e}"))?;
    for root in &repo.options().roots {
        watcher.watch(root, RecursiveMode::Recursive).map_err(|e| {
            format!(
                "cannot watch {}: {e} (is fs.inotify.max_user_watches too low?)",
                root.display()
            )
        })?;
    }
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            loop {
                match tokio::time::timeout(debounce, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            repo.reconcile().await;
        }
    });
    Ok(WatchHandle {
        _watcher: watcher,
        task,
    })
}

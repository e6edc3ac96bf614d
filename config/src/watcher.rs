//! Live reload: watch a config file's folder, and on each change re-read it into its [`Live`] value (which
//! parses, validates and swaps).
//!
//! The folder (not the file) is watched so that every way a file gets replaced is seen: in-place writes,
//! editors' write-to-temp-then-rename, delete then recreate, and Kubernetes' ConfigMap update (the
//! mounted name is a symlink through `..data`, which the kubelet swaps by renaming `..data_tmp` over it).
//! An event that names the file, or one of the kubelet's `..` entries, schedules a debounced re-read;
//! events about the folder's other files are dropped on the watcher's thread (a log written next to the
//! config must neither keep the gateway's threads busy nor hold a reload back). The debounce waits for the
//! file's events to stop, but never longer than `MAX_DEBOUNCE_ROUNDS` quiet periods. A file whose content
//! hash is unchanged is not a reload. SIGHUP and a slow safety-net poll trigger the same re-read. What a
//! re-read does (hash, load, swap or refuse) is [`Live::apply`]'s, the same for every trigger.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::live::{Live, Loaded, Loader, Rejection, ReloadOutcome, ReloadStatus, Running};
use crate::routes::{GatewayConfig, load_gateway_config};

/// However busy the file's events keep the folder, a re-read waits at most this many debounce periods.
const MAX_DEBOUNCE_ROUNDS: u32 = 10;

/// How the watcher behaves.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Quiet time after the last file event before the file is read (editors write in bursts).
    pub debounce: Duration,
    /// Re-read the file this often even without events (a safety net for missed events); `None`: never.
    pub poll_interval: Option<Duration>,
    /// Reload on SIGHUP.
    pub sighup: bool,
    /// Watch the folder for changes (turn off to reload only on SIGHUP, polls and [`ConfigWatcher::reload_now`]).
    pub watch_filesystem: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            debounce: Duration::from_millis(100),
            poll_interval: Some(Duration::from_secs(10)),
            sighup: true,
            watch_filesystem: true,
        }
    }
}

/// Watches a config file and re-reads it into its [`Live`] value (see the module docs). The watcher holds
/// no value of its own: every read goes through [`Live::reload`].
pub struct ConfigWatcher<T> {
    live: Arc<Live<T>>,
    task: JoinHandle<()>,
    _fs: Option<RecommendedWatcher>,
}

impl<T: Send + Sync + 'static> ConfigWatcher<T> {
    /// Loads `file` (which must be valid) and starts watching it. Must be called inside a tokio runtime.
    pub async fn start(
        file: impl Into<PathBuf>,
        loader: Loader<T>,
        options: WatchOptions,
    ) -> Result<Self, Diagnostics> {
        let live = Arc::new(Live::open(file, loader)?);
        Self::watch(live, options)
    }

    /// Watches the file of a running [`Live`] value, re-reading it on changes, SIGHUP and polls (a change made
    /// between the value's start and this call is seen by the first poll, or by [`ConfigWatcher::reload_now`]).
    /// Must be called inside a tokio runtime.
    pub fn watch(live: Arc<Live<T>>, options: WatchOptions) -> Result<Self, Diagnostics> {
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let fs = if options.watch_filesystem {
            Some(watch_folder(live.file(), tx.clone())?)
        } else {
            None
        };
        let sighup = if options.sighup {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("cannot listen for SIGHUP, reload on file changes only: {e}");
                    None
                }
            }
        } else {
            None
        };
        let task = tokio::spawn(run(live.clone(), rx, sighup, options));
        drop(tx);
        Ok(ConfigWatcher { live, task, _fs: fs })
    }

    /// A snapshot of the current value; keep it for the whole request.
    pub fn current(&self) -> Arc<Running<T>> {
        self.live.current()
    }

    /// Where the config stands (load time, hash, last rejection).
    pub fn status(&self) -> ReloadStatus {
        self.live.status()
    }

    /// Every reload outcome from now on (applied or rejected), for metrics.
    pub fn subscribe(&self) -> broadcast::Receiver<ReloadOutcome> {
        self.live.subscribe()
    }

    /// The watched value, for readers that outlive this borrow.
    pub fn reader(&self) -> Arc<Live<T>> {
        self.live.clone()
    }

    /// The watched file.
    pub fn file(&self) -> &Path {
        self.live.file()
    }

    /// Re-reads the file now (as SIGHUP does), off the async threads.
    pub async fn reload_now(&self) -> ReloadOutcome {
        reload_off_thread(&self.live).await
    }
}

impl ConfigWatcher<GatewayConfig> {
    /// Watches a gateway routes file. Reloads swap the routing rules; changed listeners are kept as they
    /// were at start-up and reported with a "needs restart" warning.
    pub async fn gateway(file: impl Into<PathBuf>, options: WatchOptions) -> Result<Self, Diagnostics> {
        Self::start(file, gateway_loader(), options).await
    }
}

/// The loader used by [`ConfigWatcher::gateway`]: parse and validate, keeping the running listeners.
pub fn gateway_loader() -> Loader<GatewayConfig> {
    Arc::new(|text: &str, file: &Path, running: Option<&GatewayConfig>| {
        let (config, warnings) = load_gateway_config(text, file)?;
        let mut warnings = warnings.0;
        let value = match running {
            Some(running) => {
                let (merged, more) = GatewayConfig::reloaded(running, config, file);
                warnings.extend(more);
                merged
            }
            None => config,
        };
        Ok(Loaded { value, warnings })
    })
}

impl<T> Drop for ConfigWatcher<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// [`Live::reload`] on a blocking thread.
async fn reload_off_thread<T: Send + Sync + 'static>(live: &Arc<Live<T>>) -> ReloadOutcome {
    let reloading = live.clone();
    match tokio::task::spawn_blocking(move || reloading.reload()).await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(file = %live.file().display(), "config reload task failed; the running config stays: {e}");
            ReloadOutcome::Rejected(Rejection {
                at: std::time::SystemTime::now(),
                content_hash: None,
                error: format!("reload task failed: {e}"),
                diagnostics: Diagnostics::new(),
            })
        }
    }
}

fn watch_folder(file: &Path, tx: mpsc::UnboundedSender<()>) -> Result<RecommendedWatcher, Diagnostics> {
    let folder = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let fail = |e: notify::Error| {
        Diagnostics::single(Diagnostic::error(
            file,
            Pos::default(),
            format!("cannot watch the folder '{}' for changes: {e}", folder.display()),
        ))
    };
    let name = file.file_name().map(OsStr::to_os_string).unwrap_or_default();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // A watcher error may mean missed events: re-read to be safe.
        if event.map(|e| concerns_the_file(&e, &name)).unwrap_or(true) {
            let _ = tx.send(());
        }
    })
    .map_err(fail)?;
    watcher
        .watch(&folder, RecursiveMode::NonRecursive)
        .map_err(fail)?;
    Ok(watcher)
}

/// Whether a folder event may mean the file named `name` changed: it names the file (written, created,
/// removed, renamed to or from), or a `..`-prefixed entry (the kubelet's `..data` symlink and its
/// timestamped folders, through which a ConfigMap's file names point), or it names nothing or asks for a
/// rescan (events were lost). Reads (access events) never change the file.
fn concerns_the_file(event: &notify::Event, name: &OsStr) -> bool {
    if event.kind.is_access() {
        return false;
    }
    event.need_rescan()
        || event.paths.is_empty()
        || event.paths.iter().any(|p| match p.file_name() {
            Some(n) => n == name || n.as_encoded_bytes().starts_with(b".."),
            None => true,
        })
}

async fn run<T: Send + Sync + 'static>(
    live: Arc<Live<T>>,
    mut rx: mpsc::UnboundedReceiver<()>,
    mut sighup: Option<tokio::signal::unix::Signal>,
    options: WatchOptions,
) {
    let mut poll = options.poll_interval.map(|p| {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + p, p);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let mut fs_open = true;
    loop {
        let from_fs = tokio::select! {
            got = rx.recv(), if fs_open => {
                if got.is_none() {
                    fs_open = false;
                    continue;
                }
                true
            }
            Some(()) = async { match sighup.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {
                tracing::info!(file = %live.file().display(), "SIGHUP: re-reading the config");
                false
            }
            _ = async { match poll.as_mut() { Some(p) => { p.tick().await; } None => std::future::pending::<()>().await } } => false,
        };
        if from_fs {
            // Debounce: wait until the file's events have been quiet for `debounce`, but not for ever.
            let latest = tokio::time::Instant::now() + options.debounce * MAX_DEBOUNCE_ROUNDS;
            loop {
                let now = tokio::time::Instant::now();
                if now >= latest {
                    break;
                }
                let quiet_until = (now + options.debounce).min(latest);
                match tokio::time::timeout_at(quiet_until, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => {
                        fs_open = false;
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        reload_off_thread(&live).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, CreateKind, EventKind, Flag, ModifyKind, RenameMode};

    fn event(kind: EventKind, paths: &[&str]) -> notify::Event {
        paths
            .iter()
            .fold(notify::Event::new(kind), |e, p| e.add_path(PathBuf::from(p)))
    }

    #[test]
    fn only_events_that_can_change_the_file_schedule_a_reread() {
        let name = OsStr::new("routes.yaml");
        let write = EventKind::Modify(ModifyKind::Any);
        assert!(concerns_the_file(&event(write, &["/etc/gw/routes.yaml"]), name));
        assert!(concerns_the_file(
            &event(
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                &["/etc/gw/.routes.yaml.swp", "/etc/gw/routes.yaml"]
            ),
            name
        ));
        assert!(
            concerns_the_file(
                &event(EventKind::Create(CreateKind::Any), &["/etc/gw/..data"]),
                name
            ),
            "the kubelet swaps ..data to update a ConfigMap"
        );
        assert!(
            concerns_the_file(&event(write, &[]), name),
            "an event naming nothing"
        );
        assert!(concerns_the_file(
            &event(EventKind::Other, &["/etc/gw/other"]).set_flag(Flag::Rescan),
            name
        ));

        assert!(
            !concerns_the_file(&event(write, &["/etc/gw/access.log"]), name),
            "a neighbour's writes are not the config's"
        );
        assert!(!concerns_the_file(
            &event(write, &["/etc/gw/routes.yaml.bak"]),
            name
        ));
        assert!(!concerns_the_file(
            &event(EventKind::Access(AccessKind::Any), &["/etc/gw/routes.yaml"]),
            name
        ));
    }
}

//! Live reload: watch a config file's folder, and on each change parse → validate → swap.
//!
//! The folder (not the file) is watched so that every way a file gets replaced is seen: in-place writes,
//! editors' write-to-temp-then-rename, delete then recreate, and Kubernetes' ConfigMap update (the
//! mounted name is a symlink through `..data`, which the kubelet swaps by renaming `..data_tmp` over it).
//! An event that names the file, or one of the kubelet's `..` entries, schedules a debounced re-read;
//! events about the folder's other files are dropped on the watcher's thread (a log written next to the
//! config must neither keep the gateway's threads busy nor hold a reload back). The debounce waits for the
//! file's events to stop, but never longer than `MAX_DEBOUNCE_ROUNDS` quiet periods. A file whose content
//! hash is unchanged is not a reload. SIGHUP and a slow safety-net poll trigger the same re-read. An invalid
//! file leaves the running value in place and records the rejection (text, time, content hash).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::file::read_config_file;
use crate::routes::{GatewayConfig, load_gateway_config};

/// However busy the file's events keep the folder, a re-read waits at most this many debounce periods.
const MAX_DEBOUNCE_ROUNDS: u32 = 10;

/// A freshly loaded value with the warnings found while loading it.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// The value to run.
    pub value: T,
    /// Warnings (they do not stop the reload).
    pub warnings: Vec<Diagnostic>,
}

/// Turns file text into a value: `(text, file, running value)`; the running value is `None` at start-up.
pub type Loader<T> = Arc<dyn Fn(&str, &Path, Option<&T>) -> Result<Loaded<T>, Diagnostics> + Send + Sync>;

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

/// A refused reload.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// When it was refused.
    pub at: SystemTime,
    /// SHA-256 (hex) of the refused content; `None` when the file could not be read.
    pub content_hash: Option<String>,
    /// Every problem, one per line (`file:line:column: message`).
    pub error: String,
    /// The same problems, structured.
    pub diagnostics: Diagnostics,
}

/// Where the watched config stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ReloadStatus {
    /// The watched file.
    pub file: PathBuf,
    /// When the running value was loaded.
    pub loaded_at: SystemTime,
    /// SHA-256 (hex) of the running value's file content.
    pub content_hash: String,
    /// Warnings of the running value.
    pub warnings: Vec<Diagnostic>,
    /// Successful reloads since start (the initial load not counted).
    pub reloads: u64,
    /// Refused reloads since start.
    pub rejections: u64,
    /// The most recent refusal, if any (kept after later successful reloads).
    pub last_rejection: Option<Rejection>,
}

/// The result of one reload attempt, broadcast to subscribers (for metrics and logs).
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadOutcome {
    /// A new value is running.
    Applied {
        /// SHA-256 (hex) of the new content.
        content_hash: String,
        /// Its warnings.
        warnings: Vec<Diagnostic>,
    },
    /// The file was refused; the running value stays.
    Rejected(Rejection),
    /// The content is the same as the running value (or as the last refused content): nothing to do.
    Unchanged,
}

impl ReloadOutcome {
    /// A low-cardinality label for metrics: `applied`, `rejected`, `unchanged`.
    pub fn label(&self) -> &'static str {
        match self {
            ReloadOutcome::Applied { .. } => "applied",
            ReloadOutcome::Rejected(_) => "rejected",
            ReloadOutcome::Unchanged => "unchanged",
        }
    }
}

struct Shared<T> {
    file: PathBuf,
    loader: Loader<T>,
    current: ArcSwap<T>,
    status: watch::Sender<ReloadStatus>,
    events: broadcast::Sender<ReloadOutcome>,
    /// Serialises reloads; holds the hash of the last refused content.
    reload_lock: Mutex<Option<String>>,
}

/// A cheap, cloneable read handle on a watched config.
pub struct ConfigReader<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for ConfigReader<T> {
    fn clone(&self) -> Self {
        ConfigReader {
            shared: self.shared.clone(),
        }
    }
}

/// Watches a config file and holds its current value (see the module docs).
pub struct ConfigWatcher<T> {
    shared: Arc<Shared<T>>,
    task: JoinHandle<()>,
    _fs: Option<RecommendedWatcher>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl<T: Send + Sync + 'static> Shared<T> {
    /// Reads, parses, validates and swaps; never panics, never leaves a partial value.
    fn reload(&self) -> ReloadOutcome {
        let mut last_rejected = match self.reload_lock.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let text = match read_config_file(&self.file) {
            Ok(t) => t,
            Err(d) => return self.reject(&mut last_rejected, None, d),
        };
        let hash = sha256_hex(text.as_bytes());
        if hash == self.status.borrow().content_hash || last_rejected.as_deref() == Some(hash.as_str()) {
            return ReloadOutcome::Unchanged;
        }
        let running = self.current.load_full();
        match (self.loader)(&text, &self.file, Some(&running)) {
            Ok(loaded) => {
                self.current.store(Arc::new(loaded.value));
                *last_rejected = None;
                self.status.send_modify(|s| {
                    s.loaded_at = SystemTime::now();
                    s.content_hash = hash.clone();
                    s.warnings = loaded.warnings.clone();
                    s.reloads += 1;
                });
                for w in &loaded.warnings {
                    tracing::warn!(file = %self.file.display(), "{w}");
                }
                tracing::info!(file = %self.file.display(), hash = %&hash[..12], "config reloaded");
                let outcome = ReloadOutcome::Applied {
                    content_hash: hash,
                    warnings: loaded.warnings,
                };
                let _ = self.events.send(outcome.clone());
                outcome
            }
            Err(d) => self.reject(&mut last_rejected, Some(hash), d),
        }
    }

    fn reject(
        &self,
        last_rejected: &mut Option<String>,
        hash: Option<String>,
        diagnostics: Diagnostics,
    ) -> ReloadOutcome {
        if hash.is_some() && *last_rejected == hash {
            return ReloadOutcome::Unchanged;
        }
        last_rejected.clone_from(&hash);
        let rejection = Rejection {
            at: SystemTime::now(),
            content_hash: hash,
            error: diagnostics.to_string(),
            diagnostics,
        };
        tracing::error!(file = %self.file.display(), "config reload refused, the running config stays:\n{}", rejection.error);
        self.status.send_modify(|s| {
            s.rejections += 1;
            s.last_rejection = Some(rejection.clone());
        });
        let outcome = ReloadOutcome::Rejected(rejection);
        let _ = self.events.send(outcome.clone());
        outcome
    }
}

impl<T: Send + Sync + 'static> ConfigReader<T> {
    /// A snapshot of the current value; keep it for the whole request.
    pub fn current(&self) -> Arc<T> {
        self.shared.current.load_full()
    }

    /// Where the config stands (load time, hash, last rejection).
    pub fn status(&self) -> ReloadStatus {
        self.shared.status.borrow().clone()
    }
}

impl<T: Send + Sync + 'static> ConfigWatcher<T> {
    /// Loads `file` (which must be valid) and starts watching it. Must be called inside a tokio runtime.
    pub async fn start(
        file: impl Into<PathBuf>,
        loader: Loader<T>,
        options: WatchOptions,
    ) -> Result<Self, Diagnostics> {
        let file: PathBuf = file.into();
        let text = read_config_file(&file)?;
        let loaded = loader(&text, &file, None)?;
        let hash = sha256_hex(text.as_bytes());
        let status = ReloadStatus {
            file: file.clone(),
            loaded_at: SystemTime::now(),
            content_hash: hash,
            warnings: loaded.warnings,
            reloads: 0,
            rejections: 0,
            last_rejection: None,
        };
        let (events, _) = broadcast::channel(64);
        let shared = Arc::new(Shared {
            file: file.clone(),
            loader,
            current: ArcSwap::from_pointee(loaded.value),
            status: watch::Sender::new(status),
            events,
            reload_lock: Mutex::new(None),
        });
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let fs = if options.watch_filesystem {
            Some(watch_folder(&file, tx.clone())?)
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
        let task = tokio::spawn(run(shared.clone(), rx, sighup, options));
        drop(tx);
        Ok(ConfigWatcher {
            shared,
            task,
            _fs: fs,
        })
    }

    /// A snapshot of the current value; keep it for the whole request.
    pub fn current(&self) -> Arc<T> {
        self.shared.current.load_full()
    }

    /// Where the config stands (load time, hash, last rejection).
    pub fn status(&self) -> ReloadStatus {
        self.shared.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn status_watch(&self) -> watch::Receiver<ReloadStatus> {
        self.shared.status.subscribe()
    }

    /// Every reload outcome from now on (applied or rejected), for metrics.
    pub fn subscribe(&self) -> broadcast::Receiver<ReloadOutcome> {
        self.shared.events.subscribe()
    }

    /// A cloneable read handle.
    pub fn reader(&self) -> ConfigReader<T> {
        ConfigReader {
            shared: self.shared.clone(),
        }
    }

    /// The watched file.
    pub fn file(&self) -> &Path {
        &self.shared.file
    }

    /// Re-reads the file now (as SIGHUP does), off the async threads.
    pub async fn reload_now(&self) -> ReloadOutcome {
        let shared = self.shared.clone();
        match tokio::task::spawn_blocking(move || shared.reload()).await {
            Ok(o) => o,
            Err(e) => ReloadOutcome::Rejected(Rejection {
                at: SystemTime::now(),
                content_hash: None,
                error: format!("reload task failed: {e}"),
                diagnostics: Diagnostics::new(),
            }),
        }
    }
}

impl ConfigWatcher<GatewayConfig> {
    /// Watches a gateway routes file. Reloads swap the routing rules; changed listeners are kept as they
    /// were at start-up and reported with a "needs restart" warning.
    pub async fn gateway(file: impl Into<PathBuf>, options: WatchOptions) -> Result<Self, Diagnostics> {
        Self::start(file, gateway_loader(), options).await
    }
}

/// The loader used by [`ConfigWatcher::gateway`].
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
    shared: Arc<Shared<T>>,
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
                tracing::info!(file = %shared.file.display(), "SIGHUP: re-reading the config");
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
        let s = shared.clone();
        if tokio::task::spawn_blocking(move || s.reload()).await.is_err() {
            tracing::error!(file = %shared.file.display(), "config reload task failed; the running config stays");
        }
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

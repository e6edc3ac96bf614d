//! The running value of a reloadable config file, and the one place that replaces it.
//!
//! A [`Live`] holds the value in force in one `ArcSwap`, together with the content hash, load time and
//! warnings of the text it came from, so a reader that takes a snapshot sees all four of one version. Every
//! reload — a file event, SIGHUP, a poll, an explicit call with text — goes through [`Live::apply`]: hash the
//! text, skip it when it is what runs (or what was refused last), run the loader, swap or record the refusal,
//! tell the observer and the subscribers. The loader is pure: text and the running value in, a new value or
//! every problem out; nothing it does is visible until the swap, so a refused file changes nothing.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::file::read_config_file;

/// A freshly loaded value with the warnings found while loading it.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// The value to run.
    pub value: T,
    /// Warnings (they do not stop the reload).
    pub warnings: Vec<Diagnostic>,
}

/// Turns file text into a value: `(text, file, running value)`; the running value is `None` at start-up.
/// It must be pure: whatever it builds becomes visible only when [`Live`] swaps it in.
pub type Loader<T> = Arc<dyn Fn(&str, &Path, Option<&T>) -> Result<Loaded<T>, Diagnostics> + Send + Sync>;

/// Called after every reload attempt, with its outcome and the value in force afterwards (the new one when
/// it was applied). Runs before [`Live::apply`] returns, under the reload lock (so it must not call
/// [`Live::status`]).
pub type Observer<T> = Box<dyn Fn(&ReloadOutcome, &Running<T>) + Send + Sync>;

/// SHA-256 (hex) of a config file's text: the content hash of [`Running`] and [`Rejection`].
pub fn content_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// One version of the value in force, with what identifies it. Derefs to the value.
#[derive(Debug)]
pub struct Running<T> {
    /// The value.
    pub value: T,
    /// SHA-256 (hex) of the text it came from.
    pub content_hash: String,
    /// When it was swapped in.
    pub loaded_at: SystemTime,
    /// Its warnings.
    pub warnings: Vec<Diagnostic>,
}

impl<T> Deref for Running<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
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

/// Where the config stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ReloadStatus {
    /// The config file.
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

/// What happened to reloads so far; its lock also serialises them.
#[derive(Debug, Default)]
struct History {
    reloads: u64,
    rejections: u64,
    last_rejection: Option<Rejection>,
    /// Hash of the content refused last (the same content again is not a new refusal).
    last_refused_hash: Option<String>,
}

/// The running value of one config file (see the module docs).
pub struct Live<T> {
    file: PathBuf,
    loader: Loader<T>,
    current: ArcSwap<Running<T>>,
    history: Mutex<History>,
    events: broadcast::Sender<ReloadOutcome>,
    observer: Option<Observer<T>>,
}

impl<T: Send + Sync + 'static> Live<T> {
    /// Loads `text` (as if read from `file`, which later reloads read) and starts with it; the text must be
    /// valid. `observer`, if any, sees every later reload attempt.
    pub fn start(
        file: impl Into<PathBuf>,
        text: &str,
        loader: Loader<T>,
        observer: Option<Observer<T>>,
    ) -> Result<Self, Diagnostics> {
        let file = file.into();
        let loaded = load_guarded(&loader, text, &file, None)?;
        let (events, _) = broadcast::channel(64);
        Ok(Live {
            current: ArcSwap::from_pointee(Running {
                value: loaded.value,
                content_hash: content_hash(text),
                loaded_at: SystemTime::now(),
                warnings: loaded.warnings,
            }),
            file,
            loader,
            history: Mutex::new(History::default()),
            events,
            observer,
        })
    }

    /// Reads `file` and starts with its content (see [`Live::start`]).
    pub fn open(file: impl Into<PathBuf>, loader: Loader<T>) -> Result<Self, Diagnostics> {
        let file = file.into();
        let text = read_config_file(&file)?;
        Self::start(file, &text, loader, None)
    }

    /// A snapshot of the value in force; keep it for the whole request.
    pub fn current(&self) -> Arc<Running<T>> {
        self.current.load_full()
    }

    /// The config file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Where the config stands (load time, hash, counts, last rejection).
    pub fn status(&self) -> ReloadStatus {
        let history = self.history();
        let running = self.current();
        ReloadStatus {
            file: self.file.clone(),
            loaded_at: running.loaded_at,
            content_hash: running.content_hash.clone(),
            warnings: running.warnings.clone(),
            reloads: history.reloads,
            rejections: history.rejections,
            last_rejection: history.last_rejection.clone(),
        }
    }

    /// Every reload outcome from now on (applied or rejected), for metrics and logs.
    pub fn subscribe(&self) -> broadcast::Receiver<ReloadOutcome> {
        self.events.subscribe()
    }

    /// Re-reads the file and applies its content. Blocking (file I/O and the loader): call it off the
    /// async threads.
    pub fn reload(&self) -> ReloadOutcome {
        let mut history = self.history();
        match read_config_file(&self.file) {
            Ok(text) => self.apply_locked(&mut history, &text),
            Err(d) => self.refuse(&mut history, None, d),
        }
    }

    /// Applies `text` as the file's new content: the one path every reload takes. Never panics, never leaves
    /// a partial value.
    pub fn apply(&self, text: &str) -> ReloadOutcome {
        let mut history = self.history();
        self.apply_locked(&mut history, text)
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        match self.history.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn apply_locked(&self, history: &mut History, text: &str) -> ReloadOutcome {
        let hash = content_hash(text);
        let running = self.current.load_full();
        if hash == running.content_hash || history.last_refused_hash.as_deref() == Some(hash.as_str()) {
            return ReloadOutcome::Unchanged;
        }
        match load_guarded(&self.loader, text, &self.file, Some(&running.value)) {
            Ok(loaded) => {
                let next = Arc::new(Running {
                    value: loaded.value,
                    content_hash: hash.clone(),
                    loaded_at: SystemTime::now(),
                    warnings: loaded.warnings.clone(),
                });
                self.current.store(Arc::clone(&next));
                history.reloads += 1;
                history.last_refused_hash = None;
                for w in &loaded.warnings {
                    tracing::warn!(file = %self.file.display(), "{w}");
                }
                tracing::info!(file = %self.file.display(), hash = %&hash[..12], "config reloaded");
                let outcome = ReloadOutcome::Applied {
                    content_hash: hash,
                    warnings: loaded.warnings,
                };
                self.tell(&outcome, &next);
                outcome
            }
            Err(d) => self.refuse(history, Some(hash), d),
        }
    }

    fn refuse(&self, history: &mut History, hash: Option<String>, diagnostics: Diagnostics) -> ReloadOutcome {
        if hash.is_some() && history.last_refused_hash == hash {
            return ReloadOutcome::Unchanged;
        }
        history.last_refused_hash.clone_from(&hash);
        let rejection = Rejection {
            at: SystemTime::now(),
            content_hash: hash,
            error: diagnostics.to_string(),
            diagnostics,
        };
        tracing::error!(file = %self.file.display(), "config reload refused, the running config stays:\n{}", rejection.error);
        history.rejections += 1;
        history.last_rejection = Some(rejection.clone());
        let outcome = ReloadOutcome::Rejected(rejection);
        self.tell(&outcome, &self.current.load_full());
        outcome
    }

    fn tell(&self, outcome: &ReloadOutcome, running: &Running<T>) {
        if let Some(observe) = &self.observer {
            observe(outcome, running);
        }
        let _ = self.events.send(outcome.clone());
    }
}

/// Runs the loader, turning a panic inside it into a refusal of the text. A panic is a bug of ours, but a
/// config edit must never take the process or its reload task down with it: the running config stays, and the
/// refusal names the bug so that it gets reported.
fn load_guarded<T>(
    loader: &Loader<T>,
    text: &str,
    file: &Path,
    running: Option<&T>,
) -> Result<Loaded<T>, Diagnostics> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loader(text, file, running))).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        Err(Diagnostics::single(Diagnostic::error(
            file,
            Pos::default(),
            format!(
                "the config loader failed on this file ({what}); this is a bug in infergate: please report it \
                 with the file. The running config stays in force"
            ),
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Pos;

    /// A loader that accepts digits and refuses anything else; it counts nothing and changes nothing.
    fn digits() -> Loader<u32> {
        Arc::new(|text: &str, file: &Path, _running: Option<&u32>| {
            text.trim()
                .parse()
                .map(|value| Loaded {
                    value,
                    warnings: Vec::new(),
                })
                .map_err(|_| Diagnostics::single(Diagnostic::error(file, Pos::default(), "not a number")))
        })
    }

    #[test]
    fn every_attempt_goes_through_one_path_and_a_refusal_changes_nothing() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let observer: Observer<u32> = {
            let seen = seen.clone();
            Box::new(move |outcome, running| {
                seen.lock().unwrap().push((outcome.label(), running.value));
            })
        };
        let live = Live::start("n.txt", "1", digits(), Some(observer)).unwrap();
        assert_eq!(live.current().content_hash, content_hash("1"));

        assert!(matches!(live.apply("x"), ReloadOutcome::Rejected(_)));
        assert_eq!(**live.current(), 1, "a refused text leaves the value");
        assert_eq!(live.current().content_hash, content_hash("1"));
        assert_eq!(
            live.apply("x"),
            ReloadOutcome::Unchanged,
            "refused once is enough"
        );
        assert_eq!(live.apply("1"), ReloadOutcome::Unchanged, "what runs already");
        assert!(matches!(live.apply("2"), ReloadOutcome::Applied { .. }));
        assert_eq!(**live.current(), 2);

        let status = live.status();
        assert_eq!((status.reloads, status.rejections), (1, 1));
        assert_eq!(status.content_hash, content_hash("2"));
        assert_eq!(
            status.last_rejection.unwrap().content_hash,
            Some(content_hash("x"))
        );
        assert_eq!(
            *seen.lock().unwrap(),
            vec![("rejected", 1), ("applied", 2)],
            "the observer sees each attempt that did something, with the value in force after it"
        );
    }

    #[test]
    fn a_loader_that_panics_refuses_the_text_and_the_running_value_stays() {
        let loader: Loader<u32> = Arc::new(|text: &str, file: &Path, running: Option<&u32>| {
            if text.trim() == "boom" {
                let bytes = "ñ";
                // The kind of bug the routes fuzzer found: a byte slice inside a character.
                let _ = &bytes[1..];
            }
            digits()(text, file, running)
        });
        assert!(
            Live::start("n.txt", "boom", loader.clone(), None).is_err(),
            "start refuses it too"
        );
        let live = Live::start("n.txt", "1", loader, None).unwrap();
        let ReloadOutcome::Rejected(rejection) = live.apply("boom") else {
            panic!("a panicking loader must refuse the text");
        };
        let message = rejection.error;
        assert!(
            message.contains("bug in infergate") && message.contains("char boundary"),
            "{message}"
        );
        assert_eq!(**live.current(), 1, "the running value stays");
        assert!(
            matches!(live.apply("2"), ReloadOutcome::Applied { .. }),
            "later edits still apply"
        );
    }
}

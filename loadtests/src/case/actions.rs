//! The actions of a phase, run beside its load at their times: routes edits, a backend killed or restarted,
//! the pod terminated, its model repository edited or taken away, a Deployment's pods replaced one by one. Each leaves a log entry (when it ran, how
//! long it took, how many requests were in flight at that instant, and its error if it failed) that the
//! invariants judge the load against.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::spec::{ActionKind, ActionSpec};
use crate::deployment::Deployment;
use crate::pod::{PodControl, RoutesWriter};

/// One action as it ran.
#[derive(Debug, Clone)]
pub struct ActionLog {
    /// Its name in the case, if it has one.
    pub name: Option<String>,
    /// What it did.
    pub kind: ActionKind,
    /// When it started, since the measured start.
    pub at: Duration,
    /// When it was done (a restart waits until the backend is ready; a rolling restart until the old pods
    /// have exited).
    pub done: Duration,
    /// Requests in flight when it started.
    pub in_flight: u64,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The actions' times and kinds: once at `at`, or every `every` until the end of the measured time.
pub fn schedule(
    actions: &[ActionSpec],
    dir: &Path,
    measure_start: Instant,
    duration: Option<Duration>,
) -> Vec<(Instant, Option<String>, ActionKind)> {
    let mut out = Vec::new();
    let span = duration.unwrap_or(Duration::from_secs(10));
    let in_case = |kind: ActionKind| match kind {
        ActionKind::Routes(p) => ActionKind::Routes(dir.join(p)),
        ActionKind::RestartBackend(n, models) => ActionKind::RestartBackend(n, models.map(|m| dir.join(m))),
        ActionKind::Repository(folder) => ActionKind::Repository(dir.join(folder)),
        other => other,
    };
    for a in actions {
        match (&a.at, a.every) {
            (Some(at), _) => {
                if let Some(kind) = a.kind(0) {
                    out.push((measure_start + at.within(span), a.name.clone(), in_case(kind)));
                }
            }
            (None, Some(every)) => {
                let mut t = every.0;
                let mut i = 0usize;
                while t < span && !every.0.is_zero() {
                    if let Some(kind) = a.kind(i) {
                        out.push((measure_start + t, None, in_case(kind)));
                    }
                    t += every.0;
                    i += 1;
                }
            }
            (None, None) => {}
        }
    }
    out.sort_by_key(|(t, _, _)| *t);
    out
}

/// What the actions act on.
pub struct Hands {
    /// The pod's processes.
    pub pod: PodControl,
    /// The routes file.
    pub routes: RoutesWriter,
    /// The load's requests in flight.
    pub in_flight: Arc<AtomicU64>,
    /// The pods behind the Service, in a case with `pod.deployment`.
    pub deployment: Option<Arc<Deployment>>,
}

/// Runs the schedule in order. Once `stop` turns true no further action starts (one under way finishes);
/// the task then returns the log.
pub fn spawn(
    schedule: Vec<(Instant, Option<String>, ActionKind)>,
    measure_start: Instant,
    hands: Hands,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<Vec<ActionLog>> {
    tokio::spawn(async move {
        let mut log = Vec::new();
        for (when, name, kind) in schedule {
            tokio::select! {
                _ = tokio::time::sleep_until(when) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            let started = Instant::now();
            let in_flight = hands.in_flight.load(Ordering::Relaxed);
            let error = run_one(&kind, &hands).await.err();
            if let Some(e) = &error {
                tracing::warn!(action = ?kind, error = %e, "action failed");
            }
            log.push(ActionLog {
                name,
                kind,
                at: started.saturating_duration_since(measure_start),
                done: Instant::now().saturating_duration_since(measure_start),
                in_flight,
                error,
            });
        }
        log
    })
}

async fn run_one(kind: &ActionKind, hands: &Hands) -> Result<(), String> {
    match kind {
        ActionKind::Routes(file) => hands
            .routes
            .write(file)
            .map_err(|e| format!("{}: {e}", file.display())),
        ActionKind::KillBackend(n) => hands.pod.kill_backend(*n).await.map_err(|e| e.to_string()),
        ActionKind::RestartBackend(n, models) => hands
            .pod
            .restart_backend(*n, models.clone())
            .await
            .map_err(|e| e.to_string()),
        ActionKind::TerminatePod => {
            hands.pod.terminate_all().await;
            Ok(())
        }
        ActionKind::Repository(folder) => hands.pod.sync_repository(folder).map_err(|e| e.to_string()),
        ActionKind::RepositoryReadable(readable) => hands
            .pod
            .set_repository_readable(*readable)
            .map_err(|e| e.to_string()),
        ActionKind::GpuLost(lost) => hands.pod.set_gpu_lost(*lost).map_err(|e| e.to_string()),
        ActionKind::RollingRestart => match &hands.deployment {
            Some(d) => d.rolling_restart().await.map_err(|e| e.to_string()),
            None => Err("rolling_restart needs pod.deployment".into()),
        },
    }
}

/// How many times `file` (relative to the case folder `dir`) was written by the logged actions.
pub fn writes_of(log: &[ActionLog], dir: &Path, file: &Path) -> u64 {
    let wanted: PathBuf = dir.join(file);
    log.iter()
        .filter(|a| a.error.is_none() && a.kind == ActionKind::Routes(wanted.clone()))
        .count() as u64
}

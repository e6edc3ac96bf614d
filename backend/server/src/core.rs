//! `ServerCore`: what the REST and gRPC front ends call ([`InferenceService`]), over the repository.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use infergate_protocol::{
    InferRequest, InferResponse, InferenceService, LoadParameters, ModelMetadata, ModelStatistics,
    RepositoryIndexEntry, ServeError, ServerMetadata,
};
use tokio::sync::Notify;

use crate::repository::device_recovery::{self, DeviceWatch};
use crate::repository::{ControlMode, Repository, RepositoryOptions, watch};

/// Server-wide settings of the core.
#[derive(Debug, Clone)]
pub struct CoreOptions {
    /// The repository and its control mode.
    pub repository: RepositoryOptions,
    /// Inference requests in the server at once (0 = unlimited); more are refused with UNAVAILABLE.
    pub max_concurrent_requests: usize,
    /// Ready only when every model that should serve does (Triton's `--strict-readiness`, default true).
    pub strict_readiness: bool,
    /// Poll mode: how long the repository must stay unchanged before it is reconciled.
    pub poll_debounce: Duration,
}

impl Default for CoreOptions {
    fn default() -> Self {
        CoreOptions {
            repository: RepositoryOptions::default(),
            max_concurrent_requests: 0,
            strict_readiness: true,
            poll_debounce: Duration::from_millis(500),
        }
    }
}

/// The server's core, shared by every front end. Cheap to clone.
#[derive(Clone)]
pub struct ServerCore {
    inner: Arc<Inner>,
}

struct Inner {
    repo: Arc<Repository>,
    options: CoreOptions,
    started: AtomicBool,
    shutting_down: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    watch: Mutex<Option<watch::WatchHandle>>,
    device_watch: Mutex<Option<DeviceWatch>>,
    server_started: Instant,
}

/// Counts a request in flight for the concurrency limit and the shutdown drain.
struct InFlight<'a>(&'a Inner);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The protocol extensions that work on this server.
pub const EXTENSIONS: &[&str] = &[
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
];

impl ServerCore {
    /// A core over an empty repository state; call [`ServerCore::start`] to load models.
    pub fn new(options: CoreOptions) -> Self {
        ServerCore {
            inner: Arc::new(Inner {
                repo: Arc::new(Repository::new(options.repository.clone())),
                options,
                started: AtomicBool::new(false),
                shutting_down: AtomicBool::new(false),
                in_flight: AtomicUsize::new(0),
                idle: Notify::new(),
                watch: Mutex::new(None),
                device_watch: Mutex::new(None),
                server_started: Instant::now(),
            }),
        }
    }

    /// Loads the start-up models (per the control mode), starts rebuilding versions whose GPU device is
    /// lost, and, in poll mode, starts following the repository. Models that fail are reported in the
    /// index; the error is only for a watch that cannot start.
    pub async fn start(&self) -> Result<(), String> {
        let t = Instant::now();
        self.inner.repo.load_startup().await;
        if self.inner.options.repository.mode == ControlMode::Poll {
            let handle = watch::watch(self.inner.repo.clone(), self.inner.options.poll_debounce)?;
            *self.inner.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        }
        *self.inner.device_watch.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(device_recovery::watch_devices(self.inner.repo.clone()));
        self.inner.started.store(true, Ordering::Release);
        tracing::info!(
            ms = t.elapsed().as_millis() as u64,
            ready = self.ready(),
            "start-up loading done"
        );
        Ok(())
    }

    /// The repository.
    pub fn repository(&self) -> &Arc<Repository> {
        &self.inner.repo
    }

    /// Time since the core was created.
    pub fn uptime(&self) -> Duration {
        self.inner.server_started.elapsed()
    }

    /// Stops taking inference requests (they get UNAVAILABLE) and reports not ready; in-flight ones go on.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.inner.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.inner
            .device_watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Inference requests in the server now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Waits until no inference request is in flight, at most `timeout`; true when drained.
    pub async fn drain(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let idle = self.inner.idle.notified();
                tokio::pin!(idle);
                // Registered before the check, so a request finishing in between still wakes us.
                idle.as_mut().enable();
                if self.in_flight() == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    fn admit(&self) -> Result<InFlight<'_>, ServeError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(ServeError::unavailable(
                "the server is shutting down and takes no new inference requests",
            ));
        }
        let n = self.inner.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        let guard = InFlight(&self.inner);
        let max = self.inner.options.max_concurrent_requests;
        if max > 0 && n > max {
            return Err(ServeError::unavailable(format!(
                "too many concurrent inference requests: the server's limit is {max} (--max-concurrent-requests); retry later"
            )));
        }
        Ok(guard)
    }

    /// The Prometheus text of `/metrics`.
    pub fn render_metrics(&self) -> String {
        let mut out = crate::metrics::render(&self.inner.repo.all_serving());
        crate::metrics::render_readiness(&mut out, self.ready(), &self.inner.repo.wanted_readiness());
        crate::metrics::render_repository(
            &mut out,
            &self.inner.repo.root_readability(),
            &self.inner.repo.load_failure_counts(),
        );
        let memory = &self.inner.repo.options().load.memory;
        crate::metrics::render_memory_budget(&mut out, memory.reserved(), memory.limit());
        crate::metrics::render_host(&mut out);
        out
    }
}

impl InferenceService for ServerCore {
    fn live(&self) -> bool {
        true
    }

    fn ready(&self) -> bool {
        self.inner.started.load(Ordering::Acquire)
            && !self.inner.shutting_down.load(Ordering::Acquire)
            && (!self.inner.options.strict_readiness || self.inner.repo.all_wanted_serving())
    }

    fn server_metadata(&self) -> ServerMetadata {
        ServerMetadata {
            name: "infergate".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }
    }

    fn model_ready(&self, name: &str, version: Option<u64>) -> bool {
        self.inner
            .repo
            .get(name, version)
            .is_ok_and(|lv| lv.device_lost().is_none())
    }

    fn model_metadata(&self, name: &str, version: Option<u64>) -> Result<ModelMetadata, ServeError> {
        let lv = self.inner.repo.get(name, version)?;
        let versions = self
            .inner
            .repo
            .serving_versions(name)
            .iter()
            .map(u64::to_string)
            .collect();
        Ok(lv.metadata(versions))
    }

    fn model_config(&self, name: &str, version: Option<u64>) -> Result<serde_json::Value, ServeError> {
        let lv = self.inner.repo.get(name, version)?;
        Ok((*lv.config_json).clone())
    }

    fn model_statistics(
        &self,
        name: Option<&str>,
        version: Option<u64>,
    ) -> Result<Vec<ModelStatistics>, ServeError> {
        let repo = &self.inner.repo;
        let versions = match (name, version) {
            (None, _) => repo.all_serving(),
            (Some(n), Some(v)) => vec![repo.get(n, Some(v))?],
            (Some(n), None) => {
                if !repo.knows(n) {
                    return Err(ServeError::unknown_model(n));
                }
                let all: Vec<_> = repo.all_serving().into_iter().filter(|lv| lv.name == n).collect();
                if all.is_empty() {
                    return Err(ServeError::version_not_ready(n, None));
                }
                all
            }
        };
        Ok(versions
            .iter()
            .map(|lv| lv.stats.model_statistics(&lv.name, lv.version, lv.memory_usage()))
            .collect())
    }

    async fn infer(&self, request: InferRequest) -> Result<InferResponse, ServeError> {
        let start = Instant::now();
        let _in_flight = self.admit()?;
        let version = self.inner.repo.get(&request.model_name, request.model_version)?;
        version.infer(request, start).await
    }

    fn repository_index(&self, ready_only: bool) -> Vec<RepositoryIndexEntry> {
        self.inner.repo.index(ready_only)
    }

    async fn load_model(&self, name: &str, parameters: LoadParameters) -> Result<(), ServeError> {
        self.explicit_only("load")?;
        self.inner.repo.load(name, parameters).await
    }

    async fn unload_model(&self, name: &str, _unload_dependents: bool) -> Result<(), ServeError> {
        // No model depends on another here (no ensembles), so `unload_dependents` changes nothing.
        self.explicit_only("unload")?;
        self.inner.repo.unload(name).await
    }
}

impl ServerCore {
    fn explicit_only(&self, what: &str) -> Result<(), ServeError> {
        match self.inner.options.repository.mode {
            ControlMode::Explicit => Ok(()),
            mode => Err(ServeError::unsupported(format!(
                "explicit model {what} is not allowed in model control mode '{}'; start the server with \
                 --model-control-mode=explicit",
                match mode {
                    ControlMode::None => "none",
                    ControlMode::Poll => "poll",
                    ControlMode::Explicit => "explicit",
                }
            ))),
        }
    }
}

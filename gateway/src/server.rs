//! The gateway process in one value: bind the data and admin listeners, compile the rules, serve, reload,
//! drain. `main.rs` and the integration tests both start the gateway through [`Gateway::start`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use infergate_config::{Diagnostics, ReloadOutcome};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::{self, Admin};
use crate::config_state::RuntimeState;
use crate::listener::{self, ConnLimits, ConnTracker, WorkerConnections};
use crate::metrics as m;
use crate::pipeline;
use crate::tls::{self, ServerTlsFiles};
use crate::worker::{self, Workers};

/// How often recorded histogram samples are folded into their buckets (the exporter's own default).
const HISTOGRAM_UPKEEP: Duration = Duration::from_secs(5);

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener address could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}; is another process using the port?")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TLS files are missing or invalid.
    #[error("data listener TLS: {0}")]
    Tls(#[from] tls::TlsError),
    /// The config could not be loaded (every problem, one per line).
    #[error("{0}")]
    Config(Diagnostics),
    /// A data worker's runtime or thread could not be started.
    #[error("cannot start the data workers: {0}")]
    Workers(#[source] std::io::Error),
    /// The metrics recorder could not be installed.
    #[error("metrics: {0}")]
    Metrics(String),
}

/// Values that override the config's listeners (command line and environment).
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// Data listener address.
    pub data: Option<SocketAddr>,
    /// Admin listener address.
    pub admin: Option<SocketAddr>,
    /// Data workers, overriding `listeners.worker_threads` (at least 1).
    pub workers: Option<usize>,
}

/// A running gateway.
pub struct Gateway {
    state: Arc<RuntimeState>,
    data_addr: SocketAddr,
    admin_addr: SocketAddr,
    ready: Arc<AtomicBool>,
    shutdown: watch::Sender<bool>,
    admin_shutdown: watch::Sender<bool>,
    tracker: Arc<ConnTracker>,
    /// The data workers; dropped with the gateway, which ends them.
    workers: Workers,
    drain_timeout: Duration,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl Gateway {
    /// Loads the config `text` (read from `file`, which [`Gateway::watch`] and SIGHUP re-read) exactly as a
    /// reload would, binds the listeners and starts serving.
    pub async fn start(text: &str, file: &Path, overrides: Overrides) -> Result<Arc<Gateway>, StartError> {
        let prometheus = m::install().map_err(StartError::Metrics)?;
        // The text is parsed once, by the loader; the listeners (restart-only) are read from what it made.
        let state =
            RuntimeState::start(file, text, overrides.workers, count_outcome).map_err(StartError::Config)?;
        let first = state.snapshot();
        let l = &first.config.listeners;
        let limits = ConnLimits::from(&l.limits);
        let tls = match &l.data.tls {
            Some(t) => Some(tls::server_config(&ServerTlsFiles {
                cert: &t.cert,
                key: &t.key,
                client_ca: t.client_ca.as_deref(),
                require_client_cert: t.require_client_cert,
            })?),
            None => None,
        };
        let worker_count = worker::count(overrides.workers.or(l.worker_threads));
        state.spawn_maintenance();
        let data_addr = overrides.data.unwrap_or(l.data.address);
        let admin_addr = overrides.admin.unwrap_or(l.admin.address);
        let data = worker::bind(data_addr, worker_count).map_err(|source| StartError::Bind {
            what: "data",
            addr: data_addr,
            source,
        })?;
        let admin_listener = TcpListener::bind(admin_addr)
            .await
            .map_err(|source| StartError::Bind {
                what: "admin",
                addr: admin_addr,
                source,
            })?;
        let data_addr = data
            .first()
            .and_then(|l| l.local_addr().ok())
            .unwrap_or(data_addr);
        let admin_addr = admin_listener.local_addr().unwrap_or(admin_addr);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let tracker = Arc::new(ConnTracker::new(worker_count));
        let ready = Arc::new(AtomicBool::new(false));
        let serve = {
            let state = Arc::clone(&state);
            let tracker = Arc::clone(&tracker);
            let ready = Arc::clone(&ready);
            move |listener| {
                let state = Arc::clone(&state);
                let handler = move |conn, req| pipeline::handle(Arc::clone(&state), conn, req);
                listener::serve(
                    listener,
                    tls.clone(),
                    limits.clone(),
                    handler,
                    shutdown_rx.clone(),
                    Arc::clone(&ready),
                    Arc::clone(&tracker),
                )
            }
        };
        let workers = Workers::start(data, serve).map_err(StartError::Workers)?;
        let admin = Arc::new(Admin {
            state: Arc::clone(&state),
            metrics: prometheus.clone(),
            ready: Arc::clone(&ready),
        });
        // The admin API outlives the drain, so probes see `/ready` turn false while requests finish.
        let (admin_shutdown, admin_rx) = watch::channel(false);
        let upkeep_task = tokio::spawn(m::upkeep(prometheus.clone(), HISTOGRAM_UPKEEP, admin_rx.clone()));
        let admin_task = tokio::spawn(admin::serve(admin_listener, admin, admin_rx));
        ready.store(true, Ordering::Release);
        metrics::gauge!(m::CONFIG_LOADED_AT).set(unix_now());
        tracing::info!(data = %data_addr, admin = %admin_addr, workers = worker_count, "gateway listening");
        Ok(Arc::new(Gateway {
            state,
            data_addr,
            admin_addr,
            ready,
            shutdown,
            admin_shutdown,
            tracker,
            workers,
            drain_timeout: l.drain_timeout,
            tasks: std::sync::Mutex::new(vec![admin_task, upkeep_task]),
        }))
    }

    /// The data listener's address (the real port when the config said port 0).
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The shared runtime state (rules, stores).
    pub fn state(&self) -> &Arc<RuntimeState> {
        &self.state
    }

    /// Applies `text` as the config file's new content: parsed, validated and compiled, then swapped in, or
    /// refused with every problem listed while the running rules stay. This is the path every reload takes
    /// (the file watcher and SIGHUP call the same [`infergate_config::Live::apply`]); changed listeners are
    /// reported as warnings (they need a restart). Returns the outcome, also counted in
    /// `infergate_gateway_config_reloads_total{result}` and shown on `/config` and `/config/errors`.
    pub fn reload_text(&self, text: &str) -> ReloadOutcome {
        self.state.live().apply(text)
    }

    /// Shutdown for a rollout: `/ready` answers 503 at once, so the pod leaves its Service's endpoints, while
    /// the listeners keep accepting and serving for `delay` (requests the cluster still routes here are
    /// served, not refused, each HTTP/1.1 one with `Connection: close` so its client moves on); then
    /// [`Gateway::shutdown`] drains.
    pub async fn shutdown_after(&self, delay: Duration) -> usize {
        self.ready.store(false, Ordering::Release);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.shutdown().await
    }

    /// Stops accepting, tells open connections to finish, and waits for them (at most the drain timeout), on
    /// every data worker.
    /// Returns the number of connections that were still open when the wait ended.
    pub async fn shutdown(&self) -> usize {
        self.ready.store(false, Ordering::Release);
        let _ = self.shutdown.send(true);
        let left = self.tracker.wait_closed(self.drain_timeout).await;
        // Connections still open past the drain timeout end with their workers.
        self.workers.stop(Duration::from_secs(1)).await;
        let _ = self.admin_shutdown.send(true);
        let tasks: Vec<JoinHandle<()>> = self
            .tasks
            .lock()
            .map(|mut t| t.drain(..).collect())
            .unwrap_or_default();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(1), t).await;
        }
        if left > 0 {
            tracing::warn!(open = left, "drain timeout reached with connections still open");
        }
        left
    }

    /// Open client connections now.
    pub fn open_connections(&self) -> usize {
        self.tracker.open()
    }

    /// Open and accepted client connections of each data worker, in worker order (as many entries as
    /// `listeners.worker_threads`, or cores).
    pub fn connections_per_worker(&self) -> Vec<WorkerConnections> {
        self.tracker.per_worker()
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Counts a reload outcome (`infergate_gateway_config_reloads_total{result}`, the load-time gauge); the
/// refusal itself and the applied version's warnings are kept by the live value for `/config/errors` and
/// `/config`, and logged there.
fn count_outcome(outcome: &ReloadOutcome, _running: &infergate_config::Running<crate::config_state::Rules>) {
    match outcome {
        ReloadOutcome::Applied { .. } => {
            metrics::counter!(m::CONFIG_RELOADS, "result" => "applied").increment(1);
            metrics::gauge!(m::CONFIG_LOADED_AT).set(unix_now());
        }
        ReloadOutcome::Rejected(_) => {
            metrics::counter!(m::CONFIG_RELOADS, "result" => "rejected").increment(1);
        }
        ReloadOutcome::Unchanged => {}
    }
}

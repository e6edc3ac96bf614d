//! Starts the processes a scenario needs — one or more backends on a model repository, the gateway on a
//! routes file rendered with the ports chosen, fault proxies playing sick upstreams — on loopback ports the
//! kernel picks, waits until they are ready, and stops them when dropped. [`PodControl`] kills, restarts and
//! terminates them while load runs (the fault drills). Binaries come from `--bin-dir` or `INFERGATE_BIN_DIR` (the debug or release folder).

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use thiserror::Error;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::fault_proxy::{Fault, FaultProxy};
use crate::repository_edit;
use crate::target::Target;

/// Why the pod could not start.
#[derive(Debug, Error)]
pub enum PodError {
    /// A binary is missing.
    #[error(
        "{0} is missing: build it (`cargo build -p infergate-gateway -p infergate-backend`, or `make build`) and pass its folder with --bin-dir or INFERGATE_BIN_DIR"
    )]
    Missing(PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A process exited or did not become ready.
    #[error("{what} did not become ready at {url}: {reason}; the last lines of its log ({log}):\n{tail}")]
    NotReady {
        /// Which process.
        what: &'static str,
        /// The readiness URL.
        url: String,
        /// What happened.
        reason: String,
        /// Its log file.
        log: String,
        /// The log's end.
        tail: String,
    },
    /// The case asks for something the pod does not have.
    #[error("{0}")]
    Spec(String),
}

/// The loopback ports of one backend process.
#[derive(Debug, Clone, Copy)]
pub struct BackendPorts {
    /// REST (also h2c).
    pub http: u16,
    /// gRPC.
    pub grpc: u16,
    /// Metrics.
    pub metrics: u16,
}

/// The loopback ports of a running pod.
#[derive(Debug, Clone)]
pub struct Ports {
    /// One per backend process, in order.
    pub backends: Vec<BackendPorts>,
    /// Gateway data.
    pub gateway: u16,
    /// Gateway admin.
    pub admin: u16,
    /// The fault proxies, by name.
    pub proxies: Vec<(String, u16)>,
}

/// A fault proxy of the pod (`{{proxy_NAME}}` in routes templates).
#[derive(Debug, Clone)]
pub struct ProxySpec {
    /// Its name in templates.
    pub name: String,
    /// Slow in front of this backend's REST port with this delay; hung when `None`.
    pub slow: Option<(usize, Duration)>,
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// The backends' model repository.
    pub models: Option<PathBuf>,
    /// Extra backend flags.
    pub backend_args: Vec<String>,
    /// How many backend processes (each on its own ports, the same repository); at least one with `models`.
    pub backends: usize,
    /// The gateway's routes template (see [`render`]); no gateway when `None`.
    pub routes: Option<PathBuf>,
    /// Gateway data workers.
    pub gateway_workers: Option<u16>,
    /// Extra gateway flags (for example `--drain-delay=5s`).
    pub gateway_args: Vec<String>,
    /// Sick upstreams to put beside the backends.
    pub proxies: Vec<ProxySpec>,
}

/// Which process of the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The gateway.
    Gateway,
    /// Backend number `n` (from 0).
    Backend(usize),
}

impl std::fmt::Display for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Process::Gateway => f.write_str("gateway"),
            Process::Backend(n) => write!(f, "backend {n}"),
        }
    }
}

/// A running pod; its processes stop when it is dropped.
pub struct Pod {
    /// Its ports.
    pub ports: Ports,
    routes_file: PathBuf,
    control: PodControl,
    _proxies: Vec<FaultProxy>,
}

/// Starts, stops and signals the pod's processes, from any task (the drills' actions run beside the load).
#[derive(Clone)]
pub struct PodControl {
    inner: Arc<Mutex<Procs>>,
    ports: Ports,
    bins: PathBuf,
    work: PathBuf,
    backend_args: Vec<String>,
    /// The pod's own copy of `PodSpec::models`, which the backends start on and the repository drills edit.
    repository: PathBuf,
    /// The backends' GPU switch: while this file exists their GPU counts as lost.
    gpu_switch: PathBuf,
}

struct Procs {
    /// Per backend: the running process (`None` once killed or stopped) and the repository it serves.
    backends: Vec<(Option<Child>, PathBuf)>,
    gateway: Option<Child>,
    /// How each process ended when the pod was terminated (`None`: killed by a signal or never ended).
    exits: Vec<(Process, Option<i32>)>,
}

/// The folder holding `infergate-gateway` and `infergate-backend`: the flag, else `INFERGATE_BIN_DIR`.
pub fn bin_dir(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_owned)
        .or_else(|| std::env::var_os("INFERGATE_BIN_DIR").map(PathBuf::from))
}

/// Ports this process has handed out. A port bound to `:0` and released can come back from the very next
/// bind, so a pod's REST and gRPC picks could be the same port; each port is handed out once per process.
static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());

/// A loopback port that is free now and that this process has not handed out before.
pub(crate) fn free_port() -> Result<u16, PodError> {
    let io = |source| PodError::Io {
        path: "127.0.0.1:0".into(),
        source,
    };
    // The ephemeral range holds thousands of ports: a thousand picks that all come back taken mean the
    // range is exhausted, not bad luck.
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io)?
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(io(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "every loopback port offered was one this run already uses; free some ephemeral ports",
    )))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> PodError + use<> {
    let path = path.to_owned();
    move |source| PodError::Io { path, source }
}

/// A log file opened for appending (a restarted process writes after its predecessor), as stdout and stderr.
pub(crate) fn log_files(log: &Path) -> Result<(Stdio, Stdio), PodError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_error(log))?;
    let err = out.try_clone().map_err(io_error(log))?;
    Ok((out.into(), err.into()))
}

impl Pod {
    /// Starts what `spec` names, logging into `work`.
    pub async fn start(spec: &PodSpec, bins: &Path, work: &Path) -> Result<Self, PodError> {
        std::fs::create_dir_all(work).map_err(io_error(work))?;
        // A switch left by an interrupted run would start the backends without their GPU.
        let gpu_switch = work.join("gpu-pulled");
        if gpu_switch.exists() {
            std::fs::remove_file(&gpu_switch).map_err(io_error(&gpu_switch))?;
        }
        // Ports are picked by binding port 0 and closing it: the window for another process to take one is
        // the few milliseconds until our process binds it.
        let backends = if spec.models.is_some() {
            spec.backends.max(1)
        } else {
            0
        };
        let mut ports = Ports {
            backends: (0..backends)
                .map(|_| {
                    Ok(BackendPorts {
                        http: free_port()?,
                        grpc: free_port()?,
                        metrics: free_port()?,
                    })
                })
                .collect::<Result<_, PodError>>()?,
            gateway: free_port()?,
            admin: free_port()?,
            proxies: Vec::new(),
        };
        let mut proxies = Vec::new();
        for p in &spec.proxies {
            let fault = match p.slow {
                Some((n, delay)) => {
                    let Some(b) = ports.backends.get(n) else {
                        return Err(PodError::Spec(format!(
                            "proxy '{}' is in front of backend {n}, but the pod has {} backend(s)",
                            p.name,
                            ports.backends.len()
                        )));
                    };
                    Fault::Slow {
                        upstream: SocketAddr::from(([127, 0, 0, 1], b.http)),
                        delay,
                    }
                }
                None => Fault::Hung,
            };
            let proxy = FaultProxy::start(fault)
                .await
                .map_err(io_error(Path::new("127.0.0.1:0")))?;
            ports.proxies.push((p.name.clone(), proxy.addr.port()));
            proxies.push(proxy);
        }
        let control = PodControl {
            inner: Arc::new(Mutex::new(Procs {
                backends: Vec::new(),
                gateway: None,
                exits: Vec::new(),
            })),
            ports: ports.clone(),
            bins: bins.to_owned(),
            work: work.to_owned(),
            backend_args: spec.backend_args.clone(),
            repository: work.join("repository"),
            gpu_switch,
        };
        let mut pod = Pod {
            routes_file: work.join("routes.yaml"),
            ports,
            control,
            _proxies: proxies,
        };
        if let Some(models) = &spec.models {
            let repository = pod.control.repository.clone();
            repository_edit::fresh_copy(models, &repository).map_err(io_error(models))?;
            for n in 0..backends {
                pod.control
                    .inner
                    .lock()
                    .await
                    .backends
                    .push((None, repository.clone()));
                pod.control.start_backend(n).await?;
            }
        }
        if let Some(routes) = &spec.routes {
            let exe = bins.join("infergate-gateway");
            if !exe.is_file() {
                return Err(PodError::Missing(exe));
            }
            pod.start_gateway(&exe, routes, spec.gateway_workers, &spec.gateway_args, work)
                .await?;
        }
        Ok(pod)
    }

    /// Starts the gateway on the pod's ports. A port picked when the pod started may since have been taken
    /// as the ephemeral port of some connection (the backends' readiness checks open many): the gateway
    /// then exits with "Address already in use" and is started again on fresh ports, three times at most.
    async fn start_gateway(
        &mut self,
        exe: &Path,
        routes: &Path,
        workers: Option<u16>,
        args: &[String],
        work: &Path,
    ) -> Result<(), PodError> {
        let log = work.join("gateway.log");
        let mut attempt = 1;
        loop {
            self.write_routes(routes)?;
            let (out, err) = log_files(&log)?;
            let mut cmd = Command::new(exe);
            cmd.arg("--config").arg(&self.routes_file);
            if let Some(w) = workers {
                cmd.args(["--workers", &w.to_string()]);
            }
            cmd.args(args);
            let child = cmd
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .map_err(io_error(exe))?;
            let url = format!("http://127.0.0.1:{}/ready", self.ports.admin);
            let ready = {
                let mut procs = self.control.inner.lock().await;
                let child = procs.gateway.insert(child);
                wait_ready(child, "the gateway", &url, &log, Duration::from_secs(60)).await
            };
            match ready {
                Err(PodError::NotReady { ref tail, .. })
                    if attempt < 3 && tail.contains("Address already in use") =>
                {
                    attempt += 1;
                    self.ports.gateway = free_port()?;
                    self.ports.admin = free_port()?;
                }
                other => return other,
            }
        }
    }

    /// The gateway's data address.
    pub fn gateway(&self) -> Target {
        Target::loopback(self.ports.gateway)
    }

    /// The gateway's admin address.
    pub fn admin(&self) -> Target {
        Target::loopback(self.ports.admin)
    }

    /// The first backend's REST address.
    pub fn backend_http(&self) -> Target {
        Target::loopback(self.ports.backends.first().map_or(0, |b| b.http))
    }

    /// The first backend's gRPC address.
    pub fn backend_grpc(&self) -> Target {
        Target::loopback(self.ports.backends.first().map_or(0, |b| b.grpc))
    }

    /// A handle that starts, stops and signals the processes from another task.
    pub fn control(&self) -> PodControl {
        self.control.clone()
    }

    /// Replaces the gateway's routes file with `template` rendered with this pod's ports.
    pub fn write_routes(&self, template: &Path) -> Result<(), PodError> {
        self.routes_writer()
            .write(template)
            .map_err(|source| PodError::Io {
                path: template.to_owned(),
                source,
            })
    }

    /// A handle that rewrites the routes file from another task (edits during the load).
    pub fn routes_writer(&self) -> RoutesWriter {
        RoutesWriter {
            ports: self.ports.clone(),
            file: self.routes_file.clone(),
        }
    }

    /// Stops the processes (SIGKILL through `kill_on_drop` if they are still running) and waits for them.
    pub async fn stop(&self) {
        let mut procs = self.control.inner.lock().await;
        let Procs {
            backends, gateway, ..
        } = &mut *procs;
        for child in gateway
            .iter_mut()
            .chain(backends.iter_mut().filter_map(|(c, _)| c.as_mut()))
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

impl PodControl {
    /// Starts backend `n` on its ports and the repository it was last given, and waits until it is ready.
    async fn start_backend(&self, n: usize) -> Result<(), PodError> {
        let exe = self.bins.join("infergate-backend");
        if !exe.is_file() {
            return Err(PodError::Missing(exe));
        }
        let ports = self.backend_ports(n)?;
        let mut procs = self.inner.lock().await;
        let Some((slot, models)) = procs.backends.get_mut(n) else {
            return Err(PodError::Spec(format!("there is no backend {n}")));
        };
        let log = self.work.join(if n == 0 {
            "backend.log".to_owned()
        } else {
            format!("backend-{n}.log")
        });
        let (out, err) = log_files(&log)?;
        let child = Command::new(&exe)
            .arg("--model-repository")
            .arg(&*models)
            .args(["--http-port", &ports.http.to_string()])
            .args(["--grpc-port", &ports.grpc.to_string()])
            .args(["--metrics-port", &ports.metrics.to_string()])
            .args(&self.backend_args)
            .env("INFERGATE_FAULT_GPU_LOST", &self.gpu_switch)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(io_error(&exe))?;
        let child = slot.insert(child);
        let url = format!("http://127.0.0.1:{}/v2/health/ready", ports.http);
        wait_ready(child, "a backend", &url, &log, Duration::from_secs(120)).await
    }

    fn backend_ports(&self, n: usize) -> Result<BackendPorts, PodError> {
        self.ports.backends.get(n).copied().ok_or_else(|| {
            PodError::Spec(format!(
                "there is no backend {n}: the pod has {} (pod.backends in case.yaml)",
                self.ports.backends.len()
            ))
        })
    }

    /// The process ids of the running processes.
    pub async fn pids(&self) -> Vec<(Process, u32)> {
        let procs = self.inner.lock().await;
        let gateway = procs
            .gateway
            .as_ref()
            .and_then(Child::id)
            .map(|p| (Process::Gateway, p));
        let backends = procs
            .backends
            .iter()
            .enumerate()
            .filter_map(|(n, (c, _))| c.as_ref().and_then(Child::id).map(|p| (Process::Backend(n), p)));
        gateway.into_iter().chain(backends).collect()
    }

    /// SIGKILL to backend `n`, as a node lost or the OOM killer would do; waits until it is gone.
    pub async fn kill_backend(&self, n: usize) -> Result<(), PodError> {
        self.backend_ports(n)?;
        let mut procs = self.inner.lock().await;
        if let Some((Some(child), _)) = procs.backends.get_mut(n) {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        if let Some((slot, _)) = procs.backends.get_mut(n) {
            *slot = None;
        }
        Ok(())
    }

    /// Restarts backend `n` as a rolling update does: SIGTERM and wait for it to drain (if it still runs),
    /// then start it on the same ports, on `models` when given (another repository, a new model version),
    /// and wait until it is ready.
    pub async fn restart_backend(&self, n: usize, models: Option<PathBuf>) -> Result<(), PodError> {
        self.backend_ports(n)?;
        {
            let mut procs = self.inner.lock().await;
            if let Some((slot, repo)) = procs.backends.get_mut(n) {
                if let Some(child) = slot.as_mut() {
                    terminate(child).await;
                }
                *slot = None;
                if let Some(m) = models {
                    *repo = m;
                }
            }
        }
        self.start_backend(n).await
    }

    /// Makes the pod's repository hold exactly the files of `from` (files that differ rewritten, others
    /// removed): what an operator's copy or a storage fault does to a volume under running backends.
    pub fn sync_repository(&self, from: &Path) -> Result<(), PodError> {
        repository_edit::sync_tree(from, &self.repository).map_err(io_error(&self.repository))
    }

    /// Takes the pod's repository folder away, so that it cannot be listed, or puts it back.
    pub fn set_repository_readable(&self, readable: bool) -> Result<(), PodError> {
        repository_edit::set_readable(&self.repository, readable).map_err(io_error(&self.repository))
    }

    /// Pulls the backends' GPU (`true`) or gives it back: while the switch file exists, their engines
    /// destroy the wgpu device and create none (`INFERGATE_FAULT_GPU_LOST`, docs/reliability.md).
    pub fn set_gpu_lost(&self, lost: bool) -> Result<(), PodError> {
        let switch = &self.gpu_switch;
        let done = if lost {
            std::fs::write(switch, b"pulled by the gpu_lost action\n")
        } else {
            std::fs::remove_file(switch).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
        };
        done.map_err(io_error(switch))
    }

    /// SIGTERM to every process at once, as Kubernetes does to a pod, and waits for each to exit (SIGKILL
    /// after a minute). Their exit codes are kept for [`PodControl::exits`].
    pub async fn terminate_all(&self) {
        self.terminate_like_kubelet(Duration::ZERO, Duration::from_secs(60))
            .await;
    }

    /// Stops the pod as the kubelet stops a pod of `deploy/k8s/base/deployment.yaml`: SIGTERM to the gateway
    /// at once, and to each backend once its `preStop` hook (a sleep of `prestop_hold`) has run, so the
    /// backend serves whatever the draining gateway still forwards; SIGKILL for whatever still runs
    /// `grace_period` (`terminationGracePeriodSeconds`) after the start. Waits for every process; their exit
    /// codes are kept for [`PodControl::exits`].
    pub async fn terminate_like_kubelet(&self, prestop_hold: Duration, grace_period: Duration) {
        let deadline = Instant::now() + grace_period;
        let mut procs = self.inner.lock().await;
        let Procs {
            backends,
            gateway,
            exits,
        } = &mut *procs;
        if let Some(child) = gateway.as_ref() {
            send_sigterm(child).await;
        }
        let gateway_exit = async {
            match gateway.as_mut() {
                Some(child) => vec![(Process::Gateway, exit_by(child, deadline).await)],
                None => Vec::new(),
            }
        };
        let backend_exits = async {
            tokio::time::sleep_until(deadline.min(Instant::now() + prestop_hold)).await;
            let mut running: Vec<(Process, &mut Child)> = backends
                .iter_mut()
                .enumerate()
                .filter_map(|(n, (c, _))| c.as_mut().map(|c| (Process::Backend(n), c)))
                .collect();
            for (_, child) in &running {
                send_sigterm(child).await;
            }
            let mut out = Vec::new();
            for (process, child) in &mut running {
                out.push((*process, exit_by(child, deadline).await));
            }
            out
        };
        let (g, b) = tokio::join!(gateway_exit, backend_exits);
        exits.extend(g);
        exits.extend(b);
    }

    /// How each process ended in [`PodControl::terminate_all`]: its exit code, `None` when killed.
    pub async fn exits(&self) -> Vec<(Process, Option<i32>)> {
        self.inner.lock().await.exits.clone()
    }
}

/// SIGTERM through kill(1): the crates forbid `unsafe`, so no libc call.
pub(crate) async fn send_sigterm(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .stdin(Stdio::null())
            .status()
            .await;
    }
}

/// The exit code of a child that was sent SIGTERM, waiting until `deadline`; then SIGKILL, and `None`.
async fn exit_by(child: &mut Child, deadline: Instant) -> Option<i32> {
    match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(status)) => status.code(),
        _ => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            None
        }
    }
}

/// SIGTERM, then wait up to a minute for a drained exit before SIGKILL.
async fn terminate(child: &mut Child) {
    send_sigterm(child).await;
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

pub(crate) async fn wait_ready(
    child: &mut Child,
    what: &'static str,
    url: &str,
    log: &Path,
    limit: Duration,
) -> Result<(), PodError> {
    let client: HyperClient<HttpConnector, Empty<Bytes>> =
        HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
    let deadline = Instant::now() + limit;
    let not_ready = |reason: String| PodError::NotReady {
        what,
        url: url.to_owned(),
        reason,
        log: log.display().to_string(),
        tail: tail(log),
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(not_ready(format!("it exited ({status})")));
        }
        if let Ok(uri) = url.parse::<http::Uri>()
            && let Ok(Ok(resp)) = tokio::time::timeout(Duration::from_secs(1), client.get(uri)).await
            && resp.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(not_ready(format!("not ready after {} s", limit.as_secs())));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Rewrites a pod's routes file from a template.
#[derive(Debug, Clone)]
pub struct RoutesWriter {
    ports: Ports,
    file: PathBuf,
}

impl RoutesWriter {
    /// Renders `template` and renames it over the routes file (written aside first, as an editor or a
    /// ConfigMap update does, so the gateway never reads half a file).
    pub fn write(&self, template: &Path) -> std::io::Result<()> {
        let text = std::fs::read_to_string(template)?;
        let tmp = self.file.with_extension("yaml.tmp");
        std::fs::write(&tmp, render(&text, &self.ports))?;
        std::fs::rename(&tmp, &self.file)
    }
}

/// A routes template with its placeholders replaced by `127.0.0.1:PORT`: `{{gateway}}`, `{{admin}}`;
/// `{{backend_http}}` and `{{backend_grpc}}` (the first backend), `{{backend_http_N}}` and `{{backend_grpc_N}}`
/// (backend N, from 0); `{{proxy_NAME}}` (a fault proxy).
pub fn render(template: &str, ports: &Ports) -> String {
    let a = |p: u16| format!("127.0.0.1:{p}");
    let mut text = template
        .replace("{{gateway}}", &a(ports.gateway))
        .replace("{{admin}}", &a(ports.admin));
    for (n, b) in ports.backends.iter().enumerate() {
        text = text
            .replace(&format!("{{{{backend_http_{n}}}}}"), &a(b.http))
            .replace(&format!("{{{{backend_grpc_{n}}}}}"), &a(b.grpc));
        if n == 0 {
            text = text
                .replace("{{backend_http}}", &a(b.http))
                .replace("{{backend_grpc}}", &a(b.grpc));
        }
    }
    for (name, port) in &ports.proxies {
        text = text.replace(&format!("{{{{proxy_{name}}}}}"), &a(*port));
    }
    text
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

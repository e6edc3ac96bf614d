//! Starts the processes a scenario needs — the backend on a model repository, the gateway on a routes file
//! rendered with the ports chosen — on loopback ports the kernel picks, waits until both are ready, and stops
//! them when dropped. Binaries come from `--bin-dir` or `INFERGATE_BIN_DIR` (the debug or release folder).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use thiserror::Error;
use tokio::process::{Child, Command};
use tokio::time::Instant;

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
}

/// The loopback ports of a running pod.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// Backend REST (also h2c).
    pub backend_http: u16,
    /// Backend gRPC.
    pub backend_grpc: u16,
    /// Backend metrics.
    pub backend_metrics: u16,
    /// Gateway data.
    pub gateway: u16,
    /// Gateway admin.
    pub admin: u16,
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// The backend's model repository.
    pub models: Option<PathBuf>,
    /// Extra backend flags.
    pub backend_args: Vec<String>,
    /// The gateway's routes template (`{{gateway}}`, `{{admin}}`, `{{backend_http}}`, `{{backend_grpc}}` are
    /// replaced by `127.0.0.1:PORT`); no gateway when `None`.
    pub routes: Option<PathBuf>,
    /// Gateway data workers.
    pub gateway_workers: Option<u16>,
}

/// A running pod; its processes stop when it is dropped.
pub struct Pod {
    /// Its ports.
    pub ports: Ports,
    routes_file: PathBuf,
    children: Vec<Child>,
}

/// The folder holding `infergate-gateway` and `infergate-backend`: the flag, else `INFERGATE_BIN_DIR`.
pub fn bin_dir(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_owned)
        .or_else(|| std::env::var_os("INFERGATE_BIN_DIR").map(PathBuf::from))
}

fn free_port() -> Result<u16, PodError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|source| PodError::Io {
        path: "127.0.0.1:0".into(),
        source,
    })?;
    l.local_addr().map(|a| a.port()).map_err(|source| PodError::Io {
        path: "127.0.0.1:0".into(),
        source,
    })
}

impl Pod {
    /// Starts what `spec` names, logging into `work`.
    pub async fn start(spec: &PodSpec, bins: &Path, work: &Path) -> Result<Self, PodError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PodError::Io { path, source }
        };
        std::fs::create_dir_all(work).map_err(io(work))?;
        // Ports are picked by binding port 0 and closing it: the window for another process to take one is
        // the few milliseconds until our process binds it.
        let ports = Ports {
            backend_http: free_port()?,
            backend_grpc: free_port()?,
            backend_metrics: free_port()?,
            gateway: free_port()?,
            admin: free_port()?,
        };
        let mut pod = Pod {
            ports,
            routes_file: work.join("routes.yaml"),
            children: Vec::new(),
        };
        if let Some(models) = &spec.models {
            let exe = bins.join("infergate-backend");
            if !exe.is_file() {
                return Err(PodError::Missing(exe));
            }
            let log = work.join("backend.log");
            let out = std::fs::File::create(&log).map_err(io(log.as_path()))?;
            let err = out.try_clone().map_err(io(log.as_path()))?;
            let child = Command::new(&exe)
                .arg("--model-repository")
                .arg(models)
                .args(["--http-port", &ports.backend_http.to_string()])
                .args(["--grpc-port", &ports.backend_grpc.to_string()])
                .args(["--metrics-port", &ports.backend_metrics.to_string()])
                .args(&spec.backend_args)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .map_err(io(exe.as_path()))?;
            pod.children.push(child);
            let url = format!("http://127.0.0.1:{}/v2/health/ready", ports.backend_http);
            pod.wait_ready("the backend", &url, &log, Duration::from_secs(120))
                .await?;
        }
        if let Some(routes) = &spec.routes {
            let exe = bins.join("infergate-gateway");
            if !exe.is_file() {
                return Err(PodError::Missing(exe));
            }
            pod.write_routes(routes)?;
            let log = work.join("gateway.log");
            let out = std::fs::File::create(&log).map_err(io(log.as_path()))?;
            let err = out.try_clone().map_err(io(log.as_path()))?;
            let mut cmd = Command::new(&exe);
            cmd.arg("--config").arg(&pod.routes_file);
            if let Some(w) = spec.gateway_workers {
                cmd.args(["--workers", &w.to_string()]);
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .map_err(io(exe.as_path()))?;
            pod.children.push(child);
            let url = format!("http://127.0.0.1:{}/ready", ports.admin);
            pod.wait_ready("the gateway", &url, &log, Duration::from_secs(60))
                .await?;
        }
        Ok(pod)
    }

    /// The gateway's data address.
    pub fn gateway(&self) -> Target {
        Target::loopback(self.ports.gateway)
    }

    /// The backend's REST address.
    pub fn backend_http(&self) -> Target {
        Target::loopback(self.ports.backend_http)
    }

    /// The backend's gRPC address.
    pub fn backend_grpc(&self) -> Target {
        Target::loopback(self.ports.backend_grpc)
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
            ports: self.ports,
            file: self.routes_file.clone(),
        }
    }

    async fn wait_ready(
        &mut self,
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
            if let Some(child) = self.children.last_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
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

    /// Stops the processes (SIGKILL through `kill_on_drop` if they are still running) and waits for them.
    pub async fn stop(mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
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

/// A routes template with `{{gateway}}`, `{{admin}}`, `{{backend_http}}`, `{{backend_grpc}}` replaced by
/// `127.0.0.1:PORT`.
pub fn render(template: &str, ports: &Ports) -> String {
    let a = |p: u16| format!("127.0.0.1:{p}");
    template
        .replace("{{gateway}}", &a(ports.gateway))
        .replace("{{admin}}", &a(ports.admin))
        .replace("{{backend_http}}", &a(ports.backend_http))
        .replace("{{backend_grpc}}", &a(ports.backend_grpc))
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

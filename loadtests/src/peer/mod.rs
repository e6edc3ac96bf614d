//! A peer server beside the pod (`pod.peer` in a case), started and stopped by the runner so that one case
//! loads infergate and the server it is compared with, alternating: a real Triton 2.51
//! (`../shared/tools/triton-peer`) whose Python backend runs the backend's ONNX models with onnxruntime, at the
//! version the project venv pins, with the same config.pbtxt (batching, instance group) as the backend.

mod repository;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use thiserror::Error;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use crate::case::spec::PeerKind;
use crate::pod::{self, PodError};
use crate::target::Target;

/// Why the peer could not start.
#[derive(Debug, Error)]
pub enum PeerError {
    /// A tool or interpreter it needs is not where it was looked for.
    #[error("{what} not found at {path}: {fix}")]
    Missing {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to get it.
        fix: &'static str,
    },
    /// A preparation command failed.
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// Its error output.
        stderr: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The backend's repository cannot be served by the peer.
    #[error("the peer's repository: {0}")]
    Repository(String),
    /// The server could not be started, or did not come up.
    #[error("the Triton peer: {0}")]
    Start(#[source] PodError),
}

impl PeerError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PeerError + use<> {
        let path = path.to_owned();
        move |source| PeerError::Io { path, source }
    }
}

/// A running peer; stopped by [`Peer::stop`], killed if dropped first.
pub struct Peer {
    /// REST (HTTP/1.1).
    pub http: u16,
    /// gRPC.
    pub grpc: u16,
    child: Mutex<Option<Child>>,
}

/// How long Triton may take to load the models (each Python stub imports numpy and onnxruntime, then builds
/// its session); a first start after `triton-peer install` is the slow one.
const READY_LIMIT: Duration = Duration::from_secs(240);

impl Peer {
    /// Starts a `kind` peer serving `models` of the backend's repository `from`, logging into `work`.
    pub async fn start(
        kind: PeerKind,
        from: &Path,
        models: &[String],
        work: &Path,
    ) -> Result<Peer, PeerError> {
        match kind {
            PeerKind::TritonOnnxruntime => Self::start_triton(from, models, work).await,
        }
    }

    async fn start_triton(from: &Path, models: &[String], work: &Path) -> Result<Peer, PeerError> {
        let tool = triton_peer(std::env::var_os("INFERGATE_SHARED_TOOLS"))?;
        let python = project_python(std::env::var_os("INFERGATE_PYTHON"), std::env::var_os("HOME"))?;
        // Both sides run the onnxruntime release the project venv pins. The peer's Python backend has its own
        // venv (numpy 1.x, which its stub is built against): onnxruntime goes there on first use.
        let version = output(
            &python,
            &["-c", "import onnxruntime; print(onnxruntime.__version__)"],
        )
        .await?;
        let peer_python = PathBuf::from(output(&tool, &["python"]).await?);
        let has_it = format!("import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '{version}')");
        if output(&peer_python, &["-c", &has_it]).await.is_err() {
            eprintln!(
                "==> installing onnxruntime {version} into the Triton peer's venv ({})",
                peer_python.display()
            );
            let wanted = format!("onnxruntime=={version}");
            output(
                &peer_python,
                &[
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    &wanted,
                    "numpy<2",
                ],
            )
            .await?;
        }
        let repo = work.join("peer-repository");
        if repo.exists() {
            std::fs::remove_dir_all(&repo).map_err(PeerError::io(&repo))?;
        }
        repository::write(from, models, &repo)?;
        let ports = [free_port()?, free_port()?, free_port()?];
        let log = work.join("triton.log");
        let (out, err) = pod::log_files(&log).map_err(PeerError::Start)?;
        // triton-peer execs tritonserver: the child is the server, and its Python stubs are the server's children.
        let child = Command::new(&tool)
            .arg("serve")
            .arg(&repo)
            .args(ports.map(|p| p.to_string()))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(PeerError::io(&tool))?;
        let peer = Peer {
            http: ports[0],
            grpc: ports[1],
            child: Mutex::new(Some(child)),
        };
        {
            let mut slot = peer.child.lock().await;
            if let Some(child) = slot.as_mut() {
                let url = format!("http://127.0.0.1:{}/v2/health/ready", peer.http);
                pod::wait_ready(child, "the Triton peer", &url, &log, READY_LIMIT)
                    .await
                    .map_err(PeerError::Start)?;
            }
        }
        Ok(peer)
    }

    /// Its REST address.
    pub fn http(&self) -> Target {
        Target::loopback(self.http)
    }

    /// Its gRPC address.
    pub fn grpc(&self) -> Target {
        Target::loopback(self.grpc)
    }

    /// SIGTERM (Triton unloads its models and its Python stubs exit), SIGKILL after 30 s; waits for the exit.
    pub async fn stop(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            pod::send_sigterm(&child).await;
            if tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// `triton-peer` in the shared tools folder: `tools` (`INFERGATE_SHARED_TOOLS`), else `../shared/tools` beside
/// the checkout this runner was built from.
fn triton_peer(tools: Option<OsString>) -> Result<PathBuf, PeerError> {
    let tool = tools
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools"))
        .join("triton-peer");
    if !tool.is_file() {
        return Err(PeerError::Missing {
            what: "triton-peer",
            path: tool,
            fix: "it lives in ../shared/tools beside the checkout; set INFERGATE_SHARED_TOOLS to the folder holding it",
        });
    }
    Ok(tool)
}

/// The project venv's python: `python` (`INFERGATE_PYTHON`), else `make venv`'s under `home`.
fn project_python(python: Option<OsString>, home: Option<OsString>) -> Result<PathBuf, PeerError> {
    let python = python
        .map(PathBuf::from)
        .or_else(|| home.map(|h| Path::new(&h).join(".cache/infergate/venv/bin/python")))
        .unwrap_or_default();
    if !python.is_file() {
        return Err(PeerError::Missing {
            what: "the project venv's python",
            path: python,
            fix: "create the venv with `make venv` (make test does), or set INFERGATE_PYTHON",
        });
    }
    Ok(python)
}

fn free_port() -> Result<u16, PeerError> {
    pod::free_port().map_err(PeerError::Start)
}

/// Runs `program args`, and returns its standard output, trimmed.
async fn output(program: &Path, args: &[&str]) -> Result<String, PeerError> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(PeerError::io(program))?;
    if !out.status.success() {
        return Err(PeerError::Command {
            command: format!("{} {}", program.display(), args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_or_venv_is_named_with_where_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = triton_peer(Some(dir.path().into())).unwrap_err().to_string();
        assert!(e.starts_with("triton-peer not found at "), "{e}");
        assert!(e.contains("../shared/tools beside the checkout"), "{e}");
        std::fs::write(dir.path().join("triton-peer"), "#!/bin/sh\n").unwrap();
        assert_eq!(
            triton_peer(Some(dir.path().into())).unwrap(),
            dir.path().join("triton-peer")
        );
        let e = project_python(None, Some(dir.path().into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(".cache/infergate/venv/bin/python") && e.contains("make venv"),
            "{e}"
        );
    }
}

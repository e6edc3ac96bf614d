//! Shared helpers of the backend's integration tests: repositories built from the example models,
//! in-process cores, requests, and the binary on free ports.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use infergate_backend::core::{CoreOptions, ServerCore};
use infergate_backend::repository::{ControlMode, RepositoryOptions};
use infergate_protocol::{DataType, InferInput, InferRequest, InferResponse, InferenceService, TensorData};

/// The committed example repository.
pub fn example_models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/models")
}

/// Bytes of an example model file, e.g. `simple/1/model.onnx`.
pub fn example_file(rel: &str) -> Vec<u8> {
    std::fs::read(example_models().join(rel)).expect("example model file")
}

/// A repository in a temporary folder.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    pub fn new() -> Self {
        Repo {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating folders).
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, bytes).expect("write");
    }

    /// Writes `simple`-style model `name` whose versions are the example's `simple/<v>` models
    /// (`v1`: y = x + 1, `v2`: y = x * 2), with `config` as config.pbtxt (None: no config file).
    pub fn simple(&self, name: &str, versions: &[(u64, u64)], config: Option<&str>) {
        for (folder, example) in versions {
            self.write(
                &format!("{name}/{folder}/model.onnx"),
                example_file(&format!("simple/{example}/model.onnx")),
            );
        }
        if let Some(c) = config {
            self.write(&format!("{name}/config.pbtxt"), c.replace("$NAME", name));
        }
    }
}

/// A simple-model config: max_batch_size 8, x/y FP32 [4]; `extra` is appended.
pub fn simple_config(extra: &str) -> String {
    format!(
        "name: \"$NAME\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 8\n\
         input [ {{ name: \"x\", data_type: TYPE_FP32, dims: [ 4 ] }} ]\n\
         output [ {{ name: \"y\", data_type: TYPE_FP32, dims: [ 4 ] }} ]\n\
         instance_group [ {{ count: 1, kind: KIND_CPU }} ]\n{extra}\n"
    )
}

/// Options for a core over `root`.
pub fn options(root: &Path, mode: ControlMode) -> CoreOptions {
    CoreOptions {
        repository: RepositoryOptions {
            roots: vec![root.to_path_buf()],
            mode,
            ..RepositoryOptions::default()
        },
        poll_debounce: Duration::from_millis(100),
        ..CoreOptions::default()
    }
}

/// A started core.
pub async fn core(root: &Path, mode: ControlMode) -> ServerCore {
    let c = ServerCore::new(options(root, mode));
    c.start().await.expect("start");
    c
}

/// An FP32 request for model `name` (version optional) with rows of 4 values.
pub fn request(name: &str, version: Option<u64>, rows: &[[f32; 4]]) -> InferRequest {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    InferRequest {
        model_name: name.to_string(),
        model_version: version,
        inputs: vec![InferInput {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape: vec![rows.len() as i64, 4],
            parameters: Default::default(),
            data: TensorData::from_f32(&flat),
        }],
        ..InferRequest::default()
    }
}

/// The FP32 values of output `name`.
pub fn output_f32(r: &InferResponse, name: &str) -> Vec<f32> {
    let o = r.output(name).expect("output present");
    o.data
        .as_bytes()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// The state and reason of `model` version `v` in the index.
pub fn index_state(core: &ServerCore, model: &str, v: &str) -> Option<(String, String)> {
    core.repository_index(false)
        .into_iter()
        .find(|e| e.name == model && e.version.as_deref() == Some(v))
        .map(|e| {
            (
                e.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
                e.reason,
            )
        })
}

/// Ports this test binary has handed out: a port bound to `:0` and released can come back from the next
/// bind, so one server's REST and gRPC picks could otherwise be the same port.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A port that was free a moment ago and that this test binary has not handed out before.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
    panic!("every loopback port offered was already handed out")
}

/// One HTTP/1.1 request; returns status and body.
pub async fn http(method: &str, addr: SocketAddr, path: &str, body: &str) -> Result<(u16, String), String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// The backend binary started on free ports.
pub struct Server {
    pub child: std::process::Child,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
}

impl Server {
    /// Starts the binary with `args` after the port flags and waits until REST answers `/v2/health/ready`.
    pub async fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[]).await
    }

    /// [`Server::start`] with environment variables added to the process's own.
    pub async fn start_with_env(args: &[&str], env: &[(&str, &std::path::Path)]) -> Server {
        let (h, g, m) = (free_port(), free_port(), free_port());
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_infergate-backend"))
            .envs(env.iter().copied())
            .args([
                "--http-address=127.0.0.1",
                "--grpc-address=127.0.0.1",
                "--metrics-address=127.0.0.1",
            ])
            .arg(format!("--http-port={h}"))
            .arg(format!("--grpc-port={g}"))
            .arg(format!("--metrics-port={m}"))
            .args(args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the backend binary");
        let mut child = child;
        // Drain stderr continuously: a full pipe would block the server's logging.
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let log = log.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    log.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let s = Server {
            child,
            log,
            http: SocketAddr::from(([127, 0, 0, 1], h)),
            grpc: SocketAddr::from(([127, 0, 0, 1], g)),
            metrics: SocketAddr::from(([127, 0, 0, 1], m)),
        };
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok((200, _)) = http("GET", s.http, "/v2/health/ready", "").await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "the backend did not become ready within 20 s:\n{}",
            s.log.lock().unwrap()
        );
    }

    /// Sends a signal to the process (`TERM`, `INT`).
    pub fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit (at most `limit`); returns its exit code and its stderr.
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, String) {
        let end = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the reader thread catch the last lines.
                std::thread::sleep(Duration::from_millis(50));
                return (status.code(), self.log.lock().unwrap().clone());
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("the backend did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

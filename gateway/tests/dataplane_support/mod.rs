//! Helpers for the data-path integration tests: upstreams written here with hyper, a gateway started
//! in-process on port 0, and clients for HTTP/1.1 and h2c.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use infergate_gateway::server::{Gateway, Overrides};
use tokio::net::TcpListener;

/// An upstream running in the test.
pub struct TestUpstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests it has received.
    pub hits: Arc<AtomicUsize>,
    /// Requests received over each connection it has accepted, in the order they were accepted.
    per_connection: Arc<Mutex<Vec<usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestUpstream {
    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.per_connection.lock().unwrap().len()
    }

    /// Requests received over each connection accepted so far, in the order they were accepted.
    pub fn requests_per_connection(&self) -> Vec<usize> {
        self.per_connection.lock().unwrap().clone()
    }

    /// Stops accepting (open connections end with the runtime).
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Starts an upstream serving HTTP/1.1 and h2c on 127.0.0.1:0 with `handler`.
pub async fn upstream<H, F>(handler: H) -> TestUpstream
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    upstream_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), handler)
}

/// Starts an upstream serving HTTP/1.1 and h2c on `listener` with `handler`.
pub fn upstream_on<H, F>(listener: TcpListener, handler: H) -> TestUpstream
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let per_connection = Arc::new(Mutex::new(Vec::new()));
    let accepted = per_connection.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let index = {
                let mut all = accepted.lock().unwrap();
                all.push(0);
                all.len() - 1
            };
            let handler = handler.clone();
            let counter = counter.clone();
            let accepted = accepted.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    accepted.lock().unwrap()[index] += 1;
                    let f = handler(req);
                    async move { Ok::<_, Infallible>(f.await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    TestUpstream {
        addr,
        hits,
        per_connection,
        task,
    }
}

/// An upstream answering 200 with `body` and a header `x-upstream: NAME` (and echoing what it saw as
/// `x-seen-version`).
pub async fn named_upstream(name: &'static str) -> TestUpstream {
    upstream(move |req: Request<Incoming>| async move {
        let version = format!("{:?}", req.version());
        Response::builder()
            .header("x-upstream", name)
            .header("x-seen-version", version)
            .body(Full::new(Bytes::from(name)))
            .unwrap()
    })
    .await
}

/// Starts a gateway from YAML (listeners on 127.0.0.1:0 unless the YAML says otherwise).
pub async fn gateway(yaml: &str) -> Arc<Gateway> {
    gateway_at(yaml, Path::new("routes.yaml")).await
}

/// Starts a gateway from YAML as if read from `file` (relative TLS paths resolve against its folder).
pub async fn gateway_at(yaml: &str, file: &Path) -> Arc<Gateway> {
    Gateway::start(
        yaml,
        file,
        Overrides {
            data: Some("127.0.0.1:0".parse().unwrap()),
            admin: Some("127.0.0.1:0".parse().unwrap()),
            workers: None,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("test config invalid:\n{e}"))
}

/// A routes file with one catch-all route to one h2c upstream.
pub fn one_route(upstream_addr: SocketAddr, extra_upstream: &str, extra_route: &str) -> String {
    format!(
        r#"
upstreams:
  - name: up
    endpoints: ["{upstream_addr}"]
    protocol: h2c
{extra_upstream}
routes:
  - name: all
    destinations:
      - upstream: up
{extra_route}
"#
    )
}

/// An HTTP/1.1 client (keep-alive pool).
pub fn http1_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An h2c (prior knowledge) client.
pub fn h2c_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Sends a request and collects the response.
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> (http::response::Parts, Bytes) {
    let resp = client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

/// GETs `path` on the admin port and returns status and body.
pub async fn admin_get(gw: &Gateway, path: &str) -> (u16, String) {
    let req = Request::get(format!("http://{}{path}", gw.admin_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    (parts.status.as_u16(), String::from_utf8_lossy(&body).into_owned())
}

/// Waits (up to 5 s, polling every 10 ms) until `cond` holds; panics naming `what` otherwise.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen within 5 s");
}

/// Reads from a raw connection until the gateway closes it; fails the test if that takes over 5 s.
pub async fn read_until_closed(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(
        r.is_ok(),
        "the gateway kept the connection open; it sent: {}",
        String::from_utf8_lossy(&out)
    );
    String::from_utf8_lossy(&out).into_owned()
}

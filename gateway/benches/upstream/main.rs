//! `infergate-bench-upstream ADDR`: the small, fast upstream that `scripts/bench-gateway.sh` puts behind the
//! gateway, nginx and HAProxy alike. HTTP/1.1 and h2c on one port; every request gets 200 and a short JSON
//! body, the shape of a KServe health or small inference answer.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Response, header::CONTENT_TYPE};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

const BODY: &[u8] =
    br#"{"model_name":"simple","outputs":[{"name":"y","datatype":"FP32","shape":[1,4],"data":[2,4,6,8]}]}"#;

fn main() -> std::process::ExitCode {
    let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("usage: infergate-bench-upstream IP:PORT");
        return std::process::ExitCode::FAILURE;
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot listen on {addr}: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    // Read the request body so uploads are part of the measured work.
                    let _ = req.into_body().collect().await;
                    let mut r = Response::new(Full::new(Bytes::from_static(BODY)));
                    r.headers_mut()
                        .insert(CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    Ok::<_, Infallible>(r)
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

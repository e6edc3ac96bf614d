//! The metrics port: `GET /metrics` in Prometheus text format, and the health probes (`/v2/health/live`,
//! `/v2/health/ready`) so the kubelet can probe a backend whose REST and gRPC ports bind to loopback only.

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use infergate_protocol::InferenceService;

use crate::core::ServerCore;

fn respond(core: &ServerCore, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            core.render_metrics(),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET /metrics\n".to_string(),
        ),
        (&Method::GET, "/v2/health/live") => probe(core.live()),
        (&Method::GET, "/v2/health/ready") => probe(core.ready()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "this port serves GET /metrics, /v2/health/live and /v2/health/ready\n".to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(ctype) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn probe(ok: bool) -> (StatusCode, &'static str, String) {
    match ok {
        true => (StatusCode::OK, "text/plain", String::new()),
        false => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", String::new()),
    }
}

/// Serves `/metrics` on `listener` until `shutdown` completes.
pub async fn serve_metrics<F>(listener: TcpListener, core: ServerCore, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a metrics connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let core = core.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let resp = respond(&core, &req);
                async move { Ok::<_, Infallible>(resp) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    }
}

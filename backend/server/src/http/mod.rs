//! The REST front end: the KServe V2 protocol over HTTP/1.1 and h2c on one port (hyper), as Triton
//! serves it. Errors become responses in one place ([`error`]).

mod body;
mod error;
mod handlers;
mod router;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use infergate_protocol::{InferenceService, ServeError};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use body::BodySlot;
pub use body::ChunksBody;
use router::Route;

/// Limits of the REST front end; each, when hit, gives the client an error that names it.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Largest request body, and largest decompressed body, in bytes (Triton's `--http-max-input-size`
    /// default: 64 MiB).
    pub max_body_bytes: usize,
    /// Requests handled at once (health checks are not counted); more are answered 503 at once.
    pub max_concurrent_requests: usize,
    /// Time allowed for a client to send its request headers (slow-loris protection).
    pub header_read_timeout: Duration,
    /// Time allowed for a request body to arrive.
    pub body_read_timeout: Duration,
    /// Concurrent HTTP/2 streams per connection.
    pub max_h2_streams: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: 64 << 20,
            max_concurrent_requests: 4096,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            max_h2_streams: 1024,
        }
    }
}

/// What every request handler shares.
pub(crate) struct State<S> {
    pub(crate) service: S,
    pub(crate) limits: HttpLimits,
    in_flight: Semaphore,
}

/// Serves the REST API on `listener` until `shutdown` completes, then stops accepting, lets in-flight
/// requests finish and returns. Bound the wait with a timeout around this future if needed.
pub async fn serve_http<S, F>(
    listener: TcpListener,
    service: S,
    limits: HttpLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    S: InferenceService,
    F: Future<Output = ()> + Send,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_h2_streams)
        .max_pending_accept_reset_streams(Some(64));
    let state = Arc::new(State {
        in_flight: Semaphore::new(limits.max_concurrent_requests),
        service,
        limits,
    });
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the connections we have.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let svc = service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle(&state, req).await) }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Routes, applies the concurrency limit, serves; every failure becomes a response here.
async fn handle<S: InferenceService>(state: &State<S>, req: Request<Incoming>) -> Response<ChunksBody> {
    let (parts, body) = req.into_parts();
    let mut body = BodySlot::new(body);
    let result = async {
        let route = router::route(&parts.method, parts.uri.path())?;
        // Health checks must answer even when the server is saturated.
        let _permit = if matches!(route, Route::Live | Route::Ready) {
            None
        } else {
            Some(state.in_flight.try_acquire().map_err(|_| {
                ServeError::unavailable(format!(
                    "the server is busy: {} requests are in progress, its limit; retry shortly",
                    state.limits.max_concurrent_requests
                ))
            })?)
        };
        handlers::dispatch(state, route, &parts, &mut body).await
    }
    .await;
    match result {
        Ok(response) => response,
        Err(e) => {
            body.drain(state.limits.max_body_bytes, state.limits.body_read_timeout)
                .await;
            e.into_response()
        }
    }
}

#[cfg(test)]
pub(crate) mod test_service;
#[cfg(test)]
mod tests;

//! The admin API (loopback by default): `/live`, `/ready`, `/metrics`, `/config`, `/config/errors`,
//! `/canary`, `/upstreams`. Plain HTTP/1.1, JSON bodies (Prometheus text for `/metrics`).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config_state::RuntimeState;
use crate::proxy::{Body, full};

/// What the admin API serves.
pub struct Admin {
    /// The running rules and their stores.
    pub state: Arc<RuntimeState>,
    /// Prometheus text renderer.
    pub metrics: PrometheusHandle,
    /// True once listeners are bound and rules loaded, false again while draining.
    pub ready: Arc<AtomicBool>,
}

impl Admin {
    /// Answers one admin request.
    pub fn respond(&self, method: &Method, path: &str) -> Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            return json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                json!({"error": format!("the admin API answers GET only, not {method}")}),
            );
        }
        match path {
            "/live" => json_response(StatusCode::OK, json!({"live": true})),
            "/ready" => {
                if self.ready.load(Ordering::Acquire) {
                    json_response(StatusCode::OK, json!({"ready": true}))
                } else {
                    json_response(StatusCode::SERVICE_UNAVAILABLE, json!({"ready": false}))
                }
            }
            "/metrics" => {
                let mut text = self.metrics.render();
                infergate_telemetry::render_build_info(&mut text, "gateway", env!("CARGO_PKG_VERSION"));
                infergate_telemetry::render_process_metrics(&mut text);
                let mut r = Response::new(full(text));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            "/config" => {
                let rules = self.state.snapshot();
                let warnings: Vec<String> = rules.warnings.iter().map(ToString::to_string).collect();
                json_response(
                    StatusCode::OK,
                    json!({
                        "hash": rules.content_hash,
                        "loaded_at_unix": unix(rules.loaded_at),
                        "warnings": warnings,
                        "rules": &rules.config.rules,
                    }),
                )
            }
            "/config/errors" => {
                let last = self.state.status().last_rejection.map(|r| {
                    json!({
                        "error": r.error,
                        "at_unix": unix(r.at).floor() as u64,
                        "hash": r.content_hash,
                    })
                });
                json_response(StatusCode::OK, json!({"last_rejection": last}))
            }
            "/canary" => json_response(StatusCode::OK, json!({"routes": self.state.canary_reports()})),
            "/upstreams" => {
                let rules = self.state.snapshot();
                let mut names: Vec<_> = rules.upstreams.keys().cloned().collect();
                names.sort();
                let ups: Vec<_> = names
                    .iter()
                    .filter_map(|n| rules.upstreams.get(n))
                    .map(|u| {
                        let eps: Vec<_> = u
                            .endpoints()
                            .into_iter()
                            .map(|e| {
                                json!({
                                    "address": e.addr.to_string(),
                                    "outstanding": e.outstanding,
                                    "ejected_for_ms": e.ejected_for.map(|d| d.as_millis() as u64),
                                    "connections": e.connections,
                                })
                            })
                            .collect();
                        json!({"name": u.name(), "endpoints": eps})
                    })
                    .collect();
                json_response(StatusCode::OK, json!({"upstreams": ups}))
            }
            other => json_response(
                StatusCode::NOT_FOUND,
                json!({"error": format!(
                    "no admin endpoint '{other}'; try /live, /ready, /metrics, /config, /config/errors, /canary, /upstreams"
                )}),
            ),
        }
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn json_response(status: StatusCode, v: serde_json::Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Serves the admin API on `listener` until `shutdown` turns true.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = crate::listener::signalled(&mut shutdown) => return,
        };
        let admin = Arc::clone(&admin);
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let resp = admin.respond(req.method(), req.uri().path());
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

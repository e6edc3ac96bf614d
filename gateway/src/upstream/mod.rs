//! Upstream clusters: endpoints balanced by power-of-two-choices on outstanding requests, outlier ejection,
//! concurrency and queue limits, periodic DNS re-resolution, and connection pools (HTTP/2 or HTTP/1.1, clear
//! text or TLS).
//!
//! [`Upstream::send`] is one try: it never retries (the route's retry policy does), but it classifies every
//! failure as a [`FailureKind`] so the policy decides on data.

mod body;
mod endpoint;
mod error;
mod h1;
mod h2;
mod outlier;
mod pool;
mod resolve;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::FutureExt;
use futures::future::Either;
use http::{Request, Response};
use tokio::sync::{Semaphore, watch};

pub use crate::upstream_protocol::{UpstreamProtocol, UpstreamTls};
pub use ::h2::Reason as H2Reason;
pub use body::{UpstreamBody, UpstreamBodyError};
pub use endpoint::{EndpointSnapshot, EndpointSpec};
pub use error::{FailureKind, UpstreamError};
pub use h2::H2Error;
pub use outlier::OutlierSettings;
pub use pool::ConnectSettings;

use crate::bridge;
use crate::metrics as m;
use crate::proxy::Body;
use crate::try_timeout::TryTimeout;
use body::Guard;
use endpoint::Endpoint;

/// Everything that defines one upstream; two upstreams with equal settings share state across reloads.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSettings {
    /// The upstream's name in the routing rules (also its metric label).
    pub name: String,
    /// Endpoints as `host:port`; a host that is not an IP address is resolved now and every
    /// `resolve_interval`, each address becoming an endpoint (a Kubernetes headless Service).
    pub endpoints: Vec<EndpointSpec>,
    /// How connections are made.
    pub connect: ConnectSettings,
    /// Requests in flight to this upstream at once; more wait in the queue.
    pub max_concurrent: usize,
    /// Requests allowed to wait for a free slot; beyond this the gateway answers 503 / UNAVAILABLE at once.
    pub max_pending: usize,
    /// Outlier detection.
    pub outlier: OutlierSettings,
    /// How often DNS names are resolved again.
    pub resolve_interval: Duration,
}

impl UpstreamSettings {
    /// Settings with defaults for everything but the name and endpoints.
    pub fn new(name: impl Into<String>, endpoints: Vec<EndpointSpec>) -> Self {
        UpstreamSettings {
            name: name.into(),
            endpoints,
            connect: ConnectSettings::default(),
            max_concurrent: 1024,
            max_pending: 1024,
            outlier: OutlierSettings::default(),
            resolve_interval: Duration::from_secs(5),
        }
    }
}

/// One upstream cluster. Cheap to share (`Arc`); its resolver task stops when the last `Arc` is dropped.
pub struct Upstream {
    settings: UpstreamSettings,
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    resolved: watch::Sender<u64>,
    concurrency: Arc<Semaphore>,
    pending: AtomicUsize,
    tries: m::TryCounters,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.settings.name)
            .field("endpoints", &self.endpoints.load().len())
            .finish_non_exhaustive()
    }
}

impl Upstream {
    /// Builds the upstream. Endpoints given as IP addresses are ready at once; DNS names are resolved by a
    /// background task (must be called inside a Tokio runtime).
    pub fn new(settings: UpstreamSettings) -> Arc<Upstream> {
        let static_eps: Vec<Arc<Endpoint>> = settings
            .endpoints
            .iter()
            .filter_map(|spec| spec.ip_addr())
            .map(|addr| Arc::new(Endpoint::new(addr, &settings.connect)))
            .collect();
        let needs_dns = settings.endpoints.iter().any(|s| s.ip_addr().is_none());
        let (resolved, _) = watch::channel(0);
        let upstream = Arc::new(Upstream {
            concurrency: Arc::new(Semaphore::new(settings.max_concurrent.max(1))),
            pending: AtomicUsize::new(0),
            endpoints: ArcSwap::from_pointee(static_eps),
            resolved,
            tries: m::TryCounters::new(Arc::from(settings.name.as_str())),
            settings,
        });
        if needs_dns {
            resolve::spawn(Arc::downgrade(&upstream));
        }
        upstream
    }

    /// The upstream's settings.
    pub fn settings(&self) -> &UpstreamSettings {
        &self.settings
    }

    /// The upstream's name.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The `upstream_tries_total` handles of this upstream.
    pub fn tries(&self) -> &m::TryCounters {
        &self.tries
    }

    /// A view of every endpoint: address, outstanding requests, ejection state, open connections.
    pub fn endpoints(&self) -> Vec<EndpointSnapshot> {
        let now = tokio::time::Instant::now();
        self.endpoints.load().iter().map(|e| e.snapshot(now)).collect()
    }

    /// Sends one try of `req` to one endpoint. The response body keeps the endpoint's outstanding count and
    /// the concurrency slot until it ends or is dropped.
    ///
    /// When a concurrency slot is free and an endpoint known (the common case), the request is handed to the
    /// endpoint's pool before the future is made, so the future holds the exchange and not the request (see
    /// `Pool::send`).
    pub fn send(
        &self,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send + '_ {
        let ready = Arc::clone(&self.concurrency)
            .try_acquire_owned()
            .ok()
            .and_then(|permit| Some((permit, self.endpoint_now()?)));
        match ready {
            Some((permit, endpoint)) => Either::Left(self.dispatch(permit, endpoint, req)),
            // Boxed: waiting for a slot or for the first DNS answer is rare, and its future large.
            None => Either::Right(Box::pin(async move {
                let permit = self.acquire().await?;
                let endpoint = self.pick().await?;
                self.dispatch(permit, endpoint, req).await
            })),
        }
    }

    /// Sends `req` to `endpoint` holding `permit`.
    fn dispatch(
        &self,
        permit: tokio::sync::OwnedSemaphorePermit,
        endpoint: Arc<Endpoint>,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send + '_ {
        let guard = Guard::new(Arc::clone(&endpoint), permit);
        let abandoned = req.extensions().get::<TryTimeout>().map(|signal| AbandonedTry {
            upstream: self,
            endpoint: Arc::clone(&endpoint),
            signal: signal.clone(),
        });
        let req = bridge::to_upstream(
            req,
            self.settings.connect.protocol,
            endpoint.addr(),
            self.settings.connect.tls.as_ref(),
        );
        // An empty body cannot fail: it needs no watching (and no allocations for it).
        let (req, body_failure) = if http_body::Body::is_end_stream(req.body()) {
            (req, None)
        } else {
            let (parts, body) = req.into_parts();
            let (watched, failure) = body::WatchedBody::new(body);
            (
                http::Request::from_parts(parts, crate::proxy::boxed(watched)),
                Some(failure),
            )
        };
        let name = &self.settings.name;
        let sending = endpoint
            .pool()
            .send(name, endpoint.addr(), &self.settings.connect, req);
        // A combinator, not an `async` block: see `Pool::send`.
        sending.map(move |result| {
            // Finished before its timeout: the signal never fires, and dropping the watch counts nothing. (The
            // closure owns it so that it lives, and drops, with the try's future.)
            drop(abandoned);
            let result = result.map_err(|e| match body_failure.as_ref().and_then(|f| f.get()) {
                Some(failure) => e.reclassify(failure.kind, &failure.cause),
                None => e,
            });
            match result {
                Ok(resp) => {
                    if resp.status().is_server_error() {
                        self.record_failure(&endpoint);
                    } else {
                        endpoint.record_success();
                    }
                    Ok(resp.map(|b| UpstreamBody::new(b, guard)))
                }
                Err(e) => {
                    if !e.kind().is_caller_fault() {
                        self.record_failure(&endpoint);
                    }
                    metrics::counter!(m::UPSTREAM_FAILURES, "upstream" => name.clone(), "kind" => e.kind().as_str()).increment(1);
                    Err(e)
                }
            }
        })
    }

    /// Counts a try abandoned at its per-try timeout as a failure of its endpoint, as a 504 from it would be.
    fn record_timeout(&self, endpoint: &Endpoint) {
        tracing::debug!(upstream = %self.settings.name, endpoint = %endpoint.addr(), "try abandoned at its per-try timeout");
        self.record_failure(endpoint);
    }

    async fn acquire(&self) -> Result<tokio::sync::OwnedSemaphorePermit, UpstreamError> {
        if let Ok(p) = Arc::clone(&self.concurrency).try_acquire_owned() {
            return Ok(p);
        }
        let waiting = self.pending.fetch_add(1, Ordering::AcqRel);
        if waiting >= self.settings.max_pending {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!(m::UPSTREAM_OVERLOADED, "upstream" => self.settings.name.clone()).increment(1);
            return Err(UpstreamError::new(
                FailureKind::Overloaded,
                &self.settings.name,
                format!(
                    "at its limit of {} concurrent and {} pending requests; raise max_concurrent/max_pending or add endpoints",
                    self.settings.max_concurrent, self.settings.max_pending
                ),
            ));
        }
        let permit = Arc::clone(&self.concurrency).acquire_owned().await;
        self.pending.fetch_sub(1, Ordering::AcqRel);
        permit.map_err(|_| {
            UpstreamError::new(
                FailureKind::Overloaded,
                &self.settings.name,
                "the upstream was shut down",
            )
        })
    }

    /// The endpoint for the next request (see [`Upstream::endpoint_now`]), waiting for the first DNS answer
    /// when none is known yet.
    async fn pick(&self) -> Result<Arc<Endpoint>, UpstreamError> {
        if let Some(endpoint) = self.endpoint_now() {
            return Ok(endpoint);
        }
        if self.settings.endpoints.iter().any(|s| s.ip_addr().is_none()) {
            // The first resolution may still be under way: wait for it, no longer than a connect.
            // (Boxed: a rare wait that would otherwise grow the future.)
            Box::pin(self.first_resolution()).await;
            if let Some(endpoint) = self.endpoint_now() {
                return Ok(endpoint);
            }
        }
        let names: Vec<String> = self.settings.endpoints.iter().map(|s| s.to_string()).collect();
        Err(UpstreamError::new(
            FailureKind::NoEndpoints,
            &self.settings.name,
            format!(
                "no endpoint address is known (endpoints: {}); check the DNS name",
                names.join(", ")
            ),
        ))
    }

    /// The endpoint for the next request: power of two choices over the endpoints not ejected (all of them
    /// when every one is ejected); `None` while no address is known.
    fn endpoint_now(&self) -> Option<Arc<Endpoint>> {
        let eps = self.endpoints.load();
        match eps.as_slice() {
            [] => None,
            // A lone endpoint is used ejected or not: no clock read to find out.
            [only] => Some(Arc::clone(only)),
            _ => Some(Arc::clone(choose(&eps, tokio::time::Instant::now()))),
        }
    }

    async fn first_resolution(&self) {
        let mut rx = self.resolved.subscribe();
        if *rx.borrow_and_update() == 0 {
            let _ = tokio::time::timeout(self.settings.connect.connect_timeout, rx.changed()).await;
        }
    }

    fn record_failure(&self, endpoint: &Endpoint) {
        let now = tokio::time::Instant::now();
        let eps = self.endpoints.load();
        let ejected = eps.iter().filter(|e| e.is_ejected(now)).count();
        let may_eject = ejected < outlier::max_ejected(&self.settings.outlier, eps.len());
        if let Some(length) = endpoint.record_failure(&self.settings.outlier, now, may_eject) {
            tracing::warn!(
                upstream = %self.settings.name,
                endpoint = %endpoint.addr(),
                ejected_for = ?length,
                "endpoint ejected after {} consecutive failures",
                self.settings.outlier.consecutive_failures
            );
            metrics::counter!(m::UPSTREAM_EJECTIONS, "upstream" => self.settings.name.clone()).increment(1);
        }
    }

    /// Replaces the endpoint set with `addrs`, keeping the state of endpoints that stay.
    fn set_addresses(&self, addrs: &[SocketAddr]) {
        let current = self.endpoints.load();
        let next: Vec<Arc<Endpoint>> = addrs
            .iter()
            .map(|a| {
                current
                    .iter()
                    .find(|e| e.addr() == *a)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Endpoint::new(*a, &self.settings.connect)))
            })
            .collect();
        self.endpoints.store(Arc::new(next));
        self.resolved.send_modify(|n| *n += 1);
    }
}

/// Dropped with a try's future: when the retry layer abandoned the try at its per-try timeout (the signal
/// fired), the endpoint was too slow and outlier detection counts it; when the try finished, or the caller
/// went away, nothing is counted (see [`crate::try_timeout`]).
struct AbandonedTry<'a> {
    upstream: &'a Upstream,
    endpoint: Arc<Endpoint>,
    signal: TryTimeout,
}

impl Drop for AbandonedTry<'_> {
    fn drop(&mut self) {
        if self.signal.fired() {
            self.upstream.record_timeout(&self.endpoint);
        }
    }
}

/// Power of two choices over the endpoints of `eps` (not empty) not ejected at `now`, or over all of them
/// when every one is ejected. Allocates nothing: the two draws are ranks among the candidates.
fn choose(eps: &[Arc<Endpoint>], now: tokio::time::Instant) -> &Arc<Endpoint> {
    let healthy = eps.iter().filter(|e| !e.is_ejected(now)).count();
    let nth = |rank: usize| -> &Arc<Endpoint> {
        if healthy == 0 {
            &eps[rank]
        } else {
            eps.iter()
                .filter(|e| !e.is_ejected(now))
                .nth(rank)
                .unwrap_or(&eps[0])
        }
    };
    let n = if healthy == 0 { eps.len() } else { healthy };
    if n == 1 {
        return nth(0);
    }
    let a = rand::random_range(0..n);
    let mut b = rand::random_range(0..n - 1);
    if b >= a {
        b += 1;
    }
    let (a, b) = (nth(a), nth(b));
    if b.outstanding() < a.outstanding() { b } else { a }
}

//! Traffic mirroring: a copy of a share of a route's requests goes to a shadow upstream, fire and
//! forget. The copy is sent on a spawned task with the buffered body; its response is discarded;
//! it never delays the real response; at most `max_concurrent` copies per route are in flight (the
//! rest are dropped and counted), and each is abandoned after `timeout`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderValue, Request};
use tokio::sync::Semaphore;

use crate::fault::Percent;
use crate::metrics as m;
use crate::retry::SendTry;
use crate::route::RouteKey;

/// Header added to mirrored requests so the shadow can tell them apart.
pub const MIRROR_HEADER: &str = "x-infergate-mirror";

/// A route's mirroring.
#[derive(Debug, Clone)]
pub struct MirrorPolicy {
    /// Shadow upstream name.
    pub upstream: Arc<str>,
    /// Share of requests copied.
    pub percent: Percent,
    /// A copy still running after this is abandoned.
    pub timeout: Duration,
    limiter: Arc<Semaphore>,
    route: Arc<str>,
}

impl MirrorPolicy {
    /// Mirroring of `route` to `upstream`, limited by `limiter` (from [`MirrorStore::attach`]).
    pub fn new(
        route: Arc<str>,
        upstream: Arc<str>,
        percent: Percent,
        timeout: Duration,
        limiter: Arc<Semaphore>,
    ) -> Self {
        Self {
            upstream,
            percent,
            timeout,
            limiter,
            route,
        }
    }

    /// Whether this request is copied (fresh random roll).
    pub fn sample(&self) -> bool {
        self.percent.hit(rand::random())
    }

    /// Copies in flight now.
    pub fn in_flight(&self, max: usize) -> usize {
        max.saturating_sub(self.limiter.available_permits())
    }

    /// Sends `req` through `svc` on a spawned task and discards the response. Returns `false`
    /// (and sends nothing) when the route already has its maximum of copies in flight. Must be
    /// called inside a tokio runtime.
    pub fn spawn<S, B>(&self, mut svc: S, mut req: Request<B>) -> bool
    where
        S: SendTry<Request<B>> + Send + 'static,
        S::Error: std::fmt::Display,
        S::Response: Send,
        B: Send + 'static,
    {
        let Ok(permit) = self.limiter.clone().try_acquire_owned() else {
            metrics::counter!(m::MIRROR_DROPPED, "route" => self.route.to_string()).increment(1);
            return false;
        };
        req.headers_mut()
            .insert(MIRROR_HEADER, HeaderValue::from_static("1"));
        let timeout = self.timeout;
        let route = self.route.clone();
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let outcome = match tokio::time::timeout(timeout, svc.send_try(req)).await {
                Ok(Ok(_response)) => "ok",
                Ok(Err(e)) => {
                    tracing::debug!(%route, %upstream, error = %e, "mirrored request failed");
                    "error"
                }
                Err(_) => "timeout",
            };
            metrics::counter!(m::MIRROR_REQUESTS, "route" => route.to_string(), "outcome" => outcome)
                .increment(1);
        });
        true
    }
}

/// Long-lived concurrency limiters for mirroring, one per route, kept across reloads so copies
/// still in flight from an older config count against the same limit.
#[derive(Debug, Default)]
pub struct MirrorStore {
    limiters: Mutex<HashMap<RouteKey, (usize, Arc<Semaphore>)>>,
}

impl MirrorStore {
    /// The limiter for `route` allowing `max_concurrent` copies (replaced if the limit changed).
    pub fn attach(&self, route: RouteKey, max_concurrent: usize) -> Arc<Semaphore> {
        let mut m = match self.limiters.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match m.get(&route) {
            Some((n, s)) if *n == max_concurrent => s.clone(),
            _ => {
                let s = Arc::new(Semaphore::new(max_concurrent));
                m.insert(route, (max_concurrent, s.clone()));
                s
            }
        }
    }

    /// Forgets routes not in `keep`.
    pub fn retain(&self, keep: &[RouteKey]) {
        if let Ok(mut m) = self.limiters.lock() {
            m.retain(|k, _| keep.contains(k));
        }
    }
}

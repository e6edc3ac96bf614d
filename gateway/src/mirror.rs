//! Traffic mirroring: a copy of a share of a route's requests goes to a shadow upstream, fire and
//! forget. The copy is sent on a spawned task with the buffered body; its response is discarded;
//! it never delays the real response; at most `max_concurrent` copies per route are in flight (the
//! rest are dropped and counted), and each is abandoned after `timeout`.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Request};
use tokio::sync::Semaphore;

use crate::fault::Percent;
use crate::metrics as m;
use crate::retry::SendTry;

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
    limit: MirrorLimit,
    route: Arc<str>,
}

impl MirrorPolicy {
    /// Mirroring of `route` to `upstream`, limited by `limit`.
    pub fn new(
        route: Arc<str>,
        upstream: Arc<str>,
        percent: Percent,
        timeout: Duration,
        limit: MirrorLimit,
    ) -> Self {
        Self {
            upstream,
            percent,
            timeout,
            limit,
            route,
        }
    }

    /// Whether this request is copied (fresh random roll).
    pub fn sample(&self) -> bool {
        self.percent.hit(rand::random())
    }

    /// Copies in flight now.
    pub fn in_flight(&self) -> usize {
        self.limit.max.saturating_sub(self.limit.available_permits())
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
        let Ok(permit) = self.limit.permits.clone().try_acquire_owned() else {
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

/// How many copies of a route's requests may be in flight at once: the limit and its permits. A new config
/// version keeps the running version's permits while the limit is unchanged, so copies still in flight from
/// the older version count against the same limit ([`MirrorLimit::carry_over`]).
#[derive(Debug, Clone)]
pub struct MirrorLimit {
    max: usize,
    permits: Arc<Semaphore>,
}

impl MirrorLimit {
    /// A fresh limit of `max` copies in flight.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            permits: Arc::new(Semaphore::new(max)),
        }
    }

    /// The running policy's limit when it allows `max` copies too, else a fresh one. Pure.
    pub fn carry_over(running: Option<&MirrorPolicy>, max: usize) -> Self {
        match running {
            Some(p) if p.limit.max == max => p.limit.clone(),
            _ => Self::new(max),
        }
    }

    /// Copies that may still start now.
    pub fn available_permits(&self) -> usize {
        self.permits.available_permits()
    }
}

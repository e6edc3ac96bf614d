//! The retry loop, as a function ([`send`]) and as a tower layer ([`RetryLayer`]).
//!
//! The loop is written out explicitly rather than with `tower::retry::Retry` because the decision
//! needs more than a `Policy` sees: the overall deadline shared by tries and back-off, rewriting
//! `grpc-timeout` per try, reading gRPC trailers from a bounded response buffer, and a budget on
//! tokio's clock. The layer wraps the same loop so it still composes in a tower stack.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::{self, BoxFuture, Either};
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{RetryBudget, RetryPolicy, SendTry, UpstreamError, UpstreamFailure, grpc_status};
use crate::metrics::{self as m, RetryOutcome};
use crate::retry::replay::ReplayBody;
use crate::timeout::{GRPC_TIMEOUT, TimeoutPolicy, format_grpc_timeout};
use crate::try_timeout::{TryTimeout, timeout_signalled};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the retry loop did, carried by errors and, when it did more than one plain try (a retry, or a retry
/// the budget refused), inserted into the response's extensions. A response without it had one try and no
/// refused retry: inserting it always cost three allocations per request (the extensions map and the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryInfo {
    /// Tries made (1 = no retry).
    pub tries: u32,
    /// Why the last retry was made, if any (`5xx`, `gateway-error`, `connect-failure`,
    /// `refused-stream`, `reset`, `per-try-timeout`, `status`, `grpc-status`, `retriable-4xx`).
    pub last_reason: Option<&'static str>,
    /// Whether a retry was wanted but the budget refused it.
    pub budget_exhausted: bool,
}

/// Why the retry loop produced no response. Map to HTTP 504 / gRPC DEADLINE_EXCEEDED for the two
/// timeouts; for `Upstream`, by the upstream failure; for `ResponseBody`, 502 / UNAVAILABLE.
#[derive(Debug, thiserror::Error)]
pub enum RetryError<E> {
    /// The overall deadline (route timeout or caller's `grpc-timeout`) passed.
    #[error("upstream did not answer within the request deadline ({} tries)", .info.tries)]
    DeadlineExceeded {
        /// What the loop did.
        info: RetryInfo,
    },
    /// The last try hit the per-try timeout and no retry was possible.
    #[error("upstream did not answer within the per-try timeout of {timeout:?} ({} tries)", .info.tries)]
    PerTryTimeout {
        /// The per-try limit.
        timeout: Duration,
        /// What the loop did.
        info: RetryInfo,
    },
    /// The last try failed without a response.
    #[error("upstream request failed ({} tries): {source}", .info.tries)]
    Upstream {
        /// The upstream error.
        #[source]
        source: E,
        /// What the loop did.
        info: RetryInfo,
    },
    /// Reading a gRPC response (to find its trailers) failed.
    #[error("upstream response body failed ({} tries): {source}", .info.tries)]
    ResponseBody {
        /// The body error.
        #[source]
        source: BoxError,
        /// What the loop did.
        info: RetryInfo,
    },
}

impl<E> RetryError<E> {
    /// What the loop did.
    pub fn info(&self) -> RetryInfo {
        match self {
            RetryError::DeadlineExceeded { info }
            | RetryError::PerTryTimeout { info, .. }
            | RetryError::Upstream { info, .. }
            | RetryError::ResponseBody { info, .. } => *info,
        }
    }

    /// Whether this is a timeout (504 / DEADLINE_EXCEEDED).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            RetryError::DeadlineExceeded { .. } | RetryError::PerTryTimeout { .. }
        )
    }
}

/// A response body: the upstream's stream, or frames buffered while looking for gRPC trailers
/// followed by the rest of the stream.
#[derive(Debug)]
pub enum RetryBody<B> {
    /// Passed through untouched.
    Stream(B),
    /// Buffered frames, then (when the buffer limit was reached) the rest.
    Buffered {
        /// Frames read so far (data and possibly trailers).
        frames: VecDeque<Frame<Bytes>>,
        /// The unread remainder.
        rest: Option<B>,
    },
}

impl<B> Body for RetryBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.get_mut() {
            RetryBody::Stream(b) => Pin::new(b).poll_frame(cx),
            RetryBody::Buffered { frames, rest } => {
                if let Some(f) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(f)));
                }
                match rest {
                    Some(b) => Pin::new(b).poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RetryBody::Stream(b) => b.is_end_stream(),
            RetryBody::Buffered { frames, rest } => {
                frames.is_empty() && rest.as_ref().is_none_or(Body::is_end_stream)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RetryBody::Stream(b) => b.size_hint(),
            RetryBody::Buffered { .. } => SizeHint::default(),
        }
    }
}

enum Outcome<R, E> {
    Response(Response<RetryBody<R>>),
    Failed(E),
    BodyFailed(BoxError),
    PerTryTimeout(Duration),
    Deadline,
}

/// Sends `req` through `svc`, retrying under `policy`, within `deadline` (see
/// [`TimeoutPolicy::deadline`]). The request body is replayed only when it was fully buffered
/// ([`ReplayBody::Full`]). `route` labels the metrics `infergate_gateway_retries_total{route,reason}`
/// and `infergate_gateway_retry_budget_exhausted_total{route}`.
///
/// gRPC requests (`content-type: application/grpc*`) get `grpc-timeout` set on each try to the time
/// left (the lesser of the deadline and the per-try timeout). When the policy retries on gRPC codes
/// and a gRPC response carries no `grpc-status` in its headers, up to `max_replay_bytes` of the
/// response are read to find its trailers; a larger response is passed on without a retry decision.
///
/// A request that cannot be retried (its body is not replayable, or the policy never retries: the default)
/// takes one try without the loop, whose future is several times larger and is moved on every await.
pub fn send<'a, S, B, R>(
    svc: &'a mut S,
    req: Request<ReplayBody<B>>,
    policy: &'a RetryPolicy,
    budget: &'a RetryBudget,
    deadline: Option<Instant>,
    route: &'a str,
) -> impl Future<Output = Result<Response<RetryBody<R>>, RetryError<S::Error>>> + 'a
where
    S: SendTry<Request<ReplayBody<B>>, Response = Response<R>>,
    S::Error: UpstreamError,
    B: Body<Data = Bytes> + Unpin + 'a,
    R: Body<Data = Bytes> + Unpin + 'a,
    R::Error: Into<BoxError>,
{
    if req.body().is_replayable() && policy.retries() {
        // Boxed: the loop's future is several times the single try's, and every request would carry it.
        Either::Left(Box::pin(retry_loop(svc, req, policy, budget, deadline, route)))
    } else {
        Either::Right(single_try(svc, req, policy, budget, deadline))
    }
}

/// The one try of a request that cannot be retried: what the loop does on its last possible try.
fn single_try<'a, S, B, R>(
    svc: &'a mut S,
    req: Request<ReplayBody<B>>,
    policy: &RetryPolicy,
    budget: &RetryBudget,
    deadline: Option<Instant>,
) -> impl Future<Output = Result<Response<RetryBody<R>>, RetryError<S::Error>>> + 'a
where
    S: SendTry<Request<ReplayBody<B>>, Response = Response<R>>,
    S::Error: 'a,
    B: 'a,
    R: 'a,
{
    let now = Instant::now();
    budget.deposit(now);
    let info = RetryInfo {
        tries: 1,
        ..RetryInfo::default()
    };
    let remaining = deadline.map(|d| d.saturating_duration_since(now));
    if remaining == Some(Duration::ZERO) {
        return Either::Left(future::ready(Err(RetryError::DeadlineExceeded { info })));
    }
    let (try_limit, limited_by_deadline) = try_limit(policy.per_try_timeout, remaining);
    let mut req = req;
    if let Some(t) = try_limit
        && is_grpc_request(req.headers())
    {
        req.headers_mut().insert(GRPC_TIMEOUT, format_grpc_timeout(t));
    }
    let answered = move |result: Result<Response<R>, S::Error>| match result {
        Ok(resp) => Ok(resp.map(RetryBody::Stream)),
        Err(source) => Err(RetryError::Upstream { source, info }),
    };
    let signal = per_try_signal(&mut req, try_limit, limited_by_deadline);
    let call = svc.send_try(req);
    Either::Right(match try_limit {
        None => Either::Left(call.map(answered)),
        Some(t) => Either::Right(timed_try(now + t, call, signal).map(move |r| match r {
            Ok(result) => answered(result),
            Err(_) if limited_by_deadline => Err(RetryError::DeadlineExceeded { info }),
            Err(_) => Err(RetryError::PerTryTimeout { timeout: t, info }),
        })),
    })
}

/// For a try limited by the per-try timeout (not by the route's deadline), the signal that tells the upstream
/// the try was abandoned at that timeout, put in the request's extensions (see [`crate::try_timeout`]).
fn per_try_signal<B>(
    req: &mut Request<B>,
    limit: Option<Duration>,
    limited_by_deadline: bool,
) -> Option<TryTimeout> {
    let signal = (limit.is_some() && !limited_by_deadline).then(TryTimeout::default)?;
    req.extensions_mut().insert(signal.clone());
    Some(signal)
}

/// A try under its time limit; the signal, when there is one, fires before the abandoned try is dropped.
fn timed_try<F: Future>(
    deadline: Instant,
    call: F,
    signal: Option<TryTimeout>,
) -> impl Future<Output = Result<F::Output, tokio::time::error::Elapsed>> {
    match signal {
        Some(signal) => Either::Left(timeout_signalled(deadline, call, signal)),
        None => Either::Right(tokio::time::timeout_at(deadline, call)),
    }
}

/// A try's time limit, the lesser of the per-try timeout and the time `remaining` to the deadline, and
/// whether it is the deadline that limits it.
fn try_limit(per_try: Option<Duration>, remaining: Option<Duration>) -> (Option<Duration>, bool) {
    match (per_try, remaining) {
        (Some(p), Some(r)) if r <= p => (Some(r), true),
        (Some(p), _) => (Some(p), false),
        (None, r) => (r, r.is_some()),
    }
}

/// The retry loop, for a request that may be retried.
async fn retry_loop<S, B, R>(
    svc: &mut S,
    req: Request<ReplayBody<B>>,
    policy: &RetryPolicy,
    budget: &RetryBudget,
    deadline: Option<Instant>,
    route: &str,
) -> Result<Response<RetryBody<R>>, RetryError<S::Error>>
where
    S: SendTry<Request<ReplayBody<B>>, Response = Response<R>>,
    S::Error: UpstreamError,
    B: Body<Data = Bytes> + Unpin,
    R: Body<Data = Bytes> + Unpin,
    R::Error: Into<BoxError>,
{
    // One clock read serves the budget, the first try's deadline arithmetic and its timer.
    let arrived = Instant::now();
    budget.deposit(arrived);
    let (parts, body) = req.into_parts();
    // The head is cloned for a try that may be followed by another; the last possible try takes it.
    let mut parts = Some(parts);
    let is_grpc = parts.as_ref().is_some_and(|p| is_grpc_request(&p.headers));
    let replayable = body.is_replayable();
    let mut original = Some(body);
    let mut info = RetryInfo::default();
    // Set when a wanted retry was skipped because its back-off would pass the deadline.
    let mut deadline_cut = false;
    loop {
        info.tries += 1;
        let now = if info.tries == 1 { arrived } else { Instant::now() };
        let remaining = deadline.map(|d| d.saturating_duration_since(now));
        if remaining == Some(Duration::ZERO) {
            if info.tries > 1 {
                RetryOutcome::DeadlineExceeded.count(route);
            }
            return Err(RetryError::DeadlineExceeded { info });
        }
        let (try_limit, limited_by_deadline) = try_limit(policy.per_try_timeout, remaining);
        let can_retry = replayable && info.tries < policy.attempts && !policy.retry_on.is_empty();
        // A try that may be followed by another sends copies; the last possible try takes the originals.
        let (head, body) = if can_retry {
            (
                parts.as_ref().map(clone_parts),
                original.as_ref().and_then(ReplayBody::try_clone),
            )
        } else {
            (parts.take(), original.take())
        };
        let (Some(head), Some(body)) = (head, body) else {
            // Unreachable by construction: the originals are taken only by a try that cannot be retried.
            return Err(RetryError::DeadlineExceeded { info });
        };
        let mut req = Request::from_parts(head, body);
        if is_grpc && let Some(t) = try_limit {
            req.headers_mut().insert(GRPC_TIMEOUT, format_grpc_timeout(t));
        }

        let signal = per_try_signal(&mut req, try_limit, limited_by_deadline);
        let call = svc.send_try(req);
        let result = match try_limit {
            Some(t) => timed_try(now + t, call, signal).await.ok(),
            None => Some(call.await),
        };
        let (reason, outcome): (Option<&'static str>, Outcome<R, S::Error>) = match result {
            None if limited_by_deadline => (None, Outcome::Deadline),
            None => (
                policy.retry_on.per_try_timeout(),
                Outcome::PerTryTimeout(try_limit.unwrap_or_default()),
            ),
            Some(Err(e)) => {
                let f = e.failure();
                (policy.retry_on.failure(f), Outcome::Failed(e))
            }
            Some(Ok(resp)) => {
                let mut reason = policy.retry_on.status(resp.status());
                if reason.is_none() && is_grpc {
                    reason = policy.retry_on.grpc_headers(resp.headers());
                }
                if reason.is_none()
                    && is_grpc
                    && can_retry
                    && policy.retry_on.has_grpc_codes()
                    && grpc_status(resp.headers()).is_none()
                {
                    // Boxed: rarely taken, and large enough to grow every request's future.
                    Box::pin(read_trailers(resp, policy, deadline)).await
                } else {
                    (reason, Outcome::Response(resp.map(RetryBody::Stream)))
                }
            }
        };
        let wanted_retry = reason.is_some();
        if let Some(reason) = reason
            && can_retry
        {
            if budget.try_withdraw(Instant::now()) {
                let delay = policy.backoff.delay(info.tries - 1, rand::random());
                let fits = deadline.is_none_or(|d| Instant::now() + delay < d);
                deadline_cut = !fits;
                if fits {
                    info.last_reason = Some(reason);
                    metrics::counter!(m::RETRIES, "route" => route.to_string(), "reason" => reason)
                        .increment(1);
                    RetryOutcome::Attempted.count(route);
                    tracing::debug!(route, reason, try_no = info.tries, ?delay, "retrying");
                    tokio::time::sleep(delay).await;
                    continue;
                }
            } else {
                info.budget_exhausted = true;
                metrics::counter!(m::RETRY_BUDGET_EXHAUSTED, "route" => route.to_string()).increment(1);
                RetryOutcome::BudgetExhausted.count(route);
            }
        }
        if let Some(ending) = retry_ending(&info, &outcome, wanted_retry, deadline_cut) {
            ending.count(route);
        }
        return match outcome {
            Outcome::Response(mut resp) => {
                if info.tries > 1 || info.budget_exhausted {
                    resp.extensions_mut().insert(info);
                }
                Ok(resp)
            }
            Outcome::Failed(source) => Err(RetryError::Upstream { source, info }),
            Outcome::BodyFailed(source) => Err(RetryError::ResponseBody { source, info }),
            Outcome::PerTryTimeout(_) if deadline_cut => Err(RetryError::DeadlineExceeded { info }),
            Outcome::PerTryTimeout(timeout) => Err(RetryError::PerTryTimeout { timeout, info }),
            Outcome::Deadline => Err(RetryError::DeadlineExceeded { info }),
        };
    }
}

/// How a request that retried (or was cut short by its deadline while retrying) ended, for
/// `retry_outcomes_total`; `None` for a request that took one try and wanted no retry, and for one whose
/// wanted retry the budget refused (counted as `budget_exhausted` where it was refused).
fn retry_ending<R, E>(
    info: &RetryInfo,
    outcome: &Outcome<R, E>,
    wanted_retry: bool,
    deadline_cut: bool,
) -> Option<RetryOutcome> {
    if info.budget_exhausted {
        return None;
    }
    if deadline_cut || (info.tries > 1 && matches!(outcome, Outcome::Deadline)) {
        return Some(RetryOutcome::DeadlineExceeded);
    }
    if info.tries == 1 {
        return None;
    }
    Some(match outcome {
        Outcome::Response(_) if !wanted_retry => RetryOutcome::Succeeded,
        _ => RetryOutcome::Failed,
    })
}

fn is_grpc_request(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A copy of a request head for one try.
fn clone_parts(p: &http::request::Parts) -> http::request::Parts {
    let mut req = Request::new(());
    *req.method_mut() = p.method.clone();
    *req.uri_mut() = p.uri.clone();
    *req.version_mut() = p.version;
    *req.headers_mut() = p.headers.clone();
    *req.extensions_mut() = p.extensions.clone();
    req.into_parts().0
}

/// Buffers a gRPC response (up to the replay limit, within the deadline) to read `grpc-status`
/// from its trailers.
async fn read_trailers<R, E>(
    resp: Response<R>,
    policy: &RetryPolicy,
    deadline: Option<Instant>,
) -> (Option<&'static str>, Outcome<R, E>)
where
    R: Body<Data = Bytes> + Unpin,
    R::Error: Into<BoxError>,
{
    let (parts, mut body) = resp.into_parts();
    let mut frames = VecDeque::new();
    let mut len = 0usize;
    let read = async {
        loop {
            match body.frame().await {
                None => return Ok::<_, BoxError>((None::<HeaderMap>, true)),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(frame)) => {
                    if let Some(t) = frame.trailers_ref() {
                        let t = t.clone();
                        frames.push_back(frame);
                        return Ok((Some(t), true));
                    }
                    len += frame.data_ref().map_or(0, Bytes::len);
                    frames.push_back(frame);
                    if len > policy.max_replay_bytes {
                        return Ok((None, false));
                    }
                }
            }
        }
    };
    let result = match deadline {
        Some(d) => tokio::time::timeout_at(d, read).await.ok(),
        None => Some(read.await),
    };
    match result {
        None => (None, Outcome::Deadline),
        Some(Err(e)) => (
            policy.retry_on.failure(UpstreamFailure::Reset),
            Outcome::BodyFailed(e),
        ),
        Some(Ok((trailers, ended))) => {
            let reason = trailers.as_ref().and_then(|t| policy.retry_on.grpc_headers(t));
            let rest = if ended { None } else { Some(body) };
            (
                reason,
                Outcome::Response(Response::from_parts(parts, RetryBody::Buffered { frames, rest })),
            )
        }
    }
}

/// Tower layer running [`send`] with one route's policy, budget and timeout.
#[derive(Debug, Clone)]
pub struct RetryLayer {
    policy: Arc<RetryPolicy>,
    budget: Arc<RetryBudget>,
    timeout: TimeoutPolicy,
    route: Arc<str>,
}

impl RetryLayer {
    /// A layer for `route`.
    pub fn new(
        route: Arc<str>,
        policy: Arc<RetryPolicy>,
        budget: Arc<RetryBudget>,
        timeout: TimeoutPolicy,
    ) -> Self {
        Self {
            policy,
            budget,
            timeout,
            route,
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RetryLayer`]. Its deadline is computed when `call` is made, from the
/// route timeout and the request's `grpc-timeout`.
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    layer: RetryLayer,
}

impl<S, B, R> Service<Request<ReplayBody<B>>> for Retry<S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: UpstreamError,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    R: Body<Data = Bytes> + Unpin + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<RetryBody<R>>;
    type Error = RetryError<S::Error>;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service is awaited per try inside the loop.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<B>>) -> Self::Future {
        let inner = self.inner.clone();
        let l = self.layer.clone();
        Box::pin(async move {
            let mut inner = inner;
            let deadline = l.timeout.deadline(req.headers(), Instant::now());
            send(&mut inner, req, &l.policy, &l.budget, deadline, &l.route).await
        })
    }
}

//! The request pipeline: one request from arrival to response.
//!
//! Each request loads ONE snapshot of the running rules and keeps it to the end, so a reload never changes
//! the rules under a request in flight. The stages, in order: protocol checks (CONNECT, upgrades, body
//! size) → `x-request-id` → route match (for gRPC, the model name peeked from the body) → fault injection →
//! caller identification and quota → canary split and model-version rewrite → retries and timeouts around
//! the upstream call → mirroring → response headers, metrics and canary bookkeeping. A `ModelStreamInfer`
//! stream is routed on its first message, and every message, that one included, passes the same checks on
//! its way upstream (`stream.rs`).

mod body_bytes;
mod observe;
mod stream;

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use http::header::{CONTENT_LENGTH, HeaderName, HeaderValue};
use http::{Method, Request, Response};
use http_body::Body as _;
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use crate::bridge;
use crate::caller::Caller;
use crate::config_state::{Rules, RuntimeState, Snapshot};
use crate::connection::ConnInfo;
use crate::error::{ErrorKind, GatewayError, GrpcCode};
use crate::headers::{self, UpgradeRequest};
use crate::metrics::{self as m, DestinationMetrics};
use crate::model_ref::grpc::{
    FRAME_HEADER_LEN, GrpcPeek, MODEL_STREAM_INFER_PATH, ModelFields, frame_header, peek_model_fields,
};
use crate::proxy::{Body, BoxError, boxed};
use crate::quota::QuotaDecision;
use crate::request_target;
use crate::retry::{self, ReplayBody, RetryError, SendTry, UpstreamFailure};
use crate::route::{ModelRef, RequestFacts};
use crate::split::{rewrite_grpc_version, rewrite_rest_path};
use crate::upstream::{FailureKind, Upstream, UpstreamBody, UpstreamError};
use body_bytes::{Counted, RequestTally};
use observe::{BodyEnd, Observed};
use stream::{CheckedMessages, EndsWithVerdict, StreamPolicy, Verdict};

/// How much of a gRPC body is read to find `model_name` when routes match on the model.
const PEEK_LIMIT: usize = 4 << 20;

/// The body type requests carry once past the listener.
type ReqBody = ReplayBody<Body>;

/// Handles one request on `state`'s running rules. Never fails: every error becomes a response here.
pub async fn handle(state: Arc<RuntimeState>, conn: Arc<ConnInfo>, req: Request<Body>) -> Response<Body> {
    let started = Instant::now();
    let grpc = bridge::is_grpc(req.headers());
    let rules = state.snapshot();
    let mut labels = Labels::default();
    let mut req = count_request_bytes(req, &mut labels);
    let request_id = headers::ensure_request_id(req.headers_mut());
    let result = run(&state, &rules, &conn, req, grpc, started, &mut labels).await;
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            labels.error = Some(e.kind().as_str());
            labels.refused = matches!(e.kind(), ErrorKind::QuotaExceeded | ErrorKind::Overloaded);
            if matches!(e.kind(), ErrorKind::Internal) {
                tracing::error!(error = %e, "internal gateway error");
            } else {
                tracing::debug!(error = %e, kind = e.kind().as_str(), "request refused by the gateway");
            }
            e.into_response(grpc)
        }
    };
    let mut resp = labels.record(resp, grpc, started);
    resp.headers_mut().insert(headers::REQUEST_ID, request_id);
    resp
}

/// Wraps a request body that has bytes to count; the tally goes to the labels, which name its counter.
fn count_request_bytes(req: Request<Body>, labels: &mut Labels) -> Request<Body> {
    if req.body().is_end_stream() {
        return req;
    }
    let tally = Arc::new(RequestTally::default());
    labels.request_bytes = Some(Arc::clone(&tally));
    req.map(|body| boxed(Counted::new(body, tally)))
}

/// What the request's metrics are labelled with, gathered along the way.
#[derive(Default)]
struct Labels {
    /// The matched route.
    route: Option<Arc<str>>,
    /// The chosen destination's metric handles.
    destination: Option<Arc<DestinationMetrics>>,
    /// The gateway's error kind when it answered itself; `None` when the upstream answered.
    error: Option<&'static str>,
    /// The gateway refused the request (quota, overload): counted, but kept out of the latency histogram.
    refused: bool,
    /// The request body's byte count, when it has a body.
    request_bytes: Option<Arc<RequestTally>>,
}

impl Labels {
    /// Records the request's duration (unless the gateway refused it) and counts it in `requests_total`:
    /// at once when the status is known from the response head, or when the body ends for a gRPC
    /// response whose status comes in trailers.
    fn record(mut self, resp: Response<Body>, grpc: bool, started: Instant) -> Response<Body> {
        let status = resp.status().as_u16();
        let resp = self.count_bytes(resp);
        if !self.refused {
            let elapsed = started.elapsed();
            match &self.destination {
                Some(d) => d.record_duration(elapsed),
                None => metrics::histogram!(m::REQUEST_DURATION,
                    "route" => self.route_label(), "destination" => "none")
                .record(elapsed.as_secs_f64()),
            }
        }
        let header_grpc = if grpc {
            retry::grpc_status(resp.headers())
        } else {
            None
        };
        if !grpc || header_grpc.is_some() || self.error.is_some() {
            self.count(status, header_grpc);
            return resp;
        }
        // A gRPC answer with its status in the trailers: count when the body ends.
        let (parts, body) = resp.into_parts();
        let body = Observed::new(body, move |end| match end {
            BodyEnd::Trailers(grpc_status) => self.count(status, grpc_status),
            BodyEnd::Failed | BodyEnd::Dropped => {
                // No status reached the caller: the stream broke (or the caller left) mid-answer.
                let outcome = if matches!(end, BodyEnd::Failed) {
                    "upstream_reset"
                } else {
                    "cancelled"
                };
                self.count_as(outcome, status, None);
            }
        });
        Response::from_parts(parts, boxed(body))
    }

    /// Names the counter of the request's body bytes and counts the response's body bytes as they are sent,
    /// both under the chosen destination (or `none`).
    fn count_bytes(&mut self, resp: Response<Body>) -> Response<Body> {
        let (request_counter, response_counter) = match &self.destination {
            Some(d) => (d.request_bytes().clone(), d.response_bytes().clone()),
            None => {
                let labels = || [("route", self.route_label()), ("destination", "none".into())];
                (
                    metrics::counter!(m::REQUEST_BYTES, &labels()),
                    metrics::counter!(m::RESPONSE_BYTES, &labels()),
                )
            }
        };
        if let Some(tally) = self.request_bytes.take() {
            tally.count_into(request_counter);
        }
        if resp.body().is_end_stream() {
            return resp;
        }
        resp.map(|body| boxed(Counted::new(body, response_counter)))
    }

    fn count(&self, status: u16, grpc_status: Option<u32>) {
        match (&self.destination, self.error) {
            (Some(d), None) => d.record_response(status, grpc_status),
            (_, error) => self.count_as(error.unwrap_or("success"), status, grpc_status),
        }
    }

    fn count_as(&self, outcome: &'static str, status: u16, grpc_status: Option<u32>) {
        match &self.destination {
            Some(d) => d.record_outcome(outcome, status, grpc_status),
            None => {
                let none = metrics::SharedString::const_str("none");
                let labels = m::request_labels(
                    [self.route_label(), none.clone(), none],
                    outcome,
                    status,
                    grpc_status,
                );
                metrics::counter!(m::REQUESTS, labels).increment(1);
            }
        }
    }

    fn route_label(&self) -> metrics::SharedString {
        self.route
            .clone()
            .map_or(metrics::SharedString::const_str("none"), Into::into)
    }
}

async fn run(
    state: &Arc<RuntimeState>,
    rules: &Snapshot,
    conn: &Arc<ConnInfo>,
    req: Request<Body>,
    grpc: bool,
    started: Instant,
    labels: &mut Labels,
) -> Result<Response<Body>, GatewayError> {
    check_protocol(&req)?;
    let max_body = state.max_request_body();
    if let Some(len) = content_length(&req)
        && len > max_body
    {
        return Err(too_large(max_body));
    }

    let (mut parts, body) = req.into_parts();
    // One reading of the target: the host checked and the path made canonical before anything matches on
    // them; the canonical URI is also what goes upstream.
    request_target::canonicalise(&mut parts, conn.tls)?;
    headers::strip_hop_by_hop(&mut parts.headers);
    if let Some(peer) = &conn.forwarded_for {
        headers::append_forwarded_for(&mut parts.headers, peer);
    }
    let body: Body = Limited::new(body, usize::try_from(max_body).unwrap_or(usize::MAX)).boxed_unsync();

    // gRPC routes that match on the model need the model name from the body before matching: the whole
    // first message, since its last `model_name` is the one the backend acts on. Where the name sits depends
    // on the call (repository load and unload carry it in field 2).
    let model_fields = if grpc {
        ModelFields::of_method(parts.uri.path())
    } else {
        None
    };
    let peeking = rules.routes.uses_model_match() && model_fields.is_some();
    // A stream's later messages name models too: each is checked on its way (`pipeline/stream.rs`).
    let streaming = grpc && parts.uri.path() == MODEL_STREAM_INFER_PATH;
    let mut body = if peeking && streaming {
        // Only the first message: a streaming client may wait for its answer before sending more.
        let body = ReplayBody::Once {
            prefix: Default::default(),
            rest: body,
        };
        complete_first_message(body, max_body).await?
    } else if peeking {
        let body = buffer(body, PEEK_LIMIT, max_body).await?;
        complete_first_message(body, max_body).await?
    } else {
        ReplayBody::Once {
            prefix: Default::default(),
            rest: body,
        }
    };
    let peeked = if let Some(fields) = model_fields.filter(|_| peeking) {
        peek_model_fields(body.first_bytes(), fields)
    } else {
        GrpcPeek::Missing
    };
    let model = match &peeked {
        GrpcPeek::Found { name, version } => Some(ModelRef {
            name,
            version: *version,
        }),
        GrpcPeek::Missing => None,
        other => return Err(unreadable_grpc(other)),
    };
    let rest_model;
    let facts = {
        let f = RequestFacts::new(&parts.method, &parts.uri, &parts.headers);
        if grpc {
            f.with_model(model)
        } else if let Some(m) = f.model
            && m.name.contains('%')
        {
            // The backend percent-decodes the name segment once; so do we, to match the name it will serve.
            rest_model = request_target::rest_model_name(m.name)?;
            f.with_model(Some(ModelRef {
                name: &rest_model,
                version: m.version,
            }))
        } else {
            f
        }
    };
    let Some(route) = rules.routes.match_request(&facts) else {
        return Err(no_route(rules, &facts, &peeked));
    };
    labels.route = Some(Arc::clone(&route.name));

    // Fault injection (drills): delay, then maybe abort, before anything else is charged.
    if let Some(fault) = &route.fault {
        let d = fault.decide();
        if let Some(delay) = d.delay {
            metrics::counter!(m::FAULTS_INJECTED, "route" => route.name.to_string(), "kind" => "delay")
                .increment(1);
            tokio::time::sleep(delay).await;
        }
        if let Some(abort) = d.abort {
            metrics::counter!(m::FAULTS_INJECTED, "route" => route.name.to_string(), "kind" => "abort")
                .increment(1);
            let status = http::StatusCode::from_u16(abort.http_status.as_u16())
                .unwrap_or(http::StatusCode::SERVICE_UNAVAILABLE);
            return Err(GatewayError::new(
                ErrorKind::FaultAbort {
                    status,
                    grpc: abort.grpc_code.and_then(GrpcCode::from_u32),
                },
                format!(
                    "fault injected by route '{}' (abort {})",
                    route.name,
                    status.as_u16()
                ),
            ));
        }
    }

    // Caller identification and quota.
    let Some(caller) = rules.routes.callers().identify(&parts.headers, conn.facts()) else {
        return Err(GatewayError::new(
            ErrorKind::Unauthenticated,
            format!(
                "route '{}' needs an identified caller ({}); send the caller header or a client certificate",
                route.name,
                describe_sources(rules)
            ),
        ));
    };
    let quota = match &route.quota {
        Some(q) => state.quotas().check(q, &caller, Instant::now()),
        None => None,
    };
    if let Some(d) = &quota
        && !d.allowed
    {
        metrics::counter!(m::QUOTA_REJECTIONS, "route" => route.name.to_string()).increment(1);
        return Err(over_quota(&route.name, &caller, d));
    }

    // Canary split.
    let canary = route.canary.as_ref();
    let chosen = route.choose(&parts.headers, &caller);
    let dest = &route.split.destinations()[chosen];
    labels.destination = route.metrics.get(chosen).cloned();
    let Some(upstream) = rules.upstreams.get(&dest.upstream) else {
        return Err(GatewayError::new(
            ErrorKind::Internal,
            format!(
                "route '{}' names upstream '{}', which the running rules lack",
                route.name, dest.upstream
            ),
        ));
    };

    // Replay buffering: for retries, mirroring and gRPC version rewrites.
    let policy = &route.retry;
    // A stream is neither replayed nor mirrored: its body is not one request, and it may never end.
    let mirror = route.mirror.as_ref().filter(|mp| !streaming && mp.sample());
    let rewrites_grpc_version =
        grpc && dest.model_version.is_some() && model_fields.and_then(|f| f.version).is_some();
    let needs_whole = !streaming && (policy.retries() || mirror.is_some() || rewrites_grpc_version);
    if needs_whole && !body.is_replayable() {
        body = match body {
            ReplayBody::Once { prefix, rest } if prefix.is_empty() => {
                buffer(rest, policy.max_replay_bytes, max_body).await?
            }
            other => other,
        };
    }
    if let Some(version) = &dest.model_version {
        if streaming {
            // Every message of the stream is rewritten on its way (below); the length changes.
            parts.headers.remove(CONTENT_LENGTH);
        } else if grpc && model_fields.and_then(|f| f.version).is_none() {
            // The call's messages carry no version (repository load and unload, server and health calls):
            // there is nothing to pin, and writing field 2 would change another field.
        } else if grpc {
            let Some(bytes) = body.bytes() else {
                return Err(GatewayError::new(
                    ErrorKind::PayloadTooLarge,
                    format!(
                        "route '{}' rewrites the model version, which needs the whole gRPC request in memory, but it is larger than max_replay_body ({} bytes)",
                        route.name, policy.max_replay_bytes
                    ),
                ));
            };
            match rewrite_grpc_version(bytes, version) {
                Ok(rewritten) => {
                    // The body's length changed: a stale content-length would make the upstream reset the stream.
                    let bytes = rewritten.into_bytes();
                    parts
                        .headers
                        .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
                    body = ReplayBody::full(bytes);
                }
                Err(e) => {
                    return Err(GatewayError::new(
                        ErrorKind::BadRequest,
                        format!("cannot set model_version '{version}' in the gRPC request: {e}"),
                    ));
                }
            }
        } else if let Some(uri) = rewrite_rest_path(&parts.uri, version) {
            parts.uri = uri;
        }
    }

    // Mirror a copy (fire and forget) before the real call, so the copy never waits on the response.
    if let Some(mp) = mirror
        && let Some(copy) = body.try_clone()
        && let Some(shadow) = rules.upstreams.get(&mp.upstream)
    {
        let mut mreq = Request::new(copy);
        *mreq.method_mut() = parts.method.clone();
        *mreq.uri_mut() = parts.uri.clone();
        *mreq.headers_mut() = parts.headers.clone();
        mp.spawn(UpstreamService(Arc::clone(shadow)), mreq);
    }

    // A stream's messages, each checked as a unary request is.
    let verdict = if streaming {
        let verdict = Verdict::default();
        let policy = StreamPolicy {
            rules: Arc::clone(rules),
            route: Arc::clone(&route.name),
            version: dest.model_version.clone(),
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
            conn: Arc::clone(conn),
            state: Arc::clone(state),
        };
        let checked = CheckedMessages::new(body, policy, verdict.clone());
        body = ReplayBody::Once {
            prefix: Default::default(),
            rest: boxed(checked),
        };
        Some(verdict)
    } else {
        None
    };

    // Retries and timeouts around the upstream call.
    let deadline = route.timeout.deadline(&parts.headers, started);
    let req = Request::from_parts(parts, body);
    let mut svc = UpstreamService(Arc::clone(upstream));
    let result = send_upstream(&mut svc, req, policy, &route.retry_budget, deadline, &route.name).await;
    let outcome = match result {
        Ok(resp) => resp,
        Err(e) => {
            // A refused message of a stream reset it: the refusal is the answer, and says nothing of the
            // destination.
            if let Some(refusal) = verdict.as_ref().and_then(Verdict::take) {
                return Err(refusal);
            }
            if let Some(c) = canary {
                c.record(chosen, true, started.elapsed(), Instant::now());
            }
            return Err(retry_error(&route.name, e));
        }
    };
    // Retries and budget exhaustion are counted by the retry loop itself (by route and reason).
    let resp = bridge::from_upstream(outcome);
    let status = resp.status();
    let (mut rparts, rbody) = resp.into_parts();
    if let Some(d) = &quota {
        rate_limit_headers(&mut rparts.headers, d);
    }
    let body: Body = match canary {
        Some(c) => {
            let header_grpc = retry::grpc_status(&rparts.headers);
            let c = Arc::clone(c);
            let index = chosen;
            boxed(Observed::new(rbody, move |end| {
                let error = match end {
                    BodyEnd::Trailers(trailer_grpc) => {
                        crate::canary::is_error(Some(status), trailer_grpc.or(header_grpc))
                    }
                    BodyEnd::Failed => true,
                    // The caller went away: says nothing about the destination.
                    BodyEnd::Dropped => return,
                };
                c.record(index, error, started.elapsed(), Instant::now());
            }))
        }
        None => boxed(rbody),
    };
    let body = match verdict {
        Some(v) => boxed(EndsWithVerdict::new(body, v)),
        None => body,
    };
    Ok(Response::from_parts(rparts, body))
}

type RetryResult = Result<Response<retry::RetryBody<UpstreamBody>>, RetryError<UpstreamError>>;

/// `retry::send` for the pipeline's types. Awaiting `retry::send` directly inside `run` makes the request
/// future fail the `Send` check (rustc's higher-ranked lifetime erasure on `dyn Error + 'static` inside the
/// body type); proving `Send` here, in a signature of concrete types, sidesteps it without boxing.
fn send_upstream<'a>(
    svc: &'a mut UpstreamService,
    req: Request<ReqBody>,
    policy: &'a retry::RetryPolicy,
    budget: &'a retry::RetryBudget,
    deadline: Option<Instant>,
    route: &'a str,
) -> impl Future<Output = RetryResult> + Send + 'a {
    retry::send(svc, req, policy, budget, deadline, route)
}

/// Sends one try to an upstream; what the retry loop and the mirror call.
#[derive(Clone)]
pub struct UpstreamService(pub Arc<Upstream>);

// Implemented for the one concrete body type only: a generic `B::Error: Into<BoxError>` bound here makes the
// pipeline's future fail the `Send` check (higher-ranked lifetime inference on `dyn Error + 'static`).
impl SendTry<Request<ReqBody>> for UpstreamService {
    type Response = Response<UpstreamBody>;
    type Error = UpstreamError;

    fn send_try(
        &mut self,
        req: Request<ReqBody>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send {
        let upstream = &self.0;
        // An empty body goes as a zero-sized one, which boxes without allocating.
        let sent = Instant::now();
        let sending = upstream.send(req.map(|b| {
            if http_body::Body::is_end_stream(&b) {
                crate::proxy::empty()
            } else {
                b.boxed_unsync()
            }
        }));
        // A combinator, not an `async` block awaiting `sending` (which would hold that future twice).
        sending.inspect(move |r| {
            let tries = upstream.tries();
            tries.record_duration(sent.elapsed());
            match r {
                Ok(resp) => tries.response(resp.status().as_u16()),
                Err(e) => tries.failure(e.kind().as_str()),
            }
        })
    }
}

impl retry::UpstreamError for UpstreamError {
    fn failure(&self) -> UpstreamFailure {
        match self.kind() {
            FailureKind::ConnectFailure => UpstreamFailure::ConnectFailure,
            FailureKind::RefusedStream => UpstreamFailure::RefusedStream,
            FailureKind::Reset | FailureKind::Timeout => UpstreamFailure::Reset,
            FailureKind::Overloaded => UpstreamFailure::Overloaded,
            FailureKind::NoEndpoints
            | FailureKind::Protocol
            | FailureKind::RequestBodyTooLarge
            | FailureKind::RequestBody => UpstreamFailure::Other,
        }
    }
}

fn check_protocol<B>(req: &Request<B>) -> Result<(), GatewayError> {
    if req.method() == Method::CONNECT {
        return Err(GatewayError::new(
            ErrorKind::Unsupported,
            "the gateway does not proxy CONNECT (tunnels); send plain HTTP or gRPC requests",
        ));
    }
    if let UpgradeRequest::Protocol(p) = headers::upgrade_request(req.headers()) {
        return Err(GatewayError::new(
            ErrorKind::Unsupported,
            format!(
                "the gateway does not proxy protocol upgrades (Upgrade: {p}); send plain HTTP/1.1, HTTP/2 or gRPC"
            ),
        ));
    }
    Ok(())
}

fn content_length<B>(req: &Request<B>) -> Option<u64> {
    req.headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn too_large(max: u64) -> GatewayError {
    GatewayError::new(
        ErrorKind::PayloadTooLarge,
        format!(
            "the request body is larger than the gateway's limit of {max} bytes (listeners.limits.max_request_body)"
        ),
    )
}

/// Reads `body` into memory up to `limit` (beyond it, the rest streams and the body is not replayable).
async fn buffer(body: Body, limit: usize, max_body: u64) -> Result<ReqBody, GatewayError> {
    retry::buffer_body(body, limit)
        .await
        .map_err(|e| body_error(e, max_body))
}

/// Reads on from a body that [`buffer`] left streaming until its first gRPC message is whole (bounded by the
/// body limit), so that [`peek_model_fields`] sees every field of it. A body that ends on the way comes back whole.
async fn complete_first_message(body: ReqBody, max_body: u64) -> Result<ReqBody, GatewayError> {
    let ReplayBody::Once { prefix, mut rest } = body else {
        return Ok(body);
    };
    let mut first = bytes::BytesMut::new();
    for chunk in prefix {
        first.extend_from_slice(&chunk);
    }
    let mut trailers = None;
    let mut ended = false;
    loop {
        match frame_header(&first) {
            Some(Ok((_, len))) if first.len() >= FRAME_HEADER_LEN.saturating_add(len) => break,
            Some(Err(_)) => break,
            _ => {}
        }
        match rest.frame().await {
            None => {
                ended = true;
                break;
            }
            Some(Err(e)) => return Err(body_error(e, max_body)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => first.extend_from_slice(&data),
                Err(frame) => {
                    trailers = frame.into_trailers().ok();
                    ended = true;
                    break;
                }
            },
        }
    }
    Ok(if ended || http_body::Body::is_end_stream(&rest) {
        ReplayBody::Full {
            data: Some(first.freeze()),
            trailers,
        }
    } else {
        ReplayBody::Once {
            prefix: std::iter::once(first.freeze()).collect(),
            rest,
        }
    })
}

/// The refusal for a gRPC request whose model the gateway cannot read the way the backend would.
fn unreadable_grpc(peeked: &GrpcPeek<'_>) -> GatewayError {
    match peeked {
        GrpcPeek::Compressed => GatewayError::new(
            ErrorKind::Unsupported,
            "the gateway routes this call on its model_name and does not inflate compressed gRPC messages; send it uncompressed (grpc-encoding identity)",
        ),
        GrpcPeek::Malformed(e) => GatewayError::new(
            ErrorKind::BadRequest,
            format!("the gRPC request cannot be read to find its model_name: {e}"),
        ),
        _ => GatewayError::new(
            ErrorKind::BadRequest,
            "the gRPC request body ends inside its first message; send the whole message",
        ),
    }
}

fn body_error(e: BoxError, max_body: u64) -> GatewayError {
    if e.is::<http_body_util::LengthLimitError>() {
        too_large(max_body)
    } else {
        GatewayError::new(
            ErrorKind::BadRequest,
            format!("reading the request body failed: {e}"),
        )
    }
}

fn no_route(rules: &Rules, facts: &RequestFacts<'_>, peeked: &GrpcPeek<'_>) -> GatewayError {
    let names: Vec<&str> = rules.routes.routes().iter().map(|r| &*r.name).collect();
    let mut msg = format!(
        "no route matches {} {} (host {}, model {})",
        facts.method,
        facts.path,
        facts.host.unwrap_or("-"),
        facts.model.map_or("-", |m| m.name)
    );
    if let GrpcPeek::Compressed = peeked {
        msg.push_str("; the gRPC message is compressed, so its model_name could not be read");
    }
    if names.is_empty() {
        msg.push_str("; the running rules have no routes");
    } else {
        msg.push_str(&format!("; routes: {}", names.join(", ")));
    }
    GatewayError::new(ErrorKind::NoRoute, msg)
}

fn describe_sources(rules: &Rules) -> String {
    rules
        .routes
        .callers()
        .sources
        .sources()
        .iter()
        .map(|s| match s {
            crate::caller::CallerSource::Header(h) => format!("header {h}"),
            crate::caller::CallerSource::MtlsIdentity => "mTLS identity".to_string(),
            crate::caller::CallerSource::PeerAddress => "peer address".to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn over_quota(route: &str, caller: &Caller<'_>, d: &QuotaDecision) -> GatewayError {
    let mut e = GatewayError::new(
        ErrorKind::QuotaExceeded,
        format!(
            "caller {caller} is over its quota on route '{route}' ({} requests per bucket); retry in {} s",
            d.limit,
            d.retry_after_secs()
        ),
    )
    .with_header(
        HeaderName::from_static("retry-after"),
        HeaderValue::from(d.retry_after_secs()),
    );
    let mut h = http::HeaderMap::new();
    rate_limit_headers(&mut h, d);
    for (k, v) in &h {
        e = e.with_header(k.clone(), v.clone());
    }
    e
}

fn rate_limit_headers(h: &mut http::HeaderMap, d: &QuotaDecision) {
    h.insert(
        HeaderName::from_static("ratelimit-limit"),
        HeaderValue::from(d.limit),
    );
    h.insert(
        HeaderName::from_static("ratelimit-remaining"),
        HeaderValue::from(d.remaining),
    );
    h.insert(
        HeaderName::from_static("ratelimit-reset"),
        HeaderValue::from(d.reset_secs()),
    );
}

fn retry_error(route: &str, e: RetryError<UpstreamError>) -> GatewayError {
    match e {
        RetryError::DeadlineExceeded { info } => GatewayError::new(
            ErrorKind::Timeout,
            format!(
                "route '{route}': the upstream did not answer within the request deadline ({} tries)",
                info.tries
            ),
        ),
        RetryError::PerTryTimeout { timeout, info } => GatewayError::new(
            ErrorKind::Timeout,
            format!(
                "route '{route}': the upstream did not answer within the per-try timeout of {timeout:?} ({} tries)",
                info.tries
            ),
        ),
        RetryError::Upstream { source, info } => {
            let tries = info.tries;
            let budget = info.budget_exhausted;
            let mut g = GatewayError::from(source);
            if tries > 1 || budget {
                let note = if budget { ", retry budget exhausted" } else { "" };
                g = GatewayError::new(g.kind().clone(), format!("{} ({tries} tries{note})", g.message()));
            }
            g
        }
        RetryError::ResponseBody { source, info } => GatewayError::new(
            ErrorKind::BadGateway,
            format!(
                "route '{route}': reading the upstream's response failed ({} tries): {source}",
                info.tries
            ),
        ),
    }
}

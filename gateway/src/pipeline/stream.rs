//! `ModelStreamInfer`: every message of the stream passes the policy a unary `ModelInfer` passes.
//!
//! The backend acts on each message's own `model_name`, so routing the stream on its first message alone
//! would let a later message reach a model the rules deny, skip a version pin or go uncharged. The request
//! body is read message by message ([`CheckedMessages`]); each message is let through only when the running
//! rules send its model to the stream's own route, its caller is within the route's quota (the first message
//! was charged when the stream was routed), and, under a version pin, with its version rewritten. A refused
//! message never reaches the upstream: the body fails, which resets the upstream stream, and the caller's
//! response ends with the refusal's gRPC status in its trailers ([`EndsWithVerdict`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::HeaderName;
use http::{HeaderMap, Method, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use crate::config_state::{RuntimeState, Snapshot};
use crate::connection::ConnInfo;
use crate::error::{ErrorKind, GatewayError};
use crate::metrics as m;
use crate::model_ref::grpc::{FRAME_HEADER_LEN, GrpcPeek, ModelFields, frame_header, peek_model_fields};
use crate::proxy::{Body, BoxError};
use crate::route::{ModelRef, RequestFacts};
use crate::split::rewrite_grpc_version;

/// What one stream's messages are checked against: the rules the stream started on and the route and
/// destination it was given.
pub(super) struct StreamPolicy {
    /// The rules the stream started on (kept for its whole life, as a unary request keeps them).
    pub rules: Snapshot,
    /// The stream's route.
    pub route: Arc<str>,
    /// The destination's version pin, if any.
    pub version: Option<Arc<str>>,
    /// The request head, as matched.
    pub method: Method,
    /// The request target, canonical.
    pub uri: Uri,
    /// The request headers (the caller is identified from them, as for the first message).
    pub headers: HeaderMap,
    /// The client connection (mTLS identity, peer address).
    pub conn: Arc<ConnInfo>,
    /// The quota buckets.
    pub state: Arc<RuntimeState>,
}

impl StreamPolicy {
    /// Checks message `index` (0 for the first) of the stream, `frame` being the whole gRPC message with its
    /// 5-byte header; returns what goes upstream.
    fn admit(&self, index: u64, frame: Bytes) -> Result<Bytes, GatewayError> {
        let routes = &self.rules.routes;
        let Some(route) = routes.get(&self.route) else {
            return Err(GatewayError::new(
                ErrorKind::Internal,
                format!("the stream's route '{}' is not in its rules", self.route),
            ));
        };
        let number = index + 1;
        let matches_on_model = routes.uses_model_match();
        let model = if matches_on_model || self.version.is_some() {
            match peek_model_fields(&frame, ModelFields::MODEL) {
                GrpcPeek::Found { name, version } => Some(ModelRef { name, version }),
                GrpcPeek::Missing => None,
                GrpcPeek::Compressed => {
                    return Err(GatewayError::new(
                        ErrorKind::Unsupported,
                        format!(
                            "message {number} of the stream is compressed; the gateway reads every message's model_name and does not inflate messages: send them uncompressed (grpc-encoding identity)"
                        ),
                    ));
                }
                GrpcPeek::Malformed(e) => {
                    return Err(GatewayError::new(
                        ErrorKind::BadRequest,
                        format!("message {number} of the stream cannot be read to find its model_name: {e}"),
                    ));
                }
                GrpcPeek::NeedMore => {
                    return Err(GatewayError::new(
                        ErrorKind::Internal,
                        format!("message {number} of the stream was checked before it was whole"),
                    ));
                }
            }
        } else {
            None
        };
        let model_name = model.map_or("-", |m| m.name);
        if matches_on_model {
            let facts = RequestFacts::new(&self.method, &self.uri, &self.headers).with_model(model);
            match routes.match_request(&facts) {
                None => {
                    return Err(GatewayError::new(
                        ErrorKind::NoRoute,
                        format!(
                            "message {number} of the stream names model '{model_name}', which no route matches"
                        ),
                    ));
                }
                Some(other) if other.name != route.name => {
                    return Err(GatewayError::new(
                        ErrorKind::Forbidden,
                        format!(
                            "message {number} of the stream names model '{model_name}', which route '{}' governs; this stream is bound to route '{}' by its first message: send other models on a stream of their own",
                            other.name, route.name
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if index > 0
            && let Some(quota) = &route.quota
        {
            let Some(caller) = routes.callers().identify(&self.headers, self.conn.facts()) else {
                return Err(GatewayError::new(
                    ErrorKind::Unauthenticated,
                    format!("route '{}' needs an identified caller", route.name),
                ));
            };
            if let Some(d) = self.state.quotas().check(quota, &caller, Instant::now())
                && !d.allowed
            {
                metrics::counter!(m::QUOTA_REJECTIONS, "route" => route.name.to_string()).increment(1);
                return Err(super::over_quota(&route.name, &caller, &d));
            }
        }
        match &self.version {
            None => Ok(frame),
            Some(version) => match rewrite_grpc_version(&frame, version) {
                Ok(rewritten) => {
                    let mut out = BytesMut::with_capacity(rewritten.len());
                    for chunk in &rewritten.chunks {
                        out.extend_from_slice(chunk);
                    }
                    Ok(out.freeze())
                }
                Err(e) => Err(GatewayError::new(
                    ErrorKind::BadRequest,
                    format!("cannot set model_version '{version}' in message {number} of the stream: {e}"),
                )),
            },
        }
    }
}

/// The refusal of a stream's message, once there is one: set by [`CheckedMessages`], read by the pipeline
/// and by [`EndsWithVerdict`].
#[derive(Clone, Default)]
pub(super) struct Verdict(Arc<Mutex<Option<GatewayError>>>);

impl Verdict {
    fn set(&self, e: GatewayError) {
        if let Ok(mut v) = self.0.lock() {
            v.get_or_insert(e);
        }
    }

    /// The refusal, if a message was refused.
    pub(super) fn take(&self) -> Option<GatewayError> {
        self.0.lock().ok().and_then(|mut v| v.take())
    }
}

/// A stream's request body, let through one whole checked message at a time.
pub(super) struct CheckedMessages<B> {
    inner: B,
    policy: StreamPolicy,
    verdict: Verdict,
    buf: BytesMut,
    index: u64,
    ended: bool,
    failed: bool,
}

impl<B> CheckedMessages<B> {
    /// Checks the messages of `inner` under `policy`; a refusal is left in `verdict`.
    pub(super) fn new(inner: B, policy: StreamPolicy, verdict: Verdict) -> Self {
        Self {
            inner,
            policy,
            verdict,
            buf: BytesMut::new(),
            index: 0,
            ended: false,
            failed: false,
        }
    }

    /// The next whole message in the buffer, checked; `Ok(None)` when none is whole yet.
    fn next_message(&mut self) -> Result<Option<Bytes>, GatewayError> {
        let len = match frame_header(&self.buf) {
            None => return Ok(None),
            Some(Err(e)) => {
                return Err(GatewayError::new(
                    ErrorKind::BadRequest,
                    format!("message {} of the stream: {e}", self.index + 1),
                ));
            }
            Some(Ok((_, len))) => len,
        };
        let whole = FRAME_HEADER_LEN.saturating_add(len);
        if self.buf.len() < whole {
            self.buf.reserve(whole - self.buf.len());
            return Ok(None);
        }
        let frame = self.buf.split_to(whole).freeze();
        let admitted = self.policy.admit(self.index, frame)?;
        self.index += 1;
        Ok(Some(admitted))
    }

    fn refuse(&mut self, e: GatewayError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        tracing::debug!(error = %e, "a message of a gRPC stream was refused; the upstream stream is reset");
        let message = e.message().to_string();
        self.verdict.set(e);
        self.failed = true;
        Poll::Ready(Some(Err(message.into())))
    }
}

impl<B> HttpBody for CheckedMessages<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        loop {
            match this.next_message() {
                Ok(Some(message)) => return Poll::Ready(Some(Ok(Frame::data(message)))),
                Ok(None) => {}
                Err(e) => return this.refuse(e),
            }
            if this.ended {
                if this.buf.has_remaining() {
                    let e = GatewayError::new(
                        ErrorKind::BadRequest,
                        format!(
                            "the stream ends inside message {}; send whole messages",
                            this.index + 1
                        ),
                    );
                    return this.refuse(e);
                }
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                None => this.ended = true,
                Some(Err(e)) => {
                    this.failed = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.buf.extend_from_slice(&data),
                    Err(frame) => {
                        if this.buf.has_remaining() {
                            let e = GatewayError::new(
                                ErrorKind::BadRequest,
                                format!("the stream ends inside message {}", this.index + 1),
                            );
                            return this.refuse(e);
                        }
                        this.ended = true;
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || (self.ended && self.buf.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The caller's response to a stream: passed through, but when a message was refused it ends with the
/// refusal's `grpc-status` and `grpc-message` in its trailers (the upstream's answer to the reset, or its
/// own trailers, would hide why).
pub(super) struct EndsWithVerdict {
    inner: Body,
    verdict: Verdict,
    done: bool,
}

impl EndsWithVerdict {
    /// Wraps the upstream's response body.
    pub(super) fn new(inner: Body, verdict: Verdict) -> Self {
        Self {
            inner,
            verdict,
            done: false,
        }
    }

    fn trailers(e: GatewayError) -> Frame<Bytes> {
        let response = e.into_response(true);
        let mut trailers = HeaderMap::new();
        for name in ["grpc-status", "grpc-message"] {
            if let Some(v) = response.headers().get(name) {
                trailers.insert(HeaderName::from_static(name), v.clone());
            }
        }
        Frame::trailers(trailers)
    }
}

impl HttpBody for EndsWithVerdict {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let polled = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let ends = match &polled {
            None | Some(Err(_)) => true,
            Some(Ok(frame)) => frame.is_trailers(),
        };
        if ends {
            this.done = true;
            if let Some(refusal) = this.verdict.take() {
                return Poll::Ready(Some(Ok(Self::trailers(refusal))));
            }
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

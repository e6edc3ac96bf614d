//! Upstream failures, classified as data so that retry policies decide on the kind, never on message text.

use std::error::Error as StdError;
use std::fmt;

use crate::proxy::BoxError;

/// What kind of failure an upstream call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// A TCP connect, TLS handshake or HTTP/2 handshake failed or timed out: the request never left.
    ConnectFailure,
    /// The upstream refused the HTTP/2 stream (`REFUSED_STREAM`, or the stream was above a `GOAWAY`'s last
    /// stream id), or the connection closed before the request was written: nothing was processed.
    RefusedStream,
    /// The connection or stream was reset or closed after the request was sent, before a response.
    Reset,
    /// The upstream took longer than allowed (connect timeout here; per-try timeouts are the retry policy's).
    Timeout,
    /// The upstream's own concurrency and queue limits in the gateway are full: refused at once.
    Overloaded,
    /// The upstream has no endpoint (its DNS name resolved to nothing yet).
    NoEndpoints,
    /// The upstream answered something that is not valid HTTP.
    Protocol,
    /// The caller's request body went over the listener's size limit while streaming.
    RequestBodyTooLarge,
    /// Reading the caller's request body failed (the caller went away or sent a malformed body).
    RequestBody,
}

impl FailureKind {
    /// A short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ConnectFailure => "connect_failure",
            FailureKind::RefusedStream => "refused_stream",
            FailureKind::Reset => "reset",
            FailureKind::Timeout => "timeout",
            FailureKind::Overloaded => "overloaded",
            FailureKind::NoEndpoints => "no_endpoints",
            FailureKind::Protocol => "protocol",
            FailureKind::RequestBodyTooLarge => "request_body_too_large",
            FailureKind::RequestBody => "request_body",
        }
    }

    /// True when the upstream cannot have processed the request (so replaying it is safe even for
    /// non-idempotent calls).
    pub fn never_processed(self) -> bool {
        matches!(
            self,
            FailureKind::ConnectFailure
                | FailureKind::RefusedStream
                | FailureKind::Overloaded
                | FailureKind::NoEndpoints
        )
    }

    /// True when the failure is the caller's (its body), not the upstream's: never retried, never counted
    /// against the endpoint.
    pub fn is_caller_fault(self) -> bool {
        matches!(self, FailureKind::RequestBodyTooLarge | FailureKind::RequestBody)
    }
}

/// A failed upstream call: the kind, the upstream and endpoint it concerned, and the underlying cause.
#[derive(Debug)]
pub struct UpstreamError {
    kind: FailureKind,
    upstream: String,
    endpoint: Option<String>,
    detail: String,
    source: Option<BoxError>,
}

impl UpstreamError {
    /// A new error; `detail` says what happened in words an operator can act on.
    pub fn new(kind: FailureKind, upstream: &str, detail: impl Into<String>) -> Self {
        UpstreamError {
            kind,
            upstream: upstream.to_string(),
            endpoint: None,
            detail: detail.into(),
            source: None,
        }
    }

    /// Names the endpoint (address) the failure happened on.
    pub fn with_endpoint(mut self, endpoint: impl fmt::Display) -> Self {
        self.endpoint = Some(endpoint.to_string());
        self
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error with another kind and a detail to match: the caller's body failed, not the upstream, and
    /// `cause` (the body's own error) says how.
    pub(crate) fn reclassify(mut self, kind: FailureKind, cause: &str) -> Self {
        self.kind = kind;
        self.detail = match kind {
            FailureKind::RequestBodyTooLarge => "the request body is larger than the gateway allows".into(),
            FailureKind::RequestBody => format!("reading the request body from the caller failed: {cause}"),
            _ => self.detail,
        };
        self.source = None;
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The upstream's name.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The endpoint's address, when the failure concerned one.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The caller's own fault is told without the upstream: it has nothing to do with it.
        if self.kind.is_caller_fault() {
            return f.write_str(&self.detail);
        }
        write!(f, "upstream '{}'", self.upstream)?;
        if let Some(ep) = &self.endpoint {
            write!(f, " (endpoint {ep})")?;
        }
        write!(f, ": {}", self.detail)?;
        if let Some(src) = &self.source {
            write!(f, ": {}", root_cause(src.as_ref()))?;
        }
        Ok(())
    }
}

impl StdError for UpstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

/// The innermost error of a chain, which usually says the most (e.g. "Connection refused (os error 111)").
pub(crate) fn root_cause<'a>(e: &'a (dyn StdError + 'static)) -> &'a (dyn StdError + 'static) {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur
}

//! Retries: which failures are retried, how often, how far apart, and how many in total.
//!
//! [`RetryPolicy`] is the route's typed retry settings; [`send`] (or the tower [`RetryLayer`]) runs
//! one request through an upstream service with them, honouring the overall deadline
//! ([`crate::timeout`]). Upstream failures reach the classifier as data: the upstream module's
//! error type implements [`UpstreamError`], returning an [`UpstreamFailure`].

pub mod budget;
pub mod replay;
pub mod send_try;
pub mod service;

use std::time::Duration;

use http::{HeaderMap, StatusCode};

pub use budget::{BudgetSpec, RetryBudget};
pub use replay::{ReplayBody, buffer_body};
pub use send_try::SendTry;
pub use service::{Retry, RetryBody, RetryError, RetryInfo, RetryLayer, send};

/// Why an upstream call failed without a response: the upstream module reports this as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamFailure {
    /// The TCP/TLS connection could not be established (refused, unreachable, handshake failed).
    ConnectFailure,
    /// The upstream refused the HTTP/2 stream (REFUSED_STREAM / GOAWAY above our stream id): it
    /// never processed the request, always safe to retry.
    RefusedStream,
    /// The connection or stream was reset after the request was sent, before a full response.
    Reset,
    /// Local back-pressure: the upstream's concurrency and pending limits are full. Not retried
    /// (retrying would add load exactly when there is too much).
    Overloaded,
    /// Anything else (protocol error, no endpoint); not retried.
    Other,
}

/// Implemented by the upstream service's error type so the retry loop can classify failures
/// without string matching.
pub trait UpstreamError: std::error::Error + Send + Sync + 'static {
    /// What kind of failure this is.
    fn failure(&self) -> UpstreamFailure;
}

/// gRPC status codes by number, as `retry_on` names them.
pub const GRPC_CODES: [(&str, u32); 16] = [
    ("cancelled", 1),
    ("unknown", 2),
    ("invalid-argument", 3),
    ("deadline-exceeded", 4),
    ("not-found", 5),
    ("already-exists", 6),
    ("permission-denied", 7),
    ("resource-exhausted", 8),
    ("failed-precondition", 9),
    ("aborted", 10),
    ("out-of-range", 11),
    ("unimplemented", 12),
    ("internal", 13),
    ("unavailable", 14),
    ("data-loss", 15),
    ("unauthenticated", 16),
];

const F_5XX: u8 = 1;
const F_GATEWAY: u8 = 2;
const F_CONNECT: u8 = 4;
const F_REFUSED: u8 = 8;
const F_RESET: u8 = 16;
const F_4XX: u8 = 32;

/// The set of conditions a route retries on (`retry_on`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryOn {
    flags: u8,
    statuses: Vec<u16>,
    grpc: u32,
}

/// A `retry_on` entry that is not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown retry_on condition '{0}' (expected 5xx, gateway-error, connect-failure, refused-stream, reset, retriable-4xx, an HTTP status like 503, or a gRPC code like unavailable / grpc-14)"
)]
pub struct UnknownCondition(pub String);

impl RetryOn {
    /// Parses `retry_on` entries: `5xx`, `gateway-error`, `connect-failure`, `refused-stream`,
    /// `reset`, `retriable-4xx` (409), an HTTP status (`503`), a gRPC code by name
    /// (`unavailable`, `resource-exhausted`, …, also with `grpc-` prefix) or number (`grpc-14`).
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, UnknownCondition> {
        let mut on = RetryOn::default();
        for item in items {
            let s = item.as_ref().trim();
            let lower = s.to_ascii_lowercase().replace('_', "-");
            match lower.as_str() {
                "5xx" => on.flags |= F_5XX,
                "gateway-error" => on.flags |= F_GATEWAY,
                "connect-failure" => on.flags |= F_CONNECT,
                "refused-stream" => on.flags |= F_REFUSED,
                "reset" => on.flags |= F_RESET,
                "retriable-4xx" => on.flags |= F_4XX,
                other => {
                    if let Ok(code) = other.parse::<u16>()
                        && (100..600).contains(&code)
                    {
                        on.statuses.push(code);
                        continue;
                    }
                    let name = other.strip_prefix("grpc-").unwrap_or(other);
                    let code = GRPC_CODES
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, c)| *c)
                        .or_else(|| {
                            name.parse::<u32>()
                                .ok()
                                .filter(|c| (1..=16).contains(c) && other.starts_with("grpc-"))
                        });
                    match code {
                        Some(c) => on.grpc |= 1 << c,
                        None => return Err(UnknownCondition(s.to_string())),
                    }
                }
            }
        }
        Ok(on)
    }

    /// Whether nothing is retried.
    pub fn is_empty(&self) -> bool {
        self.flags == 0 && self.statuses.is_empty() && self.grpc == 0
    }

    /// Whether any gRPC status code is retried (so trailers may need to be read).
    pub fn has_grpc_codes(&self) -> bool {
        self.grpc != 0
    }

    /// Whether gRPC status `code` is retried.
    pub fn grpc_code(&self, code: u32) -> bool {
        code < 32 && self.grpc & (1 << code) != 0
    }

    /// The retry reason for an HTTP response status, or `None` when it is not retried.
    pub fn status(&self, status: StatusCode) -> Option<&'static str> {
        let code = status.as_u16();
        if self.statuses.contains(&code) {
            return Some("status");
        }
        if self.flags & F_5XX != 0 && status.is_server_error() {
            return Some("5xx");
        }
        if self.flags & F_GATEWAY != 0 && matches!(code, 502..=504) {
            return Some("gateway-error");
        }
        if self.flags & F_4XX != 0 && code == 409 {
            return Some("retriable-4xx");
        }
        None
    }

    /// The retry reason for a failure without a response, or `None`. `5xx` covers connect
    /// failures, refused streams and resets (Envoy's semantics); `gateway-error` covers connect
    /// failures and refused streams (a 502/503 from a proxy).
    pub fn failure(&self, f: UpstreamFailure) -> Option<&'static str> {
        let f5 = self.flags & F_5XX != 0;
        let gw = self.flags & F_GATEWAY != 0;
        match f {
            UpstreamFailure::ConnectFailure if self.flags & F_CONNECT != 0 || f5 || gw => {
                Some("connect-failure")
            }
            UpstreamFailure::RefusedStream if self.flags & F_REFUSED != 0 || f5 || gw => {
                Some("refused-stream")
            }
            UpstreamFailure::Reset if self.flags & F_RESET != 0 || f5 => Some("reset"),
            _ => None,
        }
    }

    /// The retry reason for a per-try timeout (retried under `5xx`, `gateway-error` and `reset`,
    /// like a 504 or a reset).
    pub fn per_try_timeout(&self) -> Option<&'static str> {
        (self.flags & (F_5XX | F_GATEWAY | F_RESET) != 0).then_some("per-try-timeout")
    }

    /// The retry reason for a gRPC status found in `headers` (response headers of a trailers-only
    /// response, or trailers).
    pub fn grpc_headers(&self, headers: &HeaderMap) -> Option<&'static str> {
        let code = grpc_status(headers)?;
        self.grpc_code(code).then_some("grpc-status")
    }
}

/// The `grpc-status` value in `headers`, if present and numeric.
pub fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.trim().parse().ok()
}

/// Fully jittered exponential back-off: the n-th retry waits a uniform random time in
/// `[0, min(max, base × 2^n))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Base interval (Envoy: 25 ms).
    pub base: Duration,
    /// Cap (Envoy: 10 × base).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(25),
            max: Duration::from_millis(250),
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (0-based), given a uniform random `roll`.
    pub fn delay(&self, retry: u32, roll: u64) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << retry.min(20)).min(self.max);
        let ns = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        if ns == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(((u128::from(roll) * u128::from(ns)) >> 64) as u64)
    }
}

/// A route's retry settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total tries including the first (1 = no retries).
    pub attempts: u32,
    /// Limit on each try until response headers (`None`: only the overall deadline).
    pub per_try_timeout: Option<Duration>,
    /// What is retried.
    pub retry_on: RetryOn,
    /// Back-off between tries.
    pub backoff: Backoff,
    /// Bodies up to this size are buffered for replay; larger ones are sent once, never retried.
    /// Also bounds how much of a gRPC response is buffered to read its trailers.
    pub max_replay_bytes: usize,
    /// The retry budget's settings.
    pub budget: BudgetSpec,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 1,
            per_try_timeout: None,
            retry_on: RetryOn::default(),
            backoff: Backoff::default(),
            max_replay_bytes: 1 << 20,
            budget: BudgetSpec::default(),
        }
    }
}

impl RetryPolicy {
    /// Whether this policy can ever retry.
    pub fn retries(&self) -> bool {
        self.attempts > 1 && !self.retry_on.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_conditions_and_name_the_bad_one() {
        let on = RetryOn::parse(&["gateway-error", "409", "unavailable", "grpc-4", "GRPC_INTERNAL"]).unwrap();
        assert_eq!(on.status(StatusCode::BAD_GATEWAY), Some("gateway-error"));
        assert_eq!(on.status(StatusCode::INTERNAL_SERVER_ERROR), None);
        assert_eq!(on.status(StatusCode::CONFLICT), Some("status"));
        assert!(on.grpc_code(14) && on.grpc_code(4) && on.grpc_code(13) && !on.grpc_code(2));
        let err = RetryOn::parse(&["5xx", "sometimes"]).unwrap_err();
        assert!(err.to_string().contains("'sometimes'"), "{err}");
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, 0), Duration::ZERO);
        assert!(b.delay(0, u64::MAX) < Duration::from_millis(25));
        assert!(b.delay(10, u64::MAX) < Duration::from_millis(250));
        assert!(b.delay(10, u64::MAX) > Duration::from_millis(249));
        assert_eq!(b.delay(1, u64::MAX / 2), Duration::from_nanos(24_999_999));
    }
}

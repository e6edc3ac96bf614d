//! Request deadlines: the route's overall timeout and the caller's `grpc-timeout`.
//!
//! The effective deadline of a request is the earlier of `now + route timeout` and
//! `now + grpc-timeout` (the caller's deadline). The retry loop enforces it over all tries and
//! rewrites `grpc-timeout` on each try to the time actually left, so the backend sees the real
//! deadline.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

/// The `grpc-timeout` request header.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// A route's overall timeout, covering every try and back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutPolicy {
    /// Overall time limit from the moment the request is dispatched (`None`: no limit beyond the
    /// caller's own deadline).
    pub overall: Option<Duration>,
}

/// Why a `grpc-timeout` value was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("grpc-timeout '{0}' is not 1-8 digits followed by one of H M S m u n")]
pub struct BadGrpcTimeout(pub String);

impl TimeoutPolicy {
    /// The request's deadline: the earlier of the route's overall timeout and the caller's
    /// `grpc-timeout`. A malformed `grpc-timeout` is ignored (logged at debug).
    pub fn deadline(&self, headers: &HeaderMap, now: Instant) -> Option<Instant> {
        let caller = match headers.get(GRPC_TIMEOUT).map(parse_grpc_timeout) {
            Some(Ok(d)) => Some(d),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "ignoring malformed grpc-timeout");
                None
            }
            None => None,
        };
        let limit = match (self.overall, caller) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        limit.map(|d| {
            now.checked_add(d)
                .unwrap_or(now + Duration::from_secs(86_400 * 365))
        })
    }
}

/// Parses a `grpc-timeout` header value (`TimeoutValue TimeoutUnit`: 1-8 ASCII digits, then
/// H, M, S, m, u or n).
pub fn parse_grpc_timeout(v: &HeaderValue) -> Result<Duration, BadGrpcTimeout> {
    let bad = || BadGrpcTimeout(String::from_utf8_lossy(v.as_bytes()).into_owned());
    let b = v.as_bytes();
    let (digits, unit) = b.split_at(b.len().checked_sub(1).ok_or_else(bad)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let n: u64 = digits.iter().fold(0, |acc, d| acc * 10 + u64::from(d - b'0'));
    Ok(match unit[0] {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(bad()),
    })
}

/// Formats a duration as a `grpc-timeout` value, choosing the finest unit whose value fits in
/// 8 digits, rounding down so the propagated deadline is never later than ours (at least `1n`).
pub fn format_grpc_timeout(d: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let ns = d.as_nanos().max(1);
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (scale, unit) in units {
        let v = ns / scale;
        if v <= MAX && v > 0 {
            return HeaderValue::from_str(&format!("{v}{unit}")).unwrap_or(HeaderValue::from_static("1n"));
        }
    }
    HeaderValue::from_static("99999999H")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_round_trip_and_errors() {
        let p = |s: &'static str| parse_grpc_timeout(&HeaderValue::from_static(s));
        assert_eq!(p("100m"), Ok(Duration::from_millis(100)));
        assert_eq!(p("2S"), Ok(Duration::from_secs(2)));
        assert_eq!(p("1H"), Ok(Duration::from_secs(3600)));
        assert!(p("123456789m").is_err());
        assert!(p("m").is_err());
        assert!(p("10x").is_err());
        assert_eq!(format_grpc_timeout(Duration::from_millis(50)), "50000000n");
        assert_eq!(format_grpc_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(format_grpc_timeout(Duration::from_secs(5)), "5000000u");
        assert_eq!(format_grpc_timeout(Duration::from_secs(500)), "500000m");
        assert_eq!(
            p_owned(format_grpc_timeout(Duration::from_millis(1234))),
            Duration::from_millis(1234)
        );
    }

    fn p_owned(v: HeaderValue) -> Duration {
        parse_grpc_timeout(&v).unwrap()
    }

    #[test]
    fn deadline_is_the_earlier_of_route_and_caller() {
        let now = Instant::now();
        let mut h = HeaderMap::new();
        let pol = TimeoutPolicy {
            overall: Some(Duration::from_secs(2)),
        };
        assert_eq!(pol.deadline(&h, now), Some(now + Duration::from_secs(2)));
        h.insert(GRPC_TIMEOUT, HeaderValue::from_static("500m"));
        assert_eq!(pol.deadline(&h, now), Some(now + Duration::from_millis(500)));
        h.insert(GRPC_TIMEOUT, HeaderValue::from_static("5S"));
        assert_eq!(pol.deadline(&h, now), Some(now + Duration::from_secs(2)));
        assert_eq!(
            TimeoutPolicy::default().deadline(&h, now),
            Some(now + Duration::from_secs(5))
        );
        assert_eq!(TimeoutPolicy::default().deadline(&HeaderMap::new(), now), None);
    }
}

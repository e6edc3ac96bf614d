//! Retry conditions (`retry_on`) and gRPC status codes as written in the routes file.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::diagnostic::did_you_mean;

/// A gRPC status code, written in kebab-case (`unavailable`, `resource-exhausted`); snake_case and
/// upper case (`RESOURCE_EXHAUSTED`) are accepted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum GrpcCode {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

/// One condition under which a failed try is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryOn {
    /// `5xx`: any 5xx response, or no response at all (includes connect failures and refused streams).
    FiveXx,
    /// `gateway-error`: 502, 503 or 504.
    GatewayError,
    /// `connect-failure`: the connection to the endpoint could not be opened.
    ConnectFailure,
    /// `refused-stream`: the upstream refused the HTTP/2 stream (REFUSED_STREAM; never processed).
    RefusedStream,
    /// `reset`: the connection or stream was reset before a response arrived.
    Reset,
    /// `retriable-4xx`: 409 Conflict.
    Retriable4xx,
    /// An explicit HTTP status, written as a number (`503`).
    Status(u16),
    /// A gRPC status from `grpc-status` in headers or trailers (`unavailable`, `resource-exhausted`, ...).
    Grpc(GrpcCode),
}

const GRPC_NAMES: [(&str, GrpcCode); 17] = [
    ("ok", GrpcCode::Ok),
    ("cancelled", GrpcCode::Cancelled),
    ("unknown", GrpcCode::Unknown),
    ("invalid-argument", GrpcCode::InvalidArgument),
    ("deadline-exceeded", GrpcCode::DeadlineExceeded),
    ("not-found", GrpcCode::NotFound),
    ("already-exists", GrpcCode::AlreadyExists),
    ("permission-denied", GrpcCode::PermissionDenied),
    ("resource-exhausted", GrpcCode::ResourceExhausted),
    ("failed-precondition", GrpcCode::FailedPrecondition),
    ("aborted", GrpcCode::Aborted),
    ("out-of-range", GrpcCode::OutOfRange),
    ("unimplemented", GrpcCode::Unimplemented),
    ("internal", GrpcCode::Internal),
    ("unavailable", GrpcCode::Unavailable),
    ("data-loss", GrpcCode::DataLoss),
    ("unauthenticated", GrpcCode::Unauthenticated),
];

const HTTP_NAMES: [(&str, RetryOn); 6] = [
    ("5xx", RetryOn::FiveXx),
    ("gateway-error", RetryOn::GatewayError),
    ("connect-failure", RetryOn::ConnectFailure),
    ("refused-stream", RetryOn::RefusedStream),
    ("reset", RetryOn::Reset),
    ("retriable-4xx", RetryOn::Retriable4xx),
];

impl GrpcCode {
    /// The numeric code sent in `grpc-status`.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The kebab-case name used in config files.
    pub fn name(self) -> &'static str {
        GRPC_NAMES
            .iter()
            .find(|(_, c)| *c == self)
            .map(|(n, _)| *n)
            .unwrap_or("unknown")
    }

    /// Parses a name in kebab-case, snake_case or upper case.
    pub fn from_name(s: &str) -> Option<GrpcCode> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        GRPC_NAMES.iter().find(|(n, _)| *n == norm).map(|(_, c)| *c)
    }

    /// The code with this number.
    pub fn from_code(code: u32) -> Option<GrpcCode> {
        GRPC_NAMES.iter().map(|(_, c)| *c).find(|c| c.code() == code)
    }
}

impl RetryOn {
    /// Parses one `retry_on` entry.
    pub fn parse(s: &str) -> Result<RetryOn, String> {
        let t = s.trim();
        if let Some((_, r)) = HTTP_NAMES.iter().find(|(n, _)| *n == t) {
            return Ok(*r);
        }
        if let Ok(code) = t.parse::<u16>() {
            return RetryOn::status(code);
        }
        if let Some(c) = GrpcCode::from_name(t) {
            return Ok(RetryOn::Grpc(c));
        }
        let all = HTTP_NAMES
            .iter()
            .map(|(n, _)| *n)
            .chain(GRPC_NAMES.iter().map(|(n, _)| *n));
        let mut msg = format!(
            "unknown retry condition '{t}' (expected 5xx, gateway-error, connect-failure, refused-stream, reset, \
             retriable-4xx, an HTTP status like 503, or a gRPC code like unavailable)"
        );
        if let Some(s) = did_you_mean(t, all) {
            msg.push_str(&format!("; did you mean '{s}'?"));
        }
        Err(msg)
    }

    fn status(code: u16) -> Result<RetryOn, String> {
        if (100..=599).contains(&code) {
            Ok(RetryOn::Status(code))
        } else {
            Err(format!("retry condition {code} is not an HTTP status (100-599)"))
        }
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryOn::Status(c) => write!(f, "{c}"),
            RetryOn::Grpc(c) => write!(f, "{c}"),
            other => {
                let name = HTTP_NAMES
                    .iter()
                    .find(|(_, r)| r == other)
                    .map(|(n, _)| *n)
                    .unwrap_or("?");
                f.write_str(name)
            }
        }
    }
}

impl Serialize for GrpcCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for GrpcCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GrpcCode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a gRPC status name such as unavailable")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GrpcCode, E> {
                u32::try_from(v)
                    .ok()
                    .and_then(GrpcCode::from_code)
                    .ok_or_else(|| E::custom(format!("{v} is not a gRPC status code (0-16)")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GrpcCode, E> {
                GrpcCode::from_name(v).ok_or_else(|| {
                    let mut msg = format!("unknown gRPC status '{v}'");
                    if let Some(s) = did_you_mean(v, GRPC_NAMES.iter().map(|(n, _)| *n)) {
                        msg.push_str(&format!("; did you mean '{s}'?"));
                    }
                    E::custom(msg)
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for RetryOn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RetryOn::Status(c) => s.serialize_u16(*c),
            other => s.collect_str(other),
        }
    }
}

impl<'de> Deserialize<'de> for RetryOn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RetryOn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a retry condition such as 5xx, connect-failure, 503 or unavailable")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RetryOn, E> {
                u16::try_from(v)
                    .map_err(|_| format!("retry condition {v} is not an HTTP status (100-599)"))
                    .and_then(RetryOn::status)
                    .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RetryOn, E> {
                Err(E::custom(format!(
                    "retry condition {v} is not an HTTP status (100-599)"
                )))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RetryOn, E> {
                RetryOn::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(RetryOn::parse("5xx"), Ok(RetryOn::FiveXx));
        assert_eq!(RetryOn::parse("gateway-error"), Ok(RetryOn::GatewayError));
        assert_eq!(RetryOn::parse("503"), Ok(RetryOn::Status(503)));
        assert_eq!(
            RetryOn::parse("unavailable"),
            Ok(RetryOn::Grpc(GrpcCode::Unavailable))
        );
        assert_eq!(
            RetryOn::parse("RESOURCE_EXHAUSTED"),
            Ok(RetryOn::Grpc(GrpcCode::ResourceExhausted))
        );
        assert_eq!(
            RetryOn::parse("deadline_exceeded"),
            Ok(RetryOn::Grpc(GrpcCode::DeadlineExceeded))
        );
        let e = RetryOn::parse("conect-failure").unwrap_err();
        assert!(e.contains("did you mean 'connect-failure'?"), "{e}");
        assert!(RetryOn::parse("999").unwrap_err().contains("not an HTTP status"));
        for r in ["5xx", "reset", "503", "resource-exhausted", "retriable-4xx"] {
            assert_eq!(RetryOn::parse(r).unwrap().to_string(), r);
        }
        assert_eq!(GrpcCode::Unavailable.code(), 14);
        assert_eq!(GrpcCode::from_code(8), Some(GrpcCode::ResourceExhausted));
    }
}

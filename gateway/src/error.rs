//! Every error response the gateway itself produces is built here, and only here.
//!
//! HTTP callers get the KServe error shape, a JSON body `{"error": "..."}` with a status code; gRPC callers get
//! a trailers-only response (HTTP 200, `grpc-status`, `grpc-message`). Both carry
//! `x-infergate-error-origin: gateway`, so an operator can tell a gateway decision from an upstream's answer.

use std::fmt;

use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use crate::proxy::{Body, empty, full};
use crate::upstream::{FailureKind, UpstreamError};

/// The header that marks a response as produced by the gateway rather than by an upstream.
pub const ERROR_ORIGIN: HeaderName = HeaderName::from_static("x-infergate-error-origin");

/// gRPC status codes (`grpc/doc/statuscodes.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum GrpcCode {
    /// Not an error.
    Ok = 0,
    /// The operation was cancelled.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client specified an invalid argument.
    InvalidArgument = 3,
    /// The deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// Some requested entity was not found.
    NotFound = 5,
    /// The entity a client tried to create already exists.
    AlreadyExists = 6,
    /// The caller does not have permission.
    PermissionDenied = 7,
    /// A resource (quota, message size) has been exhausted.
    ResourceExhausted = 8,
    /// The system is not in a state required for the operation.
    FailedPrecondition = 9,
    /// The operation was aborted (concurrency conflict).
    Aborted = 10,
    /// The operation went past the valid range.
    OutOfRange = 11,
    /// The operation is not implemented or not supported.
    Unimplemented = 12,
    /// Internal error.
    Internal = 13,
    /// The service is currently unavailable; a retry may succeed.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request does not have valid authentication credentials.
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The numeric code as it appears in `grpc-status`.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The code with this number, if it is one.
    pub fn from_u32(code: u32) -> Option<GrpcCode> {
        use GrpcCode::*;
        const ALL: [GrpcCode; 17] = [
            Ok,
            Cancelled,
            Unknown,
            InvalidArgument,
            DeadlineExceeded,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            ResourceExhausted,
            FailedPrecondition,
            Aborted,
            OutOfRange,
            Unimplemented,
            Internal,
            Unavailable,
            DataLoss,
            Unauthenticated,
        ];
        ALL.into_iter().find(|c| u32::from(c.as_u16()) == code)
    }

    /// The gRPC code for an HTTP status the gateway answers with, following
    /// `grpc/doc/http-grpc-status-mapping.md`, except that 429 becomes `RESOURCE_EXHAUSTED` and 504
    /// `DEADLINE_EXCEEDED` (what a gRPC caller can act on; Linkerd does the same).
    pub fn from_http_status(status: StatusCode) -> GrpcCode {
        match status.as_u16() {
            200..=299 => GrpcCode::Ok,
            400 => GrpcCode::Internal,
            401 => GrpcCode::Unauthenticated,
            403 => GrpcCode::PermissionDenied,
            404 => GrpcCode::Unimplemented,
            429 => GrpcCode::ResourceExhausted,
            504 => GrpcCode::DeadlineExceeded,
            502 | 503 => GrpcCode::Unavailable,
            _ => GrpcCode::Unknown,
        }
    }
}

/// What went wrong, as the gateway decides it. Each kind has one HTTP status and one gRPC code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed (400 / INVALID_ARGUMENT).
    BadRequest,
    /// No route matches the request (404 / UNIMPLEMENTED, as gRPC maps 404).
    NoRoute,
    /// The caller could not be identified and the rules refuse unidentified callers (401 / UNAUTHENTICATED).
    Unauthenticated,
    /// The request is not allowed where it was sent: a message of a gRPC stream that the stream's route does
    /// not govern (403 / PERMISSION_DENIED).
    Forbidden,
    /// The request body is larger than the listener allows (413 / RESOURCE_EXHAUSTED).
    PayloadTooLarge,
    /// The HTTP/1.1 request head has more or larger headers than the listener allows (431).
    HeadersTooLarge,
    /// A protocol upgrade (WebSocket, …) or CONNECT, which the gateway does not proxy (501 / UNIMPLEMENTED).
    Unsupported,
    /// The caller is over its quota on this route (429 / RESOURCE_EXHAUSTED).
    QuotaExceeded,
    /// An injected fault aborted the request with this status; the gRPC code follows the HTTP mapping unless
    /// one is given.
    FaultAbort {
        /// The HTTP status to answer with.
        status: StatusCode,
        /// The gRPC code for gRPC callers, when the fault names one.
        grpc: Option<GrpcCode>,
    },
    /// The upstream is at its concurrency and queue limits (503 / UNAVAILABLE).
    Overloaded,
    /// No endpoint of the upstream could take the request: none resolved, or connecting failed (503 /
    /// UNAVAILABLE).
    Unavailable,
    /// The upstream broke the exchange: reset stream, closed connection, malformed answer (502 / UNAVAILABLE).
    BadGateway,
    /// The route's timeout expired (504 / DEADLINE_EXCEEDED).
    Timeout,
    /// A bug or an unexpected state in the gateway (500 / INTERNAL).
    Internal,
}

impl ErrorKind {
    /// The HTTP status for HTTP callers.
    pub fn status(&self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::FaultAbort { status, .. } => *status,
            ErrorKind::Overloaded | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::BadGateway => StatusCode::BAD_GATEWAY,
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code for gRPC callers.
    pub fn grpc_code(&self) -> GrpcCode {
        match self {
            ErrorKind::BadRequest => GrpcCode::InvalidArgument,
            ErrorKind::NoRoute | ErrorKind::Unsupported => GrpcCode::Unimplemented,
            ErrorKind::Unauthenticated => GrpcCode::Unauthenticated,
            ErrorKind::Forbidden => GrpcCode::PermissionDenied,
            ErrorKind::PayloadTooLarge | ErrorKind::HeadersTooLarge | ErrorKind::QuotaExceeded => {
                GrpcCode::ResourceExhausted
            }
            ErrorKind::FaultAbort { status, grpc } => {
                grpc.unwrap_or_else(|| GrpcCode::from_http_status(*status))
            }
            ErrorKind::Overloaded | ErrorKind::Unavailable | ErrorKind::BadGateway => GrpcCode::Unavailable,
            ErrorKind::Timeout => GrpcCode::DeadlineExceeded,
            ErrorKind::Internal => GrpcCode::Internal,
        }
    }

    /// A short stable name for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::NoRoute => "no_route",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::HeadersTooLarge => "headers_too_large",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::FaultAbort { .. } => "fault_abort",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::BadGateway => "bad_gateway",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Internal => "internal",
        }
    }
}

/// An error the gateway answers on its own, with the message the caller sees and any extra headers
/// (`Retry-After`, `RateLimit-*`).
#[derive(Debug, Clone)]
pub struct GatewayError {
    kind: ErrorKind,
    message: String,
    headers: Option<Box<HeaderMap>>,
}

impl GatewayError {
    /// A new error of `kind` with a message that names the problem and, where there is one, the fix.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        GatewayError {
            kind,
            message: message.into(),
            headers: None,
        }
    }

    /// Adds a header to the error response (e.g. `Retry-After`).
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers
            .get_or_insert_with(Default::default)
            .append(name, value);
        self
    }

    /// The kind of error.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The message the caller sees.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The extra headers the response carries.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.headers.as_deref()
    }

    /// Builds the response for a caller speaking plain HTTP (`grpc == false`) or gRPC.
    pub fn into_response(self, grpc: bool) -> Response<Body> {
        let mut response = if grpc {
            let mut r = Response::new(empty());
            *r.status_mut() = StatusCode::OK;
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            h.insert("grpc-status", HeaderValue::from(self.kind.grpc_code().as_u16()));
            if let Ok(v) = HeaderValue::from_str(&percent_encode_grpc_message(&self.message)) {
                h.insert("grpc-message", v);
            }
            r
        } else {
            let body = serde_json::json!({ "error": self.message }).to_string();
            let mut r = Response::new(full(body));
            *r.status_mut() = self.kind.status();
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        };
        let h = response.headers_mut();
        h.insert(ERROR_ORIGIN, HeaderValue::from_static("gateway"));
        for (name, value) in self.headers.iter().flat_map(|h| h.iter()) {
            h.append(name.clone(), value.clone());
        }
        response
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GatewayError {}

impl From<UpstreamError> for GatewayError {
    fn from(e: UpstreamError) -> Self {
        let kind = match e.kind() {
            FailureKind::Overloaded => ErrorKind::Overloaded,
            FailureKind::NoEndpoints | FailureKind::ConnectFailure => ErrorKind::Unavailable,
            FailureKind::Timeout => ErrorKind::Timeout,
            FailureKind::RefusedStream | FailureKind::Reset | FailureKind::Protocol => ErrorKind::BadGateway,
            FailureKind::RequestBodyTooLarge => ErrorKind::PayloadTooLarge,
            FailureKind::RequestBody => ErrorKind::BadRequest,
        };
        GatewayError::new(kind, e.to_string())
    }
}

impl From<crate::request_target::TargetError> for GatewayError {
    fn from(e: crate::request_target::TargetError) -> Self {
        GatewayError::new(ErrorKind::BadRequest, e.to_string())
    }
}

/// Percent-encodes a `grpc-message` value as the gRPC HTTP/2 protocol requires: bytes outside printable ASCII
/// (0x20–0x7E) and `%` itself become `%XX`.
pub fn percent_encode_grpc_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn http_callers_get_kserve_json_and_the_origin_header() {
        let r = GatewayError::new(ErrorKind::QuotaExceeded, "caller 'a' is over quota")
            .with_header(
                HeaderName::from_static("retry-after"),
                HeaderValue::from_static("1"),
            )
            .into_response(false);
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[ERROR_ORIGIN], "gateway");
        assert_eq!(r.headers()["retry-after"], "1");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "caller 'a' is over quota");
    }

    #[test]
    fn grpc_callers_get_trailers_only_status() {
        let r = GatewayError::new(ErrorKind::Timeout, "route 'r' timed out after 1s").into_response(true);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "4");
        assert_eq!(r.headers()["grpc-message"], "route 'r' timed out after 1s");
        assert_eq!(r.headers()["content-type"], "application/grpc");
    }

    #[test]
    fn grpc_mapping_follows_the_grpc_table_with_quota_and_deadline_overrides() {
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::TOO_MANY_REQUESTS),
            GrpcCode::ResourceExhausted
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::GATEWAY_TIMEOUT),
            GrpcCode::DeadlineExceeded
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::SERVICE_UNAVAILABLE),
            GrpcCode::Unavailable
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::NOT_FOUND),
            GrpcCode::Unimplemented
        );
        assert_eq!(
            GrpcCode::from_http_status(StatusCode::IM_A_TEAPOT),
            GrpcCode::Unknown
        );
        let fault = ErrorKind::FaultAbort {
            status: StatusCode::SERVICE_UNAVAILABLE,
            grpc: None,
        };
        assert_eq!(fault.grpc_code(), GrpcCode::Unavailable);
    }

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode_grpc_message("a%b\né"), "a%25b%0A%C3%A9");
    }
}

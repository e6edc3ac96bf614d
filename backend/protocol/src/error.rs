//! The one error type of the protocol, and its one mapping to HTTP status codes and gRPC codes.

use std::fmt;

use http::StatusCode;

/// What kind of failure an error is; decides the HTTP status and the gRPC code (nothing else does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request is malformed or does not fit the model (HTTP 400, gRPC `INVALID_ARGUMENT`).
    InvalidArgument,
    /// The thing asked for does not exist (HTTP 404, gRPC `NOT_FOUND`).
    NotFound,
    /// Temporarily unable to serve: not ready, queue full, overloaded (HTTP 503, gRPC `UNAVAILABLE`).
    Unavailable,
    /// A bug or an unexpected failure inside the server (HTTP 500, gRPC `INTERNAL`).
    Internal,
    /// A feature this server does not provide (HTTP 501, gRPC `UNIMPLEMENTED`).
    Unsupported,
    /// The thing to create exists already (HTTP 400, gRPC `ALREADY_EXISTS`).
    AlreadyExists,
    /// A limit was hit, e.g. a body or message size (HTTP 400, gRPC `RESOURCE_EXHAUSTED`).
    ResourceExhausted,
    /// The request's deadline passed before it was served (HTTP 400, gRPC `DEADLINE_EXCEEDED`).
    DeadlineExceeded,
    /// The caller went away or the request was cancelled (HTTP 400, gRPC `CANCELLED`).
    Cancelled,
}

/// An error as the client will see it: a code and a message that names the problem and the fix.
///
/// HTTP callers get `{"error": message}` with [`ErrorCode::http_status`]; gRPC callers get
/// [`ErrorCode::grpc_code`] and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ServeError {
    /// The kind of failure.
    pub code: ErrorCode,
    /// The text sent to the client.
    pub message: String,
}

impl ErrorCode {
    /// Triton's map: INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503, UNSUPPORTED 501, everything else 400.
    pub fn http_status(self) -> StatusCode {
        match self {
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unsupported => StatusCode::NOT_IMPLEMENTED,
            ErrorCode::InvalidArgument
            | ErrorCode::AlreadyExists
            | ErrorCode::ResourceExhausted
            | ErrorCode::DeadlineExceeded
            | ErrorCode::Cancelled => StatusCode::BAD_REQUEST,
        }
    }

    /// The gRPC status code, as Triton's gRPC front end maps its error codes.
    pub fn grpc_code(self) -> tonic::Code {
        match self {
            ErrorCode::InvalidArgument => tonic::Code::InvalidArgument,
            ErrorCode::NotFound => tonic::Code::NotFound,
            ErrorCode::Unavailable => tonic::Code::Unavailable,
            ErrorCode::Internal => tonic::Code::Internal,
            ErrorCode::Unsupported => tonic::Code::Unimplemented,
            ErrorCode::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorCode::ResourceExhausted => tonic::Code::ResourceExhausted,
            ErrorCode::DeadlineExceeded => tonic::Code::DeadlineExceeded,
            ErrorCode::Cancelled => tonic::Code::Cancelled,
        }
    }

    /// Whether trying the same request again later may succeed (data for retry policies).
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorCode::Unavailable | ErrorCode::ResourceExhausted)
    }
}

impl ServeError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ServeError {
            code,
            message: message.into(),
        }
    }

    /// [`ErrorCode::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// [`ErrorCode::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// [`ErrorCode::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// [`ErrorCode::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// [`ErrorCode::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unsupported, message)
    }

    /// [`ErrorCode::ResourceExhausted`].
    pub fn resource_exhausted(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ResourceExhausted, message)
    }

    /// Triton's (2.51) answer for a model the repository does not know: `NOT_FOUND` (HTTP 404),
    /// `Request for unknown model: 'foo' is not found`.
    pub fn unknown_model(name: &str) -> Self {
        Self::not_found(format!("Request for unknown model: '{name}' is not found"))
    }

    /// Triton's answer for a version the model does not have: `NOT_FOUND` (HTTP 404).
    pub fn unknown_version(name: &str, version: u64) -> Self {
        Self::not_found(format!(
            "Request for unknown model: '{name}' version {version} is not found"
        ))
    }

    /// Triton's answer for a known model without that version ready (HTTP 503, gRPC `UNAVAILABLE`).
    pub fn version_not_ready(name: &str, version: Option<u64>) -> Self {
        match version {
            Some(v) => Self::unavailable(format!(
                "Request for unknown model: '{name}' version {v} is not at ready state"
            )),
            None => Self::unavailable(format!(
                "Request for unknown model: '{name}' has no available versions"
            )),
        }
    }

    /// The HTTP status for this error (see [`ErrorCode::http_status`]).
    pub fn http_status(&self) -> StatusCode {
        self.code.http_status()
    }

    /// The `{"error": "..."}` body HTTP callers receive (the KServe/Triton error shape).
    pub fn to_json_body(&self) -> Vec<u8> {
        let body = serde_json::json!({ "error": self.message });
        // Serialising a map of one string cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Prefixes the message with where the problem is (`"input 'x': "`), keeping the code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<ServeError> for tonic::Status {
    fn from(e: ServeError) -> Self {
        tonic::Status::new(e.code.grpc_code(), e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_map_is_tritons() {
        assert_eq!(ServeError::internal("x").http_status(), 500);
        assert_eq!(ServeError::not_found("x").http_status(), 404);
        assert_eq!(ServeError::unavailable("x").http_status(), 503);
        assert_eq!(ServeError::unsupported("x").http_status(), 501);
        assert_eq!(ServeError::invalid_argument("x").http_status(), 400);
        assert_eq!(ServeError::unknown_model("foo").http_status(), 404);
        assert_eq!(ServeError::unknown_version("foo", 3).http_status(), 404);
        assert_eq!(ServeError::resource_exhausted("x").http_status(), 400);
    }

    #[test]
    fn grpc_map_and_status_conversion() {
        let status: tonic::Status = ServeError::unsupported("no shm").into();
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert_eq!(status.message(), "no shm");
        assert_eq!(ErrorCode::NotFound.grpc_code(), tonic::Code::NotFound);
    }

    #[test]
    fn error_body_is_the_kserve_shape() {
        let body = ServeError::unknown_model("foo").to_json_body();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": "Request for unknown model: 'foo' is not found"})
        );
    }
}

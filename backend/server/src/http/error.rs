//! The one place where failures become HTTP responses.

use http::{Response, StatusCode, header};
use infergate_protocol::ServeError;

use super::body::ChunksBody;

/// Why a request failed, as the HTTP front end can say it.
#[derive(Debug)]
pub(crate) enum HttpError {
    /// A protocol error: status from [`ServeError::http_status`], body `{"error": "..."}`.
    Serve(ServeError),
    /// A known path with the wrong method: 405, as Triton answers.
    MethodNotAllowed,
}

impl From<ServeError> for HttpError {
    fn from(e: ServeError) -> Self {
        HttpError::Serve(e)
    }
}

impl HttpError {
    /// The response the client gets (`content-type: application/json`, exactly, as the kserve SDK checks).
    pub(crate) fn into_response(self) -> Response<ChunksBody> {
        let (status, body) = match self {
            HttpError::Serve(e) => {
                tracing::debug!(status = e.http_status().as_u16(), error = %e.message, "request failed");
                (e.http_status(), e.to_json_body())
            }
            HttpError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                br#"{"error":"Method Not Allowed"}"#.to_vec(),
            ),
        };
        let mut r = Response::new(ChunksBody::one(body));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        r
    }
}

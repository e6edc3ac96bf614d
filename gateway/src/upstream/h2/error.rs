//! Why an HTTP/2 stream or connection to an upstream failed: the `h2` crate's error, or what the gateway
//! itself decided about the connection (not HTTP/2 at all, keep-alive PING unanswered).

/// Why an HTTP/2 stream (or the whole connection) to an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum H2Error {
    /// The `h2` crate's error: a reset, a GOAWAY, a protocol violation it found, or the connection's I/O.
    #[error(transparent)]
    H2(#[from] ::h2::Error),
    /// The upstream's first bytes were not an HTTP/2 SETTINGS frame.
    #[error(
        "the upstream did not start with an HTTP/2 SETTINGS frame (is it speaking HTTP/2? set its protocol to http1)"
    )]
    NotHttp2,
    /// The connection closed before the upstream's SETTINGS arrived.
    #[error("the upstream closed the connection before its HTTP/2 SETTINGS arrived")]
    ClosedInHandshake,
}

impl H2Error {
    /// The HTTP/2 error code, when the error carries one (RST_STREAM, GOAWAY, or one the gateway sent).
    pub fn reason(&self) -> Option<::h2::Reason> {
        match self {
            H2Error::H2(e) => e.reason(),
            _ => None,
        }
    }
}

//! The codec's one error type: why bytes could not be read as an HTTP/1.1 message. What to answer and what
//! to tell the peer is the caller's to decide; the variants carry what it needs (which limit, which part).

/// Why a message head or body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The head is longer than the reader's limit (the limit, in bytes).
    #[error("the message head is larger than {0} bytes")]
    HeadTooLarge(usize),
    /// The head has more headers than the reader's limit (the limit).
    #[error("the message has more than {0} headers")]
    TooManyHeaders(usize),
    /// A transfer coding other than `chunked` (the codings as sent).
    #[error("transfer-encoding '{0}' is not supported")]
    UnsupportedCoding(String),
    /// The head is malformed; the text names what.
    #[error("malformed HTTP/1.1 head: {0}")]
    MalformedHead(String),
    /// The body's framing is broken; the text names how.
    #[error("malformed chunked body: {0}")]
    MalformedBody(&'static str),
    /// The connection closed before the body ended.
    #[error("the connection closed before the body ended")]
    Truncated,
    /// The rest of the body did not arrive in the time the reader allows.
    #[error("the rest of the body did not arrive in time")]
    Stalled,
}

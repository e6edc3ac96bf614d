//! Why an HTTP/2 stream or connection to an upstream failed: the error codes of RFC 9113 §7 and who ended
//! what, so that the retry policy can tell a stream the upstream never processed from one it reset.

use std::fmt;
use std::sync::Arc;

/// An HTTP/2 error code (RFC 9113 §7).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful shutdown.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// A protocol violation.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// An implementation fault.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// Flow control violated.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// A frame on a half-closed stream.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The header compression context broke.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// The peer is being abusive.
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);

    fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => return None,
        })
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "error code {:#x}", self.0),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a stream (or the whole connection) failed.
#[derive(Debug, Clone)]
pub struct H2Error {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// The upstream reset the stream (RST_STREAM).
    Reset(Reason),
    /// The upstream sent GOAWAY; `processed`: the stream was within its last stream id, so it may have been
    /// processed.
    GoAway { reason: Reason, processed: bool },
    /// The gateway found the upstream breaking the protocol (`reason` is what it told the upstream).
    Protocol(Reason, &'static str),
    /// The connection failed or closed.
    Io(Arc<std::io::Error>),
    /// The connection closed cleanly with the stream unfinished.
    Closed,
    /// The keep-alive PING went unanswered.
    KeepAliveTimeout,
}

impl H2Error {
    pub(crate) fn reset(reason: Reason) -> H2Error {
        H2Error {
            kind: Kind::Reset(reason),
        }
    }

    pub(crate) fn go_away(reason: Reason, processed: bool) -> H2Error {
        H2Error {
            kind: Kind::GoAway { reason, processed },
        }
    }

    pub(crate) fn protocol(reason: Reason, what: &'static str) -> H2Error {
        H2Error {
            kind: Kind::Protocol(reason, what),
        }
    }

    pub(crate) fn io(e: std::io::Error) -> H2Error {
        H2Error {
            kind: Kind::Io(Arc::new(e)),
        }
    }

    pub(crate) fn closed() -> H2Error {
        H2Error { kind: Kind::Closed }
    }

    pub(crate) fn keep_alive_timeout() -> H2Error {
        H2Error {
            kind: Kind::KeepAliveTimeout,
        }
    }

    /// Whether the upstream cannot have processed the request: it refused the stream, or its GOAWAY left
    /// the stream out (RFC 9113 §8.7). Such a request is safe to send again, whatever its method.
    pub fn is_unprocessed(&self) -> bool {
        matches!(
            self.kind,
            Kind::Reset(Reason::REFUSED_STREAM) | Kind::GoAway { processed: false, .. }
        )
    }

    /// Whether the keep-alive PING went unanswered.
    pub fn is_keep_alive_timeout(&self) -> bool {
        matches!(self.kind, Kind::KeepAliveTimeout)
    }
}

impl fmt::Display for H2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Reset(r) => write!(f, "the upstream reset the stream ({r})"),
            Kind::GoAway {
                reason,
                processed: false,
            } => write!(f, "the upstream sent GOAWAY ({reason}) before taking the stream"),
            Kind::GoAway {
                reason,
                processed: true,
            } => write!(f, "the upstream sent GOAWAY ({reason}) and closed"),
            Kind::Protocol(r, what) => write!(f, "HTTP/2 protocol error from the upstream ({r}): {what}"),
            Kind::Io(e) => write!(f, "the connection failed: {e}"),
            Kind::Closed => f.write_str("the connection closed"),
            Kind::KeepAliveTimeout => f.write_str("the upstream did not answer the keep-alive PING"),
        }
    }
}

impl std::error::Error for H2Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Io(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

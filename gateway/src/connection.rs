//! What the data listener knows about one client connection ([`ConnInfo`]) and the limits it serves it under
//! ([`ConnLimits`]). A leaf module: the listener, the HTTP/1.1 server (`h1/`) and the pipeline all read
//! these values, and none of them needs another for them.

use std::net::SocketAddr;
use std::time::Duration;

use crate::tls::PeerIdentity;

/// Per-connection limits of the data listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLimits {
    /// Largest HTTP/1.1 request head / HTTP/2 header list, bytes.
    pub max_header_bytes: usize,
    /// Most headers in one HTTP/1.1 request.
    pub max_headers: usize,
    /// Time a client has to send its request head (HTTP/1.1), its first bytes, and its TLS handshake.
    pub header_read_timeout: Duration,
    /// A connection without requests in flight for this long is closed gracefully.
    pub idle_timeout: Duration,
    /// A connection whose writes make no progress this long is closed (the client does not read); over
    /// HTTP/2, so is a stream whose client takes none of its answer this long.
    pub write_timeout: Duration,
    /// A request body that moves no bytes this long ends the exchange, and so does an answer whose upstream
    /// sends nothing this long (HTTP/1.1: the connection closes; HTTP/2: the stream is reset).
    pub stream_idle_timeout: Duration,
    /// Client connections open at once; more are refused.
    pub max_connections: usize,
    /// HTTP/2 streams a client may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 streams a client may reset before the server accepts them (rapid reset, CVE-2023-44487).
    pub h2_max_pending_accept_reset_streams: usize,
    /// HTTP/2 streams reset by the server for client protocol errors before the connection is closed.
    pub h2_max_local_error_reset_streams: usize,
    /// Largest request body, bytes; larger ones get 413.
    pub max_request_body: u64,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_header_bytes: 16 << 10,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            stream_idle_timeout: Duration::from_secs(300),
            max_connections: 10_000,
            h2_max_concurrent_streams: 200,
            h2_max_pending_accept_reset_streams: 20,
            h2_max_local_error_reset_streams: 1024,
            max_request_body: 64 << 20,
        }
    }
}

impl From<&infergate_config::ConnectionLimits> for ConnLimits {
    fn from(c: &infergate_config::ConnectionLimits) -> Self {
        ConnLimits {
            max_header_bytes: usize::try_from(c.max_header_bytes.0).unwrap_or(usize::MAX),
            max_headers: c.max_headers,
            header_read_timeout: c.header_read_timeout,
            idle_timeout: c.idle_timeout,
            write_timeout: c.write_timeout,
            stream_idle_timeout: c.stream_idle_timeout,
            max_connections: c.max_connections,
            h2_max_concurrent_streams: c.h2_max_concurrent_streams,
            h2_max_pending_accept_reset_streams: c.h2_max_pending_accept_reset_streams,
            h2_max_local_error_reset_streams: c.h2_max_local_error_reset_streams,
            max_request_body: c.max_request_body.0,
        }
    }
}

/// What the gateway knows about the connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The listener's address.
    pub local: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The verified client-certificate identity (mTLS), if any.
    pub identity: Option<PeerIdentity>,
    /// The peer's address as an `x-forwarded-for` value, formatted once per connection.
    pub forwarded_for: Option<http::HeaderValue>,
}

impl ConnInfo {
    /// What is known about a connection from `peer` to `local`.
    pub fn new(peer: SocketAddr, local: SocketAddr, tls: bool, identity: Option<PeerIdentity>) -> Self {
        ConnInfo {
            peer,
            local,
            tls,
            identity,
            forwarded_for: crate::headers::forwarded_for_value(peer.ip()),
        }
    }

    /// The caller facts that caller identification reads.
    pub fn facts(&self) -> crate::caller::ConnectionFacts<'_> {
        crate::caller::ConnectionFacts {
            tls_identity: self.identity.as_ref().and_then(PeerIdentity::primary),
            peer_ip: Some(self.peer.ip()),
        }
    }
}

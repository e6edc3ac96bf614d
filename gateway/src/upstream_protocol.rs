//! How the gateway speaks to an upstream: the HTTP version and the TLS to use. A leaf module: the bridge
//! (which shapes each request for its upstream) and the upstream client both read these values, and neither
//! needs the other for them.

use std::sync::Arc;

use rustls::pki_types::ServerName;

/// The HTTP version spoken to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/2: h2c with prior knowledge in clear text, or h2 negotiated by ALPN over TLS. Requests of all
    /// callers are multiplexed over a few connections.
    Http2,
    /// HTTP/1.1 with keep-alive; one request per connection at a time.
    Http1,
}

/// TLS towards an upstream: the client configuration (roots, ALPN) and the name to verify.
#[derive(Clone)]
pub struct UpstreamTls {
    /// rustls client configuration; its ALPN list should offer the upstream's protocol.
    pub config: Arc<rustls::ClientConfig>,
    /// The name the upstream's certificate must carry (SNI).
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.server_name == other.server_name
    }
}

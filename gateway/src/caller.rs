//! Caller identity: who is sending this request, for quotas and sticky canary splits.
//!
//! A route's rules name where the caller comes from, in order of preference: a request header
//! (`x-caller-id`), the mTLS peer identity (URI or DNS SAN, which the listener extracts and passes
//! in), or the TCP peer address. The first source that yields a value wins. [`CallerSources::identify`]
//! borrows from the request and allocates nothing.

use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;

use http::{HeaderMap, HeaderName};

use crate::stable_hash::StableHasher;

/// Where a caller's identity may be read from; see [`CallerSources`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerSource {
    /// The value of this request header (empty values are ignored).
    Header(HeaderName),
    /// The verified mTLS peer identity (URI SAN, else DNS SAN) the listener extracted.
    MtlsIdentity,
    /// The TCP peer's IP address (the port is ignored: one client, many connections).
    PeerAddress,
}

/// An ordered list of [`CallerSource`]s; the first that yields a value names the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerSources(Vec<CallerSource>);

/// What the listener knows about the connection, handed to [`CallerSources::identify`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectionFacts<'a> {
    /// The verified client-certificate identity (URI SAN preferred, else DNS SAN), if mTLS is on.
    pub tls_identity: Option<&'a str>,
    /// The peer's IP address (`None` for in-process tests or Unix sockets).
    pub peer_ip: Option<IpAddr>,
}

/// A resolved caller identity, borrowed from the request or connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Caller<'a> {
    /// Named by a request header.
    Header(&'a str),
    /// Named by the mTLS peer identity.
    Identity(&'a str),
    /// Known only by its IP address.
    Peer(IpAddr),
    /// No source yielded anything (no header, no TLS, no peer address).
    Anonymous,
}

/// The gateway-wide caller rules: the sources, and whether requests without an identity are
/// refused (config `callers.unidentified: reject`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallerPolicy {
    /// Where identities come from, in order.
    pub sources: CallerSources,
    /// Refuse requests no source identifies (401 / UNAUTHENTICATED).
    pub reject_unidentified: bool,
}

impl CallerPolicy {
    /// The caller of one request; `None` when it must be refused as unidentified.
    pub fn identify<'a>(&self, headers: &'a HeaderMap, conn: ConnectionFacts<'a>) -> Option<Caller<'a>> {
        match self.sources.identify(headers, conn) {
            Caller::Anonymous if self.reject_unidentified => None,
            c => Some(c),
        }
    }
}

impl CallerSources {
    /// The sources in the order they are tried.
    pub fn new(sources: Vec<CallerSource>) -> Self {
        Self(sources)
    }

    /// The default order: the `x-caller-id` header, then the mTLS identity, then the peer address.
    pub fn default_order() -> Self {
        Self(vec![
            CallerSource::Header(HeaderName::from_static("x-caller-id")),
            CallerSource::MtlsIdentity,
            CallerSource::PeerAddress,
        ])
    }

    /// The configured sources.
    pub fn sources(&self) -> &[CallerSource] {
        &self.0
    }

    /// Resolves the caller of one request. Header values that are not visible ASCII are skipped.
    pub fn identify<'a>(&self, headers: &'a HeaderMap, conn: ConnectionFacts<'a>) -> Caller<'a> {
        for source in &self.0 {
            match source {
                CallerSource::Header(name) => {
                    if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
                        let v = v.trim();
                        if !v.is_empty() {
                            return Caller::Header(v);
                        }
                    }
                }
                CallerSource::MtlsIdentity => {
                    if let Some(id) = conn.tls_identity.filter(|s| !s.is_empty()) {
                        return Caller::Identity(id);
                    }
                }
                CallerSource::PeerAddress => {
                    if let Some(ip) = conn.peer_ip {
                        return Caller::Peer(ip);
                    }
                }
            }
        }
        Caller::Anonymous
    }
}

impl Default for CallerSources {
    fn default() -> Self {
        Self::default_order()
    }
}

impl Caller<'_> {
    /// The caller's name as configured overrides spell it: the header value, the TLS identity, or
    /// `None` for peer addresses (matched by [`Caller::peer_ip`]) and anonymous callers.
    pub fn name(&self) -> Option<&str> {
        match self {
            Caller::Header(s) | Caller::Identity(s) => Some(s),
            Caller::Peer(_) | Caller::Anonymous => None,
        }
    }

    /// The peer IP address when the caller is known only by it.
    pub fn peer_ip(&self) -> Option<IpAddr> {
        match self {
            Caller::Peer(ip) => Some(*ip),
            _ => None,
        }
    }

    /// A stable 64-bit hash of the caller, the same in every process and release (FNV-1a followed
    /// by a SplitMix64 finaliser). Used for sticky splits, where the mapping must not change when the
    /// gateway restarts. Not collision-resistant against chosen input: do not key security state on it.
    pub fn stable_hash(&self) -> u64 {
        let mut h = StableHasher::default();
        match self {
            // The identity kinds share one namespace so that `x-caller-id: alice` and an mTLS
            // identity `alice` are the same caller for stickiness.
            Caller::Header(s) | Caller::Identity(s) => {
                h.write(&[1]);
                h.write(s.as_bytes());
            }
            Caller::Peer(IpAddr::V4(ip)) => {
                h.write(&[2]);
                h.write(&ip.octets());
            }
            Caller::Peer(IpAddr::V6(ip)) => {
                h.write(&[3]);
                h.write(&ip.octets());
            }
            Caller::Anonymous => h.write(&[0]),
        }
        h.finish()
    }

    /// A keyed hash of the caller (`state` is the process's random `RandomState`), used to key
    /// quota buckets so that a client cannot craft names that collide with another caller's bucket.
    pub fn keyed_hash<S: BuildHasher>(&self, state: &S) -> u64 {
        let mut h = state.build_hasher();
        match self {
            Caller::Header(s) | Caller::Identity(s) => {
                1u8.hash(&mut h);
                s.hash(&mut h);
            }
            Caller::Peer(ip) => {
                2u8.hash(&mut h);
                ip.hash(&mut h);
            }
            Caller::Anonymous => 0u8.hash(&mut h),
        }
        h.finish()
    }
}

impl std::fmt::Display for Caller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Header(s) | Caller::Identity(s) => f.write_str(s),
            Caller::Peer(ip) => write!(f, "{ip}"),
            Caller::Anonymous => f.write_str("anonymous"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn first_source_that_yields_wins() {
        let sources = CallerSources::default_order();
        let mut headers = HeaderMap::new();
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let peer = Some(ip);
        let conn = ConnectionFacts {
            tls_identity: Some("spiffe://ns/sa/a"),
            peer_ip: peer,
        };
        assert_eq!(
            sources.identify(&headers, conn),
            Caller::Identity("spiffe://ns/sa/a")
        );
        headers.insert("x-caller-id", HeaderValue::from_static("team-a"));
        assert_eq!(sources.identify(&headers, conn), Caller::Header("team-a"));
        headers.insert("x-caller-id", HeaderValue::from_static("  "));
        let no_tls = ConnectionFacts {
            tls_identity: None,
            peer_ip: peer,
        };
        assert_eq!(sources.identify(&headers, no_tls), Caller::Peer(ip));
        assert_eq!(
            sources.identify(&headers, ConnectionFacts::default()),
            Caller::Anonymous
        );
    }

    const PINNED_ALICE: u64 = 14_270_329_114_498_592_418;

    #[test]
    fn stable_hash_is_stable_and_spreads() {
        // Pinned value: stickiness must survive restarts and releases.
        assert_eq!(
            Caller::Header("alice").stable_hash(),
            Caller::Identity("alice").stable_hash()
        );
        assert_eq!(Caller::Header("alice").stable_hash(), PINNED_ALICE);
        assert_ne!(
            Caller::Header("alice").stable_hash(),
            Caller::Header("bob").stable_hash()
        );
    }
}

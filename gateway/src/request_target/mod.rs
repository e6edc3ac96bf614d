//! One reading of every request target: the path in its canonical form and the host checked, before anything
//! matches on them, so the gateway decides on exactly what the upstream will act on.
//!
//! [`canonicalise`] runs first in the pipeline. It refuses a request whose `Host` is missing (HTTP/1.1),
//! repeated or at odds with the target's authority ([`authority`]), and rewrites the path to its canonical form
//! ([`path`]); the rewritten URI is what routes match and what goes upstream. [`rest_model_name`] then reads
//! the KServe model name from that path, percent-decoded once as the backend decodes it. Every refusal is a
//! [`TargetError`], answered with 400 (`INVALID_ARGUMENT` for gRPC) in `error.rs`. `docs/security.md` lists
//! the attacks each rule closes.

pub mod authority;
pub mod path;

use std::borrow::Cow;

use http::Uri;
use http::request::Parts;
use http::uri::PathAndQuery;

pub use authority::route_host;

/// Why a request target was refused. Each message names the problem and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// `%2F` in the path.
    #[error(
        "the path contains an encoded '/' (%2F), which the gateway refuses: a server that decodes it reads other segments than the routes matched; send '/' unescaped between segments and no '/' inside one"
    )]
    EncodedSlash,
    /// `%00` in the path.
    #[error("the path contains an encoded NUL (%00); remove it")]
    EncodedNul,
    /// A `%` not followed by two hex digits.
    #[error(
        "the path contains '{0}', which is not a percent-escape ('%' and two hex digits); write a literal '%' as %25"
    )]
    BadEscape(String),
    /// A model-name segment that is not UTF-8 once decoded.
    #[error(
        "the path segment '{0}' is not UTF-8 once percent-decoded; percent-encode the name's UTF-8 bytes"
    )]
    SegmentNotUtf8(String),
    /// An HTTP/1.1 request without `Host`.
    #[error("an HTTP/1.1 request needs a Host header (RFC 9112 §3.2); send one naming the server")]
    MissingHost,
    /// More than one `Host`.
    #[error("the request has more than one Host header (RFC 9112 §3.2); send exactly one")]
    DuplicateHost,
    /// A `Host` that is not `host[:port]`.
    #[error(
        "Host '{0}' is not a host with an optional port; send the server's name or address, e.g. 'api.example.com:8080'"
    )]
    InvalidHost(String),
    /// `Host` and the target's authority name different servers.
    #[error(
        "Host '{host}' names another server than the request target's authority '{target}'; send the same host and port in both, or an origin-form target ('/path')"
    )]
    HostMismatch {
        /// The `Host` value.
        host: String,
        /// The authority of the target (`:authority`, or an absolute-form target's).
        target: String,
    },
    /// `user@host` in the target's authority.
    #[error(
        "the request target's authority '{0}' carries user information, which HTTP requests must not; send credentials in a header"
    )]
    UserInfo(String),
    /// The canonical path could not be put back into the URI.
    #[error("the canonical form of the path '{0}' is not a valid request target")]
    Unrepresentable(String),
}

/// Checks the request's host and rewrites its path to the canonical form, in place. `tls`: whether the request
/// came over TLS (the default port of an origin-form request's authority is then 443).
pub fn canonicalise(parts: &mut Parts, tls: bool) -> Result<(), TargetError> {
    authority::check(parts, tls)?;
    let Some(canonical) = path::canonical_path(parts.uri.path())? else {
        return Ok(());
    };
    let pq = match parts.uri.query() {
        Some(q) => format!("{canonical}?{q}"),
        None => canonical,
    };
    let Ok(pq) = PathAndQuery::try_from(pq.as_str()) else {
        return Err(TargetError::Unrepresentable(pq));
    };
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    uri.path_and_query = Some(pq);
    parts.uri = Uri::from_parts(uri).map_err(|e| TargetError::Unrepresentable(e.to_string()))?;
    Ok(())
}

/// A KServe model name as read from a canonical REST path (`RestModelPath`'s name), percent-decoded once, as
/// the backend decodes it. Borrowed unless it holds an escape.
pub fn rest_model_name(raw: &str) -> Result<Cow<'_, str>, TargetError> {
    path::decode_segment(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use http::header::HOST;

    fn canon(uri: &str) -> Result<String, TargetError> {
        let (mut parts, ()) = Request::post(uri)
            .header(HOST, "gw")
            .body(())
            .unwrap()
            .into_parts();
        canonicalise(&mut parts, false)?;
        Ok(parts.uri.to_string())
    }

    #[test]
    fn the_uri_is_rewritten_with_its_query_and_authority_kept() {
        assert_eq!(
            canon("/v2/models/%73imple/infer?a=%2F").unwrap(),
            "/v2/models/simple/infer?a=%2F"
        );
        assert_eq!(
            canon("http://gw/v2/models/x/../simple").unwrap(),
            "http://gw/v2/models/simple"
        );
        assert_eq!(
            canon("/v2/models/simple/infer").unwrap(),
            "/v2/models/simple/infer"
        );
        assert_eq!(canon("/v2/models/a%2Fb/infer"), Err(TargetError::EncodedSlash));
    }
}

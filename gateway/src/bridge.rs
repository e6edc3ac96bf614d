//! Protocol bridging: a request that arrived over HTTP/1.1, h2c or h2 leaves in the form its upstream speaks
//! (HTTP/2 with `:scheme`/`:authority`, or HTTP/1.1 with origin-form target and `Host`), and the response
//! comes back in a form the caller's connection can carry.

use std::cell::RefCell;
use std::net::SocketAddr;

use http::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{Request, Response, Version};

use crate::headers::strip_hop_by_hop;
use crate::proxy::Body;
use crate::upstream_protocol::{UpstreamProtocol, UpstreamTls};

/// True when the request is gRPC (`content-type: application/grpc` or `application/grpc+proto`, …).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.strip_prefix("application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('+') || rest.starts_with(';'))
        })
}

thread_local! {
    /// The last `Host` value parsed on this thread and its authority. A data worker is one thread, and its
    /// callers name the same few hosts over and over: comparing a few bytes and cloning the parsed value
    /// (a reference count) is cheaper than parsing, copying and allocating it again for every request.
    static LAST_HOST: RefCell<Option<(HeaderValue, Authority)>> = const { RefCell::new(None) };
}

/// The authority the caller addressed: the URI's (HTTP/2 `:authority`, absolute-form HTTP/1.1) or that of
/// `host`, its `Host` header.
fn caller_authority(uri: &Uri, host: Option<&HeaderValue>) -> Option<Authority> {
    if let Some(a) = uri.authority() {
        return Some(a.clone());
    }
    let host = host?;
    LAST_HOST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((value, authority)) = &*last
            && value.as_bytes() == host.as_bytes()
        {
            return Some(authority.clone());
        }
        let authority = host.to_str().ok()?.parse::<Authority>().ok()?;
        *last = Some((host.clone(), authority.clone()));
        Some(authority)
    })
}

/// Rewrites a request for one try to an upstream speaking `protocol` at `addr`. The caller's authority is
/// kept (the upstream sees the host the caller asked for); without one, the endpoint's address is used.
pub fn to_upstream(
    req: Request<Body>,
    protocol: UpstreamProtocol,
    addr: SocketAddr,
    tls: Option<&UpstreamTls>,
) -> Request<Body> {
    let (mut parts, body) = req.into_parts();
    let endpoint = || addr.to_string().parse::<Authority>().ok();
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match protocol {
        UpstreamProtocol::Http2 => {
            // `Host` does not go out over HTTP/2: taken out here, its value is the `:authority` when the
            // target carries none (one lookup of the name, not a read and then a removal).
            let host = parts.headers.remove(HOST);
            let authority = caller_authority(&parts.uri, host.as_ref()).or_else(endpoint);
            let mut b = Uri::builder()
                .scheme(if tls.is_some() {
                    Scheme::HTTPS
                } else {
                    Scheme::HTTP
                })
                .path_and_query(path);
            if let Some(a) = authority {
                b = b.authority(a);
            }
            if let Ok(uri) = b.build() {
                parts.uri = uri;
            }
            parts.version = Version::HTTP_2;
        }
        UpstreamProtocol::Http1 => {
            // An origin-form request with a Host keeps it as it came (the authority was read from it);
            // otherwise Host is set from the authority (absolute-form, HTTP/2 callers, or none sent).
            let keep_host = parts.uri.authority().is_none() && parts.headers.contains_key(HOST);
            if !keep_host
                && let Some(a) = caller_authority(&parts.uri, parts.headers.get(HOST)).or_else(endpoint)
                && let Ok(v) = HeaderValue::from_str(a.as_str())
            {
                parts.headers.insert(HOST, v);
            }
            parts.uri = Uri::from(path);
            parts.version = Version::HTTP_11;
        }
    }
    Request::from_parts(parts, body)
}

/// Prepares an upstream's response for the caller: hop-by-hop headers go, the version is left to the caller's
/// connection.
pub fn from_upstream<B>(resp: Response<B>) -> Response<B> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts.version = Version::default();
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::empty;

    fn req(uri: &str, host: Option<&str>) -> Request<Body> {
        let mut b = Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(HOST, h);
        }
        b.body(empty()).unwrap()
    }

    #[test]
    fn http1_request_becomes_h2_with_scheme_and_authority() {
        let r = to_upstream(
            req("/v2/models/m/infer?x=1", Some("api.example:8080")),
            UpstreamProtocol::Http2,
            "127.0.0.1:9000".parse().unwrap(),
            None,
        );
        assert_eq!(r.version(), Version::HTTP_2);
        assert_eq!(
            r.uri().to_string(),
            "http://api.example:8080/v2/models/m/infer?x=1"
        );
        assert!(r.headers().get(HOST).is_none());
    }

    #[test]
    fn h2_request_becomes_http1_with_host() {
        let r = to_upstream(
            req("http://api.example/v2", None),
            UpstreamProtocol::Http1,
            "127.0.0.1:9000".parse().unwrap(),
            None,
        );
        assert_eq!(r.version(), Version::HTTP_11);
        assert_eq!(r.uri().to_string(), "/v2");
        assert_eq!(r.headers()[HOST], "api.example");
    }

    #[test]
    fn an_http1_callers_host_goes_to_an_http1_upstream_as_it_came() {
        let addr = "127.0.0.1:9000".parse().unwrap();
        let r = to_upstream(
            req("/v2?x=1", Some("Models.Example:8080")),
            UpstreamProtocol::Http1,
            addr,
            None,
        );
        assert_eq!(r.uri().to_string(), "/v2?x=1");
        assert_eq!(r.headers()[HOST], "Models.Example:8080");
        // Absolute form: the URI's authority wins over a Host header (RFC 9112 §3.2.2).
        let r = to_upstream(
            req("http://api.example/v2", Some("other.example")),
            UpstreamProtocol::Http1,
            addr,
            None,
        );
        assert_eq!(r.headers()[HOST], "api.example");
        // No authority at all: the endpoint's address.
        let r = to_upstream(req("/v2", None), UpstreamProtocol::Http1, addr, None);
        assert_eq!(r.headers()[HOST], "127.0.0.1:9000");
    }

    #[test]
    fn each_request_gets_the_authority_of_its_own_host_header() {
        let addr = "127.0.0.1:9000".parse().unwrap();
        for host in ["a.example:8080", "a.example:8080", "b.example", "a.example:8080"] {
            let r = to_upstream(req("/x", Some(host)), UpstreamProtocol::Http2, addr, None);
            assert_eq!(r.uri().to_string(), format!("http://{host}/x"));
        }
        // An unparsable Host falls back to the endpoint, and does not replace the remembered one.
        let r = to_upstream(req("/x", Some("bad host")), UpstreamProtocol::Http2, addr, None);
        assert_eq!(r.uri().to_string(), "http://127.0.0.1:9000/x");
        let r = to_upstream(
            req("/x", Some("a.example:8080")),
            UpstreamProtocol::Http2,
            addr,
            None,
        );
        assert_eq!(r.uri().to_string(), "http://a.example:8080/x");
    }

    #[test]
    fn missing_authority_falls_back_to_the_endpoint() {
        let r = to_upstream(
            req("/x", None),
            UpstreamProtocol::Http2,
            "10.1.2.3:81".parse().unwrap(),
            None,
        );
        assert_eq!(r.uri().to_string(), "http://10.1.2.3:81/x");
    }

    #[test]
    fn grpc_is_detected_by_content_type() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc+proto"));
        assert!(is_grpc(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc-web"));
        assert!(!is_grpc(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&h));
    }
}

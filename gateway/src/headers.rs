//! Header rules of a proxy: hop-by-hop headers (RFC 9110 §7.6.1), `x-request-id`, `x-forwarded-for` and
//! protocol upgrades.

use std::net::IpAddr;

use bytes::Bytes;
use http::header::{
    CONNECTION, Entry, HeaderMap, HeaderName, HeaderValue, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE,
    TRANSFER_ENCODING, UPGRADE,
};

/// The request id header: added when the caller sent none, passed upstream and echoed in the response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The header listing the addresses a request passed through.
pub const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Headers that only mean something on one connection and never travel through a proxy.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Whether `name` is one of the fixed hop-by-hop headers, `HTTP2-Settings` or `TE`.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    // Standard names compare as enum values; the three others by their bytes.
    *name == CONNECTION
        || *name == TRANSFER_ENCODING
        || *name == UPGRADE
        || *name == TE
        || *name == PROXY_AUTHENTICATE
        || *name == PROXY_AUTHORIZATION
        || matches!(
            name.as_str(),
            "keep-alive" | "proxy-connection" | "http2-settings"
        )
}

/// Removes hop-by-hop headers: every header named in `Connection`, the fixed hop-by-hop set, `HTTP2-Settings`,
/// and `TE` except its `trailers` token (which gRPC needs end to end on HTTP/2).
///
/// Most messages carry none of them: one pass over the names (no hashing, no allocation) finds that out,
/// and only a message that has one pays for the removals.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        // `te` listed in Connection is still handled below: only its `trailers` token survives.
        if name != TE {
            headers.remove(&name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("http2-settings");
    let keeps_trailers = headers
        .get_all(TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| {
            let token = token.split(';').next().unwrap_or("").trim();
            token.eq_ignore_ascii_case("trailers")
        });
    headers.remove(TE);
    if keeps_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

/// What a request asks of the connection beyond one request and one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeRequest {
    /// No upgrade, or an `h2c` upgrade that the gateway ignores (RFC 9113 lets a server answer in HTTP/1.1).
    None,
    /// Another protocol (WebSocket, …): the gateway refuses it.
    Protocol(String),
}

/// Reads the `Upgrade` header of an HTTP/1.1 request.
pub fn upgrade_request(headers: &HeaderMap) -> UpgradeRequest {
    let Some(value) = headers.get(UPGRADE) else {
        return UpgradeRequest::None;
    };
    let text = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
    if text.split(',').all(|p| p.trim().eq_ignore_ascii_case("h2c")) {
        UpgradeRequest::None
    } else {
        UpgradeRequest::Protocol(text)
    }
}

/// Returns the request id, adding a fresh random one when the request has none (or an unreadable one).
///
/// The id is marked sensitive, which HTTP/2 encodes as a never-indexed literal: a value unique to one
/// request would only evict useful entries from the HPACK table (and make every later lookup of the
/// name walk the ids already there).
pub fn ensure_request_id(headers: &mut HeaderMap) -> HeaderValue {
    let fresh = || {
        let mut value = request_id(rand::random());
        value.set_sensitive(true);
        value
    };
    // One lookup of the name (an entry), whether the caller sent an id or not.
    match headers.entry(REQUEST_ID) {
        Entry::Occupied(mut e) if !e.get().is_empty() => {
            let v = e.get_mut();
            v.set_sensitive(true);
            v.clone()
        }
        Entry::Occupied(mut e) => {
            let value = fresh();
            e.insert(value.clone());
            value
        }
        Entry::Vacant(e) => {
            let value = fresh();
            e.insert(value.clone());
            value
        }
    }
}

/// `id` as 32 lowercase hex digits.
fn request_id(id: u128) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 32];
    for (i, b) in text.iter_mut().enumerate() {
        *b = HEX[((id >> (124 - 4 * i)) & 0xf) as usize];
    }
    // The buffer owns the digits in place: one allocation, and the clone echoed in the response shares it
    // (a copy into a plain buffer would allocate again on that first clone). Hex digits are always a valid
    // header value.
    HeaderValue::from_maybe_shared(Bytes::from_owner(text)).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// The `x-forwarded-for` value of a connection's peer, built once per connection.
pub fn forwarded_for_value(peer: IpAddr) -> Option<HeaderValue> {
    HeaderValue::from_str(&peer.to_string()).ok()
}

/// Appends the caller's address (`peer`, from [`forwarded_for_value`]) to `x-forwarded-for`.
/// One lookup of the name (an entry), not a read and then an insert.
pub fn append_forwarded_for(headers: &mut HeaderMap, peer: &HeaderValue) {
    match headers.entry(FORWARDED_FOR) {
        Entry::Vacant(e) => {
            e.insert(peer.clone());
        }
        Entry::Occupied(mut e) => {
            // A repeated header is one list (RFC 9110 §5.3): every earlier hop is kept, in order, and the
            // joined list replaces the values. Values that are empty or not text are dropped.
            let mut hops: Vec<&str> = e
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .collect();
            let peer_text = String::from_utf8_lossy(peer.as_bytes());
            hops.push(&peer_text);
            let joined = HeaderValue::from_str(&hops.join(", ")).unwrap_or_else(|_| peer.clone());
            e.insert(joined);
        }
    }
}

/// True when the message body is framed with `Transfer-Encoding` (only meaningful on HTTP/1.1).
pub fn is_chunked(headers: &HeaderMap) -> bool {
    headers.contains_key(TRANSFER_ENCODING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn connection_listed_and_fixed_hop_by_hop_headers_are_removed() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic x"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAA"),
            ("content-type", "application/json"),
            ("x-keep", "yes"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["content-type", "x-keep"]);
    }

    #[test]
    fn messages_without_hop_by_hop_headers_are_left_alone() {
        let mut h = map(&[
            ("content-type", "application/grpc"),
            ("keep-alive-ish", "1"),
            ("x-upgrade", "websocket"),
        ]);
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
    }

    #[test]
    fn te_keeps_only_trailers() {
        let mut h = map(&[("te", "gzip, trailers;q=1")]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.get(TE).unwrap(), "trailers");
        let mut h = map(&[("te", "gzip")]);
        strip_hop_by_hop(&mut h);
        assert!(h.get(TE).is_none());
    }

    #[test]
    fn request_id_is_kept_or_added() {
        let mut h = map(&[("x-request-id", "abc")]);
        assert_eq!(ensure_request_id(&mut h), "abc");
        assert!(h.get(&REQUEST_ID).unwrap().is_sensitive());
        // An empty id is replaced by a fresh one, the only value of the name.
        let mut h = map(&[("x-request-id", ""), ("x-request-id", "second")]);
        let id = ensure_request_id(&mut h);
        assert_eq!(id.len(), 32);
        assert_eq!(h.get_all(&REQUEST_ID).iter().collect::<Vec<_>>(), [&id]);
        let mut h = HeaderMap::new();
        let id = ensure_request_id(&mut h);
        assert_eq!(id.len(), 32);
        assert!(
            id.as_bytes()
                .iter()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(h.get(&REQUEST_ID).unwrap(), &id);
        assert!(h.get(&REQUEST_ID).unwrap().is_sensitive());
        assert_eq!(
            request_id(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            "0123456789abcdeffedcba9876543210"
        );
    }

    #[test]
    fn h2c_upgrade_is_ignored_websocket_is_not() {
        assert_eq!(upgrade_request(&map(&[("upgrade", "h2c")])), UpgradeRequest::None);
        assert_eq!(
            upgrade_request(&map(&[("upgrade", "websocket")])),
            UpgradeRequest::Protocol("websocket".into())
        );
    }

    #[test]
    fn forwarded_for_appends() {
        let peer = forwarded_for_value("127.0.0.1".parse().unwrap()).unwrap();
        let mut h = map(&[("x-forwarded-for", "10.0.0.1")]);
        append_forwarded_for(&mut h, &peer);
        assert_eq!(h.get(&FORWARDED_FOR).unwrap(), "10.0.0.1, 127.0.0.1");
        let mut h = HeaderMap::new();
        append_forwarded_for(&mut h, &peer);
        assert_eq!(h.get(&FORWARDED_FOR).unwrap(), "127.0.0.1");
        // A repeated header keeps every hop, in order, as one value.
        let mut h = map(&[("x-forwarded-for", "10.0.0.1"), ("x-forwarded-for", " 10.0.0.2 ")]);
        append_forwarded_for(&mut h, &peer);
        let values: Vec<_> = h.get_all(&FORWARDED_FOR).iter().collect();
        assert_eq!(values, ["10.0.0.1, 10.0.0.2, 127.0.0.1"]);
        let mut h = map(&[("x-forwarded-for", "")]);
        append_forwarded_for(&mut h, &peer);
        assert_eq!(h.get(&FORWARDED_FOR).unwrap(), "127.0.0.1");
        let v6 = forwarded_for_value("::1".parse().unwrap()).unwrap();
        assert_eq!(v6, "::1");
    }
}

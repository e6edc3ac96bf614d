//! The HPACK static table (RFC 7541 Appendix A) and the reverse lookup the encoder needs.

use http::HeaderName;

/// Index of `:authority` (empty value) in the static table.
pub(super) const AUTHORITY: usize = 1;
/// Index of `:method: GET`.
pub(super) const METHOD_GET: usize = 2;
/// Index of `:method: POST`.
pub(super) const METHOD_POST: usize = 3;
/// Index of `:path: /`.
pub(super) const PATH_ROOT: usize = 4;
/// Index of `:scheme: http`.
pub(super) const SCHEME_HTTP: usize = 6;
/// Index of `:scheme: https`.
pub(super) const SCHEME_HTTPS: usize = 7;

/// The 61 static entries as `(name, value)`; HPACK index `i` is `STATIC_TABLE[i - 1]`.
pub(super) const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The lowest static index whose name is `name`, if any.
///
/// Only regular names can be asked about (a `HeaderName` cannot hold a pseudo-header); the encoder uses the
/// pseudo-header indices above directly. A `match` on the string compiles to a length dispatch plus a few
/// comparisons, which beats hashing for 46 names.
pub(super) fn static_name_index(name: &HeaderName) -> Option<usize> {
    let index = match name.as_str() {
        "accept-charset" => 15,
        "accept-encoding" => 16,
        "accept-language" => 17,
        "accept-ranges" => 18,
        "accept" => 19,
        "access-control-allow-origin" => 20,
        "age" => 21,
        "allow" => 22,
        "authorization" => 23,
        "cache-control" => 24,
        "content-disposition" => 25,
        "content-encoding" => 26,
        "content-language" => 27,
        "content-length" => 28,
        "content-location" => 29,
        "content-range" => 30,
        "content-type" => 31,
        "cookie" => 32,
        "date" => 33,
        "etag" => 34,
        "expect" => 35,
        "expires" => 36,
        "from" => 37,
        "host" => 38,
        "if-match" => 39,
        "if-modified-since" => 40,
        "if-none-match" => 41,
        "if-range" => 42,
        "if-unmodified-since" => 43,
        "last-modified" => 44,
        "link" => 45,
        "location" => 46,
        "max-forwards" => 47,
        "proxy-authenticate" => 48,
        "proxy-authorization" => 49,
        "range" => 50,
        "referer" => 51,
        "refresh" => 52,
        "retry-after" => 53,
        "server" => 54,
        "set-cookie" => 55,
        "strict-transport-security" => 56,
        "transfer-encoding" => 57,
        "user-agent" => 58,
        "vary" => 59,
        "via" => 60,
        "www-authenticate" => 61,
        _ => return None,
    };
    Some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written `match` must agree with the table for every regular name, and pick the lowest index.
    #[test]
    fn name_index_matches_table() {
        for (i, (name, _)) in STATIC_TABLE.iter().enumerate() {
            if name.starts_with(':') {
                continue;
            }
            let lowest = STATIC_TABLE.iter().position(|(n, _)| n == name).map(|p| p + 1);
            assert_eq!(
                static_name_index(&HeaderName::from_static(name)),
                lowest,
                "{name} at {}",
                i + 1
            );
        }
        assert_eq!(static_name_index(&HeaderName::from_static("x-custom")), None);
    }

    /// Spot checks of the pseudo-header constants and a few well-known entries.
    #[test]
    fn well_known_entries() {
        assert_eq!(STATIC_TABLE[AUTHORITY - 1], (":authority", ""));
        assert_eq!(STATIC_TABLE[METHOD_GET - 1], (":method", "GET"));
        assert_eq!(STATIC_TABLE[METHOD_POST - 1], (":method", "POST"));
        assert_eq!(STATIC_TABLE[PATH_ROOT - 1], (":path", "/"));
        assert_eq!(STATIC_TABLE[SCHEME_HTTP - 1], (":scheme", "http"));
        assert_eq!(STATIC_TABLE[SCHEME_HTTPS - 1], (":scheme", "https"));
        assert_eq!(STATIC_TABLE[7], (":status", "200"));
        assert_eq!(STATIC_TABLE[13], (":status", "500"));
        assert_eq!(STATIC_TABLE[15], ("accept-encoding", "gzip, deflate"));
        assert_eq!(STATIC_TABLE[60], ("www-authenticate", ""));
    }
}

//! The HPACK encoder for request heads and trailers.
//!
//! The scheme trades compression for CPU, since the bytes go to upstreams over loopback or a LAN:
//!
//! - Strings are never Huffman-coded (H bit 0).
//! - Pseudo-headers: `:method GET`/`POST`, `:scheme http`/`https` and `:path /` are sent as fully indexed
//!   static entries; any other pseudo value is a literal without indexing, named by its static index.
//! - Regular fields go through a tiny insert-once *name cache*: a mirror of the peer decoder's dynamic
//!   table, holding at most [`CACHE_ENTRIES`] entries whose HPACK sizes sum to at most half the peer's
//!   table size. A field whose name is not cached is inserted (a literal with incremental indexing) while
//!   there is room and its value is not sensitive; a later field with that name is fully indexed when the
//!   value is the same, and otherwise a literal naming the entry by its index. Nothing ever leaves the
//!   cache, and since it fits in the peer's table the peer never evicts either, so the k-th inserted of
//!   `n` entries is always at index `62 + (n - 1 - k)` with no bookkeeping. The first values seen win a
//!   slot for good; for an upstream connection, which carries the same few request shapes over and over,
//!   that is nearly always the right choice.
//! - A sensitive value (`HeaderValue::is_sensitive`) is never indexed, and goes as a never-indexed literal.
//! - When the peer's SETTINGS_HEADER_TABLE_SIZE changes, the next block starts with size updates that
//!   make its table's maximum equal the setting. If the new size is below what the cache holds, the cache
//!   is dropped and the peer's table emptied first with an update to 0 (RFC 7541 §4.2 allows two updates).
//!   Otherwise, if the size dipped in between, that minimum is signalled before the final size, as §4.2
//!   requires; it is at least the cache's size, so nothing the cache relies on is evicted.

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::static_table::{
    AUTHORITY, METHOD_GET, METHOD_POST, PATH_ROOT, SCHEME_HTTP, SCHEME_HTTPS, STATIC_TABLE, static_name_index,
};

/// The most entries the name cache holds: enough for the repeated headers of a proxied request, few
/// enough that a linear scan beats anything cleverer.
const CACHE_ENTRIES: usize = 16;
/// Per-entry overhead in table sizes (RFC 7541 §4.1).
const ENTRY_OVERHEAD: usize = 32;
/// The peer's table size until its SETTINGS say otherwise (RFC 9113 §6.5.2).
const DEFAULT_TABLE_SIZE: usize = 4096;
/// The first dynamic table index (RFC 7541 §2.3.3).
const FIRST_DYNAMIC_INDEX: usize = STATIC_TABLE.len() + 1;

/// First-byte pattern of an indexed field (§6.1), with a 7-bit index.
const INDEXED: u8 = 0x80;
/// First-byte pattern of a literal with incremental indexing (§6.2.1), with a 6-bit name index.
const LITERAL_INDEXED: u8 = 0x40;
/// First-byte pattern of a literal without indexing (§6.2.2), with a 4-bit name index.
const LITERAL_NOT_INDEXED: u8 = 0x00;
/// First-byte pattern of a never-indexed literal (§6.2.3), with a 4-bit name index.
const LITERAL_NEVER_INDEXED: u8 = 0x10;
/// First-byte pattern of a dynamic table size update (§6.3), with a 5-bit size.
const SIZE_UPDATE: u8 = 0x20;

/// Size updates owed to the peer at the start of the next block.
#[derive(Debug, Clone, Copy)]
struct PendingUpdate {
    /// The peer's table must be emptied first (an update to 0): the cache was dropped.
    clear: bool,
    /// The smallest size the setting took since the last block.
    min: usize,
}

/// The HPACK encoder of one connection.
#[derive(Debug)]
pub(crate) struct Encoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE, which is also the maximum size we signal.
    table_size: usize,
    /// The fields we have inserted into the peer's table, oldest first.
    cache: Vec<(HeaderName, HeaderValue)>,
    /// The HPACK size of `cache`.
    cache_size: usize,
    /// Size updates to emit before the next block's first field.
    pending: Option<PendingUpdate>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder for a fresh connection: the peer's table size is the default 4096 until told otherwise.
    pub(crate) fn new() -> Encoder {
        Encoder {
            table_size: DEFAULT_TABLE_SIZE,
            cache: Vec::new(),
            cache_size: 0,
            pending: None,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed: the next block starts with the size updates it needs.
    ///
    /// Call it when the SETTINGS frame is applied (and acknowledged); the updates go out with the next
    /// block encoded after that.
    pub(crate) fn set_peer_table_size(&mut self, size: usize) {
        if size == self.table_size && self.pending.is_none() {
            return;
        }
        let mut pending = self.pending.unwrap_or(PendingUpdate {
            clear: false,
            min: size,
        });
        if size < self.cache_size {
            // The peer would evict some of the cache: drop it all and have the peer do the same.
            self.cache.clear();
            self.cache_size = 0;
            pending.clear = true;
        }
        pending.min = pending.min.min(size);
        self.pending = Some(pending);
        self.table_size = size;
    }

    /// Appends the header block of a request: pseudo-headers first (:method, :scheme, :authority if Some,
    /// :path), then `headers`.
    pub(crate) fn encode_request(
        &mut self,
        method: &Method,
        scheme: &str,
        authority: Option<&str>,
        path: &str,
        headers: &HeaderMap,
        out: &mut Vec<u8>,
    ) {
        self.flush_size_updates(out);
        match *method {
            Method::GET => encode_integer(out, INDEXED, 7, METHOD_GET),
            Method::POST => encode_integer(out, INDEXED, 7, METHOD_POST),
            _ => encode_static_literal(out, METHOD_GET, method.as_str()),
        }
        match scheme {
            "http" => encode_integer(out, INDEXED, 7, SCHEME_HTTP),
            "https" => encode_integer(out, INDEXED, 7, SCHEME_HTTPS),
            _ => encode_static_literal(out, SCHEME_HTTP, scheme),
        }
        if let Some(authority) = authority {
            encode_static_literal(out, AUTHORITY, authority);
        }
        if path == "/" {
            encode_integer(out, INDEXED, 7, PATH_ROOT);
        } else {
            encode_static_literal(out, PATH_ROOT, path);
        }
        for (name, value) in headers {
            self.encode_field(name, value, out);
        }
    }

    /// Appends the header block of trailers.
    pub(crate) fn encode_trailers(&mut self, headers: &HeaderMap, out: &mut Vec<u8>) {
        self.flush_size_updates(out);
        for (name, value) in headers {
            self.encode_field(name, value, out);
        }
    }

    /// Emits the size updates owed since the last block; they must open the block (RFC 7541 §4.2).
    fn flush_size_updates(&mut self, out: &mut Vec<u8>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        if pending.clear {
            encode_integer(out, SIZE_UPDATE, 5, 0);
            if self.table_size > 0 {
                encode_integer(out, SIZE_UPDATE, 5, self.table_size);
            }
        } else {
            if pending.min < self.table_size {
                encode_integer(out, SIZE_UPDATE, 5, pending.min);
            }
            encode_integer(out, SIZE_UPDATE, 5, self.table_size);
        }
    }

    /// Encodes one regular field through the name cache (see the module docs).
    fn encode_field(&mut self, name: &HeaderName, value: &HeaderValue, out: &mut Vec<u8>) {
        let sensitive = value.is_sensitive();
        let literal = if sensitive {
            LITERAL_NEVER_INDEXED
        } else {
            LITERAL_NOT_INDEXED
        };
        if let Some(k) = self.cache.iter().position(|(cached, _)| cached == name) {
            let index = FIRST_DYNAMIC_INDEX + self.cache.len() - 1 - k;
            if !sensitive && self.cache[k].1 == value {
                encode_integer(out, INDEXED, 7, index);
            } else {
                encode_integer(out, literal, 4, index);
                encode_string(out, value.as_bytes());
            }
            return;
        }
        let size = name.as_str().len() + value.len() + ENTRY_OVERHEAD;
        let insert =
            !sensitive && self.cache.len() < CACHE_ENTRIES && self.cache_size + size <= self.table_size / 2;
        let (pattern, prefix) = if insert {
            (LITERAL_INDEXED, 6)
        } else {
            (literal, 4)
        };
        match static_name_index(name) {
            Some(index) => encode_integer(out, pattern, prefix, index),
            None => {
                out.push(pattern);
                encode_string(out, name.as_str().as_bytes());
            }
        }
        encode_string(out, value.as_bytes());
        if insert {
            self.cache.push((name.clone(), value.clone()));
            self.cache_size += size;
        }
    }
}

/// Appends a literal without indexing whose name is the static entry `name_index`.
fn encode_static_literal(out: &mut Vec<u8>, name_index: usize, value: &str) {
    encode_integer(out, LITERAL_NOT_INDEXED, 4, name_index);
    encode_string(out, value.as_bytes());
}

/// Appends an integer with a `prefix`-bit prefix (RFC 7541 §5.1), `pattern` supplying the bits above it.
fn encode_integer(out: &mut Vec<u8>, pattern: u8, prefix: u8, value: usize) {
    let max_prefix = (1usize << prefix) - 1;
    if value < max_prefix {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a raw (never Huffman-coded) string literal (RFC 7541 §5.2).
fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
    encode_integer(out, 0x00, 7, bytes.len());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes one integer into a fresh vector.
    fn int(pattern: u8, prefix: u8, value: usize) -> Vec<u8> {
        let mut out = Vec::new();
        encode_integer(&mut out, pattern, prefix, value);
        out
    }

    /// RFC 7541 C.1 examples and the prefix boundaries.
    #[test]
    fn integers() {
        assert_eq!(int(0, 5, 10), [10]);
        assert_eq!(int(0, 5, 1337), [0x1f, 0x9a, 0x0a]);
        assert_eq!(int(0, 8, 42), [42]);
        assert_eq!(int(0x80, 7, 126), [0xfe]);
        assert_eq!(int(0x80, 7, 127), [0xff, 0x00]);
        assert_eq!(int(0x40, 6, 62), [0x7e]);
        assert_eq!(int(0x40, 6, 63), [0x7f, 0x00]);
        assert_eq!(int(0x20, 5, 4096), [0x3f, 0xe1, 0x1f]);
        assert_eq!(int(0x10, 4, 15), [0x1f, 0x00]);
    }

    /// The request pseudo-headers: static indices where the table has the full field, raw literals
    /// without indexing otherwise.
    #[test]
    fn request_pseudo_headers() {
        let mut enc = Encoder::new();
        let mut out = Vec::new();
        enc.encode_request(&Method::GET, "https", None, "/", &HeaderMap::new(), &mut out);
        assert_eq!(out, [0x82, 0x87, 0x84]);

        out.clear();
        enc.encode_request(
            &Method::POST,
            "http",
            Some("a.b"),
            "/x",
            &HeaderMap::new(),
            &mut out,
        );
        assert_eq!(out, [0x83, 0x86, 0x01, 3, b'a', b'.', b'b', 0x04, 2, b'/', b'x']);

        out.clear();
        enc.encode_request(&Method::PUT, "ftp", None, "/", &HeaderMap::new(), &mut out);
        assert_eq!(out, [0x02, 3, b'P', b'U', b'T', 0x06, 3, b'f', b't', b'p', 0x84]);
    }

    /// Names are inserted once; a repeated value is one byte; a new value names the entry by index.
    #[test]
    fn name_cache() {
        let mut enc = Encoder::new();
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", HeaderValue::from_static("ig"));
        headers.insert("x-a", HeaderValue::from_static("1"));
        let mut out = Vec::new();
        enc.encode_trailers(&headers, &mut out);
        // user-agent by static name index 58; x-a spelled out.
        assert_eq!(
            out,
            [0x40 | 58, 2, b'i', b'g', 0x40, 3, b'x', b'-', b'a', 1, b'1']
        );
        assert_eq!(enc.cache_size, 10 + 2 + 32 + 3 + 1 + 32);

        // x-a is the newest (62), user-agent the older (63).
        headers.insert("x-a", HeaderValue::from_static("2"));
        out.clear();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(out, [0x80 | 63, 0x0f, 62 - 15, 1, b'2']);
    }

    /// Sensitive values are never inserted nor fully indexed, and go as never-indexed literals.
    #[test]
    fn sensitive_values() {
        let mut enc = Encoder::new();
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert("authorization", secret.clone());
        let mut out = Vec::new();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(out, [0x10 | 0x0f, 23 - 15, 1, b's']);
        assert!(enc.cache.is_empty());

        // Once the name is cached with a plain value, the same value marked sensitive is still a literal.
        headers.insert("authorization", HeaderValue::from_static("s"));
        out.clear();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(out, [0x40 | 23, 1, b's']);
        headers.insert("authorization", secret);
        out.clear();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(out, [0x1f, 62 - 15, 1, b's']);
    }

    /// The cache stops at 16 entries and at half the peer's table size.
    #[test]
    fn cache_limits() {
        let mut enc = Encoder::new();
        let mut headers = HeaderMap::new();
        for i in 0..20 {
            headers.insert(
                HeaderName::try_from(format!("x-{i:02}")).unwrap(),
                HeaderValue::from_static("v"),
            );
        }
        enc.encode_trailers(&headers, &mut Vec::new());
        assert_eq!(enc.cache.len(), CACHE_ENTRIES);

        let mut enc = Encoder::new();
        enc.set_peer_table_size(150);
        let mut headers = HeaderMap::new();
        // 1 + 30 + 32 = 63 each: one fits in half of 150, the second would not.
        headers.insert("a", HeaderValue::from_str(&"x".repeat(30)).unwrap());
        headers.insert("b", HeaderValue::from_str(&"x".repeat(30)).unwrap());
        let mut out = Vec::new();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(&out[..2], [0x3f, 150 - 31]);
        assert_eq!(&out[2..5], [0x40, 1, b'a']);
        assert_eq!(&out[36..39], [0x00, 1, b'b']);
        assert_eq!(out.len(), 36 + 3 + 1 + 30);
        assert_eq!((enc.cache.len(), enc.cache_size), (1, 63));
    }

    /// Size updates: none by default, one for a change the cache survives, 0 then the size when the cache
    /// is dropped, and the interval's minimum when the size dipped.
    #[test]
    fn size_updates() {
        let mut enc = Encoder::new();
        let mut out = Vec::new();
        enc.encode_trailers(&HeaderMap::new(), &mut out);
        assert!(out.is_empty());

        enc.set_peer_table_size(4096);
        enc.encode_trailers(&HeaderMap::new(), &mut out);
        assert!(out.is_empty());

        enc.set_peer_table_size(8192);
        enc.encode_trailers(&HeaderMap::new(), &mut out);
        assert_eq!(out, [0x3f, 0xe1, 0x3f]);

        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("1")); // 36 bytes
        out.clear();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(enc.cache.len(), 1);

        // Down to 100 and back: the cache (36) survives, the minimum goes first.
        enc.set_peer_table_size(100);
        enc.set_peer_table_size(4096);
        out.clear();
        enc.encode_trailers(&HeaderMap::new(), &mut out);
        assert_eq!(out, [0x3f, 100 - 31, 0x3f, 0xe1, 0x1f]);
        assert_eq!(enc.cache.len(), 1);

        // Below the cache's size: cleared, 0 then the new size.
        enc.set_peer_table_size(20);
        out.clear();
        enc.encode_trailers(&HeaderMap::new(), &mut out);
        assert_eq!(out, [0x20, 0x34]);
        assert!(enc.cache.is_empty());

        // To 0 with an empty cache: one update to 0.
        enc.set_peer_table_size(0);
        out.clear();
        enc.encode_trailers(&headers, &mut out);
        assert_eq!(out, [0x20, 0x00, 3, b'x', b'-', b'a', 1, b'1']);
    }
}

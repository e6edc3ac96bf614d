//! The request path in its one canonical form (RFC 3986 §6.2.2), and the model name read from it the way the
//! backend reads it.
//!
//! Canonical means: percent-escapes of unreserved characters (`A–Z a–z 0–9 - . _ ~`, §2.3) decoded, every other
//! escape written with upper-case hex (§6.2.2.1), then `.` and `..` segments removed (§5.2.4). An escaped `/`
//! (`%2F`, which is not a separator, §2.2) and an escaped NUL are refused, as is any `%` not followed by two hex
//! digits: each lets two readers of one path see different segments. Escapes of other reserved characters stay
//! escaped, so the canonical path decodes exactly once, wherever it is decoded.

use std::borrow::Cow;

use super::TargetError;

/// The canonical form of `path`: `Ok(None)` when `path` is canonical already (no escape and no dot segment, the
/// common case, which costs one scan and no allocation).
pub fn canonical_path(path: &str) -> Result<Option<String>, TargetError> {
    let bytes = path.as_bytes();
    if !bytes.contains(&b'%') && !has_dot_segment(path) {
        return Ok(None);
    }
    let decoded = decode_unreserved(path)?;
    let resolved = remove_dot_segments(&decoded);
    Ok(if resolved == path { None } else { Some(resolved) })
}

/// Fully percent-decodes one path segment (a model name), as the backend's router does. The segment comes from a
/// canonical path, so its escapes are well formed; a result that is not UTF-8 is refused.
pub fn decode_segment(segment: &str) -> Result<Cow<'_, str>, TargetError> {
    if !segment.contains('%') {
        return Ok(Cow::Borrowed(segment));
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let v = escape_at(bytes, i).ok_or_else(|| TargetError::BadEscape(escape_text(bytes, i)))?;
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| TargetError::SegmentNotUtf8(segment.to_string()))
}

/// Whether some segment of `path` is `.` or `..`. Looks only where a dot is (a vectorised search): most
/// paths have none, and splitting every path into its segments cost more than the rest of the check.
fn has_dot_segment(path: &str) -> bool {
    let b = path.as_bytes();
    memchr::memchr_iter(b'.', b).any(|i| {
        let starts_segment = i == 0 || b[i - 1] == b'/';
        let end = if b.get(i + 1) == Some(&b'.') { i + 2 } else { i + 1 };
        starts_segment && (end == b.len() || b[end] == b'/')
    })
}

/// Decodes escapes of unreserved characters, upper-cases the hex of the others, refuses `%2F`, `%00` and
/// malformed escapes.
fn decode_unreserved(path: &str) -> Result<String, TargetError> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            // Not an escape: copied as it came (the `http` crate has checked the path's characters). A multi-byte
            // character is copied whole, starting here.
            let next = bytes[i + 1..]
                .iter()
                .position(|&c| c == b'%')
                .map_or(bytes.len(), |p| i + 1 + p);
            out.push_str(&path[i..next]);
            i = next;
            continue;
        }
        let v = escape_at(bytes, i).ok_or_else(|| TargetError::BadEscape(escape_text(bytes, i)))?;
        match v {
            b'/' => return Err(TargetError::EncodedSlash),
            0 => return Err(TargetError::EncodedNul),
            _ if is_unreserved(v) => out.push(char::from(v)),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(v >> 4)]));
                out.push(char::from(HEX[usize::from(v & 0xf)]));
            }
        }
        i += 3;
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The byte the escape at `bytes[i]` (a `%`) stands for, when two hex digits follow.
fn escape_at(bytes: &[u8], i: usize) -> Option<u8> {
    let hi = hex_value(*bytes.get(i + 1)?)?;
    let lo = hex_value(*bytes.get(i + 2)?)?;
    Some(hi << 4 | lo)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The escape at `bytes[i]` as text for an error message (at most three bytes).
fn escape_text(bytes: &[u8], i: usize) -> String {
    let end = (i + 3).min(bytes.len());
    String::from_utf8_lossy(&bytes[i..end]).into_owned()
}

/// RFC 3986 §2.3.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §5.2.4 on an absolute path: `.` segments go, `..` removes the segment before it (never above the root).
/// A path ending in `.` or `..` keeps its trailing `/`, as the RFC's algorithm does.
fn remove_dot_segments(path: &str) -> String {
    let Some(rest) = path.strip_prefix('/') else {
        // Not an absolute path (`*`, the asterisk form): nothing to resolve against.
        return path.to_string();
    };
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut s = String::with_capacity(path.len());
    for seg in out {
        s.push('/');
        s.push_str(seg);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(p: &str) -> String {
        canonical_path(p).unwrap().unwrap_or_else(|| p.to_string())
    }

    #[test]
    fn unreserved_escapes_decode_and_others_are_upper_cased() {
        assert_eq!(canon("/v2/models/%73imple/infer"), "/v2/models/simple/infer");
        assert_eq!(canon("/v2/models/%7e%2D%5f%2e/x"), "/v2/models/~-_./x");
        assert_eq!(canon("/v2/models/a%20b/infer"), "/v2/models/a%20b/infer");
        assert_eq!(canon("/v2/models/a%3ab"), "/v2/models/a%3Ab");
        // Double encoding decodes once: %25 is not unreserved, so it stays.
        assert_eq!(canon("/v2/models/%2573imple"), "/v2/models/%2573imple");
        assert_eq!(canonical_path("/v2/models/simple/infer").unwrap(), None);
        assert_eq!(canonical_path("/v2/models/a%3Ab").unwrap(), None);
        assert_eq!(canon("/v2/models/caf%C3%A9"), "/v2/models/caf%C3%A9");
        assert_eq!(canon("/v2/é/%41"), "/v2/é/A");
    }

    #[test]
    fn dot_segments_resolve_after_decoding() {
        assert_eq!(canon("/v2/models/x/../simple/infer"), "/v2/models/simple/infer");
        assert_eq!(canon("/v2/models/./simple/./infer"), "/v2/models/simple/infer");
        assert_eq!(
            canon("/v2/models/x/%2e%2E/simple/infer"),
            "/v2/models/simple/infer"
        );
        assert_eq!(canon("/../../v2"), "/v2");
        assert_eq!(canon("/v2/models/simple/.."), "/v2/models/");
        assert_eq!(canon("/v2/models/simple/."), "/v2/models/simple/");
        assert_eq!(canon("/.."), "/");
        // Dots inside a segment are not dot segments.
        assert_eq!(canonical_path("/v2/models/a..b/.x").unwrap(), None);
        assert_eq!(canon("*"), "*");
    }

    #[test]
    fn encoded_slash_nul_and_bad_escapes_are_refused() {
        assert_eq!(canonical_path("/v2/models/a%2Fb"), Err(TargetError::EncodedSlash));
        assert_eq!(canonical_path("/v2/models/a%2fb"), Err(TargetError::EncodedSlash));
        assert_eq!(canonical_path("/v2/models/a%00"), Err(TargetError::EncodedNul));
        assert_eq!(
            canonical_path("/v2/models/%zz"),
            Err(TargetError::BadEscape("%zz".into()))
        );
        assert_eq!(canonical_path("/v2/%4"), Err(TargetError::BadEscape("%4".into())));
        assert_eq!(
            canonical_path("/v2/%+4"),
            Err(TargetError::BadEscape("%+4".into()))
        );
    }

    #[test]
    fn the_dot_segment_search_agrees_with_splitting_into_segments() {
        // Every path of up to 7 characters over `/`, `.` and `a`: the search must find a dot segment exactly
        // where splitting the path at its slashes does.
        let mut paths = vec![String::new()];
        for _ in 0..7 {
            let longer: Vec<String> = paths
                .iter()
                .filter(|p| p.len() == paths.last().map_or(0, String::len))
                .flat_map(|p| ['/', '.', 'a'].map(|c| format!("{p}{c}")))
                .collect();
            paths.extend(longer);
        }
        assert_eq!(paths.len(), (0..=7).map(|n| 3usize.pow(n)).sum::<usize>());
        for p in &paths {
            let by_split = p.split('/').any(|s| s == "." || s == "..");
            assert_eq!(has_dot_segment(p), by_split, "{p:?}");
        }
    }

    #[test]
    fn segments_decode_fully_once() {
        assert_eq!(decode_segment("simple").unwrap(), "simple");
        assert_eq!(decode_segment("a%20b").unwrap(), "a b");
        assert_eq!(decode_segment("%2573").unwrap(), "%73");
        assert_eq!(decode_segment("caf%C3%A9").unwrap(), "café");
        assert!(matches!(
            decode_segment("%FF"),
            Err(TargetError::SegmentNotUtf8(_))
        ));
    }
}

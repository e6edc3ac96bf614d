//! The HPACK decoder for response heads and trailers: header block in, `http::HeaderMap` out.
//!
//! Decoding runs in two layers. [`Decoder::next_field`] reads one representation (RFC 7541 §6) and keeps
//! the dynamic table in step; it knows nothing about HTTP semantics and fails only with connection errors.
//! [`Decoder::decode`] drives it over the whole block and applies the response rules of RFC 9113 §8,
//! which fail only the stream, and so never cut the block short.
//!
//! Names and values are validated once, when they enter the decoder, and kept validated: the dynamic
//! table holds `HeaderName`/`HeaderValue` pairs (or, for a field that can never be accepted, what is left
//! of it, because the table must hold it anyway to stay in step with the peer). A raw literal value is
//! delivered as a slice of the block, without a copy; only the table's own entry gets one, so that
//! long-lived entries do not pin the buffers of old blocks.

use std::collections::VecDeque;
use std::sync::LazyLock;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::DecodeError;
use super::huffman;
use super::static_table::STATIC_TABLE;

/// Per-entry overhead in table sizes and header list sizes (RFC 7541 §4.1, RFC 9113 §6.5.2).
const ENTRY_OVERHEAD: usize = 32;
/// The dynamic table size both sides start from: the initial SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2).
const DEFAULT_TABLE_SIZE: usize = 4096;
/// The first dynamic table index (RFC 7541 §2.3.3).
const FIRST_DYNAMIC_INDEX: usize = STATIC_TABLE.len() + 1;
/// Continuation bytes accepted after an integer's prefix (RFC 7541 §5.1). Four carry 28 bits, so every
/// integer is below 2^28 + 2^7 and no arithmetic on one can overflow even a 32-bit `usize`; whatever an
/// integer encodes here (an index, a string length, a table size) is bounded far lower by the table
/// ceiling or the block length, so the cap rejects nothing a sane encoder sends.
const MAX_INTEGER_CONTINUATIONS: u32 = 4;

/// A pseudo-header field name that the decoder recognises (RFC 9113 §8.3, RFC 8441 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pseudo {
    /// `:status`, the only one allowed in a response.
    Status,
    /// `:method` (request only).
    Method,
    /// `:scheme` (request only).
    Scheme,
    /// `:authority` (request only).
    Authority,
    /// `:path` (request only).
    Path,
    /// `:protocol` (request only, extended CONNECT).
    Protocol,
}

impl Pseudo {
    /// Recognises a pseudo-header name.
    fn from_bytes(name: &[u8]) -> Option<Pseudo> {
        Some(match name {
            b":status" => Pseudo::Status,
            b":method" => Pseudo::Method,
            b":scheme" => Pseudo::Scheme,
            b":authority" => Pseudo::Authority,
            b":path" => Pseudo::Path,
            b":protocol" => Pseudo::Protocol,
            _ => return None,
        })
    }

    /// The name as sent.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Pseudo::Status => ":status",
            Pseudo::Method => ":method",
            Pseudo::Scheme => ":scheme",
            Pseudo::Authority => ":authority",
            Pseudo::Path => ":path",
            Pseudo::Protocol => ":protocol",
        }
    }
}

/// A field name as received, classified once.
#[derive(Debug, Clone)]
pub(super) enum Name {
    /// A known pseudo-header.
    Pseudo(Pseudo),
    /// A valid lowercase regular name.
    Regular(HeaderName),
    /// Anything else (an unknown pseudo-header, uppercase, a forbidden byte): kept raw so it can sit in
    /// the dynamic table and be reported when used.
    Invalid(Bytes),
}

impl Name {
    /// Classifies a name from a literal.
    fn from_bytes(raw: Bytes) -> Name {
        if raw.first() == Some(&b':') {
            return match Pseudo::from_bytes(&raw) {
                Some(pseudo) => Name::Pseudo(pseudo),
                None => Name::Invalid(Bytes::copy_from_slice(&raw)),
            };
        }
        // `from_lowercase` rejects uppercase, which HTTP/2 forbids (RFC 9113 §8.2.1), and interns the
        // standard names, so a `HeaderMap` lookup of those stays cheap.
        match HeaderName::from_lowercase(&raw) {
            Ok(name) => Name::Regular(name),
            // A copy, for the reason values in the table are copies (see `Decoder::next_field`).
            Err(_) => Name::Invalid(Bytes::copy_from_slice(&raw)),
        }
    }

    /// Classifies a static table name; those are all valid.
    fn from_static(name: &'static str) -> Name {
        match Pseudo::from_bytes(name.as_bytes()) {
            Some(pseudo) => Name::Pseudo(pseudo),
            None => Name::Regular(HeaderName::from_static(name)),
        }
    }

    /// Whether the name is, or claims to be, a pseudo-header.
    fn is_pseudo_like(&self) -> bool {
        match self {
            Name::Pseudo(_) => true,
            Name::Regular(_) => false,
            Name::Invalid(raw) => raw.first() == Some(&b':'),
        }
    }

    /// The name's bytes as sent.
    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Pseudo(pseudo) => pseudo.as_str().as_bytes(),
            Name::Regular(name) => name.as_str().as_bytes(),
            Name::Invalid(raw) => raw,
        }
    }
}

/// A field value as received, validated once.
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// A value `HeaderValue` accepts.
    Valid(HeaderValue),
    /// A value with a forbidden byte (NUL, CR, LF or another control character). No field using it can
    /// be accepted, so only its length is kept, for the table's accounting.
    Invalid {
        /// The length in bytes.
        len: usize,
    },
}

impl Value {
    /// Validates a value from a literal; a `Bytes` is taken over without copying.
    fn from_bytes(raw: Bytes) -> Value {
        let len = raw.len();
        match HeaderValue::from_maybe_shared(raw) {
            Ok(value) => Value::Valid(value),
            Err(_) => Value::Invalid { len },
        }
    }

    /// The length in bytes.
    fn len(&self) -> usize {
        match self {
            Value::Valid(value) => value.len(),
            Value::Invalid { len } => *len,
        }
    }
}

/// One decoded field, which is also the form of a table entry.
#[derive(Debug, Clone)]
pub(super) struct Field {
    /// The name.
    pub(super) name: Name,
    /// The value.
    pub(super) value: Value,
    /// Name length + value length + 32: its size both in the table and in the header list.
    pub(super) size: usize,
}

impl Field {
    /// Builds a field, computing its size.
    fn new(name: Name, value: Value) -> Field {
        let size = name.as_bytes().len() + value.len() + ENTRY_OVERHEAD;
        Field { name, value, size }
    }
}

/// The static table as ready fields, so a static index costs what a dynamic one does.
static STATIC_FIELDS: LazyLock<[Field; 61]> = LazyLock::new(|| {
    std::array::from_fn(|i| {
        let (name, value) = STATIC_TABLE[i];
        Field::new(
            Name::from_static(name),
            Value::Valid(HeaderValue::from_static(value)),
        )
    })
});

/// The dynamic table (RFC 7541 §2.3.2, §4): newest entry first, so index 62 is `entries[0]`.
#[derive(Debug)]
struct DynamicTable {
    /// The entries, newest first.
    entries: VecDeque<Field>,
    /// The sum of the entries' sizes.
    size: usize,
    /// The current maximum size, as last set by the peer's encoder.
    max_size: usize,
}

impl DynamicTable {
    /// Inserts an entry, evicting the oldest ones to make room (§4.4). An entry larger than the table
    /// empties it and is not added.
    fn insert(&mut self, field: Field) {
        if field.size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - field.size);
        self.size += field.size;
        self.entries.push_front(field);
    }

    /// Applies a maximum size change (§4.3).
    fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Evicts the oldest entries until the table's size is at most `target`.
    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let Some(oldest) = self.entries.pop_back() else {
                break;
            };
            self.size -= oldest.size;
        }
    }
}

/// The HPACK decoder of one connection: its dynamic table outlives the header blocks.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// Our half of the connection's decoding context.
    table: DynamicTable,
    /// The SETTINGS_HEADER_TABLE_SIZE we advertise: a size update above it is an error (RFC 7541 §6.3).
    max_table_size: usize,
}

/// A decoded response head or trailer section.
#[derive(Debug)]
pub(crate) struct DecodedBlock {
    /// The `:status` pseudo-header, if the block had one.
    pub(crate) status: Option<StatusCode>,
    /// The regular fields, in block order.
    pub(crate) headers: HeaderMap,
}

impl Decoder {
    /// `max_table_size`: the SETTINGS_HEADER_TABLE_SIZE we advertise (4096): the ceiling for size updates.
    ///
    /// The table starts at the protocol's initial 4096 bytes (or the ceiling, if lower): until the peer's
    /// encoder sends a size update, that is the size it assumes.
    pub(crate) fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable {
                entries: VecDeque::new(),
                size: 0,
                max_size: DEFAULT_TABLE_SIZE.min(max_table_size),
            },
            max_table_size,
        }
    }

    /// Decodes one complete header block (HEADERS + CONTINUATION payloads already joined) of a response
    /// or of trailers. Always processes the whole block (so the dynamic table stays in sync with the
    /// encoder) even when the block turns out unacceptable for the stream.
    ///
    /// `:status` is reported, not required: the caller knows whether the block is a head (needs one) or
    /// trailers (must not have one). `max_list_size` bounds the decoded header list (RFC 9113 §6.5.2); past
    /// it, fields are no longer stored. A `Malformed` error takes precedence over `TooLarge`; either is
    /// only reported once the whole block has been decoded. A `Compression` error leaves the table
    /// unusable: the connection must be closed.
    pub(crate) fn decode(
        &mut self,
        block: &Bytes,
        max_list_size: usize,
    ) -> Result<DecodedBlock, DecodeError> {
        let mut pos = 0;
        let mut status = None;
        // Room for a usual response and the few headers the gateway adds to it, so neither grows the map.
        let mut headers = HeaderMap::with_capacity(12);
        let mut list_size = 0usize;
        let mut malformed = None;
        let mut fields_seen = false;
        let mut regular_seen = false;
        while pos < block.len() {
            let Some(field) = self.next_field(block, &mut pos, fields_seen)? else {
                continue;
            };
            fields_seen = true;
            list_size = list_size.saturating_add(field.size);
            if malformed.is_some() {
                continue;
            }
            let Field { name, value, .. } = field;
            if regular_seen && name.is_pseudo_like() {
                malformed = Some("pseudo-header after a regular header");
                continue;
            }
            match (name, value) {
                (Name::Regular(name), value) => {
                    regular_seen = true;
                    if is_connection_specific(&name) {
                        malformed = Some("connection-specific header field");
                    } else if let Value::Valid(value) = value {
                        // Past the limit the block is only decoded for the table's sake.
                        if list_size <= max_list_size {
                            headers.append(name, value);
                        }
                    } else {
                        malformed = Some("invalid header value");
                    }
                }
                (Name::Pseudo(Pseudo::Status), _) if status.is_some() => {
                    malformed = Some("duplicate :status");
                }
                (Name::Pseudo(Pseudo::Status), Value::Valid(value)) => {
                    match StatusCode::from_bytes(value.as_bytes()) {
                        Ok(code) => status = Some(code),
                        Err(_) => malformed = Some("invalid :status"),
                    }
                }
                (Name::Pseudo(Pseudo::Status), Value::Invalid { .. }) => {
                    malformed = Some("invalid :status");
                }
                (Name::Pseudo(_), _) => malformed = Some("request pseudo-header in a response"),
                (Name::Invalid(raw), _) => {
                    malformed = Some(if raw.first() == Some(&b':') {
                        "unknown pseudo-header"
                    } else if raw.iter().any(u8::is_ascii_uppercase) {
                        "uppercase header name"
                    } else {
                        "invalid header name"
                    });
                }
            }
        }
        if let Some(reason) = malformed {
            return Err(DecodeError::Malformed(reason));
        }
        if list_size > max_list_size {
            return Err(DecodeError::TooLarge);
        }
        Ok(DecodedBlock { status, headers })
    }

    /// Reads the representation at `*pos` and advances past it, updating the dynamic table.
    ///
    /// Returns `None` for a dynamic table size update, which may only come before the block's first field
    /// (`fields_seen` false; RFC 7541 §4.2); several in a row are fine there.
    pub(super) fn next_field(
        &mut self,
        block: &Bytes,
        pos: &mut usize,
        fields_seen: bool,
    ) -> Result<Option<Field>, DecodeError> {
        let Some(&first) = block.get(*pos) else {
            return Err(DecodeError::Compression("truncated header block"));
        };
        if first & 0x80 != 0 {
            // Indexed field (§6.1).
            let index = decode_integer(block, pos, 7)?;
            return self.field_at(index).cloned().map(Some);
        }
        if first & 0xe0 == 0x20 {
            // Dynamic table size update (§6.3).
            if fields_seen {
                return Err(DecodeError::Compression("table size update after a header field"));
            }
            let size = decode_integer(block, pos, 5)?;
            if size > self.max_table_size {
                return Err(DecodeError::Compression(
                    "table size update above the advertised limit",
                ));
            }
            self.table.set_max_size(size);
            return Ok(None);
        }
        // Literals: with incremental indexing (01, 6-bit index, §6.2.1), without indexing (0000, §6.2.2)
        // or never indexed (0001, §6.2.3).
        let (indexing, prefix) = if first & 0x40 != 0 { (true, 6) } else { (false, 4) };
        let never_indexed = first & 0xf0 == 0x10;
        let name_index = decode_integer(block, pos, prefix)?;
        let name = if name_index == 0 {
            Name::from_bytes(decode_string(block, pos)?.0)
        } else {
            self.field_at(name_index)?.name.clone()
        };
        let (raw_value, sliced) = decode_string(block, pos)?;
        let mut value = Value::from_bytes(raw_value);
        if never_indexed && let Value::Valid(value) = &mut value {
            // Keeps the marking if the field is forwarded: whoever re-encodes it must not index it either.
            value.set_sensitive(true);
        }
        let field = Field::new(name, value);
        if indexing {
            let mut entry = field.clone();
            if sliced && let Value::Valid(value) = &mut entry.value {
                // `block` may share its allocation with a whole read buffer, and an entry can outlive many
                // blocks: a copy of its own bytes keeps the table's memory bounded by the table's size.
                if let Ok(copy) = HeaderValue::from_bytes(value.as_bytes()) {
                    *value = copy;
                }
            }
            self.table.insert(entry);
        }
        Ok(Some(field))
    }

    /// The static or dynamic entry at an HPACK index (§2.3.3).
    fn field_at(&self, index: usize) -> Result<&Field, DecodeError> {
        match index {
            0 => Err(DecodeError::Compression("index 0")),
            1..FIRST_DYNAMIC_INDEX => Ok(&STATIC_FIELDS[index - 1]),
            _ => self
                .table
                .entries
                .get(index - FIRST_DYNAMIC_INDEX)
                .ok_or(DecodeError::Compression("index beyond the dynamic table")),
        }
    }

    /// The dynamic table's entries (newest first) as `(name, value)` strings, an invalid value showing
    /// as `<invalid>`, and the table's size.
    #[cfg(test)]
    pub(super) fn table_snapshot(&self) -> (Vec<(String, String)>, usize) {
        let entries = self
            .table
            .entries
            .iter()
            .map(|f| {
                let name = String::from_utf8_lossy(f.name.as_bytes()).into_owned();
                let value = match &f.value {
                    Value::Valid(value) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    Value::Invalid { .. } => "<invalid>".to_owned(),
                };
                (name, value)
            })
            .collect();
        (entries, self.table.size)
    }

    /// The dynamic table's current maximum size.
    #[cfg(test)]
    pub(super) fn table_max_size(&self) -> usize {
        self.table.max_size
    }
}

/// Whether a name is one of the connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2).
///
/// `te` is allowed: it may only appear in requests, and only as "trailers", which is a request-side rule.
fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

/// Decodes an integer with a `prefix`-bit prefix at `*pos` (RFC 7541 §5.1), advancing past it.
fn decode_integer(block: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, DecodeError> {
    const TRUNCATED: DecodeError = DecodeError::Compression("truncated integer");
    let max_prefix = (1usize << prefix) - 1;
    let first = *block.get(*pos).ok_or(TRUNCATED)?;
    *pos += 1;
    let mut value = usize::from(first) & max_prefix;
    if value < max_prefix {
        return Ok(value);
    }
    for i in 0..MAX_INTEGER_CONTINUATIONS {
        let byte = *block.get(*pos).ok_or(TRUNCATED)?;
        *pos += 1;
        value += usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::Compression("integer too large"))
}

/// Decodes a string literal at `*pos` (RFC 7541 §5.2), advancing past it. A raw string is a slice of
/// `block` (no copy; the flag returned is true); a Huffman-coded one is decoded into a new buffer.
fn decode_string(block: &Bytes, pos: &mut usize) -> Result<(Bytes, bool), DecodeError> {
    let huffman_coded = block.get(*pos).is_some_and(|&b| b & 0x80 != 0);
    let len = decode_integer(block, pos, 7)?;
    let start = *pos;
    if len > block.len() - start {
        return Err(DecodeError::Compression("truncated string literal"));
    }
    let end = start + len;
    *pos = end;
    if huffman_coded {
        let mut decoded = Vec::new();
        huffman::decode(&block[start..end], &mut decoded)?;
        Ok((Bytes::from(decoded), false))
    } else {
        Ok((block.slice(start..end), true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes one integer from `bytes`, returning it and how many bytes it took.
    fn int(bytes: &[u8], prefix: u8) -> Result<(usize, usize), DecodeError> {
        let mut pos = 0;
        decode_integer(bytes, &mut pos, prefix).map(|v| (v, pos))
    }

    /// RFC 7541 C.1 examples, and the flag bits above the prefix being ignored.
    #[test]
    fn integers() {
        assert_eq!(int(&[0b1110_1010], 5).unwrap(), (10, 1));
        assert_eq!(
            int(&[0b0001_1111, 0b1001_1010, 0b0000_1010], 5).unwrap(),
            (1337, 3)
        );
        assert_eq!(int(&[42], 8).unwrap(), (42, 1));
        assert_eq!(int(&[0x7f, 0x00], 7).unwrap(), (127, 2));
        assert_eq!(
            int(&[0x0f, 0xff, 0xff, 0xff, 0x7f], 4).unwrap(),
            (15 + (1 << 28) - 1, 5)
        );
    }

    /// Truncation and overlong encodings are connection errors.
    #[test]
    fn integer_errors() {
        let truncated = Err(DecodeError::Compression("truncated integer"));
        assert_eq!(int(&[], 7), truncated);
        assert_eq!(int(&[0x1f], 5), truncated);
        assert_eq!(int(&[0x1f, 0x9a], 5), truncated);
        let too_large = Err(DecodeError::Compression("integer too large"));
        assert_eq!(int(&[0x7f, 0x80, 0x80, 0x80, 0x80, 0x00], 7), too_large);
        assert_eq!(
            int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 7),
            too_large
        );
    }

    /// Eviction keeps the size within the maximum; an oversized entry empties the table.
    #[test]
    fn table_eviction() {
        let field = |n: &'static str, v: &'static str| {
            Field::new(Name::from_static(n), Value::Valid(HeaderValue::from_static(v)))
        };
        let mut table = DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size: 100,
        };
        table.insert(field("a", "1")); // 34
        table.insert(field("b", "2")); // 34
        assert_eq!((table.entries.len(), table.size), (2, 68));
        table.insert(field("c", "3")); // evicts "a"
        assert_eq!((table.entries.len(), table.size), (2, 68));
        assert_eq!(table.entries[1].name.as_bytes(), b"b");
        table.set_max_size(40);
        assert_eq!((table.entries.len(), table.size), (1, 34));
        assert_eq!(table.entries[0].name.as_bytes(), b"c");
        table.insert(field("long-name", "long-value"));
        assert_eq!((table.entries.len(), table.size), (0, 0));
        table.set_max_size(0);
        table.insert(field("a", ""));
        assert_eq!((table.entries.len(), table.size), (0, 0));
    }
}

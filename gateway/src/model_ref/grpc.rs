//! gRPC wire peeking: the model name of a `ModelInferRequest` read from the first length-prefixed
//! message of the body, without decoding the tensors.
//!
//! A gRPC message is a 5-byte header (compressed flag, big-endian u32 length) then the protobuf
//! bytes. We walk every top-level protobuf field of the message, skipping length-delimited ones by their
//! length, and keep the LAST `model_name` (field 1) and `model_version` (field 2), as every protobuf parser
//! does for a singular field seen twice (the backend's included): routing on an earlier occurrence would
//! let a request be routed as one model and served as another. So the whole first message is needed
//! ([`GrpcPeek::NeedMore`] until it is there). Fields 1 and 2 with a wire type other than
//! length-delimited, groups anywhere, and compressed messages ([`GrpcPeek::Compressed`]) cannot be read the
//! backend's way here; the pipeline refuses them when routes match on the model (`docs/security.md`).
use std::ops::Range;

/// The KServe V2 gRPC method whose first message carries `model_name` (field 1) and
/// `model_version` (field 2).
pub const MODEL_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";
/// The streaming variant (Triton): every message is a `ModelInferRequest`.
pub const MODEL_STREAM_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// Where a request message carries the model it names: its protobuf field numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFields {
    /// The field holding the model name.
    pub name: u32,
    /// The field holding the model version, when the message has one.
    pub version: Option<u32>,
}

impl ModelFields {
    /// `ModelInferRequest` and the other per-model requests (`ModelReady`, `ModelMetadata`, `ModelConfig`,
    /// `ModelStatistics`): `name`/`model_name` 1, `version`/`model_version` 2.
    pub const MODEL: ModelFields = ModelFields {
        name: 1,
        version: Some(2),
    };
    /// `RepositoryModelLoadRequest` and `RepositoryModelUnloadRequest`: `repository_name` 1, `model_name` 2,
    /// no version.
    pub const REPOSITORY: ModelFields = ModelFields {
        name: 2,
        version: None,
    };

    /// The layout of the request messages of the gRPC method at `path`, or `None` for methods whose requests
    /// name no model (server health and metadata, the repository index, anything outside
    /// `inference.GRPCInferenceService`).
    pub fn of_method(path: &str) -> Option<ModelFields> {
        let method = path.strip_prefix(SERVICE_PREFIX)?;
        match method {
            "RepositoryModelLoad" | "RepositoryModelUnload" => Some(Self::REPOSITORY),
            "ServerLive" | "ServerReady" | "ServerMetadata" | "RepositoryIndex" => None,
            m if m.starts_with("Model") => Some(Self::MODEL),
            _ => None,
        }
    }
}

/// The path prefix of the KServe V2 gRPC service's methods.
const SERVICE_PREFIX: &str = "/inference.GRPCInferenceService/";

/// Length of the gRPC message header: compressed flag (1 byte) and message length (4 bytes, BE).
pub const FRAME_HEADER_LEN: usize = 5;

/// What [`peek_model`] found in the first gRPC message of a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcPeek<'a> {
    /// `model_name` and `model_version`, each the last occurrence in the message.
    Found {
        /// The model name field (its last occurrence).
        name: &'a str,
        /// The version field (its last occurrence), unless absent, empty or not in the message.
        version: Option<&'a str>,
    },
    /// The bytes end before the first message does: buffer more of the body and peek again.
    NeedMore,
    /// The message has the compressed flag set; its fields cannot be read without inflating it.
    Compressed,
    /// The whole message was read and it has no `model_name`, or an empty one last.
    Missing,
    /// The bytes are not a gRPC message carrying protobuf.
    Malformed(WireError),
}

/// Why bytes could not be read as a gRPC-framed protobuf message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// `model_name` or `model_version` is not length-delimited (a protobuf parser refuses the message).
    #[error(
        "protobuf field {field} (model name or version) has wire type {wire_type}; it must be 2 (length-delimited)"
    )]
    WrongWireType {
        /// The field number.
        field: u32,
        /// The wire type it came with.
        wire_type: u8,
    },
    /// The compressed flag is neither 0 nor 1.
    #[error("gRPC message header has compressed flag {0} (expected 0 or 1)")]
    BadFlag(u8),
    /// A varint runs past 10 bytes.
    #[error("protobuf varint longer than 10 bytes")]
    VarintTooLong,
    /// A field uses a wire type that `ModelInferRequest` never contains (groups) or an unknown one.
    #[error("protobuf wire type {0} is not supported")]
    BadWireType(u8),
    /// A length runs past the end of its message.
    #[error("protobuf field length runs past the end of the message")]
    Truncated,
    /// `model_name` or `model_version` is not UTF-8.
    #[error("model name or version is not UTF-8")]
    NotUtf8,
    /// The message has the compressed flag set.
    #[error("gRPC message is compressed; the gateway does not inflate messages to read or rewrite fields")]
    Compressed,
}

/// One top-level protobuf field: its number, wire type and the byte ranges of the whole field and
/// of its payload (for length-delimited fields, the bytes after the length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field number.
    pub number: u32,
    /// Wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
    pub wire_type: u8,
    /// The whole field, key included, relative to the message start.
    pub span: Range<usize>,
    /// The value bytes (for wire type 2, without the length prefix).
    pub value: Range<usize>,
}

/// Outcome of reading one field from a possibly incomplete message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A complete field.
    Field(Field),
    /// The message ends here.
    End,
    /// The available bytes stop inside a field whose key was read; `number` says which.
    Incomplete {
        /// The field number whose value is cut off (`None` when the key itself is cut off).
        number: Option<u32>,
    },
}

/// Reads the 5-byte gRPC message header: `(compressed, message_len)`, or `None` when fewer than 5
/// bytes are available.
pub fn frame_header(buf: &[u8]) -> Option<Result<(bool, usize), WireError>> {
    let h = buf.get(..FRAME_HEADER_LEN)?;
    let compressed = match h[0] {
        0 => false,
        1 => true,
        other => return Some(Err(WireError::BadFlag(other))),
    };
    let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize;
    Some(Ok((compressed, len)))
}

/// Reads a protobuf varint at `pos`; `Ok(None)` when the bytes end first.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<Option<u64>, WireError> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = buf.get(*pos + i) else {
            return Ok(None);
        };
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *pos += i + 1;
            return Ok(Some(value));
        }
    }
    Err(WireError::VarintTooLong)
}

/// Reads the field starting at `pos` of `msg` (the available bytes of a message whose full length
/// is `msg_len`), advancing `pos` past it.
pub fn next_field(msg: &[u8], msg_len: usize, pos: &mut usize) -> Result<Next, WireError> {
    if *pos >= msg_len {
        return Ok(Next::End);
    }
    let start = *pos;
    let mut p = *pos;
    let Some(key) = read_varint(msg, &mut p)? else {
        return Ok(Next::Incomplete { number: None });
    };
    let number = (key >> 3) as u32;
    let wire_type = (key & 7) as u8;
    let (value, end) = match wire_type {
        0 => {
            let vs = p;
            match read_varint(msg, &mut p)? {
                Some(_) => (vs..p, p),
                None => return Ok(Next::Incomplete { number: Some(number) }),
            }
        }
        1 | 5 => {
            let n = if wire_type == 1 { 8 } else { 4 };
            (p..p + n, p + n)
        }
        2 => {
            let Some(len) = read_varint(msg, &mut p)? else {
                return Ok(Next::Incomplete { number: Some(number) });
            };
            let len = usize::try_from(len).map_err(|_| WireError::Truncated)?;
            let end = p.checked_add(len).ok_or(WireError::Truncated)?;
            (p..end, end)
        }
        other => return Err(WireError::BadWireType(other)),
    };
    if end > msg_len {
        return Err(WireError::Truncated);
    }
    if end > msg.len() {
        return Ok(Next::Incomplete { number: Some(number) });
    }
    *pos = end;
    Ok(Next::Field(Field {
        number,
        wire_type,
        span: start..end,
        value,
    }))
}

/// Reads `model_name` and `model_version` from the first gRPC message in `body`, which may be only a prefix
/// of the request body. Never reads tensor contents: length-delimited fields are skipped by length. Every
/// field of the message is visited and the last occurrence of each wins, so the answer is
/// [`GrpcPeek::NeedMore`] until the whole first message is in `body`.
pub fn peek_model(body: &[u8]) -> GrpcPeek<'_> {
    peek_model_fields(body, ModelFields::MODEL)
}

/// [`peek_model`] for a message whose model name (and version) sit in `fields`.
pub fn peek_model_fields(body: &[u8], fields: ModelFields) -> GrpcPeek<'_> {
    let (compressed, len) = match frame_header(body) {
        None => return GrpcPeek::NeedMore,
        Some(Err(e)) => return GrpcPeek::Malformed(e),
        Some(Ok(h)) => h,
    };
    if compressed {
        return GrpcPeek::Compressed;
    }
    let avail = body.len().min(FRAME_HEADER_LEN.saturating_add(len));
    let msg = &body[FRAME_HEADER_LEN..avail];
    let mut pos = 0;
    let mut name: Option<&str> = None;
    let mut version: Option<&str> = None;
    loop {
        match next_field(msg, len, &mut pos) {
            Err(e) => return GrpcPeek::Malformed(e),
            Ok(Next::End) => break,
            Ok(Next::Incomplete { .. }) => return GrpcPeek::NeedMore,
            Ok(Next::Field(f)) => {
                let slot = if f.number == fields.name {
                    &mut name
                } else if Some(f.number) == fields.version {
                    &mut version
                } else {
                    continue;
                };
                if f.wire_type != 2 {
                    return GrpcPeek::Malformed(WireError::WrongWireType {
                        field: f.number,
                        wire_type: f.wire_type,
                    });
                }
                match std::str::from_utf8(&msg[f.value.clone()]) {
                    Ok(s) => *slot = Some(s),
                    Err(_) => return GrpcPeek::Malformed(WireError::NotUtf8),
                }
            }
        }
    }
    match name.filter(|n| !n.is_empty()) {
        Some(name) => GrpcPeek::Found {
            name,
            version: version.filter(|v| !v.is_empty()),
        },
        None => GrpcPeek::Missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8];
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn finds_name_after_skipping_fields_in_any_order() {
        // raw_input_contents (7) first, then model_name (1): still found by skipping field 7.
        let msg = [&[0x3a, 3, 9, 9, 9][..], &[0x0a, 3, b'r', b'e', b's'][..]].concat();
        assert_eq!(
            peek_model(&frame(&msg)),
            GrpcPeek::Found {
                name: "res",
                version: None
            }
        );
    }

    #[test]
    fn the_last_occurrence_wins_wherever_it_is() {
        // model_name "a", then a tensor (field 7), then model_name "b" and two versions: b, version 9.
        let msg = [
            &[0x0a, 1, b'a'][..],
            &[0x12, 1, b'1'][..],
            &[0x3a, 3, 9, 9, 9][..],
            &[0x0a, 1, b'b'][..],
            &[0x12, 1, b'9'][..],
        ]
        .concat();
        let f = frame(&msg);
        assert_eq!(
            peek_model(&f),
            GrpcPeek::Found {
                name: "b",
                version: Some("9")
            }
        );
        // Until the whole message is there, nothing is decided.
        for cut in 0..f.len() {
            assert_eq!(peek_model(&f[..cut]), GrpcPeek::NeedMore, "cut at {cut}");
        }
        // A later empty name leaves the message without one, as a protobuf parser reads it.
        let emptied = frame(&[&msg[..], &[0x0a, 0][..]].concat());
        assert_eq!(peek_model(&emptied), GrpcPeek::Missing);
        // Field 1 as a varint: a parser refuses the message, so do we.
        assert_eq!(
            peek_model(&frame(&[0x0a, 1, b'a', 0x08, 1])),
            GrpcPeek::Malformed(WireError::WrongWireType {
                field: 1,
                wire_type: 0
            })
        );
    }

    #[test]
    fn partial_bytes_ask_for_more_and_bad_bytes_are_named() {
        let msg = [0x0a, 5, b'm', b'o', b'd', b'e', b'l'];
        let f = frame(&msg);
        assert_eq!(peek_model(&f[..3]), GrpcPeek::NeedMore);
        assert_eq!(peek_model(&f[..8]), GrpcPeek::NeedMore);
        assert_eq!(
            peek_model(&f),
            GrpcPeek::Found {
                name: "model",
                version: None
            }
        );
        let mut bad = f.clone();
        bad[0] = 7;
        assert_eq!(peek_model(&bad), GrpcPeek::Malformed(WireError::BadFlag(7)));
        let mut comp = f;
        comp[0] = 1;
        assert_eq!(peek_model(&comp), GrpcPeek::Compressed);
        // A group (wire type 3) is refused, not misread.
        assert_eq!(
            peek_model(&frame(&[0x0b])),
            GrpcPeek::Malformed(WireError::BadWireType(3))
        );
        assert_eq!(peek_model(&frame(&[0x1a, 0])), GrpcPeek::Missing);
    }

    #[test]
    fn repository_calls_name_their_model_in_field_2_and_carry_no_version() {
        let path = "/inference.GRPCInferenceService/RepositoryModelLoad";
        let fields = ModelFields::of_method(path).unwrap();
        assert_eq!(fields, ModelFields::REPOSITORY);
        // repository_name 1, model_name 2: the model is field 2, and nothing is read as a version.
        let msg = [0x0a, 1, b'r', 0x12, 6, b's', b'e', b'c', b'r', b'e', b't'];
        assert_eq!(
            peek_model_fields(&frame(&msg), fields),
            GrpcPeek::Found {
                name: "secret",
                version: None
            }
        );
        assert_eq!(
            ModelFields::of_method("/inference.GRPCInferenceService/ModelStreamInfer"),
            Some(ModelFields::MODEL)
        );
        assert_eq!(
            ModelFields::of_method("/inference.GRPCInferenceService/RepositoryIndex"),
            None
        );
        assert_eq!(ModelFields::of_method("/grpc.health.v1.Health/Check"), None);
    }
}

//! Model-version rewrite for a chosen destination: the REST path and the gRPC `model_version`
//! field (2) of `ModelInferRequest`.
//!
//! The gRPC rewrite re-encodes only field 2 and the 5-byte message header; every other field —
//! the tensors above all — is passed on as zero-copy slices of the original buffer.

use bytes::{BufMut, Bytes, BytesMut};
use http::Uri;

use crate::model_ref::grpc::{FRAME_HEADER_LEN, Next, WireError, frame_header, next_field};
use crate::model_ref::kserve::parse_rest_model_path;

/// `/v2/models/m/infer` → `/v2/models/m/versions/{version}/infer` (an existing version segment is
/// replaced; the query string is kept). `None` when the path names no model.
pub fn rewrite_rest_path(uri: &Uri, version: &str) -> Option<Uri> {
    let pq = uri.path_and_query()?.as_str();
    let parsed = parse_rest_model_path(pq)?;
    let mut out = String::with_capacity(pq.len() + version.len() + 10);
    out.push_str(&pq[..parsed.after_name]);
    out.push_str("/versions/");
    out.push_str(version);
    out.push_str(&pq[parsed.after_version..]);
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(out.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// A rewritten gRPC body: chunks to send in order (small re-encoded heads, zero-copy slices of the
/// original for everything else).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewrittenBody {
    /// The chunks, in order.
    pub chunks: Vec<Bytes>,
}

impl RewrittenBody {
    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunks joined into one buffer (copies; a single chunk is returned as is).
    pub fn into_bytes(self) -> Bytes {
        if self.chunks.len() == 1 {
            return self.chunks.into_iter().next().unwrap_or_default();
        }
        let mut b = BytesMut::with_capacity(self.len());
        for c in &self.chunks {
            b.extend_from_slice(c);
        }
        b.freeze()
    }
}

/// Sets `model_version` (field 2) of every `ModelInferRequest` message in a complete gRPC request
/// body to `version`, rewriting each message's length. Existing field-2 occurrences are dropped;
/// the new field goes right after `model_name` (or first when there is none). Compressed messages
/// are refused with [`WireError::Compressed`]: the pipeline then answers with a clear error instead
/// of sending the request to the wrong version.
pub fn rewrite_grpc_version(body: &Bytes, version: &str) -> Result<RewrittenBody, WireError> {
    let mut out = RewrittenBody::default();
    let mut at = 0usize;
    while at < body.len() {
        let (compressed, len) = frame_header(&body[at..]).ok_or(WireError::Truncated)??;
        if compressed {
            return Err(WireError::Compressed);
        }
        let start = at + FRAME_HEADER_LEN;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= body.len())
            .ok_or(WireError::Truncated)?;
        rewrite_message(body, start, end, version, &mut out)?;
        at = end;
    }
    Ok(out)
}

fn rewrite_message(
    body: &Bytes,
    start: usize,
    end: usize,
    version: &str,
    out: &mut RewrittenBody,
) -> Result<(), WireError> {
    let msg = &body[start..end];
    // Pass 1: find field spans to keep; insert the version after field 1.
    let mut keep: Vec<std::ops::Range<usize>> = Vec::new();
    let mut insert_after: Option<usize> = None; // index into `keep` after which the version goes
    let mut pos = 0;
    loop {
        match next_field(msg, msg.len(), &mut pos)? {
            Next::End => break,
            Next::Incomplete { .. } => return Err(WireError::Truncated),
            Next::Field(f) => {
                if f.number == 2 {
                    continue;
                }
                let is_name = f.number == 1;
                // Merge adjacent spans so the tail stays one slice.
                let last_ix = keep.len().checked_sub(1);
                match keep.last_mut() {
                    Some(last) if last.end == f.span.start && insert_after != last_ix => {
                        last.end = f.span.end
                    }
                    _ => keep.push(f.span.clone()),
                }
                if is_name {
                    insert_after = Some(keep.len() - 1);
                }
            }
        }
    }
    let mut field = BytesMut::with_capacity(version.len() + 11);
    field.put_u8(0x12); // field 2, wire type 2
    put_varint(&mut field, version.len() as u64);
    field.extend_from_slice(version.as_bytes());
    let new_len = keep.iter().map(|r| r.len()).sum::<usize>() + field.len();
    let new_len = u32::try_from(new_len).map_err(|_| WireError::Truncated)?;

    // The head: message header, the spans up to and including model_name, then the version field.
    let mut head = BytesMut::with_capacity(FRAME_HEADER_LEN + 64 + field.len());
    head.put_u8(0);
    head.put_u32(new_len);
    let split_at = insert_after.map_or(0, |i| i + 1);
    for r in &keep[..split_at] {
        head.extend_from_slice(&msg[r.clone()]);
    }
    head.extend_from_slice(&field);
    out.chunks.push(head.freeze());
    for r in &keep[split_at..] {
        out.chunks.push(body.slice(start + r.start..start + r.end));
    }
    Ok(())
}

fn put_varint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_paths_gain_or_replace_the_version() {
        let u: Uri = "/v2/models/m/infer".parse().unwrap();
        assert_eq!(
            rewrite_rest_path(&u, "2").unwrap(),
            "/v2/models/m/versions/2/infer"
        );
        let u: Uri = "http://h:1/v2/models/m/versions/1/infer?a=b".parse().unwrap();
        assert_eq!(
            rewrite_rest_path(&u, "7").unwrap(),
            "http://h:1/v2/models/m/versions/7/infer?a=b"
        );
        let u: Uri = "/v2/models/m".parse().unwrap();
        assert_eq!(rewrite_rest_path(&u, "3").unwrap(), "/v2/models/m/versions/3");
        let u: Uri = "/v2/health/ready".parse().unwrap();
        assert_eq!(rewrite_rest_path(&u, "3"), None);
    }
}

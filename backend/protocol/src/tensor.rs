//! Tensor bytes as they travel between the front ends and the engine: little-endian, row-major, no copies.

use bytes::{BufMut, Bytes, BytesMut};

use crate::datatype::DataType;
use crate::error::ServeError;

/// The contents of one tensor: little-endian, row-major bytes shared without copying (`bytes::Bytes`).
///
/// Fixed-size types hold `element_count × element_size` bytes (`BOOL` one byte each, 0 or 1); `BYTES`
/// tensors hold each element as a little-endian `u32` length followed by its bytes (Triton's
/// serialisation). Codecs in this crate only produce data whose size matches the shape and datatype
/// (checked with [`validate_tensor`]), so the server can hand it to the engine as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorData(Bytes);

impl TensorData {
    /// Wraps raw bytes (no check; see [`validate_tensor`]).
    pub fn new(bytes: Bytes) -> Self {
        TensorData(bytes)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// The raw bytes, owned (cheap: a reference count).
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Serialises byte strings as a `BYTES` tensor (u32 LE length + bytes each).
    pub fn from_byte_strings<I, S>(elements: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        let mut out = BytesMut::new();
        for e in elements {
            put_bytes_element(&mut out, e.as_ref());
        }
        TensorData(out.freeze())
    }

    /// Little-endian bytes of `f32` values.
    pub fn from_f32(values: &[f32]) -> Self {
        let mut out = BytesMut::with_capacity(values.len() * 4);
        for v in values {
            out.put_f32_le(*v);
        }
        TensorData(out.freeze())
    }

    /// The elements of a `BYTES` tensor, each borrowed from the buffer; an error names the element
    /// whose length runs past the end.
    pub fn byte_strings(&self) -> BytesElements<'_> {
        BytesElements {
            rest: &self.0,
            index: 0,
        }
    }
}

impl From<Bytes> for TensorData {
    fn from(b: Bytes) -> Self {
        TensorData(b)
    }
}

impl From<Vec<u8>> for TensorData {
    fn from(b: Vec<u8>) -> Self {
        TensorData(Bytes::from(b))
    }
}

/// Iterator over the elements of a serialised `BYTES` tensor.
#[derive(Debug, Clone)]
pub struct BytesElements<'a> {
    rest: &'a [u8],
    index: usize,
}

impl<'a> Iterator for BytesElements<'a> {
    type Item = Result<&'a [u8], ServeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let index = self.index;
        self.index += 1;
        let Some((len_bytes, after)) = self.rest.split_first_chunk::<4>() else {
            let left = self.rest.len();
            self.rest = &[];
            return Some(Err(ServeError::invalid_argument(format!(
                "BYTES element {index}: only {left} bytes left where a 4-byte length prefix was expected"
            ))));
        };
        let len = u32::from_le_bytes(*len_bytes) as usize;
        if after.len() < len {
            let left = after.len();
            self.rest = &[];
            return Some(Err(ServeError::invalid_argument(format!(
                "BYTES element {index}: length prefix says {len} bytes but only {left} remain"
            ))));
        }
        let (element, rest) = after.split_at(len);
        self.rest = rest;
        Some(Ok(element))
    }
}

/// Appends one `BYTES` element (u32 LE length + bytes).
pub fn put_bytes_element(out: &mut BytesMut, element: &[u8]) {
    // Elements longer than 4 GiB cannot be expressed in Triton's format; callers bound body sizes far below.
    out.put_u32_le(element.len() as u32);
    out.put_slice(element);
}

/// Number of elements of a shape; refuses negative dimensions and products that overflow.
///
/// `what` names the tensor in messages, e.g. `input 'x'`.
pub fn element_count(what: &str, shape: &[i64]) -> Result<usize, ServeError> {
    let mut n: usize = 1;
    for &d in shape {
        if d < 0 {
            return Err(ServeError::invalid_argument(format!(
                "{what}: shape {} has a negative dimension {d}; request tensors need concrete sizes (≥ 0)",
                shape_string(shape)
            )));
        }
        n = usize::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .ok_or_else(|| {
                ServeError::invalid_argument(format!(
                    "{what}: shape {} has more elements than this server can address",
                    shape_string(shape)
                ))
            })?;
    }
    Ok(n)
}

/// Checks that `data` is exactly what `datatype` and `shape` call for; the error says what was
/// expected and what came. `what` names the tensor, e.g. `input 'x'`.
pub fn validate_tensor(what: &str, datatype: DataType, shape: &[i64], data: &[u8]) -> Result<(), ServeError> {
    let count = element_count(what, shape)?;
    match datatype.element_size() {
        Some(size) => {
            let expected = count.checked_mul(size).ok_or_else(|| {
                ServeError::invalid_argument(format!(
                    "{what}: shape {} is too large for {datatype} data",
                    shape_string(shape)
                ))
            })?;
            if data.len() != expected {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: shape {} of {datatype} needs {expected} bytes ({count} elements × {size} bytes), \
                     got {} bytes",
                    shape_string(shape),
                    data.len()
                )));
            }
        }
        None => {
            let mut seen = 0usize;
            for element in (BytesElements { rest: data, index: 0 }) {
                element.map_err(|e| e.context(what))?;
                seen += 1;
            }
            if seen != count {
                return Err(ServeError::invalid_argument(format!(
                    "{what}: shape {} has {count} BYTES elements, but the data holds {seen}",
                    shape_string(shape)
                )));
            }
        }
    }
    Ok(())
}

/// `[1,3,224,224]`, the way shapes appear in error messages.
pub fn shape_string(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_elements_round_trip() {
        let t = TensorData::from_byte_strings(["ab", "", "xyz"]);
        assert_eq!(t.len(), 4 + 2 + 4 + 4 + 3);
        let got: Vec<&[u8]> = t.byte_strings().map(|e| e.unwrap()).collect();
        assert_eq!(got, vec![&b"ab"[..], b"", b"xyz"]);
        validate_tensor("input 'x'", DataType::Bytes, &[3], t.as_bytes()).unwrap();
        validate_tensor("input 'x'", DataType::Bytes, &[1, 3], t.as_bytes()).unwrap();
    }

    #[test]
    fn truncated_bytes_elements_are_reported() {
        let mut raw = TensorData::from_byte_strings(["abcdef"]).into_bytes().to_vec();
        raw.truncate(7);
        let err = validate_tensor("input 'x'", DataType::Bytes, &[1], &raw).unwrap_err();
        assert!(
            err.message.contains("input 'x'") && err.message.contains("6 bytes"),
            "{}",
            err.message
        );
        let err = validate_tensor("input 'x'", DataType::Bytes, &[1], &[1, 0]).unwrap_err();
        assert!(err.message.contains("4-byte length prefix"), "{}", err.message);
    }

    #[test]
    fn bytes_element_count_must_match_the_shape() {
        let t = TensorData::from_byte_strings(["a", "b"]);
        let err = validate_tensor("input 'x'", DataType::Bytes, &[3], t.as_bytes()).unwrap_err();
        assert!(err.message.contains("3 BYTES elements") && err.message.contains("holds 2"));
    }

    #[test]
    fn fixed_size_data_must_match_the_shape() {
        let t = TensorData::from_f32(&[1.0, 2.0, 3.0]);
        validate_tensor("input 'x'", DataType::Fp32, &[1, 3], t.as_bytes()).unwrap();
        let err = validate_tensor("input 'x'", DataType::Fp32, &[2, 3], t.as_bytes()).unwrap_err();
        assert_eq!(
            err.message,
            "input 'x': shape [2,3] of FP32 needs 24 bytes (6 elements × 4 bytes), got 12 bytes"
        );
    }

    #[test]
    fn negative_and_huge_dims_are_refused() {
        let err = element_count("input 'x'", &[-1, 4]).unwrap_err();
        assert!(err.message.contains("negative dimension -1"));
        let err = element_count("input 'x'", &[i64::MAX, i64::MAX]).unwrap_err();
        assert!(err.message.contains("more elements"));
        let err = validate_tensor("input 'x'", DataType::Fp64, &[1 << 61, 4], &[]).unwrap_err();
        assert_eq!(err.code, crate::ErrorCode::InvalidArgument);
        assert_eq!(element_count("s", &[]).unwrap(), 1);
        assert_eq!(element_count("s", &[0, 5]).unwrap(), 0);
    }
}

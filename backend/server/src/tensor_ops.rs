//! Concatenating request tensors along the batch dimension and splitting outputs back.
//!
//! Tensors are little-endian, row-major, so rows along the leading dimension are contiguous byte
//! ranges: concatenation is appending, splitting is slicing (no copy for outputs: `Bytes::slice`).
//! `BYTES` (string) tensors have variable-size elements and are walked element by element.

use bytes::{Bytes, BytesMut};
use infergate_engine::Tensor;

/// Why tensors could not be joined or split (a bug in the caller or the model: not the client's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BatchShapeError(pub String);

/// Joins tensors with equal dtype and equal non-batch dims along dimension 0.
pub fn concat_rows(parts: &[&Tensor]) -> Result<Tensor, BatchShapeError> {
    let Some(first) = parts.first() else {
        return Err(BatchShapeError("nothing to concatenate".into()));
    };
    if parts.len() == 1 {
        return Ok((*first).clone());
    }
    if first.shape.is_empty() {
        return Err(BatchShapeError("a scalar tensor has no batch dimension".into()));
    }
    let mut rows = 0usize;
    let mut bytes = 0usize;
    for p in parts {
        if p.dtype != first.dtype || p.shape.len() != first.shape.len() || p.shape[1..] != first.shape[1..] {
            return Err(BatchShapeError(format!(
                "cannot batch {} {:?} with {} {:?}",
                first.dtype, first.shape, p.dtype, p.shape
            )));
        }
        rows += p.shape[0];
        bytes += p.data.len();
    }
    let mut data = BytesMut::with_capacity(bytes);
    for p in parts {
        data.extend_from_slice(&p.data);
    }
    let mut shape = first.shape.clone();
    shape[0] = rows;
    Ok(Tensor {
        dtype: first.dtype,
        shape,
        data: data.freeze(),
    })
}

/// Splits `t` along dimension 0 into pieces of `rows[i]` rows each (which must add up to `t.shape[0]`).
pub fn split_rows(t: &Tensor, rows: &[usize]) -> Result<Vec<Tensor>, BatchShapeError> {
    if rows.len() == 1 {
        return Ok(vec![t.clone()]);
    }
    let total: usize = rows.iter().sum();
    if t.shape.first() != Some(&total) {
        return Err(BatchShapeError(format!(
            "output {} {:?} does not have the batch's {total} rows along its first dimension",
            t.dtype, t.shape
        )));
    }
    let per_row: usize = t.shape[1..].iter().product();
    let offsets: Vec<usize> = match t.dtype.size() {
        Some(size) => row_offsets(rows, per_row * size),
        None => string_offsets(&t.data, rows, per_row)?,
    };
    let mut out = Vec::with_capacity(rows.len());
    for (i, &r) in rows.iter().enumerate() {
        let mut shape = t.shape.clone();
        shape[0] = r;
        out.push(Tensor {
            dtype: t.dtype,
            shape,
            data: slice(&t.data, offsets[i], offsets[i + 1]),
        });
    }
    Ok(out)
}

fn slice(b: &Bytes, from: usize, to: usize) -> Bytes {
    b.slice(from..to)
}

fn row_offsets(rows: &[usize], row_bytes: usize) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    let mut at = 0;
    offsets.push(0);
    for &r in rows {
        at += r * row_bytes;
        offsets.push(at);
    }
    offsets
}

/// Byte offsets where each piece of a `BYTES` tensor starts (plus the end).
fn string_offsets(data: &[u8], rows: &[usize], per_row: usize) -> Result<Vec<usize>, BatchShapeError> {
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0);
    let mut at = 0usize;
    for &r in rows {
        for _ in 0..r * per_row {
            let len_bytes: [u8; 4] = data
                .get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| BatchShapeError("BYTES output is shorter than its shape".into()))?;
            at += 4 + u32::from_le_bytes(len_bytes) as usize;
            if at > data.len() {
                return Err(BatchShapeError("BYTES output element runs past the end".into()));
            }
        }
        offsets.push(at);
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_concat_and_split() {
        let a = Tensor::from_vec(vec![1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let b = Tensor::from_vec(vec![2, 3], vec![4.0f32, 5.0, 6.0, 7.0, 8.0, 9.0]).unwrap();
        let joined = concat_rows(&[&a, &b]).unwrap();
        assert_eq!(joined.shape, vec![3, 3]);
        assert_eq!(
            joined.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        );
        let parts = split_rows(&joined, &[1, 2]).unwrap();
        assert_eq!(parts, vec![a, b]);
    }

    #[test]
    fn string_tensors_split_on_element_boundaries() {
        let a = Tensor::from_strings(vec![1, 2], &[b"a".to_vec(), b"bcd".to_vec()]).unwrap();
        let b = Tensor::from_strings(vec![1, 2], &[b"".to_vec(), b"ef".to_vec()]).unwrap();
        let joined = concat_rows(&[&a, &b]).unwrap();
        let parts = split_rows(&joined, &[1, 1]).unwrap();
        assert_eq!(parts, vec![a, b]);
    }

    #[test]
    fn mismatched_shapes_are_refused() {
        let a = Tensor::from_vec(vec![1, 3], vec![1.0f32, 2.0, 3.0]).unwrap();
        let b = Tensor::from_vec(vec![1, 2], vec![4.0f32, 5.0]).unwrap();
        assert!(concat_rows(&[&a, &b]).is_err());
        assert!(split_rows(&a, &[1, 1]).is_err());
    }
}

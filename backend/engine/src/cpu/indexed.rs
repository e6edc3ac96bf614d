//! Kernels of the indexed operators: running sums, triangles, one-hot encoding, GatherND and ScatterND.
//!
//! Each has a generic kernel over element slices and a `Buf` entry point that picks the element type.

use super::buf::{Buf, map_same};
use super::movement::strides_of;
use super::num::Num;
use crate::error::{EngineError, Result};
use crate::ir::ScatterReduction;

/// Apply a generic numeric kernel to a buffer of any numeric dtype; BOOL and STRING are refused.
macro_rules! map_num {
    ($b:expr, $what:expr, $v:ident => $e:expr) => {
        match $b {
            Buf::F32($v) => Buf::F32($e),
            Buf::F64($v) => Buf::F64($e),
            Buf::F16($v) => Buf::F16($e),
            Buf::BF16($v) => Buf::BF16($e),
            Buf::I8($v) => Buf::I8($e),
            Buf::I16($v) => Buf::I16($e),
            Buf::I32($v) => Buf::I32($e),
            Buf::I64($v) => Buf::I64($e),
            Buf::U8($v) => Buf::U8($e),
            Buf::U16($v) => Buf::U16($e),
            Buf::U32($v) => Buf::U32($e),
            Buf::U64($v) => Buf::U64($e),
            other => {
                return Err(EngineError::unsupported(format!(
                    "{} on {} tensors (numeric types only)",
                    $what,
                    other.dtype()
                )));
            }
        }
    };
}

/// Running sum of `x` (shape `shape`) along `axis`.
pub(crate) fn cumsum<T: Num>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Vec<T> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut y = vec![T::default(); x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * n * inner + i;
            let mut acc = T::default();
            for step in 0..n {
                let j = if reverse { n - 1 - step } else { step };
                let at = base + j * inner;
                if exclusive {
                    y[at] = acc;
                    acc = acc.add(x[at]);
                } else {
                    acc = acc.add(x[at]);
                    y[at] = acc;
                }
            }
        }
    }
    y
}

/// [`cumsum`] on a buffer.
pub(crate) fn cumsum_buf(
    x: &Buf,
    shape: &[usize],
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<Buf> {
    Ok(map_num!(x, "CumSum", v => cumsum(v, shape, axis, exclusive, reverse)))
}

/// The upper (`upper`) or lower triangle of every matrix in the last two dims of `x`, the diagonal
/// shifted by `k`; other elements become the default (zero, false, empty string).
pub(crate) fn trilu<T: Clone + Default>(x: &[T], shape: &[usize], upper: bool, k: i64) -> Vec<T> {
    let r = shape.len();
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let mut y = x.to_vec();
    for (at, v) in y.iter_mut().enumerate() {
        let (i, j) = (((at / cols) % rows.max(1)) as i64, (at % cols) as i64);
        let keep = if upper { j - i >= k } else { j - i <= k };
        if !keep {
            *v = T::default();
        }
    }
    y
}

/// [`trilu`] on a buffer.
pub(crate) fn trilu_buf(x: &Buf, shape: &[usize], upper: bool, k: i64) -> Buf {
    map_same!(x, v => trilu(v, shape, upper, k))
}

/// One-hot encoding: `idx` (shape `idx_shape`) gets a new axis of size `depth` at `axis`; a position
/// holds `on` where it equals the index (negative indices count from the end), `off` elsewhere.
/// Indices outside `[-depth, depth)` give a row of `off`, as ONNX specifies.
pub(crate) fn one_hot<T: Clone>(
    idx: &[i64],
    idx_shape: &[usize],
    axis: usize,
    depth: usize,
    off: &T,
    on: &T,
) -> Vec<T> {
    let outer: usize = idx_shape[..axis].iter().product();
    let inner: usize = idx_shape[axis..].iter().product();
    let mut y = vec![off.clone(); outer * depth * inner];
    for o in 0..outer {
        for i in 0..inner {
            let mut v = idx[o * inner + i];
            if v < 0 {
                v += depth as i64;
            }
            if (0..depth as i64).contains(&v) {
                y[(o * depth + v as usize) * inner + i] = on.clone();
            }
        }
    }
    y
}

/// [`one_hot`] with `values` = `[off, on]` as a buffer.
pub(crate) fn one_hot_buf(
    idx: &[i64],
    idx_shape: &[usize],
    axis: usize,
    depth: usize,
    values: &Buf,
) -> Result<Buf> {
    if values.len() != 2 {
        return Err(EngineError::invalid(format!(
            "OneHot values must hold two elements [off_value, on_value], got {}",
            values.len()
        )));
    }
    Ok(map_same!(values, v => one_hot(idx, idx_shape, axis, depth, &v[0], &v[1])))
}

/// Where the index tuples of GatherND/ScatterND point: per tuple, the element offset into data of
/// the slice it addresses (batch offset included), and the slice length.
fn nd_offsets(
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    batch_dims: usize,
    what: &str,
) -> Result<(Vec<usize>, usize)> {
    let q = ishape.len();
    let k = ishape[q - 1];
    let slice: usize = dshape[batch_dims + k..].iter().product();
    let per_batch: usize = dshape[batch_dims..].iter().product();
    let tuples_per_batch: usize = ishape[batch_dims..q - 1].iter().product();
    let strides = strides_of(&dshape[batch_dims..]);
    let n_tuples: usize = ishape[..q - 1].iter().product();
    let mut out = Vec::with_capacity(n_tuples);
    for t in 0..n_tuples {
        let tuple = &idx[t * k..(t + 1) * k];
        let mut off = (t / tuples_per_batch.max(1)) * per_batch;
        for (j, &v) in tuple.iter().enumerate() {
            let d = dshape[batch_dims + j] as i64;
            let at = if v < 0 { v + d } else { v };
            if !(0..d).contains(&at) {
                return Err(EngineError::invalid(format!(
                    "{what} index {v} is out of range for data dim {} of size {d}",
                    batch_dims + j
                )));
            }
            off += at as usize * strides[j];
        }
        out.push(off);
    }
    Ok((out, slice))
}

/// ONNX GatherND: the slices of `data` addressed by the last dim of `idx`.
pub(crate) fn gather_nd_buf(
    data: &Buf,
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    batch_dims: usize,
) -> Result<Buf> {
    let (offsets, slice) = nd_offsets(dshape, idx, ishape, batch_dims, "GatherND")?;
    Ok(map_same!(data, v => {
        let mut y = Vec::with_capacity(offsets.len() * slice);
        for &o in &offsets {
            y.extend_from_slice(&v[o..o + slice]);
        }
        y
    }))
}

/// Writes `updates` into the slices of `data` that `offsets` address, in order, combining with
/// `combine` when given (later duplicates see the earlier results, as ONNX's reference does).
fn scatter<T: Clone>(
    data: &[T],
    offsets: &[usize],
    slice: usize,
    updates: &[T],
    combine: Option<fn(&T, &T) -> T>,
) -> Vec<T> {
    let mut y = data.to_vec();
    for (t, &o) in offsets.iter().enumerate() {
        for e in 0..slice {
            let u = &updates[t * slice + e];
            y[o + e] = match combine {
                None => u.clone(),
                Some(f) => f(&y[o + e], u),
            };
        }
    }
    y
}

fn combiner<T: Num>(r: ScatterReduction) -> Option<fn(&T, &T) -> T> {
    match r {
        ScatterReduction::None => None,
        ScatterReduction::Add => Some(|a, b| a.add(*b)),
        ScatterReduction::Mul => Some(|a, b| a.mul(*b)),
        ScatterReduction::Max => Some(|a, b| if *b > *a { *b } else { *a }),
        ScatterReduction::Min => Some(|a, b| if *b < *a { *b } else { *a }),
    }
}

/// ONNX ScatterND.
pub(crate) fn scatter_nd_buf(
    data: &Buf,
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    updates: &Buf,
    reduction: ScatterReduction,
) -> Result<Buf> {
    let (offsets, slice) = nd_offsets(dshape, idx, ishape, 0, "ScatterND")?;
    if reduction == ScatterReduction::None {
        return crate::cpu::buf::pair_same!(data, updates, (d, u) => scatter(d, &offsets, slice, u, None))
            .ok_or_else(|| EngineError::invalid("ScatterND updates must have the data's element type"));
    }
    let what = "ScatterND with a reduction";
    Ok(map_num!(data, what, d => {
        let Some(u) = updates_as(updates, d) else {
            return Err(EngineError::invalid("ScatterND updates must have the data's element type"));
        };
        scatter(d, &offsets, slice, u, combiner(reduction))
    }))
}

/// ONNX ScatterElements: for each position of `idx` (shape `ishape`, data's rank), the element of
/// `data` at that position with its `axis` coordinate replaced by the index takes the update at the
/// same position, or is combined with it, in row-major order of the indices.
pub(crate) fn scatter_elements_buf(
    data: &Buf,
    dshape: &[usize],
    idx: &[i64],
    ishape: &[usize],
    updates: &Buf,
    axis: usize,
    reduction: ScatterReduction,
) -> Result<Buf> {
    let dstrides = strides_of(dshape);
    let istrides = strides_of(ishape);
    let d = dshape[axis] as i64;
    let mut offsets = Vec::with_capacity(idx.len());
    for (flat, &v) in idx.iter().enumerate() {
        let at = if v < 0 { v + d } else { v };
        if !(0..d).contains(&at) {
            return Err(EngineError::invalid(format!(
                "ScatterElements index {v} is out of range for data dim {axis} of size {d}"
            )));
        }
        let mut off = 0;
        for (j, (&is, &ds)) in istrides.iter().zip(&dstrides).enumerate() {
            let coord = if j == axis {
                at as usize
            } else {
                (flat / is.max(1)) % ishape[j].max(1)
            };
            off += coord * ds;
        }
        offsets.push(off);
    }
    if reduction == ScatterReduction::None {
        return crate::cpu::buf::pair_same!(data, updates, (d, u) => scatter(d, &offsets, 1, u, None))
            .ok_or_else(|| {
                EngineError::invalid("ScatterElements updates must have the data's element type")
            });
    }
    let what = "ScatterElements with a reduction";
    Ok(map_num!(data, what, d => {
        let Some(u) = updates_as(updates, d) else {
            return Err(EngineError::invalid("ScatterElements updates must have the data's element type"));
        };
        scatter(d, &offsets, 1, u, combiner(reduction))
    }))
}

/// `updates` as a slice of the data's element type, when it has that type.
fn updates_as<'a, T: 'static>(updates: &'a Buf, _like: &[T]) -> Option<&'a [T]> {
    let any: &dyn std::any::Any = match updates {
        Buf::F32(v) => v,
        Buf::F64(v) => v,
        Buf::F16(v) => v,
        Buf::BF16(v) => v,
        Buf::I8(v) => v,
        Buf::I16(v) => v,
        Buf::I32(v) => v,
        Buf::I64(v) => v,
        Buf::U8(v) => v,
        Buf::U16(v) => v,
        Buf::U32(v) => v,
        Buf::U64(v) => v,
        Buf::Bool(v) => v,
        Buf::Str(v) => v,
    };
    any.downcast_ref::<Vec<T>>().map(Vec::as_slice)
}

/// ONNX NonZero: the coordinates (`[rank, count]`, row-major order) of the non-zero elements.
pub(crate) fn non_zero(x: &Buf, shape: &[usize]) -> Result<(Vec<usize>, Vec<i64>)> {
    let flags: Vec<bool> = match x {
        Buf::Bool(v) => v.clone(),
        Buf::Str(_) => return Err(EngineError::unsupported("NonZero on STRING tensors")),
        other => other.to_f64().into_iter().map(|v| v != 0.0).collect(),
    };
    let hits: Vec<usize> = flags
        .iter()
        .enumerate()
        .filter(|(_, f)| **f)
        .map(|(i, _)| i)
        .collect();
    let strides = strides_of(shape);
    let mut out = vec![0i64; shape.len() * hits.len()];
    for (c, &flat) in hits.iter().enumerate() {
        for (d, &s) in strides.iter().enumerate() {
            out[d * hits.len() + c] = ((flat / s.max(1)) % shape[d].max(1)) as i64;
        }
    }
    Ok((vec![shape.len(), hits.len()], out))
}

#[cfg(test)]
mod tests;

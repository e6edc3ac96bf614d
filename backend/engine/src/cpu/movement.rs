//! Data movement kernels, generic over the element type: strided gathers (Transpose, Slice, Expand,
//! DepthToSpace), Concat, Split, Gather, GatherElements, Tile, Pad, Resize.

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::ir::{CoordTransform, NearestMode, PadMode, ResizeMode};

/// Gathers of at least this many elements are split over the pool's threads.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// Row-major strides of a shape.
pub(crate) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// out[idx] = src[base + Σ idx_d · strides_d].
pub(crate) fn strided_gather<T: Clone + Send + Sync>(
    src: &[T],
    base: isize,
    out: &[usize],
    strides: &[isize],
) -> Vec<T> {
    let n: usize = out.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let mut res = vec![src[base as usize].clone(); n];
    strided_gather_into(src, base, out, strides, &mut res);
    res
}

/// [`strided_gather`] into `res` (as many values as `out` has; every one is written).
pub(crate) fn strided_gather_into<T: Clone + Send + Sync>(
    src: &[T],
    base: isize,
    out: &[usize],
    strides: &[isize],
    res: &mut [T],
) {
    let r = out.len();
    if res.is_empty() {
        return;
    }
    if r == 0 {
        res[0] = src[base as usize].clone();
        return;
    }
    let inner = out[r - 1];
    let is = strides[r - 1];
    let start = |ri: usize| -> isize {
        let mut rem = ri;
        let mut off = base;
        for d in (0..r - 1).rev() {
            let i = rem % out[d];
            rem /= out[d];
            off += i as isize * strides[d];
        }
        off
    };
    // rows written in place (a contiguous row is one slice copy)
    let row = |ri: usize, dst: &mut [T]| {
        let off = start(ri);
        if is == 1 {
            dst.clone_from_slice(&src[off as usize..off as usize + inner]);
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                *d = src[(off + j as isize * is) as usize].clone();
            }
        }
    };
    if inner == 0 {
        return;
    }
    if res.len() >= PAR_MIN {
        let per = ((1 << 13) / inner).max(1);
        res.par_chunks_mut(per * inner)
            .enumerate()
            .for_each(|(ci, chunk)| {
                for (k, dst) in chunk.chunks_mut(inner).enumerate() {
                    row(ci * per + k, dst);
                }
            });
    } else {
        res.chunks_mut(inner)
            .enumerate()
            .for_each(|(ri, dst)| row(ri, dst));
    }
}

/// The output shape of a transpose and the input stride of each of its axes.
fn transposed_view(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<isize>) {
    let st = strides_of(shape);
    let out = perm.iter().map(|&p| shape[p]).collect();
    let strides = perm.iter().map(|&p| st[p] as isize).collect();
    (out, strides)
}

pub(crate) fn transpose<T: Clone + Send + Sync>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let (out, s) = transposed_view(shape, perm);
    strided_gather(x, 0, &out, &s)
}

/// [`transpose`] of f32 data into a reused buffer (attention's transposes are hundreds of KiB, each
/// faulted in afresh otherwise). When the two last axes swap (a `[.., K, N]` matrix turned
/// `[.., N, K]`), 8 × 8 blocks are transposed in registers instead of gathered value by value.
pub(crate) fn transpose_f32(x: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let mut res = crate::cpu::arena::take(n);
    let r = perm.len();
    let swaps_last_two = r >= 2
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
        && perm[..r - 2].iter().enumerate().all(|(i, &p)| p == i);
    if swaps_last_two && n > 0 {
        let (rows, cols) = (shape[r - 2], shape[r - 1]);
        let isa = crate::cpu::simd::isa();
        let matrices = n / (rows * cols);
        let each = |(src, dst): (&[f32], &mut [f32])| {
            crate::cpu::transpose::columns(isa, src, rows, cols, 0..cols, dst)
        };
        if n >= PAR_MIN && matrices > 1 {
            x.par_chunks(rows * cols)
                .zip(res.par_chunks_mut(rows * cols))
                .for_each(each);
        } else {
            x.chunks(rows * cols)
                .zip(res.chunks_mut(rows * cols))
                .for_each(each);
        }
        return res;
    }
    let (out, s) = transposed_view(shape, perm);
    strided_gather_into(x, 0, &out, &s, &mut res);
    res
}

pub(crate) fn expand<T: Clone + Send + Sync>(x: &[T], shape: &[usize], out: &[usize]) -> Vec<T> {
    let s: Vec<isize> = crate::cpu::elementwise::bstrides(shape, out)
        .into_iter()
        .map(|v| v as isize)
        .collect();
    strided_gather(x, 0, out, &s)
}

pub(crate) fn slice<T: Clone + Send + Sync>(
    x: &[T],
    shape: &[usize],
    starts: &[i64],
    steps: &[i64],
    out: &[usize],
) -> Vec<T> {
    let st = strides_of(shape);
    let base: isize = starts
        .iter()
        .zip(&st)
        .map(|(&s, &t)| s as isize * t as isize)
        .sum();
    let s: Vec<isize> = steps
        .iter()
        .zip(&st)
        .map(|(&p, &t)| p as isize * t as isize)
        .collect();
    strided_gather(x, base, out, &s)
}

pub(crate) fn depth_to_space<T: Clone + Send + Sync>(
    x: &[T],
    shape: &[usize],
    b: usize,
    crd: bool,
) -> Vec<T> {
    let (n, c, h, w) = (shape[0], shape[1], shape[2], shape[3]);
    let cc = c / (b * b);
    if crd {
        let v = [n, cc, b, b, h, w];
        transpose(x, &v, &[0, 1, 4, 2, 5, 3])
    } else {
        let v = [n, b, b, cc, h, w];
        transpose(x, &v, &[0, 3, 4, 1, 5, 2])
    }
}

pub(crate) fn concat<T: Clone>(parts: &[(&[T], &[usize])], axis: usize, out: &[usize]) -> Vec<T> {
    let outer: usize = out[..axis].iter().product();
    let inner: usize = out[axis + 1..].iter().product();
    let mut res = Vec::with_capacity(out.iter().product());
    for o in 0..outer {
        for (data, shape) in parts {
            let chunk = shape[axis] * inner;
            res.extend_from_slice(&data[o * chunk..(o + 1) * chunk]);
        }
    }
    res
}

pub(crate) fn split<T: Clone>(x: &[T], shape: &[usize], axis: usize, sizes: &[usize]) -> Vec<Vec<T>> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let total = shape[axis] * inner;
    let mut outs: Vec<Vec<T>> = sizes
        .iter()
        .map(|&s| Vec::with_capacity(outer * s * inner))
        .collect();
    for o in 0..outer {
        let mut start = o * total;
        for (k, &s) in sizes.iter().enumerate() {
            outs[k].extend_from_slice(&x[start..start + s * inner]);
            start += s * inner;
        }
    }
    outs
}

fn fix_index(i: i64, dim: usize) -> Result<usize> {
    let j = if i < 0 { i + dim as i64 } else { i };
    if j < 0 || j >= dim as i64 {
        return Err(EngineError::invalid(format!(
            "index {i} is out of bounds for a dim of size {dim}"
        )));
    }
    Ok(j as usize)
}

pub(crate) fn gather<T: Clone>(x: &[T], shape: &[usize], axis: usize, idx: &[i64]) -> Result<Vec<T>> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let dim = shape[axis];
    let fixed: Vec<usize> = idx.iter().map(|&i| fix_index(i, dim)).collect::<Result<_>>()?;
    let mut res = Vec::with_capacity(outer * fixed.len() * inner);
    for o in 0..outer {
        for &i in &fixed {
            let s = (o * dim + i) * inner;
            res.extend_from_slice(&x[s..s + inner]);
        }
    }
    Ok(res)
}

pub(crate) fn gather_elements<T: Clone>(
    x: &[T],
    shape: &[usize],
    axis: usize,
    idx: &[i64],
    ishape: &[usize],
) -> Result<Vec<T>> {
    let xs = strides_of(shape);
    let is = strides_of(ishape);
    let mut res = Vec::with_capacity(idx.len());
    for (flat, &i) in idx.iter().enumerate() {
        let mut off = 0;
        for d in 0..ishape.len() {
            let c = (flat / is[d]) % ishape[d];
            let c = if d == axis { fix_index(i, shape[axis])? } else { c };
            if c >= shape[d] {
                return Err(EngineError::invalid(
                    "GatherElements index shape exceeds the data shape",
                ));
            }
            off += c * xs[d];
        }
        res.push(x[off].clone());
    }
    Ok(res)
}

pub(crate) fn tile<T: Clone>(x: &[T], shape: &[usize], out: &[usize]) -> Vec<T> {
    let xs = strides_of(shape);
    let os = strides_of(out);
    let n: usize = out.iter().product();
    (0..n)
        .map(|flat| {
            let mut off = 0;
            for d in 0..out.len() {
                off += ((flat / os[d]) % out[d] % shape[d]) * xs[d];
            }
            x[off].clone()
        })
        .collect()
}

pub(crate) fn pad<T: Clone>(
    x: &[T],
    shape: &[usize],
    pads: &[i64],
    mode: PadMode,
    value: T,
    out: &[usize],
) -> Result<Vec<T>> {
    let r = shape.len();
    let xs = strides_of(shape);
    let os = strides_of(out);
    let n: usize = out.iter().product();
    if mode != PadMode::Constant && shape.contains(&0) && n > 0 {
        return Err(EngineError::invalid(
            "Pad: cannot reflect/edge/wrap-pad an empty dim",
        ));
    }
    let mut res = Vec::with_capacity(n);
    'outer: for flat in 0..n {
        let mut off = 0;
        for d in 0..r {
            let o = ((flat / os[d]) % out[d]) as i64;
            let dim = shape[d] as i64;
            let mut i = o - pads[d];
            if i < 0 || i >= dim {
                match mode {
                    PadMode::Constant => {
                        res.push(value.clone());
                        continue 'outer;
                    }
                    PadMode::Edge => i = i.clamp(0, dim - 1),
                    PadMode::Wrap => i = i.rem_euclid(dim),
                    PadMode::Reflect => {
                        if dim == 1 {
                            i = 0;
                        } else {
                            let period = 2 * (dim - 1);
                            i = i.rem_euclid(period);
                            if i >= dim {
                                i = period - i;
                            }
                        }
                    }
                }
            }
            off += i as usize * xs[d];
        }
        res.push(x[off].clone());
    }
    Ok(res)
}

/// Resize parameters for one call.
pub(crate) struct ResizeParams<'a> {
    pub(crate) mode: ResizeMode,
    pub(crate) coord: CoordTransform,
    pub(crate) nearest: NearestMode,
    pub(crate) cubic_a: f32,
    pub(crate) exclude_outside: bool,
    pub(crate) extrapolation: f32,
    pub(crate) scales: &'a [f32],
    pub(crate) roi: &'a [f32],
}

/// Taps for one output coordinate: (input index, weight); `None` = extrapolation value.
fn taps(
    p: &ResizeParams<'_>,
    axis: usize,
    rank: usize,
    x: usize,
    in_len: usize,
    out_len: usize,
) -> Option<Vec<(usize, f32)>> {
    let scale = p.scales[axis];
    let xf = x as f32;
    let inf = in_len as f32;
    let x_ori = match p.coord {
        CoordTransform::HalfPixel => (xf + 0.5) / scale - 0.5,
        CoordTransform::HalfPixelSymmetric => {
            let adj = out_len as f32 / (scale * inf);
            let center = inf / 2.0;
            center * (1.0 - adj) + (xf + 0.5) / scale - 0.5
        }
        // as the ONNX reference: the float output length scale·in, not the rounded one
        CoordTransform::PytorchHalfPixel => {
            if scale * inf == 1.0 {
                -0.5
            } else {
                (xf + 0.5) / scale - 0.5
            }
        }
        CoordTransform::AlignCorners => {
            let ow = scale * inf;
            if ow == 1.0 {
                0.0
            } else {
                xf * (inf - 1.0) / (ow - 1.0)
            }
        }
        CoordTransform::Asymmetric => xf / scale,
        CoordTransform::TfCropAndResize => {
            let (s, e) = (p.roi[axis], p.roi[axis + rank]);
            if out_len > 1 {
                s * (inf - 1.0) + xf * (e - s) * (inf - 1.0) / (out_len as f32 - 1.0)
            } else {
                0.5 * (s + e) * (inf - 1.0)
            }
        }
    };
    if p.coord == CoordTransform::TfCropAndResize && (x_ori < 0.0 || x_ori > inf - 1.0) {
        return None;
    }
    let last = in_len as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last) as usize;
    let fl = x_ori.floor();
    let is_int = x_ori == fl;
    let r = x_ori - fl;
    let f = fl as i64;
    Some(match p.mode {
        ResizeMode::Nearest => {
            let i = if is_int {
                f
            } else {
                let up = match p.nearest {
                    NearestMode::RoundPreferFloor => r > 0.5,
                    NearestMode::RoundPreferCeil => r >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                };
                if up { f + 1 } else { f }
            };
            vec![(clamp(i), 1.0)]
        }
        ResizeMode::Linear => {
            if is_int {
                vec![(clamp(f), 1.0)]
            } else {
                vec![(clamp(f), 1.0 - r), (clamp(f + 1), r)]
            }
        }
        ResizeMode::Cubic => {
            if is_int {
                return Some(vec![(clamp(f), 1.0)]);
            }
            let a = p.cubic_a;
            let c = |t: f32| -> f32 {
                let t = t.abs();
                if t <= 1.0 {
                    ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
                } else if t < 2.0 {
                    ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
                } else {
                    0.0
                }
            };
            let mut v: Vec<(i64, f32)> = (-1..=2).map(|k| (f + k, c(r - k as f32))).collect();
            if p.exclude_outside {
                v.retain(|(i, _)| *i >= 0 && *i <= last);
                let s: f32 = v.iter().map(|(_, w)| w).sum();
                if s != 0.0 {
                    v.iter_mut().for_each(|(_, w)| *w /= s);
                }
            }
            v.into_iter().map(|(i, w)| (clamp(i), w)).collect()
        }
    })
}

/// Separable N-d resize of f32 data.
pub(crate) fn resize_f32(x: &[f32], shape: &[usize], out: &[usize], p: &ResizeParams<'_>) -> Vec<f32> {
    let rank = shape.len();
    let mut cur = x.to_vec();
    let mut cur_shape = shape.to_vec();
    // NaN marks extrapolated values until the end (only used by tf_crop_and_resize)
    let mut any_extra = false;
    // Axes that shrink first, then those that grow; among equals the last axis first, whose
    // values are resized one at a time (the others move whole rows).
    let mut order: Vec<usize> = (0..rank).collect();
    order.sort_by(|&a, &b| {
        let ra = out[a] as f64 / shape[a].max(1) as f64;
        let rb = out[b] as f64 / shape[b].max(1) as f64;
        ra.total_cmp(&rb).then((a + 1 != rank).cmp(&(b + 1 != rank)))
    });
    for axis in order {
        if cur_shape[axis] == out[axis] && p.scales[axis] == 1.0 && p.coord != CoordTransform::TfCropAndResize
        {
            continue;
        }
        let in_len = cur_shape[axis];
        let out_len = out[axis];
        let outer: usize = cur_shape[..axis].iter().product();
        let inner: usize = cur_shape[axis + 1..].iter().product();
        let tap: Vec<Option<Vec<(usize, f32)>>> = (0..out_len)
            .map(|o| taps(p, axis, rank, o, in_len, out_len))
            .collect();
        let mut next = vec![0f32; outer * out_len * inner];
        next.par_chunks_mut(out_len * inner)
            .enumerate()
            .for_each(|(oi, dst)| {
                let src = &cur[oi * in_len * inner..(oi + 1) * in_len * inner];
                if inner == 1 {
                    for (d, t) in dst.iter_mut().zip(&tap) {
                        *d = match t {
                            None => f32::NAN,
                            Some(t) => t.iter().fold(0.0, |acc, &(i, w)| acc + w * src[i]),
                        };
                    }
                    return;
                }
                for (o, t) in tap.iter().enumerate() {
                    let d = &mut dst[o * inner..(o + 1) * inner];
                    match t {
                        None => d.fill(f32::NAN),
                        Some(t) => {
                            d.fill(0.0);
                            for &(i, w) in t {
                                let s = &src[i * inner..(i + 1) * inner];
                                d.iter_mut().zip(s).for_each(|(a, b)| *a += w * b);
                            }
                        }
                    }
                }
            });
        if tap.iter().any(Option::is_none) {
            any_extra = true;
        }
        cur = next;
        cur_shape[axis] = out_len;
    }
    if any_extra {
        cur.iter_mut()
            .filter(|v| v.is_nan())
            .for_each(|v| *v = p.extrapolation);
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f32 transpose (reused buffers full of NaN, register blocks when the last two axes
    /// swap) against the generic gather, on shapes off the 8-row block.
    #[test]
    fn f32_transposes_match_the_generic_gather() {
        let cases: [(&[usize], &[usize]); 6] = [
            (&[197, 64], &[1, 0]),
            (&[2, 6, 19, 21], &[0, 1, 3, 2]),
            (&[1, 197, 6, 64], &[0, 2, 1, 3]),
            (&[3, 8, 16], &[0, 2, 1]),
            (&[4, 5, 6], &[2, 0, 1]),
            (&[7, 1], &[1, 0]),
        ];
        for (shape, perm) in cases {
            let n: usize = shape.iter().product();
            for _ in 0..4 {
                crate::cpu::arena::give(vec![f32::NAN; n.max(1024)]);
            }
            let x: Vec<f32> = (0..n).map(|v| v as f32).collect();
            assert_eq!(
                transpose_f32(&x, shape, perm),
                transpose(&x, shape, perm),
                "{shape:?} {perm:?}"
            );
        }
    }
}

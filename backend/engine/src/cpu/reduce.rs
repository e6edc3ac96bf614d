//! Reductions, arg-reductions, Softmax and TopK over f32/f64 (and integer via f64).

use rayon::prelude::*;

use crate::cpu::fastmath;
use crate::cpu::simd::multiversion;
use crate::ir::ReduceOp;

/// Split a shape around a set of sorted reduced axes into (kept positions, reduced positions) via a
/// permutation so that reduced axes are innermost; returns (outer count, reduced count, perm).
fn perm_for(shape: &[usize], axes: &[usize]) -> (usize, usize, Vec<usize>) {
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let outer: usize = kept.iter().map(|&a| shape[a]).product();
    let red: usize = axes.iter().map(|&a| shape[a]).product();
    let mut perm = kept;
    perm.extend_from_slice(axes);
    (outer, red, perm)
}

/// Reduce f64 values (used for every dtype; f32 inputs go through `reduce_f32`).
pub(crate) fn reduce_f64(x: &[f64], shape: &[usize], axes: &[usize], op: ReduceOp) -> Vec<f64> {
    let (outer, red, perm) = perm_for(shape, axes);
    let t = crate::cpu::movement::transpose(x, shape, &perm);
    (0..outer).map(|o| fold(&t[o * red..(o + 1) * red], op)).collect()
}

fn fold(v: &[f64], op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Sum => v.iter().sum(),
        ReduceOp::Mean => v.iter().sum::<f64>() / v.len() as f64,
        ReduceOp::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::Prod => v.iter().product(),
        ReduceOp::L2 => v.iter().map(|a| a * a).sum::<f64>().sqrt(),
        ReduceOp::L1 => v.iter().map(|a| a.abs()).sum(),
        ReduceOp::SumSquare => v.iter().map(|a| a * a).sum(),
        ReduceOp::LogSum => v.iter().sum::<f64>().ln(),
        ReduceOp::LogSumExp => {
            let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if m.is_infinite() {
                return v.iter().map(|a| a.exp()).sum::<f64>().ln();
            }
            m + v.iter().map(|a| (a - m).exp()).sum::<f64>().ln()
        }
    }
}

/// Sum in f64 over 8 interleaved partial sums (so that it vectorises).
fn sum_f64(v: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&a| f64::from(a)).sum();
    for c in chunks {
        for (s, &a) in acc.iter_mut().zip(c) {
            *s += f64::from(a);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Fast f32 reduce: a contiguous trailing block is reduced directly, others via transpose.
pub(crate) fn reduce_f32(x: &[f32], shape: &[usize], axes: &[usize], op: ReduceOp) -> Vec<f32> {
    let r = shape.len();
    let trailing = !axes.is_empty() && axes.iter().enumerate().all(|(i, &a)| a == r - axes.len() + i);
    let (outer, red, t) = if trailing {
        let red: usize = axes.iter().map(|&a| shape[a]).product();
        let outer: usize = shape.iter().product::<usize>() / red.max(1);
        (outer, red, std::borrow::Cow::Borrowed(x))
    } else {
        let (outer, red, perm) = perm_for(shape, axes);
        (
            outer,
            red,
            std::borrow::Cow::Owned(crate::cpu::movement::transpose(x, shape, &perm)),
        )
    };
    if red == 0 {
        return vec![fold(&[], op) as f32; outer];
    }
    let f = |v: &[f32]| -> f32 {
        match op {
            ReduceOp::Sum => sum_f64(v) as f32,
            ReduceOp::Mean => (sum_f64(v) / v.len() as f64) as f32,
            ReduceOp::Max => v.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            ReduceOp::Min => v.iter().copied().fold(f32::INFINITY, f32::min),
            _ => fold(&v.iter().map(|&a| f64::from(a)).collect::<Vec<_>>(), op) as f32,
        }
    };
    if outer * red >= 1 << 15 {
        t.par_chunks(red).map(f).collect()
    } else {
        t.chunks(red).map(f).collect()
    }
}

/// ArgMax/ArgMin along one axis.
pub(crate) fn arg_reduce(x: &[f64], shape: &[usize], axis: usize, max: bool, last: bool) -> Vec<i64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let d = shape[axis];
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best = 0usize;
            for k in 1..d {
                let v = x[(o * d + k) * inner + i];
                let b = x[(o * d + best) * inner + i];
                let better = if max {
                    v > b || (last && v == b)
                } else {
                    v < b || (last && v == b)
                };
                if better {
                    best = k;
                }
            }
            out.push(best as i64);
        }
    }
    out
}

/// Softmax / LogSoftmax of f32 data over `[outer, d, inner]`; with `nan_rows_to_zero`, zeros for a row
/// whose softmax is NaN (every value −∞, or a NaN or +∞ among them). Such a row is NaN throughout (its
/// sum is NaN: exp keeps NaN, and −∞ − −∞ is NaN), so its first value tells.
pub(crate) fn softmax_f32(
    x: &[f32],
    outer: usize,
    d: usize,
    inner: usize,
    log: bool,
    nan_rows_to_zero: bool,
) -> Vec<f32> {
    // a reused buffer: attention's probabilities are megabytes, faulted in afresh on every run
    // otherwise; every value is written below
    let mut out = crate::cpu::arena::take(x.len());
    if d == 0 || x.is_empty() {
        out.copy_from_slice(x);
        return out;
    }
    let strided = |blk: &mut [f32]| {
        for i in 0..inner {
            let mut m = f32::NEG_INFINITY;
            for k in 0..d {
                m = m.max(blk[k * inner + i]);
            }
            let mut s = 0f32;
            for k in 0..d {
                let e = (blk[k * inner + i] - m).exp();
                if !log {
                    blk[k * inner + i] = e;
                }
                s += e;
            }
            if log {
                let ls = s.ln();
                for k in 0..d {
                    blk[k * inner + i] = blk[k * inner + i] - m - ls;
                }
            } else {
                let inv = 1.0 / s;
                for k in 0..d {
                    blk[k * inner + i] *= inv;
                }
            }
            if nan_rows_to_zero && blk[i].is_nan() {
                (0..d).for_each(|k| blk[k * inner + i] = 0.0);
            }
        }
    };
    let isa = crate::cpu::simd::isa();
    let block = d * inner;
    let run = |(src, dst): (&[f32], &mut [f32])| {
        if inner == 1 {
            softmax_rows(isa, src, dst, d, log);
            if nan_rows_to_zero {
                dst.chunks_exact_mut(d)
                    .filter(|out| out[0].is_nan())
                    .for_each(|out| out.fill(0.0));
            }
        } else {
            dst.copy_from_slice(src);
            dst.chunks_mut(block).for_each(strided);
        }
    };
    if outer * block >= 1 << 14 {
        let per = ((1 << 12) / block).max(1) * block;
        x.par_chunks(per).zip(out.par_chunks_mut(per)).for_each(run);
    } else {
        run((x, &mut out));
    }
    out
}

/// Softmax of contiguous rows of `d` values from `src` into `dst`, with the vectorising exp of
/// `cpu::fastmath`; max and sum kept in 16 partial lanes, each pass a plain loop LLVM vectorises.
#[inline(always)]
fn softmax_rows_body<const FMA: bool>(src: &[f32], dst: &mut [f32], d: usize, log: bool) {
    const LANES: usize = 16;
    for (row, out) in src.chunks_exact(d).zip(dst.chunks_exact_mut(d)) {
        let chunks = row.chunks_exact(LANES);
        let tail_max = chunks
            .remainder()
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let mut mx = [f32::NEG_INFINITY; LANES];
        // compare-and-select: `f32::max`'s NaN rule costs a compare and a blend per vector; a
        // NaN is passed over the same way (and then makes the row NaN through its exp)
        for c in chunks {
            for (a, &v) in mx.iter_mut().zip(c) {
                *a = if v > *a { v } else { *a };
            }
        }
        let m = mx.iter().copied().fold(tail_max, f32::max);
        for (o, &v) in out.iter_mut().zip(row) {
            *o = fastmath::exp::<FMA>(v - m);
        }
        let chunks = out.chunks_exact(LANES);
        let tail_sum: f32 = chunks.remainder().iter().sum();
        let mut acc = [0f32; LANES];
        for c in chunks {
            for (a, &e) in acc.iter_mut().zip(c) {
                *a += e;
            }
        }
        let s = acc.iter().sum::<f32>() + tail_sum;
        if log {
            let shift = m + s.ln();
            out.iter_mut().zip(row).for_each(|(o, &v)| *o = v - shift);
        } else {
            let inv = 1.0 / s;
            out.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

multiversion! {
    fn softmax_rows(src: &[f32], dst: &mut [f32], d: usize, log: bool) = softmax_rows_body;
}

/// TopK along an axis: (values as f64, indices). Ties keep the lower index first.
pub(crate) fn topk(
    x: &[f64],
    shape: &[usize],
    axis: usize,
    k: usize,
    largest: bool,
) -> (Vec<usize>, Vec<i64>) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let d = shape[axis];
    let mut src_idx = vec![0usize; outer * k * inner];
    let mut idx = vec![0i64; outer * k * inner];
    for o in 0..outer {
        for i in 0..inner {
            let mut cand: Vec<usize> = (0..d).collect();
            let val = |c: usize| x[(o * d + c) * inner + i];
            cand.sort_by(|&a, &b| {
                let (va, vb) = (val(a), val(b));
                let ord = if largest {
                    vb.partial_cmp(&va)
                } else {
                    va.partial_cmp(&vb)
                };
                ord.unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
            });
            for (j, &c) in cand.iter().take(k).enumerate() {
                src_idx[(o * k + j) * inner + i] = (o * d + c) * inner + i;
                idx[(o * k + j) * inner + i] = c as i64;
            }
        }
    }
    (src_idx, idx)
}

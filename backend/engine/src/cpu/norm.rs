//! Normalisations (f32): BatchNormalization (inference), InstanceNormalization, LayerNormalization.

use rayon::prelude::*;

use crate::cpu::simd::multiversion;

/// y = (x − mean)/sqrt(var + eps)·scale + bias per channel (axis 1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn batch_norm(
    x: &[f32],
    n: usize,
    c: usize,
    inner: usize,
    scale: &[f32],
    bias: &[f32],
    mean: &[f32],
    var: &[f32],
    eps: f32,
) -> Vec<f32> {
    let mut out = crate::cpu::arena::take(x.len());
    out.par_chunks_mut(inner.max(1))
        .zip(x.par_chunks(inner.max(1)))
        .enumerate()
        .for_each(|(i, (blk, xs))| {
            let ch = i % c;
            let s = scale[ch] / (var[ch] + eps).sqrt();
            let b = bias[ch] - mean[ch] * s;
            blk.iter_mut().zip(xs).for_each(|(v, &x)| *v = x * s + b);
        });
    let _ = n;
    out
}

/// Per-(n, c) normalisation over the spatial block.
pub(crate) fn instance_norm(
    x: &[f32],
    c: usize,
    inner: usize,
    scale: &[f32],
    bias: &[f32],
    eps: f32,
) -> Vec<f32> {
    let mut out = x.to_vec();
    out.par_chunks_mut(inner.max(1)).enumerate().for_each(|(i, blk)| {
        let ch = i % c;
        let n = blk.len() as f64;
        let mean = blk.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = blk.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        blk.iter_mut()
            .for_each(|v| *v = ((f64::from(*v) - mean) * inv) as f32 * scale[ch] + bias[ch]);
    });
    out
}

/// Normalise each row of `d` elements; scale/bias broadcast over the row. Returns (y, mean, inv_std).
pub(crate) fn layer_norm(
    x: &[f32],
    d: usize,
    scale: &[f32],
    bias: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len().checked_div(d).unwrap_or(0);
    let mut out = x.to_vec();
    let mut means = vec![0f32; rows];
    let mut invs = vec![0f32; rows];
    if d == 0 {
        return (out, means, invs);
    }
    // scale and bias as full rows, so that the row loop vectorises
    let full = |v: &[f32]| -> Vec<f32> { (0..d).map(|j| v[j % v.len()]).collect() };
    let s = full(scale);
    let b = bias.map_or_else(|| vec![0.0; d], full);
    let isa = crate::cpu::simd::isa();
    let per = ((1 << 13) / d).max(1);
    out.par_chunks_mut(per * d)
        .zip(means.par_chunks_mut(per).zip(invs.par_chunks_mut(per)))
        .for_each(|(rows, (mo, io))| layer_norm_rows(isa, rows, d, &s, &b, eps, mo, io));
    (out, means, invs)
}

/// Σ f(v) in f64 over 8 interleaved partial sums (so that it vectorises).
#[inline(always)]
fn sum8(v: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&x| f(x)).sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x);
        }
    }
    acc.iter().sum::<f64>() + tail
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn layer_norm_rows_body<const FMA: bool>(
    rows: &mut [f32],
    d: usize,
    s: &[f32],
    b: &[f32],
    eps: f32,
    mo: &mut [f32],
    io: &mut [f32],
) {
    for ((row, mo), io) in rows.chunks_exact_mut(d).zip(mo).zip(io) {
        let mean = sum8(row, f64::from) / d as f64;
        let var = sum8(row, |v| (f64::from(v) - mean).powi(2)) / d as f64;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        let (m32, i32_) = (mean as f32, inv as f32);
        for ((v, &s), &b) in row.iter_mut().zip(s).zip(b) {
            *v = (*v - m32) * i32_ * s + b;
        }
        *mo = m32;
        *io = i32_;
    }
}

multiversion! {
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_rows(rows: &mut [f32], d: usize, s: &[f32], b: &[f32], eps: f32, mo: &mut [f32], io: &mut [f32]) = layer_norm_rows_body;
}

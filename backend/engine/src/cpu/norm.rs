//! Normalisations (f32): BatchNormalization (inference), InstanceNormalization, LayerNormalization.

use rayon::prelude::*;

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
    let mut out = x.to_vec();
    out.par_chunks_mut(inner.max(1)).enumerate().for_each(|(i, blk)| {
        let ch = i % c;
        let s = scale[ch] / (var[ch] + eps).sqrt();
        let b = bias[ch] - mean[ch] * s;
        blk.iter_mut().for_each(|v| *v = *v * s + b);
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
    out.par_chunks_mut(d)
        .zip(means.par_iter_mut().zip(invs.par_iter_mut()))
        .for_each(|(row, (mo, io))| {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            let (m32, i32_) = (mean as f32, inv as f32);
            for (j, v) in row.iter_mut().enumerate() {
                let s = scale[j % scale.len()];
                let b = bias.map_or(0.0, |b| b[j % b.len()]);
                *v = (*v - m32) * i32_ * s + b;
            }
            *mo = m32;
            *io = i32_;
        });
    (out, means, invs)
}

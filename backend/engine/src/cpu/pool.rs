//! N-d max and average pooling over [N, C, spatial…] f32 data.

use rayon::prelude::*;

/// Pooling geometry.
pub(crate) struct PoolGeom<'a> {
    pub(crate) in_sp: &'a [usize],
    pub(crate) out_sp: &'a [usize],
    pub(crate) kernel: &'a [usize],
    pub(crate) strides: &'a [usize],
    pub(crate) pads: &'a [usize],
    pub(crate) dilations: &'a [usize],
}

fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
}

/// 2-D max pooling without indices (the common case): direct loops, no index arithmetic per tap.
fn max_pool_2d(x: &[f32], planes: usize, g: &PoolGeom<'_>) -> Vec<f32> {
    let (ih, iw) = (g.in_sp[0], g.in_sp[1]);
    let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (pt, pl) = (g.pads[0] as isize, g.pads[1] as isize);
    let mut out = vec![0f32; planes * oh * ow];
    out.par_chunks_mut((oh * ow).max(1))
        .enumerate()
        .for_each(|(p, dst)| {
            let src = &x[p * ih * iw..(p + 1) * ih * iw];
            for y in 0..oh {
                for xo in 0..ow {
                    let mut best = f32::NEG_INFINITY;
                    for ky in 0..kh {
                        let r = (y * sh + ky * dh) as isize - pt;
                        if r < 0 || r >= ih as isize {
                            continue;
                        }
                        let row = &src[r as usize * iw..(r as usize + 1) * iw];
                        for kx in 0..kw {
                            let c = (xo * sw + kx * dw) as isize - pl;
                            if c >= 0 && c < iw as isize {
                                best = best.max(row[c as usize]);
                            }
                        }
                    }
                    dst[y * ow + xo] = best;
                }
            }
        });
    out
}

/// Max pooling; also returns flat indices into x (row-major, or column-major spatial when `col`).
pub(crate) fn max_pool(
    x: &[f32],
    planes: usize,
    g: &PoolGeom<'_>,
    col: bool,
    want_indices: bool,
) -> (Vec<f32>, Vec<i64>) {
    if g.in_sp.len() == 2 && !want_indices {
        return (max_pool_2d(x, planes, g), Vec::new());
    }
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let mut out = vec![0f32; planes * out_len];
    let mut idx = vec![0i64; planes * out_len];
    out.par_chunks_mut(out_len.max(1))
        .zip(idx.par_chunks_mut(out_len.max(1)))
        .enumerate()
        .for_each(|(p, (dst, di))| {
            let src = &x[p * in_len..(p + 1) * in_len];
            let mut oc = vec![0; ns];
            let mut kc = vec![0; ns];
            let mut pos = vec![0usize; ns];
            for o in 0..out_len {
                unravel(o, g.out_sp, &mut oc);
                let mut best = f32::NEG_INFINITY;
                let mut best_i = 0usize;
                let mut found = false;
                for k in 0..klen {
                    unravel(k, g.kernel, &mut kc);
                    let mut flat = 0usize;
                    let mut inside = true;
                    for d in 0..ns {
                        let c = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if c < 0 || c >= g.in_sp[d] as isize {
                            inside = false;
                            break;
                        }
                        pos[d] = c as usize;
                        flat = flat * g.in_sp[d] + c as usize;
                    }
                    if inside && (!found || src[flat] > best) {
                        best = src[flat];
                        found = true;
                        best_i = if col {
                            let mut f = 0usize;
                            for d in (0..ns).rev() {
                                f = f * g.in_sp[d] + pos[d];
                            }
                            f
                        } else {
                            flat
                        };
                    }
                }
                dst[o] = best;
                di[o] = (p * in_len + best_i) as i64;
            }
        });
    (out, idx)
}

/// Average pooling.
pub(crate) fn avg_pool(x: &[f32], planes: usize, g: &PoolGeom<'_>, count_include_pad: bool) -> Vec<f32> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let mut out = vec![0f32; planes * out_len];
    out.par_chunks_mut(out_len.max(1))
        .enumerate()
        .for_each(|(p, dst)| {
            let src = &x[p * in_len..(p + 1) * in_len];
            let mut oc = vec![0; ns];
            let mut kc = vec![0; ns];
            for (o, v) in dst.iter_mut().enumerate() {
                unravel(o, g.out_sp, &mut oc);
                let mut sum = 0f32;
                let mut cnt = 0usize;
                let mut cnt_pad = 0usize;
                for k in 0..klen {
                    unravel(k, g.kernel, &mut kc);
                    let mut flat = 0usize;
                    let mut inside = true;
                    let mut in_padded = true;
                    for d in 0..ns {
                        let c = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if c < -(g.pads[d] as isize) || c >= (g.in_sp[d] + g.pads[d + ns]) as isize {
                            in_padded = false;
                        }
                        if c < 0 || c >= g.in_sp[d] as isize {
                            inside = false;
                        } else {
                            flat = flat * g.in_sp[d] + c as usize;
                        }
                    }
                    if in_padded {
                        cnt_pad += 1;
                    }
                    if inside {
                        sum += src[flat];
                        cnt += 1;
                    }
                }
                let div = if count_include_pad { cnt_pad } else { cnt };
                *v = if div == 0 { 0.0 } else { sum / div as f32 };
            }
        });
    out
}

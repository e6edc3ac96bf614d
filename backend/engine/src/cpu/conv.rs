//! Convolution: im2col + GEMM, direct 1×1 GEMM, direct depthwise; ConvTranspose via col2im.

use rayon::prelude::*;

use crate::cpu::gemm::{MatRef, sgemm};
use crate::error::Result;

/// Geometry of an N-d convolution.
pub(crate) struct ConvGeom<'a> {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) m: usize,
    pub(crate) group: usize,
    pub(crate) in_sp: &'a [usize],
    pub(crate) out_sp: &'a [usize],
    pub(crate) kernel: &'a [usize],
    pub(crate) strides: &'a [usize],
    pub(crate) pads: &'a [usize],
    pub(crate) dilations: &'a [usize],
}

/// Unravel a flat spatial index into coordinates.
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
}

/// im2col for one image and one group: rows (c, k…) × columns (output positions).
fn im2col(x: &[f32], g: &ConvGeom<'_>, c0: usize, cg: usize, col: &mut [f32]) {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    if ns == 2 {
        let (ih_n, iw_n) = (g.in_sp[0], g.in_sp[1]);
        let (oh_n, ow_n) = (g.out_sp[0], g.out_sp[1]);
        let (kh_n, kw_n) = (g.kernel[0], g.kernel[1]);
        let (sh, sw) = (g.strides[0], g.strides[1]);
        let (dh, dw) = (g.dilations[0], g.dilations[1]);
        let (pt, pl) = (g.pads[0] as isize, g.pads[1] as isize);
        col.par_chunks_mut(out_len).enumerate().for_each(|(row, dst)| {
            let ci = row / klen;
            let kk = row % klen;
            let (kh, kw) = (kk / kw_n, kk % kw_n);
            let _ = kh_n;
            let src = &x[(c0 + ci) * in_len..(c0 + ci + 1) * in_len];
            for oh in 0..oh_n {
                let ih = (oh * sh + kh * dh) as isize - pt;
                let d = &mut dst[oh * ow_n..(oh + 1) * ow_n];
                if ih < 0 || ih >= ih_n as isize {
                    d.fill(0.0);
                    continue;
                }
                let srow = &src[ih as usize * iw_n..(ih as usize + 1) * iw_n];
                let base = (kw * dw) as isize - pl;
                if sw == 1 {
                    for (ow, v) in d.iter_mut().enumerate() {
                        let iw = base + ow as isize;
                        *v = if iw >= 0 && (iw as usize) < iw_n {
                            srow[iw as usize]
                        } else {
                            0.0
                        };
                    }
                } else {
                    for (ow, v) in d.iter_mut().enumerate() {
                        let iw = base + (ow * sw) as isize;
                        *v = if iw >= 0 && (iw as usize) < iw_n {
                            srow[iw as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
        });
        return;
    }
    col.par_chunks_mut(out_len).enumerate().for_each(|(row, dst)| {
        let ci = row / klen;
        let mut kc = vec![0; ns];
        unravel(row % klen, g.kernel, &mut kc);
        let mut oc = vec![0; ns];
        let src = &x[(c0 + ci) * in_len..(c0 + ci + 1) * in_len];
        for (o, v) in dst.iter_mut().enumerate() {
            unravel(o, g.out_sp, &mut oc);
            let mut idx = 0usize;
            let mut inside = true;
            for d in 0..ns {
                let p = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                if p < 0 || p >= g.in_sp[d] as isize {
                    inside = false;
                    break;
                }
                idx = idx * g.in_sp[d] + p as usize;
            }
            *v = if inside { src[idx] } else { 0.0 };
        }
    });
    let _ = cg;
}

/// Depthwise 2-D convolution (group == C == M, one filter per channel).
fn depthwise2d(x: &[f32], w: &[f32], bias: Option<&[f32]>, g: &ConvGeom<'_>, out: &mut [f32]) {
    let (ih_n, iw_n) = (g.in_sp[0], g.in_sp[1]);
    let (oh_n, ow_n) = (g.out_sp[0], g.out_sp[1]);
    let (kh_n, kw_n) = (g.kernel[0], g.kernel[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (pt, pl) = (g.pads[0] as isize, g.pads[1] as isize);
    let plane_in = ih_n * iw_n;
    let plane_out = oh_n * ow_n;
    out.par_chunks_mut(plane_out).enumerate().for_each(|(nc, dst)| {
        let c = nc % g.c;
        let src = &x[nc * plane_in..(nc + 1) * plane_in];
        let wk = &w[c * kh_n * kw_n..(c + 1) * kh_n * kw_n];
        let b = bias.map_or(0.0, |b| b[c]);
        dst.fill(b);
        // valid ow range for each kw: iw = ow*sw + kw*dw - pl in [0, iw_n)
        for oh in 0..oh_n {
            let drow = &mut dst[oh * ow_n..(oh + 1) * ow_n];
            for kh in 0..kh_n {
                let ih = (oh * sh + kh * dh) as isize - pt;
                if ih < 0 || ih >= ih_n as isize {
                    continue;
                }
                let srow = &src[ih as usize * iw_n..(ih as usize + 1) * iw_n];
                for kw in 0..kw_n {
                    let wv = wk[kh * kw_n + kw];
                    let off = (kw * dw) as isize - pl;
                    // ow_lo: first ow with off + ow*sw >= 0
                    let ow_lo = if off >= 0 {
                        0
                    } else {
                        ((-off) as usize).div_ceil(sw)
                    };
                    // ow_hi: first ow with off + ow*sw >= iw_n
                    let lim = iw_n as isize - off;
                    let ow_hi = if lim <= 0 {
                        0
                    } else {
                        (lim as usize).div_ceil(sw).min(ow_n)
                    };
                    if sw == 1 {
                        let s0 = (off + ow_lo as isize) as usize;
                        for (d, s) in drow[ow_lo..ow_hi.max(ow_lo)].iter_mut().zip(&srow[s0..]) {
                            *d += wv * s;
                        }
                    } else {
                        for ow in ow_lo..ow_hi {
                            drow[ow] += wv * srow[(off + (ow * sw) as isize) as usize];
                        }
                    }
                }
            }
        }
    });
}

/// Conv of f32 data; `out` has N×M×out_len elements.
pub(crate) fn conv_f32(x: &[f32], w: &[f32], bias: Option<&[f32]>, g: &ConvGeom<'_>) -> Result<Vec<f32>> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let mut out = vec![0f32; g.n * g.m * out_len];
    if out.is_empty() {
        return Ok(out);
    }
    if g.group == g.c && g.group == g.m && g.in_sp.len() == 2 && g.group > 1 {
        depthwise2d(x, w, bias, g, &mut out);
        return Ok(out);
    }
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let kdim = cg * klen;
    let pointwise =
        klen == 1 && g.strides.iter().all(|&s| s == 1) && g.pads.iter().all(|&p| p == 0) && in_len == out_len;
    let parallel_images = g.n >= rayon::current_num_threads() && g.n > 1;
    let run_image = |ni: usize, dst: &mut [f32], parallel: bool| -> Result<()> {
        let ximg = &x[ni * g.c * in_len..(ni + 1) * g.c * in_len];
        let mut col = if pointwise {
            Vec::new()
        } else {
            vec![0f32; kdim * out_len]
        };
        for gi in 0..g.group {
            let dst_g = &mut dst[gi * mg * out_len..(gi + 1) * mg * out_len];
            let wmat = MatRef {
                data: w,
                off: gi * mg * kdim,
                rs: kdim,
                cs: 1,
            };
            if pointwise {
                let xmat = MatRef {
                    data: ximg,
                    off: gi * cg * in_len,
                    rs: in_len,
                    cs: 1,
                };
                sgemm(
                    mg, out_len, kdim, wmat, xmat, dst_g, out_len, 1.0, false, parallel,
                )?;
            } else {
                im2col(ximg, g, gi * cg, cg, &mut col);
                let cmat = MatRef {
                    data: &col,
                    off: 0,
                    rs: out_len,
                    cs: 1,
                };
                sgemm(
                    mg, out_len, kdim, wmat, cmat, dst_g, out_len, 1.0, false, parallel,
                )?;
            }
        }
        if let Some(b) = bias {
            for (mi, row) in dst.chunks_mut(out_len).enumerate() {
                let bv = b[mi];
                row.iter_mut().for_each(|v| *v += bv);
            }
        }
        Ok(())
    };
    if parallel_images {
        out.par_chunks_mut(g.m * out_len)
            .enumerate()
            .try_for_each(|(ni, dst)| run_image(ni, dst, false))?;
    } else {
        for (ni, dst) in out.chunks_mut(g.m * out_len).enumerate() {
            run_image(ni, dst, true)?;
        }
    }
    Ok(out)
}

/// ConvTranspose of f32 data. `g.c` is input channels, `g.m` output channels; w is [C, M/group, k…].
pub(crate) fn conv_transpose_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
) -> Result<Vec<f32>> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let mut out = vec![0f32; g.n * g.m * out_len];
    let rows = mg * klen;
    let mut cols = vec![0f32; rows * in_len];
    let mut ic = vec![0; ns];
    let mut kc = vec![0; ns];
    for ni in 0..g.n {
        for gi in 0..g.group {
            // cols[(m, k…), in_pos] = Σ_c w[c, m, k…] · x[c, in_pos]
            let wmat = MatRef {
                data: w,
                off: gi * cg * rows,
                rs: 1,
                cs: rows,
            };
            let xmat = MatRef {
                data: x,
                off: (ni * g.c + gi * cg) * in_len,
                rs: in_len,
                cs: 1,
            };
            sgemm(rows, in_len, cg, wmat, xmat, &mut cols, in_len, 1.0, false, true)?;
            let dst = &mut out[(ni * g.m + gi * mg) * out_len..(ni * g.m + (gi + 1) * mg) * out_len];
            for r in 0..rows {
                let mi = r / klen;
                unravel(r % klen, g.kernel, &mut kc);
                let plane = &mut dst[mi * out_len..(mi + 1) * out_len];
                for p in 0..in_len {
                    unravel(p, g.in_sp, &mut ic);
                    let mut idx = 0usize;
                    let mut inside = true;
                    for d in 0..ns {
                        let o = (ic[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if o < 0 || o >= g.out_sp[d] as isize {
                            inside = false;
                            break;
                        }
                        idx = idx * g.out_sp[d] + o as usize;
                    }
                    if inside {
                        plane[idx] += cols[r * in_len + p];
                    }
                }
            }
        }
        if let Some(b) = bias {
            let img = &mut out[ni * g.m * out_len..(ni + 1) * g.m * out_len];
            for (mi, row) in img.chunks_mut(out_len).enumerate() {
                let bv = b[mi];
                row.iter_mut().for_each(|v| *v += bv);
            }
        }
    }
    Ok(out)
}

//! Depthwise 2-D convolution (group == C == M): a direct kernel, vectorised over output columns,
//! with the bias and the epilogue fused.
//!
//! Each input plane is first copied into a zero-padded scratch plane split into `stride` column
//! phases (column `j` of phase `q` is padded column `j·stride + q`), so that for every kernel tap
//! the inputs of consecutive outputs are consecutive: no bounds checks, no gathers, one vector of
//! 16 outputs accumulated in registers over all taps.

use rayon::prelude::*;

use crate::cpu::conv::{ConvGeom, strided_copy, valid_range};
use crate::cpu::epilogue::Epi;
use crate::cpu::simd::{Isa, fmadd, multiversion};

/// Outputs computed together (one AVX-512 vector, two AVX2 vectors).
const V: usize = 16;

/// Multiply-adds per parallel task, at least.
const TASK_MACS: usize = 1 << 15;

/// Plane geometry, with the scratch layout.
#[derive(Clone, Copy)]
struct Plane {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    /// padded rows kept
    rows: usize,
    /// values per padded row of one phase
    pw: usize,
}

impl Plane {
    fn new(g: &ConvGeom<'_>) -> Plane {
        let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
        let (kh, kw) = (g.kernel[0], g.kernel[1]);
        let (sh, sw) = (g.strides[0], g.strides[1]);
        let (dh, dw) = (g.dilations[0], g.dilations[1]);
        Plane {
            ih: g.in_sp[0],
            iw: g.in_sp[1],
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pt: g.pads[0],
            pl: g.pads[1],
            rows: (oh - 1) * sh + (kh - 1) * dh + 1,
            pw: ow + (kw - 1) * dw / sw + V,
        }
    }
}

/// `out` (N×C planes of oh×ow) = depthwise conv of `x` (N×C planes of ih×iw) with `w` (C×kh×kw),
/// plus `bias`, then `epi` (rows are planes).
pub(crate) fn depthwise2d(
    isa: Isa,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    out: &mut [f32],
) {
    let p = Plane::new(g);
    let plane_in = p.ih * p.iw;
    let plane_out = p.oh * p.ow;
    let klen = p.kh * p.kw;
    if plane_out == 0 {
        return;
    }
    let min_len = (TASK_MACS / (plane_out * klen).max(1)).max(1);
    // offset of each tap (ky, kx) in the scratch plane from the first value an output reads
    let taps: Vec<usize> = (0..klen)
        .map(|t| {
            let (ky, kx) = (t / p.kw, t % p.kw);
            let off = kx * p.dw;
            (ky * p.dh * p.sw + off % p.sw) * p.pw + off / p.sw
        })
        .collect();
    out.par_chunks_mut(plane_out)
        .enumerate()
        .with_min_len(min_len)
        .for_each_init(Vec::new, |scratch, (nc, dst)| {
            let c = nc % g.c;
            let b = bias.map_or(0.0, |b| b[c]);
            plane(
                isa,
                &x[nc * plane_in..(nc + 1) * plane_in],
                &w[c * klen..(c + 1) * klen],
                b,
                p,
                &taps,
                scratch,
                dst,
            );
            epi.apply(nc, 0, dst);
        });
}

#[inline(always)]
fn plane_body<const FMA: bool>(
    src: &[f32],
    wk: &[f32],
    b: f32,
    p: Plane,
    taps: &[usize],
    scratch: &mut Vec<f32>,
    dst: &mut [f32],
) {
    let (sw, pw) = (p.sw, p.pw);
    let size = p.rows * sw * pw;
    if scratch.len() != size {
        // The padding is written once per geometry; only the valid part changes between planes.
        scratch.clear();
        scratch.resize(size, 0.0);
    }
    for r in 0..p.rows {
        let Some(iy) = r.checked_sub(p.pt).filter(|&iy| iy < p.ih) else {
            continue;
        };
        let srow = &src[iy * p.iw..(iy + 1) * p.iw];
        for q in 0..sw {
            let (lo, hi) = valid_range(sw, q, p.pl, p.iw, pw);
            let drow = &mut scratch[(r * sw + q) * pw..(r * sw + q + 1) * pw];
            strided_copy(&mut drow[lo..hi], srow, sw, (lo * sw + q).saturating_sub(p.pl));
        }
    }
    for oy in 0..p.oh {
        let drow = &mut dst[oy * p.ow..(oy + 1) * p.ow];
        let row0 = oy * p.sh * sw * pw;
        for ox0 in (0..p.ow).step_by(V) {
            let mut acc = [b; V];
            for (&off, &wv) in taps.iter().zip(wk) {
                let base = row0 + ox0 + off;
                let Some(s) = scratch.get(base..base + V) else {
                    continue;
                };
                for (a, &s) in acc.iter_mut().zip(s) {
                    *a = fmadd::<FMA>(s, wv, *a);
                }
            }
            let n = V.min(p.ow - ox0);
            drow[ox0..ox0 + n].copy_from_slice(&acc[..n]);
        }
    }
}

multiversion! {
    #[allow(clippy::too_many_arguments)]
    fn plane(src: &[f32], wk: &[f32], b: f32, p: Plane, taps: &[usize], scratch: &mut Vec<f32>, dst: &mut [f32]) = plane_body;
}

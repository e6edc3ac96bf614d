//! Depthwise 2-D convolution (group == C == M): a direct kernel, vectorised over output columns,
//! with the bias and the epilogue fused; small planes on x86-64 with channels in lanes instead
//! ([`lanes`]), larger ones with AVX-512 read straight from the input ([`direct`]).
//!
//! Each input plane is first copied into a zero-padded, stride-phase-split scratch plane
//! ([`PadPlane`]), so that for every kernel tap the inputs of consecutive outputs are consecutive:
//! no bounds checks, no gathers, one vector of 16 outputs accumulated in registers over all taps.

use rayon::prelude::*;

use crate::cpu::conv::ConvGeom;
use crate::cpu::epilogue::Epi;
use crate::cpu::padded::{PadPlane, Window};
use crate::cpu::simd::{Isa, fmadd, multiversion};

#[cfg(target_arch = "x86_64")]
mod direct;
mod lanes;

pub(crate) use lanes::filter_lanes;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Outputs computed together (one AVX-512 vector, two AVX2 vectors).
pub(crate) const V: usize = 16;

/// A depthwise convolution's filters (C×kh×kw), and the same with channels in lanes when they
/// were made at plan time ([`filter_lanes`]).
#[derive(Clone, Copy)]
pub(crate) struct Filters<'a> {
    pub(crate) values: &'a [f32],
    pub(crate) lanes: Option<&'a [f32]>,
}

/// Multiply-adds per parallel task, at least.
const TASK_MACS: usize = 1 << 15;

/// `out` (N×C planes of oh×ow) = depthwise conv of `x` (N×C planes of ih×iw) with `w` (C×kh×kw),
/// plus `bias`, then `epi` (rows are planes).
pub(crate) fn depthwise2d(
    isa: Isa,
    x: &[f32],
    filters: Filters<'_>,
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    out: &mut [f32],
) {
    if lanes::applies(isa, g) {
        lanes::depthwise_lanes(isa, x, filters, bias, g, epi, out);
        return;
    }
    let w = filters.values;
    let win = Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads);
    let plane_in = win.ih * win.iw;
    let plane_out = win.oh * win.ow;
    let klen = win.kh * win.kw;
    if plane_out == 0 {
        return;
    }
    let min_len = (TASK_MACS / (plane_out * klen).max(1)).max(1);
    #[cfg(target_arch = "x86_64")]
    if direct::applies(isa, g) {
        let zeros = vec![0f32; win.iw];
        out.par_chunks_mut(plane_out)
            .enumerate()
            .with_min_len(min_len)
            .for_each(|(nc, dst)| {
                let c = nc % g.c;
                let src = &x[nc * plane_in..(nc + 1) * plane_in];
                let init = bias.map_or(0.0, |b| b[c]);
                direct::plane(
                    &win,
                    src,
                    &zeros,
                    &w[c * klen..(c + 1) * klen],
                    init,
                    epi,
                    nc,
                    dst,
                );
            });
        return;
    }
    let pp = PadPlane::new(&win, V);
    let taps = tap_offsets(&pp, &win);
    out.par_chunks_mut(plane_out)
        .enumerate()
        .with_min_len(min_len)
        .for_each_init(Vec::new, |scratch, (nc, dst)| {
            let c = nc % g.c;
            let fresh = scratch.len() != pp.len();
            if fresh {
                scratch.resize(pp.len(), 0.0);
            }
            let k = Kernel {
                win,
                pp,
                taps: &taps,
                w: &w[c * klen..(c + 1) * klen],
                init: bias.map_or(0.0, |b| b[c]),
            };
            plane(
                isa,
                &k,
                &x[nc * plane_in..(nc + 1) * plane_in],
                fresh,
                scratch,
                dst,
            );
            epi.apply(nc, 0, dst);
        });
}

/// Offset of each tap (ky, kx) in a padded plane from the first value its output reads.
pub(crate) fn tap_offsets(pp: &PadPlane, win: &Window) -> Vec<usize> {
    (0..win.kh * win.kw)
        .map(|t| pp.tap_offset(t / win.kw, t % win.kw))
        .collect()
}

/// One plane's window operation: geometry, tap offsets and weights, start value.
struct Kernel<'a> {
    win: Window,
    pp: PadPlane,
    taps: &'a [usize],
    w: &'a [f32],
    init: f32,
}

/// One plane: the padded copy, then the outputs (AVX-512/AVX2 kernels of `x86.rs` on x86-64,
/// four output rows at a time; one row at a time, auto-vectorised, elsewhere).
fn plane(isa: Isa, k: &Kernel<'_>, src: &[f32], fresh: bool, scratch: &mut [f32], dst: &mut [f32]) {
    fill(isa, &k.pp, src, fresh, scratch);
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        x86::plane(isa, k, scratch, dst);
        return;
    }
    plane_rows(isa, k, scratch, dst);
}

#[inline(always)]
fn fill_body<const FMA: bool>(pp: &PadPlane, src: &[f32], fresh: bool, scratch: &mut [f32]) {
    pp.fill(src, 0.0, fresh, scratch);
}

multiversion! {
    fn fill(pp: &PadPlane, src: &[f32], fresh: bool, scratch: &mut [f32]) = fill_body;
}

#[inline(always)]
fn plane_rows_body<const FMA: bool>(k: &Kernel<'_>, scratch: &[f32], dst: &mut [f32]) {
    let ow = k.win.ow;
    for oy in 0..k.win.oh {
        let drow = &mut dst[oy * ow..(oy + 1) * ow];
        let row0 = k.pp.row_offset(oy);
        for ox0 in (0..ow).step_by(V) {
            let mut acc = [k.init; V];
            for (&off, &wv) in k.taps.iter().zip(k.w) {
                let base = row0 + ox0 + off;
                let Some(s) = scratch.get(base..base + V) else {
                    continue;
                };
                for (a, &s) in acc.iter_mut().zip(s) {
                    *a = fmadd::<FMA>(s, wv, *a);
                }
            }
            let n = V.min(ow - ox0);
            drow[ox0..ox0 + n].copy_from_slice(&acc[..n]);
        }
    }
}

multiversion! {
    fn plane_rows(k: &Kernel<'_>, scratch: &[f32], dst: &mut [f32]) = plane_rows_body;
}

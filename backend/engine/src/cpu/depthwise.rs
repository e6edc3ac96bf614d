//! Depthwise 2-D convolution (group == C == M): a direct kernel, vectorised over output columns,
//! with the bias and the epilogue fused.
//!
//! Each input plane is first copied into a zero-padded, stride-phase-split scratch plane
//! ([`PadPlane`]), so that for every kernel tap the inputs of consecutive outputs are consecutive:
//! no bounds checks, no gathers, one vector of 16 outputs accumulated in registers over all taps.

use rayon::prelude::*;

use crate::cpu::conv::ConvGeom;
use crate::cpu::epilogue::Epi;
use crate::cpu::padded::{PadPlane, Window};
use crate::cpu::simd::{Isa, fmadd, multiversion};

/// Outputs computed together (one AVX-512 vector, two AVX2 vectors).
pub(crate) const V: usize = 16;

/// Multiply-adds per parallel task, at least.
const TASK_MACS: usize = 1 << 15;

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
    let win = Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads);
    let plane_in = win.ih * win.iw;
    let plane_out = win.oh * win.ow;
    let klen = win.kh * win.kw;
    if plane_out == 0 {
        return;
    }
    let pp = PadPlane::new(&win, V);
    let taps = tap_offsets(&pp, &win);
    let min_len = (TASK_MACS / (plane_out * klen).max(1)).max(1);
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

#[inline(always)]
fn plane_body<const FMA: bool>(
    k: &Kernel<'_>,
    src: &[f32],
    fresh: bool,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    k.pp.fill(src, 0.0, fresh, scratch);
    // four output rows at a time: four independent accumulator chains per tap
    let mut oy = 0;
    while oy + 4 <= k.win.oh {
        rows::<4, FMA>(k, scratch, oy, dst);
        oy += 4;
    }
    while oy < k.win.oh {
        rows::<1, FMA>(k, scratch, oy, dst);
        oy += 1;
    }
}

/// Output rows `oy..oy + R`, 16 columns at a time.
#[inline(always)]
fn rows<const R: usize, const FMA: bool>(k: &Kernel<'_>, scratch: &[f32], oy: usize, dst: &mut [f32]) {
    let ow = k.win.ow;
    let max_tap = k.taps.iter().copied().max().unwrap_or(0);
    let span = max_tap + V;
    for ox0 in (0..ow).step_by(V) {
        // the values each row's outputs read, checked once
        let wins: [&[f32]; R] = std::array::from_fn(|r| {
            let base = k.pp.row_offset(oy + r) + ox0;
            scratch.get(base..base + span).unwrap_or(&[])
        });
        if wins.iter().any(|w| w.len() < span) {
            continue;
        }
        let mut acc = [[k.init; V]; R];
        for (&off, &wv) in k.taps.iter().zip(k.w) {
            let off = off.min(max_tap);
            for (a, win) in acc.iter_mut().zip(&wins) {
                for (a, &s) in a.iter_mut().zip(&win[off..off + V]) {
                    *a = fmadd::<FMA>(s, wv, *a);
                }
            }
        }
        let n = V.min(ow - ox0);
        for (r, a) in acc.iter().enumerate() {
            let o = (oy + r) * ow + ox0;
            dst[o..o + n].copy_from_slice(&a[..n]);
        }
    }
}

multiversion! {
    fn plane(k: &Kernel<'_>, src: &[f32], fresh: bool, scratch: &mut [f32], dst: &mut [f32]) = plane_body;
}

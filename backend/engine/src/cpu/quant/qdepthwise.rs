//! Depthwise integer convolutions (one filter per channel: `group == c == m`) on 8-bit codes, computed
//! directly: each output plane is its channel's centred input times the filter's centred taps, tap by
//! tap over the output rows, with no im2col matrix. Through the grouped product each of hundreds of
//! channels was a product of one row, whose packing cost far more than its few multiply-adds.

use rayon::prelude::*;

use super::igemm::{ConvGeom, valid_columns};
use super::qgemm::{Codes, value};
use crate::cpu::simd::{self, multiversion};

/// Multiply-adds per parallel task, at least.
const TASK_MACS: usize = 1 << 15;

/// Whether `g` is a 2-D depthwise convolution this module computes.
pub(crate) fn applies(g: &ConvGeom) -> bool {
    g.group > 1 && g.group == g.c && g.m == g.c && g.input.len() == 2
}

/// `y[n, c, oh, ow]` in i32 of the codes `x [n, c, h, w]` with zero point `x_zp` and the filters
/// `w [c, 1, kh, kw]` with zero points `w_zp` (one, or one per channel). Padding reads the zero
/// point, so it adds nothing once centred.
pub(crate) fn depthwise_q(x: Codes<'_>, x_zp: i32, w: Codes<'_>, w_zp: &[i32], g: &ConvGeom) -> Vec<i32> {
    let in_size: usize = g.input.iter().product();
    let out_size: usize = g.output.iter().product();
    let k_size: usize = g.kernel.iter().product();
    let mut y = vec![0i32; g.n * g.m * out_size];
    let min_len = (TASK_MACS / (out_size * k_size).max(1)).max(1);
    let isa = simd::isa();
    y.par_chunks_mut(out_size.max(1))
        .enumerate()
        .with_min_len(min_len)
        .for_each_init(Vec::new, |centred, (plane, acc)| {
            let ch = plane % g.c;
            let x = x.slice(plane * in_size..(plane + 1) * in_size);
            let w = w.slice(ch * k_size..(ch + 1) * k_size);
            let wz = w_zp[if w_zp.len() == 1 { 0 } else { ch }];
            one_plane(isa, x, x_zp, w, wz, g, centred, acc);
        });
    y
}

/// One channel's output plane `acc` from its input plane `x` and its filter `w`; `centred` is the
/// task's scratch for the input's centred values.
#[inline(always)]
fn one_plane_body<const FMA: bool>(
    x: Codes<'_>,
    x_zp: i32,
    w: Codes<'_>,
    w_zp: i32,
    g: &ConvGeom,
    centred: &mut Vec<i32>,
    acc: &mut [i32],
) {
    let (ih, iw) = (g.input[0], g.input[1]);
    let (ow, kw, sw) = (g.output[1], g.kernel[1], g.strides[1]);
    // Each input row split into the phases of the horizontal stride (phase q holds columns
    // q, q + sw, …, `pw` values a phase), so that every tap reads consecutive values: column
    // `ox·sw + dx` is value `ox + ⌊dx / sw⌋` of phase `dx mod sw`.
    let pw = iw.div_ceil(sw);
    centred.clear();
    centred.resize(ih * sw * pw, 0);
    let signed = x.signed();
    for (row, phases) in x
        .bits()
        .chunks_exact(iw.max(1))
        .zip(centred.chunks_exact_mut(sw * pw))
    {
        if sw == 1 {
            for (d, &b) in phases.iter_mut().zip(row) {
                *d = value(b, signed) - x_zp;
            }
            continue;
        }
        for (q, phase) in phases.chunks_exact_mut(pw).enumerate() {
            for (d, &b) in phase.iter_mut().zip(row.iter().skip(q).step_by(sw)) {
                *d = value(b, signed) - x_zp;
            }
        }
    }
    for (t, &code) in w.bits().iter().enumerate() {
        let tap = value(code, w.signed()) - w_zp;
        if tap == 0 {
            continue;
        }
        let (ky, kx) = (t / kw, t % kw);
        let dy = (ky * g.dilations[0]) as isize - g.pad_begin[0] as isize;
        let dx = (kx * g.dilations[1]) as isize - g.pad_begin[1] as isize;
        let cols = valid_columns(ow, sw, dx, iw);
        if cols.is_empty() {
            continue;
        }
        let (q, shift) = (dx.rem_euclid(sw as isize) as usize, dx.div_euclid(sw as isize));
        // the first valid column reads input column ≥ 0, so its phase index is ≥ 0
        let first = (cols.start as isize + shift) as usize;
        for (oy, row) in acc.chunks_exact_mut(ow.max(1)).enumerate() {
            let iy = (oy * g.strides[0]) as isize + dy;
            if iy < 0 || iy >= ih as isize {
                continue;
            }
            let phase = &centred[(iy as usize * sw + q) * pw..][..pw];
            let src = &phase[first..first + cols.len()];
            for (a, &v) in row[cols.clone()].iter_mut().zip(src) {
                *a += v * tap;
            }
        }
    }
}

multiversion! {
    /// [`one_plane_body`] compiled for AVX2 and AVX-512 too: the baseline target has no 32-bit
    /// vector multiply (SSE4.1's `pmulld`), and each product took a sequence of shuffles.
    #[allow(clippy::too_many_arguments)]
    fn one_plane(x: Codes<'_>, x_zp: i32, w: Codes<'_>, w_zp: i32, g: &ConvGeom, centred: &mut Vec<i32>, acc: &mut [i32]) = one_plane_body;
}

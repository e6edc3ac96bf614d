//! Depthwise integer convolutions (one filter per channel: `group == c == m`) on 8-bit codes, computed
//! directly: each output plane is its channel's centred input times the filter's centred taps, tap by
//! tap over the output rows, with no im2col matrix. Through the grouped product each of hundreds of
//! channels was a product of one row, whose packing cost far more than its few multiply-adds.

use rayon::prelude::*;

use super::igemm::ConvGeom;
use super::qgemm::Codes;

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
    let (ih, iw) = (g.input[0], g.input[1]);
    let (oh, ow) = (g.output[0], g.output[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (in_size, out_size, k_size) = (ih * iw, oh * ow, kh * kw);
    let value = |signed: bool, b: u8| if signed { i32::from(b as i8) } else { i32::from(b) };
    let mut y = vec![0i32; g.n * g.m * out_size];
    let min_len = (TASK_MACS / (out_size * k_size).max(1)).max(1);
    y.par_chunks_mut(out_size.max(1))
        .enumerate()
        .with_min_len(min_len)
        .for_each(|(plane, acc)| {
            let ch = plane % g.c;
            let xs: Vec<i32> = x.bits()[plane * in_size..(plane + 1) * in_size]
                .iter()
                .map(|&b| value(x.signed(), b) - x_zp)
                .collect();
            let wz = w_zp[if w_zp.len() == 1 { 0 } else { ch }];
            for ky in 0..kh {
                for kx in 0..kw {
                    let tap = value(w.signed(), w.bits()[ch * k_size + ky * kw + kx]) - wz;
                    if tap == 0 {
                        continue;
                    }
                    let dy = (ky * g.dilations[0]) as isize - g.pad_begin[0] as isize;
                    let dx = (kx * g.dilations[1]) as isize - g.pad_begin[1] as isize;
                    let cols = valid(ow, g.strides[1], dx, iw);
                    for (oy, row) in acc.chunks_exact_mut(ow.max(1)).enumerate() {
                        let iy = (oy * g.strides[0]) as isize + dy;
                        if iy < 0 || iy >= ih as isize {
                            continue;
                        }
                        let src = &xs[iy as usize * iw..(iy as usize + 1) * iw];
                        accumulate(&mut row[cols.clone()], src, cols.start, g.strides[1], dx, tap);
                    }
                }
            }
        });
    y
}

/// `row[j] += src[(first + j)·stride + offset] · tap` for each j.
fn accumulate(row: &mut [i32], src: &[i32], first: usize, stride: usize, offset: isize, tap: i32) {
    let start = ((first * stride) as isize + offset) as usize;
    let len = row.len();
    if stride == 1 {
        for (a, &v) in row.iter_mut().zip(&src[start..start + len]) {
            *a += v * tap;
        }
    } else {
        for (j, a) in row.iter_mut().enumerate() {
            *a += src[start + j * stride] * tap;
        }
    }
}

/// The output columns `ox` whose input column `ox·stride + offset` lies in `0..width`.
fn valid(out: usize, stride: usize, offset: isize, width: usize) -> std::ops::Range<usize> {
    let s = stride as isize;
    let lo = if offset < 0 { (-offset + s - 1) / s } else { 0 };
    let last = width as isize - 1 - offset;
    let hi = if last < 0 {
        0
    } else {
        (last / s + 1).min(out as isize)
    };
    let lo = lo.min(hi);
    lo as usize..hi as usize
}

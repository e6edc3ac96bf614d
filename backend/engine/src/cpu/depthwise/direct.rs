//! The depthwise convolution read straight from its input planes with AVX-512, for the large planes
//! of the early stages of MobileNet, EfficientNet and SSDlite (strides 1 and 2, no dilation).
//!
//! The column-vectorised kernel of [`super::depthwise2d`] first copies each plane into a padded,
//! stride-phase-split scratch plane. On planes of 56×56 and more that copy cost more than the
//! kernel: it reads a plane the previous layer had already pushed out of L2, writes it, and the
//! kernel reads it again. Here nothing is copied:
//! - a load's lanes whose column lies outside the row are masked off (AVX-512 masked loads never
//!   touch them), which gives the zero padding; rows outside the plane are read from a zero row;
//! - with stride 2, the 16 inputs of 16 outputs are the even lanes of two consecutive loads,
//!   gathered by one permute.
//!
//! Four output rows of 32 columns are computed together (eight independent multiply-add chains, and
//! each input row loaded into L1 once serves all of them), then the epilogue runs on them while
//! they are in L1.

// Raw-pointer SIMD loads and stores need `unsafe`; `plane` checks the extents before the calls.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use crate::cpu::conv::ConvGeom;
use crate::cpu::epilogue::Epi;
use crate::cpu::padded::Window;
use crate::cpu::simd::Isa;

/// Outputs per vector.
const V: usize = 16;
/// Vectors of outputs per row computed together.
const NV: usize = 2;
/// Output rows computed together.
const ROWS: usize = 4;
/// Kernel rows, at most.
const MAX_KH: usize = 8;

/// True when the depthwise convolution `g` runs here on `isa`.
pub(super) fn applies(isa: Isa, g: &ConvGeom<'_>) -> bool {
    isa == Isa::Avx512
        && g.in_sp.len() == 2
        && g.kernel[0] <= MAX_KH
        && g.dilations.iter().all(|&d| d == 1)
        && (g.strides == [1, 1] || g.strides == [2, 2])
}

/// One channel plane: `dst` (oh × ow) = `init` + the window sums of `src` (ih × iw) with the
/// filter `w` (kh × kw), then `epi` on its row `row` (the plane), four output rows at a time.
/// `zeros` holds iw zeros: the row that taps above or below the plane read (as the padded copy's
/// zero rows, so that a weight of ±∞ or NaN gives NaN there too).
#[allow(clippy::too_many_arguments)]
pub(super) fn plane(
    win: &Window,
    src: &[f32],
    zeros: &[f32],
    w: &[f32],
    init: f32,
    epi: &Epi<'_>,
    row: usize,
    dst: &mut [f32],
) {
    let (oh, ow) = (win.oh, win.ow);
    assert!(
        src.len() == win.ih * win.iw
            && zeros.len() == win.iw
            && dst.len() == oh * ow
            && w.len() == win.kh * win.kw
            && win.kh <= MAX_KH
            && win.sh == win.sw
            && matches!(win.sw, 1 | 2)
            && win.dh == 1
            && win.dw == 1
            && is_x86_feature_detected!("avx512f"),
        "depthwise direct kernel: a plane that does not fit its geometry"
    );
    let mut oy = 0;
    while oy < oh {
        let rows = if oy + ROWS <= oh { ROWS } else { 1 };
        // each output row's input row for each tap row: a row of `src`, or the zero row
        let mut from = [[zeros.as_ptr(); MAX_KH]; ROWS];
        for (r, from) in from.iter_mut().enumerate().take(rows) {
            for (ky, f) in from.iter_mut().enumerate().take(win.kh) {
                if let Some(iy) = ((oy + r) * win.sh + ky)
                    .checked_sub(win.pt)
                    .filter(|&iy| iy < win.ih)
                {
                    *f = src[iy * win.iw..].as_ptr();
                }
            }
        }
        // SAFETY: AVX-512F is available and the extents were checked above: every row pointer
        // starts a row of iw readable values, every load is masked to the columns 0..iw of one,
        // every store to the columns < ow of a row < oh of `dst`.
        unsafe {
            let d = dst.as_mut_ptr();
            match (win.sw, rows) {
                (1, ROWS) => band::<1, ROWS>(win, &from, w, init, oy, d),
                (1, _) => band::<1, 1>(win, &from, w, init, oy, d),
                (_, ROWS) => band::<2, ROWS>(win, &from, w, init, oy, d),
                _ => band::<2, 1>(win, &from, w, init, oy, d),
            }
        }
        epi.apply(row, oy * ow, &mut dst[oy * ow..(oy + rows) * ow]);
        oy += rows;
    }
}

/// Lanes `t` of a load at column `c0` with `0 ≤ c0 + t < iw`.
#[inline(always)]
fn columns_inside(c0: isize, iw: usize) -> __mmask16 {
    let lo = (-c0).clamp(0, V as isize);
    let hi = (iw as isize - c0).clamp(lo, V as isize);
    (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16
}

/// Output rows `oy..oy + R` of a plane with stride `S`, `V·NV` columns at a time (`R·NV`
/// independent multiply-add chains); `from[r][ky]` is the input row of output row `oy + r` and
/// tap row `ky`.
///
/// # Safety
/// AVX-512F is available; each `from[r][ky]` (`r < R`, `ky < kh`) points to iw readable values,
/// `dst` to oh × ow writable ones with `oy + R ≤ oh`, and `w` has kh × kw values.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
unsafe fn band<const S: usize, const R: usize>(
    win: &Window,
    from: &[[*const f32; MAX_KH]; ROWS],
    w: &[f32],
    init: f32,
    oy: usize,
    dst: *mut f32,
) {
    let (iw, ow) = (win.iw, win.ow);
    // lanes 0, 2, …, 30 of two vectors: the even inputs of a stride-2 block
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for ox0 in (0..ow).step_by(V * NV) {
        let mut acc = [[_mm512_set1_ps(init); NV]; R];
        for kx in 0..win.kw {
            // the column lane 0 of each vector reads for this tap, and the lanes inside the row
            let mut c0 = [0isize; NV];
            let mut m0 = [0 as __mmask16; NV];
            let mut m1 = [0 as __mmask16; NV];
            for j in 0..NV {
                c0[j] = ((ox0 + V * j) * S + kx) as isize - win.pl as isize;
                m0[j] = columns_inside(c0[j], iw);
                m1[j] = columns_inside(c0[j] + V as isize, iw);
            }
            for ky in 0..win.kh {
                let wv = _mm512_set1_ps(w[ky * win.kw + kx]);
                for r in 0..R {
                    let row = from[r][ky];
                    for j in 0..NV {
                        // SAFETY (the loads): masked to the columns of the row inside 0..iw; the
                        // pointer is formed with `wrapping_offset` and masked-off lanes are not
                        // read.
                        let p = row.wrapping_offset(c0[j]);
                        let v = unsafe {
                            if S == 1 {
                                _mm512_maskz_loadu_ps(m0[j], p)
                            } else {
                                let lo = _mm512_maskz_loadu_ps(m0[j], p);
                                let hi = _mm512_maskz_loadu_ps(m1[j], p.wrapping_add(V));
                                _mm512_permutex2var_ps(lo, even, hi)
                            }
                        };
                        acc[r][j] = _mm512_fmadd_ps(v, wv, acc[r][j]);
                    }
                }
            }
        }
        for j in 0..NV {
            let col = ox0 + V * j;
            let n = V.min(ow.saturating_sub(col));
            let mask = ((1u32 << n) - 1) as __mmask16;
            for r in 0..R {
                // SAFETY: row oy + r < oh, columns col..col + n ≤ ow of `dst` (none when n = 0).
                unsafe { _mm512_mask_storeu_ps(dst.wrapping_add((oy + r) * ow + col), mask, acc[r][j]) };
            }
        }
    }
}

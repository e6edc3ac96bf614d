//! x86-64 kernels of the depthwise convolution: four output rows × 16 columns accumulated in
//! registers over all taps (four independent FMA chains), AVX-512F or AVX2 + FMA.

// Raw-pointer SIMD loads and stores need `unsafe`; `plane` checks every extent before the calls.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::{Kernel, V};
use crate::cpu::simd::Isa;

/// All output rows of one plane from its padded copy `scratch`.
pub(super) fn plane(isa: Isa, k: &Kernel<'_>, scratch: &[f32], dst: &mut [f32]) {
    let (oh, ow) = (k.win.oh, k.win.ow);
    let max_tap = k.taps.iter().copied().max().unwrap_or(0);
    let span = max_tap + V;
    let mut oy = 0;
    while oy < oh {
        let r = if oy + 4 <= oh { 4 } else { 1 };
        for ox0 in (0..ow).step_by(V) {
            let n = V.min(ow - ox0);
            let mut bases = [0usize; 4];
            let mut outs = [0usize; 4];
            for i in 0..r {
                bases[i] = k.pp.row_offset(oy + i) + ox0;
                outs[i] = (oy + i) * ow + ox0;
            }
            // every load reads base + off .. base + off + 16 with off ≤ max_tap; every store n
            // values at outs[i]
            let fits = bases[..r].iter().all(|&b| b + span <= scratch.len())
                && outs[..r].iter().all(|&o| o + n <= dst.len())
                && k.w.len() >= k.taps.len();
            if !fits {
                continue;
            }
            let job = Job {
                src: scratch.as_ptr(),
                bases,
                taps: k.taps,
                w: k.w,
                init: k.init,
                dst: dst.as_mut_ptr(),
                outs,
                n,
            };
            // SAFETY: the CPU has `isa` (detected); the extents were checked just above and the
            // tap offsets are clamped to max_tap inside the kernels.
            unsafe {
                match (isa, r) {
                    (Isa::Avx512, 4) => rows_avx512::<4>(&job, max_tap),
                    (Isa::Avx512, _) => rows_avx512::<1>(&job, max_tap),
                    (_, 4) => rows_avx2::<4>(&job, max_tap),
                    _ => rows_avx2::<1>(&job, max_tap),
                }
            }
        }
        oy += r;
    }
}

/// One block of output rows: where each row reads and writes.
struct Job<'a> {
    src: *const f32,
    bases: [usize; 4],
    taps: &'a [usize],
    w: &'a [f32],
    init: f32,
    dst: *mut f32,
    outs: [usize; 4],
    n: usize,
}

/// # Safety
/// AVX-512F is available; for `i < R`, `src + bases[i] + max_tap + 16` and `dst + outs[i] + n`
/// stay inside their buffers; `w` has a weight per tap; `n ≤ 16`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
unsafe fn rows_avx512<const R: usize>(j: &Job<'_>, max_tap: usize) {
    let mask = ((1u32 << j.n) - 1) as __mmask16;
    // SAFETY (the whole body): as guaranteed by the caller; offsets are clamped to max_tap.
    unsafe {
        let mut acc = [_mm512_set1_ps(j.init); R];
        for (&off, &wv) in j.taps.iter().zip(j.w) {
            let off = off.min(max_tap);
            let w = _mm512_set1_ps(wv);
            for i in 0..R {
                let s = _mm512_loadu_ps(j.src.add(j.bases[i] + off));
                acc[i] = _mm512_fmadd_ps(s, w, acc[i]);
            }
        }
        for i in 0..R {
            _mm512_mask_storeu_ps(j.dst.add(j.outs[i]), mask, acc[i]);
        }
    }
}

/// # Safety
/// As [`rows_avx512`], with AVX2 and FMA instead of AVX-512F.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)]
unsafe fn rows_avx2<const R: usize>(j: &Job<'_>, max_tap: usize) {
    // SAFETY (the whole body): as guaranteed by the caller; AVX2 masked stores do not touch
    // masked-off lanes.
    unsafe {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(j.n.min(8) as i32), lane);
        let m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(j.n.saturating_sub(8) as i32), lane);
        let mut acc = [[_mm256_set1_ps(j.init); 2]; R];
        for (&off, &wv) in j.taps.iter().zip(j.w) {
            let off = off.min(max_tap);
            let w = _mm256_set1_ps(wv);
            for i in 0..R {
                let p = j.src.add(j.bases[i] + off);
                acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(p), w, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), w, acc[i][1]);
            }
        }
        for i in 0..R {
            let p = j.dst.add(j.outs[i]);
            _mm256_maskstore_ps(p, m0, acc[i][0]);
            _mm256_maskstore_ps(p.wrapping_add(8), m1, acc[i][1]);
        }
    }
}

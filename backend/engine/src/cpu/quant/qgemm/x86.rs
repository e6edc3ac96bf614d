//! x86-64 micro-kernels of the 8-bit integer product: one register tile of i32 dot products over
//! packed panels whose every 32-bit lane holds 4 consecutive k of one row or column.
//!
//! AVX-512 VNNI: 8 × 32 (16 accumulators), one `vpdpbusd` per row and 16 columns per k group: the
//! u8 operand times the i8 one, 4 products summed into each i32 lane without saturation. AVX2:
//! 4 × 8, bytes widened to i16 and multiplied with `vpmaddwd` (pairs of k summed into i32 lanes,
//! exact for 8-bit inputs; `vpmaddubsw` would saturate at i16), the two pairs of a k group summed
//! once per tile. Both wrap past the i32 range, as the reference does.
//!
//! `LEFT_U8` says which operand the instruction reads as unsigned: the broadcast left one, or the
//! vector right one. Each function checks its slice lengths before reading through pointers.

// SIMD loads and stores through raw pointers need `unsafe`; every function checks its bounds first.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

/// Rows and columns of an AVX-512 VNNI tile.
pub(super) const MR_VNNI: usize = 8;
pub(super) const NR_VNNI: usize = 32;
/// Rows and columns of an AVX2 tile.
pub(super) const MR_AVX2: usize = 4;
pub(super) const NR_AVX2: usize = 8;

/// `out[i·ld + j] = Σ_g dot4(l[g][i], r[g][j])` over `groups` k groups.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::needless_range_loop)]
pub(super) unsafe fn tile_vnni<const LEFT_U8: bool>(
    groups: usize,
    l: &[u8],
    r: &[u8],
    out: &mut [i32],
    ld: usize,
) {
    assert!(l.len() >= groups * MR_VNNI * 4 && r.len() >= groups * NR_VNNI * 4);
    assert!(ld >= NR_VNNI && out.len() >= (MR_VNNI - 1) * ld + NR_VNNI);
    // SAFETY: the assert bounds every read: group g reads l[g·MR·4 .. (g+1)·MR·4] and
    // r[g·NR·4 .. (g+1)·NR·4]; the stores write NR values at each of out[i·ld] for i < MR.
    unsafe {
        let mut acc = [[_mm512_setzero_si512(); 2]; MR_VNNI];
        let (mut lp, mut rp) = (l.as_ptr(), r.as_ptr());
        for _ in 0..groups {
            let r0 = _mm512_loadu_si512(rp.cast());
            let r1 = _mm512_loadu_si512(rp.add(64).cast());
            for i in 0..MR_VNNI {
                let a = _mm512_set1_epi32(lp.add(4 * i).cast::<i32>().read_unaligned());
                if LEFT_U8 {
                    acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], a, r0);
                    acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], a, r1);
                } else {
                    acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], r0, a);
                    acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], r1, a);
                }
            }
            lp = lp.add(4 * MR_VNNI);
            rp = rp.add(4 * NR_VNNI);
        }
        let o = out.as_mut_ptr();
        for i in 0..MR_VNNI {
            _mm512_storeu_si512(o.add(i * ld).cast(), acc[i][0]);
            _mm512_storeu_si512(o.add(i * ld + 16).cast(), acc[i][1]);
        }
    }
}

/// [`tile_vnni`] with AVX2 on an `MR_AVX2 × NR_AVX2` tile.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
#[allow(clippy::needless_range_loop)]
pub(super) unsafe fn tile_avx2<const LEFT_U8: bool>(
    groups: usize,
    l: &[u8],
    r: &[u8],
    out: &mut [i32],
    ld: usize,
) {
    assert!(l.len() >= groups * MR_AVX2 * 4 && r.len() >= groups * NR_AVX2 * 4);
    assert!(ld >= NR_AVX2 && out.len() >= (MR_AVX2 - 1) * ld + NR_AVX2);
    // SAFETY: as in `tile_vnni`, for this tile's MR and NR.
    unsafe {
        // acc[i][h]: lanes (2c, 2c+1) hold column 4h + c's sums of k pairs (0,1) and (2,3)
        let mut acc = [[_mm256_setzero_si256(); 2]; MR_AVX2];
        let (mut lp, mut rp) = (l.as_ptr(), r.as_ptr());
        for _ in 0..groups {
            let rv = _mm256_loadu_si256(rp.cast());
            let (lo, hi) = (_mm256_castsi256_si128(rv), _mm256_extracti128_si256::<1>(rv));
            // the right operand is the unsigned one exactly when the left is not
            let (r0, r1) = if LEFT_U8 {
                (_mm256_cvtepi8_epi16(lo), _mm256_cvtepi8_epi16(hi))
            } else {
                (_mm256_cvtepu8_epi16(lo), _mm256_cvtepu8_epi16(hi))
            };
            for i in 0..MR_AVX2 {
                // the row's 4 bytes, widened and repeated for each of 4 columns
                let x = _mm_set1_epi32(lp.add(4 * i).cast::<i32>().read_unaligned());
                let a = if LEFT_U8 {
                    _mm256_cvtepu8_epi16(x)
                } else {
                    _mm256_cvtepi8_epi16(x)
                };
                acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(a, r0));
                acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(a, r1));
            }
            lp = lp.add(4 * MR_AVX2);
            rp = rp.add(4 * NR_AVX2);
        }
        let o = out.as_mut_ptr();
        for i in 0..MR_AVX2 {
            // [c0 c1 c4 c5 | c2 c3 c6 c7] → [c0 … c7]
            let s = _mm256_hadd_epi32(acc[i][0], acc[i][1]);
            let s = _mm256_permute4x64_epi64::<0b11_01_10_00>(s);
            _mm256_storeu_si256(o.add(i * ld).cast(), s);
        }
    }
}

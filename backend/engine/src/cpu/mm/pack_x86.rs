//! Packing a panel of A whose rows are contiguous (a row-major activation, the left operand of a
//! transformer's every MatMul) with 8 × 8 blocks transposed in registers. Element by element, each
//! value takes its own store `MR` floats from the last, and packing took a tenth of a transformer
//! encoder's run on one thread.

use crate::cpu::simd::Isa;

/// Rows of a panel packed in registers.
const ROWS: usize = 8;

/// Whether [`rows8`] packs full panels of `mr` rows for `isa` (the AVX-512 panels: 8 rows).
pub(super) fn rows_in_registers(isa: Isa, mr: usize) -> bool {
    cfg!(target_arch = "x86_64") && isa == Isa::Avx512 && mr == ROWS
}

/// Packs the 8 rows of `src` that start at `first`, `rs` apart, `k` values each, scaled by
/// `alpha`, into `panel` (`k` steps of 8 values). Only called when [`rows_in_registers`] holds.
#[allow(clippy::too_many_arguments)]
pub(super) fn rows8(isa: Isa, src: &[f32], first: usize, rs: usize, k: usize, alpha: f32, panel: &mut [f32]) {
    assert!(rows_in_registers(isa, ROWS), "rows8 on {isa:?}");
    assert!(
        k == 0 || first + (ROWS - 1) * rs + k <= src.len(),
        "rows8: 8 rows of {k} values from {first}, {rs} apart, past {} values",
        src.len()
    );
    assert!(panel.len() >= ROWS * k, "rows8: panel too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rows_in_registers` admitted an AVX-512 isa, which `simd::isa` only picks when the
    // CPU has it (AVX with it); the asserts above keep every read inside `src` and every write
    // inside `panel`.
    #[allow(unsafe_code)]
    unsafe {
        x86::rows8(src.as_ptr().add(first), rs, k, alpha, panel.as_mut_ptr());
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use std::arch::x86_64::*;

    use super::ROWS;

    /// # Safety
    /// AVX is available; `src + i·rs + j` is readable for `i < 8`, `j < k`; `dst` has `8·k`
    /// writable floats.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn rows8(src: *const f32, rs: usize, k: usize, alpha: f32, dst: *mut f32) {
        let scale = _mm256_set1_ps(alpha);
        let scaled = alpha != 1.0;
        let blocks = k / ROWS;
        for b in 0..blocks {
            let at = b * ROWS;
            // SAFETY (whole block): at + 8 ≤ k, so every row's 8 values are readable and the 64
            // values written lie below 8·k.
            unsafe {
                let r = |i: usize| _mm256_loadu_ps(src.add(i * rs + at));
                let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
                let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
                // pairs of rows interleaved: t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5]
                let t0 = _mm256_unpacklo_ps(r0, r1);
                let t1 = _mm256_unpackhi_ps(r0, r1);
                let t2 = _mm256_unpacklo_ps(r2, r3);
                let t3 = _mm256_unpackhi_ps(r2, r3);
                let t4 = _mm256_unpacklo_ps(r4, r5);
                let t5 = _mm256_unpackhi_ps(r4, r5);
                let t6 = _mm256_unpacklo_ps(r6, r7);
                let t7 = _mm256_unpackhi_ps(r6, r7);
                // four rows of one column per half: s0 = column 0 of rows 0-3 | column 4 of rows 0-3
                let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                let columns = [
                    _mm256_permute2f128_ps::<0x20>(s0, s4),
                    _mm256_permute2f128_ps::<0x20>(s1, s5),
                    _mm256_permute2f128_ps::<0x20>(s2, s6),
                    _mm256_permute2f128_ps::<0x20>(s3, s7),
                    _mm256_permute2f128_ps::<0x31>(s0, s4),
                    _mm256_permute2f128_ps::<0x31>(s1, s5),
                    _mm256_permute2f128_ps::<0x31>(s2, s6),
                    _mm256_permute2f128_ps::<0x31>(s3, s7),
                ];
                for (j, col) in columns.into_iter().enumerate() {
                    let col = if scaled { _mm256_mul_ps(col, scale) } else { col };
                    _mm256_storeu_ps(dst.add((at + j) * ROWS), col);
                }
            }
        }
        for kk in blocks * ROWS..k {
            for i in 0..ROWS {
                // SAFETY: kk < k and i < 8: inside both buffers.
                unsafe { *dst.add(kk * ROWS + i) = *src.add(i * rs + kk) * alpha };
            }
        }
    }
}

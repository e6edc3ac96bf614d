//! Transposing 8 rows at a time with 8 × 8 blocks in AVX registers: `dst[j·ds + i] = alpha ·
//! src[first + i·rs + j]` for 8 rows `i` and `k` columns `j`. Used where a layout change sits on a
//! hot path: packing a row-major A for the matrix product, and moving images between planes and
//! channels-last. Element by element, every value takes its own load and store.

use crate::cpu::simd::Isa;

/// Rows transposed together.
pub(crate) const ROWS: usize = 8;

/// Writes `dst[j·ds + i] = alpha · src[first + i·rs + j]` for `i < 8`, `j < k`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rows8(
    isa: Isa,
    src: &[f32],
    first: usize,
    rs: usize,
    k: usize,
    alpha: f32,
    dst: &mut [f32],
    ds: usize,
) {
    if k == 0 {
        return;
    }
    assert!(
        first + (ROWS - 1) * rs + k <= src.len(),
        "transpose: 8 rows of {k} values from {first}, {rs} apart, past {} values",
        src.len()
    );
    assert!(
        ds >= ROWS && (k - 1) * ds + ROWS <= dst.len(),
        "transpose: {k} columns {ds} apart past {} values",
        dst.len()
    );
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `Isa::Avx2` and `Isa::Avx512` are only picked when the CPU has them (AVX with
        // them); the asserts above keep every read inside `src` and every write inside `dst`.
        #[allow(unsafe_code)]
        unsafe {
            x86::rows8(src.as_ptr().add(first), rs, k, alpha, dst.as_mut_ptr(), ds);
        }
        return;
    }
    let _ = isa;
    for i in 0..ROWS {
        let row = &src[first + i * rs..][..k];
        for (j, &v) in row.iter().enumerate() {
            dst[j * ds + i] = v * alpha;
        }
    }
}

/// `dst[(j − j0)·rows + i] = src[i·cols + j]` for `j` in `columns` (`j0` its start): columns of a
/// row-major `rows × cols` matrix written as rows, 8 source rows at a time in registers.
pub(crate) fn columns(
    isa: Isa,
    src: &[f32],
    rows: usize,
    cols: usize,
    columns: std::ops::Range<usize>,
    dst: &mut [f32],
) {
    let (j0, width) = (columns.start, columns.len());
    let whole = rows - rows % ROWS;
    for i0 in (0..whole).step_by(ROWS) {
        rows8(isa, src, i0 * cols + j0, cols, width, 1.0, &mut dst[i0..], rows);
    }
    for i in whole..rows {
        for (jj, j) in columns.clone().enumerate() {
            dst[jj * rows + i] = src[i * cols + j];
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use std::arch::x86_64::*;

    use super::ROWS;

    /// # Safety
    /// AVX is available; `src + i·rs + j` is readable for `i < 8`, `j < k`; `dst + j·ds + i` is
    /// writable for `j < k`, `i < 8`.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn rows8(src: *const f32, rs: usize, k: usize, alpha: f32, dst: *mut f32, ds: usize) {
        let scale = _mm256_set1_ps(alpha);
        let scaled = alpha != 1.0;
        let blocks = k / ROWS;
        for b in 0..blocks {
            let at = b * ROWS;
            // SAFETY (whole block): at + 8 ≤ k, so every row's 8 values are readable and every
            // column written is below k.
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
                    _mm256_storeu_ps(dst.add((at + j) * ds), col);
                }
            }
        }
        for j in blocks * ROWS..k {
            for i in 0..ROWS {
                // SAFETY: j < k and i < 8: inside both buffers.
                unsafe { *dst.add(j * ds + i) = *src.add(i * rs + j) * alpha };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::simd::all_available;

    #[test]
    fn eight_rows_land_as_columns_on_every_instruction_set() {
        for isa in all_available() {
            for (rs, k, ds) in [(21usize, 21usize, 8usize), (40, 16, 11), (9, 3, 8), (100, 37, 64)] {
                let src: Vec<f32> = (0..8 * rs + 5).map(|v| v as f32).collect();
                let mut dst = vec![f32::NAN; k * ds + 8];
                rows8(isa, &src, 5, rs, k, 0.5, &mut dst, ds);
                for j in 0..k {
                    for i in 0..ROWS {
                        assert_eq!(
                            dst[j * ds + i],
                            src[5 + i * rs + j] * 0.5,
                            "{isa:?} rs {rs} k {k}"
                        );
                    }
                    if j + 1 < k {
                        assert!(dst[j * ds + ROWS..(j + 1) * ds].iter().all(|v| v.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn column_ranges_land_as_rows() {
        for isa in all_available() {
            for (rows, cols, range) in [
                (49usize, 40usize, 0..40),
                (49, 40, 16..33),
                (5, 9, 2..9),
                (16, 3, 1..2),
            ] {
                let src: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
                let mut dst = vec![f32::NAN; rows * range.len()];
                columns(isa, &src, rows, cols, range.clone(), &mut dst);
                for (jj, j) in range.clone().enumerate() {
                    for i in 0..rows {
                        assert_eq!(
                            dst[jj * rows + i],
                            src[i * cols + j],
                            "{isa:?} {rows}×{cols} {range:?}"
                        );
                    }
                }
            }
        }
    }
}

//! x86-64 micro-kernels of the matrix product: one register tile `C[mr × nr] = init + A·B` with
//! AVX-512F (8 × 48: 24 accumulators of 16 lanes) or AVX2 + FMA (6 × 16: 12 accumulators of 8).
//!
//! The AVX2 tile keeps 12 accumulators, 2 B vectors and 1 broadcast in 15 of the 16 registers: a
//! 4 × 24 tile needs all 16, and the compiler then spills an accumulator to the stack, putting a
//! store-to-load round trip on the loop's critical path (a third of the kernel's peak).
//!
//! A is a packed panel (`k` steps of `MR` values, broadcast one at a time), B a packed panel (`k`
//! steps of `NR` values, zero-padded, so its loads need no mask); only C's columns past `nr` are
//! masked. Smaller row and column counts run instances with fewer accumulators.
//! `mm::run_task` checks every bound before calling.

// Raw-pointer SIMD loads and stores need `unsafe`; every function states what the caller guarantees.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::x86_act::{act256, act512};
use crate::cpu::epilogue::RegisterAct;
use crate::cpu::simd::{Isa, prefetch, prefetch_rows};

/// How the accumulators start.
#[derive(Clone, Copy)]
pub(super) enum TileInit {
    /// zero
    Zero,
    /// one value per row (`mr` readable values)
    Row(*const f32),
    /// one value per column (`nr` readable values)
    Col(*const f32),
    /// the current content of C (a later block of K)
    LoadC,
}

/// What the next tile will read, fetched into the cache a line per step of this tile's loop.
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    /// the next tile's A panel (`k` steps of MR values, as this one's)
    pub(super) a: *const f32,
    /// lines of the next B block to fetch during this tile, `b_lines` of them from `b`
    pub(super) b: *const f32,
    pub(super) b_lines: usize,
}

/// Rows and columns of a packed AVX-512 panel.
const MR512: usize = 8;
const NR512: usize = 48;
/// Rows and columns of a packed AVX2 panel.
const MR256: usize = 6;
const NR256: usize = 16;

/// One tile with the instruction set's kernel, picking the instance for `mr` rows and `nr` columns.
///
/// # Safety
/// `isa` is available on this CPU. `a` points to `k` packed steps of the isa's MR values, `b` to
/// `k` packed steps of its NR values. For every `i < mr`, `c + i*ldc` points to `nr` writable
/// floats (readable too with `LoadC`). `Row(p)`: `mr` readable floats; `Col(p)`: `nr`.
/// `1 ≤ mr ≤ MR`, `1 ≤ nr ≤ NR`. `act` is applied to the sums before they are stored.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    isa: Isa,
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
    init: TileInit,
    ahead: Ahead,
    act: Option<RegisterAct>,
) {
    // one instance per count of column vectors and per (rows → MR of the instance)
    macro_rules! rows {
        ($f:ident, $v:literal, [$($m:literal => $mr:literal),*]) => {
            match mr {
                $($m => $f::<$mr, $v>(k, a, b, c, ldc, mr, nr, init, ahead, act),)*
                _ => {}
            }
        };
    }
    macro_rules! pick {
        ($f:ident, $nv:expr, $rows:tt, [$($v:literal),*]) => {
            match $nv {
                $($v => rows!($f, $v, $rows),)*
                _ => {}
            }
        };
    }
    // SAFETY: forwarded from the caller; each instance reads at most MR rows of A and 16·NV
    // (8·NV) ≤ NR columns of B per step, and touches only the first mr rows and nr columns of C.
    unsafe {
        match isa {
            Isa::Avx512 => {
                pick!(tile_avx512, nr.div_ceil(16), [1 => 1, 2 => 2, 3 => 4, 4 => 4, 5 => 8, 6 => 8, 7 => 8, 8 => 8], [1, 2, 3])
            }
            Isa::Avx2 => {
                pick!(tile_avx2, nr.div_ceil(8), [1 => 1, 2 => 2, 3 => 3, 4 => 4, 5 => 6, 6 => 6], [1, 2])
            }
            Isa::Scalar => {}
        }
    }
}

/// Step `step`'s share of [`Ahead`]: a line of the next A panel, and one of the next B block.
#[inline(always)]
fn ahead_step(ahead: Ahead, step: usize, mr: usize) {
    prefetch(ahead.a.wrapping_add(step * mr));
    if step < ahead.b_lines {
        prefetch(ahead.b.wrapping_add(step * 16));
    }
}

#[inline(always)]
fn mask16(nr: usize, j: usize) -> __mmask16 {
    let rem = nr.saturating_sub(16 * j);
    if rem >= 16 {
        0xFFFF
    } else {
        ((1u32 << rem) - 1) as __mmask16
    }
}

/// One AVX-512 register tile of `MR` rows and `16·NV` columns.
///
/// # Safety
/// As [`tile`] with `mr ≤ MR`, `16·(NV-1) < nr ≤ 16·NV`, and AVX-512F available.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile_avx512<const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
    init: TileInit,
    ahead: Ahead,
    act: Option<RegisterAct>,
) {
    let mut masks = [0 as __mmask16; NV];
    for j in 0..NV {
        masks[j] = mask16(nr, j);
    }
    let rows = MR.min(mr);
    // SAFETY (the whole body): pointers and extents as guaranteed by the caller; masked-off lanes
    // are never accessed by masked loads and stores, and pointers that may pass the end of C or
    // of the init vector are formed with `wrapping_add` and only used under a mask.
    unsafe {
        prefetch_rows(c.cast_const(), ldc, rows, nr);
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        match init {
            TileInit::Zero => {}
            TileInit::Row(p) => {
                for i in 0..rows {
                    let v = _mm512_set1_ps(*p.add(i));
                    for j in 0..NV {
                        acc[i][j] = v;
                    }
                }
            }
            TileInit::Col(p) => {
                for j in 0..NV {
                    let v = _mm512_maskz_loadu_ps(masks[j], p.wrapping_add(16 * j));
                    for i in 0..MR {
                        acc[i][j] = v;
                    }
                }
            }
            TileInit::LoadC => {
                for i in 0..rows {
                    for j in 0..NV {
                        acc[i][j] = _mm512_maskz_loadu_ps(masks[j], c.add(i * ldc).wrapping_add(16 * j));
                    }
                }
            }
        }
        let mut ap = a;
        let mut bp = b;
        for step in 0..k {
            ahead_step(ahead, step, MR512);
            let mut bv = [_mm512_setzero_ps(); NV];
            for j in 0..NV {
                bv[j] = _mm512_loadu_ps(bp.add(16 * j));
            }
            for i in 0..MR {
                let av = _mm512_set1_ps(*ap.add(i));
                for j in 0..NV {
                    acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
                }
            }
            ap = ap.add(MR512);
            bp = bp.add(NR512);
        }
        for i in 0..rows {
            for j in 0..NV {
                let v = act512(act, acc[i][j]);
                _mm512_mask_storeu_ps(c.add(i * ldc).wrapping_add(16 * j), masks[j], v);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2")]
fn mask8(nr: usize, j: usize) -> __m256i {
    let rem = nr.saturating_sub(8 * j).min(8) as i32;
    _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// One AVX2 register tile of `MR` rows and `8·NV` columns.
///
/// # Safety
/// As [`tile`] with `mr ≤ MR`, `8·(NV-1) < nr ≤ 8·NV`, and AVX2 + FMA available.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile_avx2<const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    mr: usize,
    nr: usize,
    init: TileInit,
    ahead: Ahead,
    act: Option<RegisterAct>,
) {
    let full = nr == 8 * NV;
    let rows = MR.min(mr);
    // SAFETY (the whole body): as in `tile_avx512`; AVX2 masked loads and stores do not touch
    // masked-off lanes.
    unsafe {
        let mut masks = [_mm256_setzero_si256(); NV];
        for j in 0..NV {
            masks[j] = mask8(nr, j);
        }
        macro_rules! load_c {
            ($p:expr, $j:expr) => {
                if full {
                    _mm256_loadu_ps($p)
                } else {
                    _mm256_maskload_ps($p, masks[$j])
                }
            };
        }
        prefetch_rows(c.cast_const(), ldc, rows, nr);
        let mut acc = [[_mm256_setzero_ps(); NV]; MR];
        match init {
            TileInit::Zero => {}
            TileInit::Row(p) => {
                for i in 0..rows {
                    let v = _mm256_set1_ps(*p.add(i));
                    for j in 0..NV {
                        acc[i][j] = v;
                    }
                }
            }
            TileInit::Col(p) => {
                for j in 0..NV {
                    let v = load_c!(p.wrapping_add(8 * j), j);
                    for i in 0..MR {
                        acc[i][j] = v;
                    }
                }
            }
            TileInit::LoadC => {
                for i in 0..rows {
                    for j in 0..NV {
                        acc[i][j] = load_c!(c.add(i * ldc).wrapping_add(8 * j), j);
                    }
                }
            }
        }
        let mut ap = a;
        let mut bp = b;
        for step in 0..k {
            ahead_step(ahead, step, MR256);
            let mut bv = [_mm256_setzero_ps(); NV];
            for j in 0..NV {
                bv[j] = _mm256_loadu_ps(bp.add(8 * j));
            }
            for i in 0..MR {
                let av = _mm256_set1_ps(*ap.add(i));
                for j in 0..NV {
                    acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
                }
            }
            ap = ap.add(MR256);
            bp = bp.add(NR256);
        }
        for i in 0..rows {
            for j in 0..NV {
                let p = c.add(i * ldc).wrapping_add(8 * j);
                let v = act256(act, acc[i][j]);
                if full {
                    _mm256_storeu_ps(p, v);
                } else {
                    _mm256_maskstore_ps(p, masks[j], v);
                }
            }
        }
    }
}

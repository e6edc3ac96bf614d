//! The activations the x86-64 tiles apply to their sums before storing them ([`RegisterAct`]), with
//! the same results, bit for bit, as the tail's steps in `cpu::epilogue` (which run on every CPU):
//! the same operations in the same order, NaN and signed zeros included.

use std::arch::x86_64::*;

use crate::cpu::epilogue::RegisterAct;
use crate::cpu::fastmath::exp_consts::*;

/// `act` on 16 sums. `max_ps(a, b)` is `if a > b { a } else { b }` and `min_ps(a, b)`
/// `if a < b { a } else { b }`, which give the tail's steps' NaN and signed-zero results.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn act512(act: Option<RegisterAct>, v: __m512) -> __m512 {
    match act {
        None => v,
        Some(RegisterAct::Relu) => _mm512_max_ps(v, _mm512_setzero_ps()),
        Some(RegisterAct::Clip(lo, hi)) => {
            _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), v))
        }
        Some(RegisterAct::HardSwish) => {
            let t = _mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.0 / 6.0)), _mm512_set1_ps(0.5));
            let t = _mm512_min_ps(_mm512_set1_ps(1.0), _mm512_max_ps(_mm512_setzero_ps(), t));
            _mm512_mul_ps(v, t)
        }
        Some(RegisterAct::Sigmoid) => sigmoid512(v),
        Some(RegisterAct::Silu) => _mm512_mul_ps(v, sigmoid512(v)),
    }
}

/// [`act512`] on 8 sums.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn act256(act: Option<RegisterAct>, v: __m256) -> __m256 {
    match act {
        None => v,
        Some(RegisterAct::Relu) => _mm256_max_ps(v, _mm256_setzero_ps()),
        Some(RegisterAct::Clip(lo, hi)) => {
            _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v))
        }
        Some(RegisterAct::HardSwish) => {
            let t = _mm256_add_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.0 / 6.0)), _mm256_set1_ps(0.5));
            let t = _mm256_min_ps(_mm256_set1_ps(1.0), _mm256_max_ps(_mm256_setzero_ps(), t));
            _mm256_mul_ps(v, t)
        }
        Some(RegisterAct::Sigmoid) => sigmoid256(v),
        Some(RegisterAct::Silu) => _mm256_mul_ps(v, sigmoid256(v)),
    }
}

/// `fastmath::sigmoid::<true>` on 16 lanes: 1 / (1 + e^−x).
#[inline]
#[target_feature(enable = "avx512f")]
fn sigmoid512(x: __m512) -> __m512 {
    // −x flips the sign bit, as Rust's negation does (0 − x would turn −0 into +0)
    let neg = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(x),
        _mm512_set1_epi32(i32::MIN),
    ));
    let one = _mm512_set1_ps(1.0);
    _mm512_div_ps(one, _mm512_add_ps(one, exp512(neg)))
}

/// `fastmath::exp::<true>` on 16 lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp512(x: __m512) -> __m512 {
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(LOW));
    // `clamp`: NaN passes through both (max_ps and min_ps return their second operand on NaN)
    let x = _mm512_min_ps(_mm512_set1_ps(HIGH), _mm512_max_ps(_mm512_set1_ps(LOW), x));
    let n = _mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), _mm512_set1_ps(0.5));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(n);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(POLY[0]);
    for c in &POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
    let shift = _mm512_set1_ps(SHIFT);
    let n_bits = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_ps(n, shift)),
        _mm512_castps_si512(shift),
    );
    let scale = _mm512_slli_epi32::<23>(_mm512_add_epi32(n_bits, _mm512_set1_epi32(127)));
    let y = _mm512_mul_ps(e, _mm512_castsi512_ps(scale));
    _mm512_mask_mov_ps(y, below, _mm512_setzero_ps())
}

/// [`sigmoid512`] on 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn sigmoid256(x: __m256) -> __m256 {
    let neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0));
    let one = _mm256_set1_ps(1.0);
    _mm256_div_ps(one, _mm256_add_ps(one, exp256(neg)))
}

/// [`exp512`] on 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp256(x: __m256) -> __m256 {
    let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LOW));
    let x = _mm256_min_ps(_mm256_set1_ps(HIGH), _mm256_max_ps(_mm256_set1_ps(LOW), x));
    let n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5)));
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(POLY[0]);
    for c in &POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
    let shift = _mm256_set1_ps(SHIFT);
    let n_bits = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(n, shift)),
        _mm256_castps_si256(shift),
    );
    let scale = _mm256_slli_epi32::<23>(_mm256_add_epi32(n_bits, _mm256_set1_epi32(127)));
    let y = _mm256_mul_ps(e, _mm256_castsi256_ps(scale));
    _mm256_andnot_ps(below, y)
}

//! Branch-free f32 approximations of exp, erf, sigmoid and tanh that auto-vectorise (libm's calls
//! do not), for GELU, Softmax, Sigmoid and the recurrent gates. `FMA` as in `simd::fmadd`.
//!
//! Accuracy against f64 (tested): exp within 2 ulp over its normal range, erf within 5e-7
//! absolute, sigmoid within 3e-7 relative (above 1e-38), tanh within 3e-7 absolute, GELU within
//! 1e-6 absolute plus 3e-7 relative.

use crate::cpu::simd::fmadd;
use exp_consts::*;

/// [`exp`]'s constants, shared with the matrix-product tiles' copy of it in registers.
pub(crate) mod exp_consts {
    pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 split in two (Cody–Waite) so that n·ln2 is exact in the first part
    pub(crate) const LN2_HI: f32 = 0.693_359_4;
    pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
    /// inputs are clamped to `LOW..=HIGH`; below `LOW` the result is 0
    pub(crate) const LOW: f32 = -87.336_55;
    pub(crate) const HIGH: f32 = 88.376_26;
    /// Cephes expf polynomial on [−ln2/2, ln2/2], highest degree first
    pub(crate) const POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    /// 1.5·2^23: adding it to a whole number leaves the number in the low bits
    pub(crate) const SHIFT: f32 = 12_582_912.0;
}

/// e^x. Inputs below −87.3 give 0, inputs above 88.37 give about 2.4e38 (not up to f32::MAX, then
/// infinity); NaN stays NaN.
///
/// Below −87.3, e^x is under f32's normal range. It is 0 rather than the smallest normal: Softmax
/// divides it by the row's sum (a masked attention score became a subnormal probability), and every
/// operation on a subnormal costs an Intel core a microcode assist (BERT with a padding mask ran at
/// half speed there).
#[inline(always)]
pub(crate) fn exp<const FMA: bool>(x: f32) -> f32 {
    let below = x < LOW;
    let x = x.clamp(LOW, HIGH);
    let n = fmadd::<FMA>(x, LOG2E, 0.5).floor();
    let r = fmadd::<FMA>(n, -LN2_LO, fmadd::<FMA>(n, -LN2_HI, x));
    let mut p = POLY[0];
    for c in &POLY[1..] {
        p = fmadd::<FMA>(p, r, *c);
    }
    let e = fmadd::<FMA>(p, r * r, r) + 1.0;
    // 2^n from n's bits: n is a whole number in [−126, 128], so adding 1.5·2^23 leaves it, in two's
    // complement, in the low bits of the sum. Integer ops that vectorise; `n as i32` saturates and
    // checks for NaN, which LLVM does lane by lane.
    let n_bits = (n + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits());
    let y = e * f32::from_bits(n_bits.wrapping_add(127) << 23);
    if below { 0.0 } else { y }
}

/// erf(x), a rational approximation; exactly ±1 for |x| ≥ 3.9 (as erf rounds to f32 there), so
/// that 1 + erf(x) is 0 for large negative x.
#[inline(always)]
pub(crate) fn erf<const FMA: bool>(x: f32) -> f32 {
    if x.abs() >= 3.9 {
        return 1f32.copysign(x);
    }
    let x2 = x * x;
    let mut p = -2.726_142_3e-10;
    p = fmadd::<FMA>(x2, p, 2.770_681_4e-8);
    p = fmadd::<FMA>(x2, p, -2.101_024e-6);
    p = fmadd::<FMA>(x2, p, -5.692_506_4e-5);
    p = fmadd::<FMA>(x2, p, -7.349_906_3e-4);
    p = fmadd::<FMA>(x2, p, -2.954_6e-3);
    p = fmadd::<FMA>(x2, p, -1.609_603_3e-2);
    let mut q = -1.456_607_2e-5;
    q = fmadd::<FMA>(x2, q, -2.133_740_6e-4);
    q = fmadd::<FMA>(x2, q, -1.682_827e-3);
    q = fmadd::<FMA>(x2, q, -7.373_329e-3);
    q = fmadd::<FMA>(x2, q, -1.426_474e-2);
    x * p / q
}

/// 1 / (1 + e^−x).
#[inline(always)]
pub(crate) fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<FMA>(-x))
}

/// tanh(x) = sign(x)·(1 − 2 / (e^{2|x|} + 1)); below |x| = 1/8, where that difference cancels (Mish
/// takes tanh of tiny softplus values), its Taylor series to x⁹.
#[inline(always)]
pub(crate) fn tanh<const FMA: bool>(x: f32) -> f32 {
    let t = 1.0 - 2.0 / (exp::<FMA>(2.0 * x.abs()) + 1.0);
    let x2 = x * x;
    let mut p = 62.0 / 2835.0;
    p = fmadd::<FMA>(p, x2, -17.0 / 315.0);
    p = fmadd::<FMA>(p, x2, 2.0 / 15.0);
    p = fmadd::<FMA>(p, x2, -1.0 / 3.0);
    let small = fmadd::<FMA>(p * x2, x, x);
    if x.abs() < 0.125 { small } else { t.copysign(x) }
}

/// x·Φ(x) with the exact (erf) normal CDF.
#[inline(always)]
pub(crate) fn gelu<const FMA: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> impl Iterator<Item = f32> {
        (-200_000..=200_000).map(|i| i as f32 * 5e-4)
    }

    #[test]
    fn approximations_stay_within_their_stated_error() {
        for x in grid() {
            let xd = f64::from(x);
            let gelu_ref = 0.5 * xd * (1.0 + crate::cpu::num::erf(xd / 2f64.sqrt()));
            for (name, got, want, abs, rel) in [
                ("erf", erf::<true>(x), crate::cpu::num::erf(xd), 5e-7, 0.0),
                ("tanh", tanh::<false>(x), xd.tanh(), 3e-7, 0.0),
                ("gelu", gelu::<true>(x), gelu_ref, 1e-6, 3e-7),
            ] {
                let ok = (f64::from(got) - want).abs() <= abs + rel * want.abs();
                assert!(ok, "{name}({x}) = {got}, want {want}");
            }
            let s = 1.0 / (1.0 + (-xd).exp());
            assert!(
                (f64::from(sigmoid::<true>(x)) - s).abs() <= 3e-7 * s + 1e-38,
                "sigmoid({x})"
            );
        }
        for x in (-8700..=8837).map(|i| i as f32 * 0.01) {
            let want = f64::from(x).exp();
            for got in [exp::<true>(x), exp::<false>(x)] {
                let ulp = f64::from(f32::EPSILON) * want;
                assert!(
                    (f64::from(got) - want).abs() <= 2.0 * ulp,
                    "exp({x}) = {got}, want {want}"
                );
            }
        }
        assert!(exp::<true>(f32::NAN).is_nan() && erf::<true>(f32::NAN).is_nan());
        // under f32's normal range: 0, never a subnormal
        assert_eq!((exp::<true>(-87.5), exp::<false>(-1000.0)), (0.0, 0.0));
        assert!(exp::<true>(-87.33) >= f32::MIN_POSITIVE);
        assert!(exp::<true>(1000.0).is_finite() && exp::<true>(1000.0) > 2.3e38);
        assert!(sigmoid::<true>(-1000.0) < 1e-37 && sigmoid::<true>(1000.0) == 1.0);
        assert_eq!((tanh::<true>(50.0), tanh::<true>(-50.0)), (1.0, -1.0));
        // relative error near 0, where 1 − 2/(e^{2x} + 1) would cancel
        for i in -300..=0 {
            let x = 10f32.powf(i as f32 / 10.0);
            for x in [x, -x] {
                let (got, want) = (f64::from(tanh::<true>(x)), f64::from(x).tanh());
                assert!(
                    (got - want).abs() <= 2e-6 * want.abs(),
                    "tanh({x}) = {got}, want {want}"
                );
            }
        }
        assert_eq!((erf::<true>(9.0), erf::<true>(-9.0)), (1.0, -1.0));
    }
}

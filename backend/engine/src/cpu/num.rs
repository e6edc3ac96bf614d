//! A small numeric trait so element-wise kernels are written once for every dtype.

use half::{bf16, f16};

/// Arithmetic shared by all numeric dtypes (integers wrap; integer division by zero gives 0).
pub(crate) trait Num: Copy + PartialOrd + Send + Sync + Default + 'static {
    const IS_FLOAT: bool;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// The remainder of truncated division, with the dividend's sign (C's `fmod`).
    fn rem(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn max_value() -> Self;
    fn min_value() -> Self;
    /// A buffer of `n` values for a kernel that writes every one of them: zeroes, or for f32 a buffer
    /// the run freed ([`crate::cpu::arena`]), so that large outputs are not faulted in again.
    fn output_buffer(n: usize) -> Vec<Self> {
        vec![Self::default(); n]
    }
}

macro_rules! int_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = false;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            fn rem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            #[allow(clippy::unnecessary_cast)]
            fn neg(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[allow(unused_comparisons)]
            fn abs(self) -> Self { if self < 0 as $t { (0 as $t).wrapping_sub(self) } else { self } }
            fn max_value() -> Self { <$t>::MAX }
            fn min_value() -> Self { <$t>::MIN }
        }
    )*};
}
int_num!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_num {
    ($($t:ty $(=> $buffer:path)?),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = true;
            $(fn output_buffer(n: usize) -> Vec<Self> { $buffer(n) })?
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div(self, o: Self) -> Self { self / o }
            fn rem(self, o: Self) -> Self { self % o }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn neg(self) -> Self { -self }
            fn abs(self) -> Self { <$t>::abs(self) }
            fn max_value() -> Self { <$t>::INFINITY }
            fn min_value() -> Self { <$t>::NEG_INFINITY }
        }
    )*};
}
float_num!(f32 => crate::cpu::arena::take, f64);

macro_rules! half_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = true;
            fn add(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() + o.to_f32()) }
            fn sub(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() - o.to_f32()) }
            fn mul(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() * o.to_f32()) }
            fn div(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() / o.to_f32()) }
            fn rem(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() % o.to_f32()) }
            fn to_f64(self) -> f64 { self.to_f64() }
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            fn neg(self) -> Self { -self }
            fn abs(self) -> Self { <$t>::from_f32(self.to_f32().abs()) }
            fn max_value() -> Self { <$t>::INFINITY }
            fn min_value() -> Self { <$t>::NEG_INFINITY }
        }
    )*};
}
half_num!(f16, bf16);

/// Numerical Recipes' Chebyshev fit of erfc: the coefficients of t¹..t⁹ (t⁰'s, −1.26551223, is in [`erf`]).
const ERFC_FIT: [f64; 9] = [
    1.000_023_68,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_203_98,
    1.488_515_87,
    -0.822_152_23,
    0.170_872_77,
];

/// erf(x) with ~1e-7 relative accuracy (Numerical Recipes' Chebyshev fit of erfc). The polynomial is
/// evaluated by Horner's rule in a loop: written out as nested parentheses it made rustfmt take 12 s.
pub(crate) fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = ERFC_FIT.iter().rev().fold(0.0, |acc, &c| c + t * acc);
    let r = t * (-z * z - 1.265_512_23 + t * poly).exp();
    if x >= 0.0 { 1.0 - r } else { r - 1.0 }
}

/// erf for f32 with a fast rational approximation (max abs error ~1.5e-7).
#[inline]
pub(crate) fn erf_f32(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 is too coarse; use the f64 version, it is still cheap.
    erf(f64::from(x)) as f32
}

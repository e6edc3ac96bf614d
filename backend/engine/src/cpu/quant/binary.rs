//! QLinearAdd and QLinearMul on 8-bit codes of one shape, in one pass: each pair of codes
//! dequantized, added or multiplied, and quantized to the output's scale and zero point, with the
//! numbers of `QuantizeLinear(DequantizeLinear(a) ∘ DequantizeLinear(b))` (the float graph a QDQ
//! model writes), without the two FP32 tensors in between.

use super::linear::{finite_quotient, in_pieces, quantize_one, reciprocal, round_saturate_finite};
use crate::cpu::simd;

/// The scales and zero points of one QLinearAdd or QLinearMul (all per tensor), the output's
/// range, and whether the codes are INT8.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BinaryCodes {
    pub(crate) multiply: bool,
    pub(crate) signed: bool,
    pub(crate) a: (f32, i32),
    pub(crate) b: (f32, i32),
    pub(crate) c: (f32, i32),
    pub(crate) range: (i32, i32),
}

/// `c[i] = quantize(dequantize(a[i]) ∘ dequantize(b[i]))` on the codes' bytes (INT8 codes as their
/// two's complement), in pieces on the pool's threads when large.
pub(crate) fn qlinear_binary(a: &[u8], b: &[u8], p: &BinaryCodes) -> Vec<u8> {
    let mut c = vec![0u8; a.len().min(b.len())];
    let isa = simd::isa();
    in_pieces(&mut c, |piece, c| {
        binary_run(isa, &a[piece.clone()], &b[piece], c, p)
    });
    c
}

simd::multiversion! {
    /// [`qlinear_binary`] on one piece, in vector lanes.
    pub(crate) fn binary_run(a: &[u8], b: &[u8], c: &mut [u8], p: &BinaryCodes) = binary_lanes;
}

#[inline(always)]
fn binary_lanes<const FMA: bool>(a: &[u8], b: &[u8], c: &mut [u8], p: &BinaryCodes) {
    // the codes' type and the operation chosen outside the loop, so that each loop vectorises
    match (p.signed, p.multiply) {
        (false, false) => codes::<FMA>(a, b, c, p, i32::from, |x, y| x + y),
        (false, true) => codes::<FMA>(a, b, c, p, i32::from, |x, y| x * y),
        (true, false) => codes::<FMA>(a, b, c, p, |v| i32::from(v as i8), |x, y| x + y),
        (true, true) => codes::<FMA>(a, b, c, p, |v| i32::from(v as i8), |x, y| x * y),
    }
}

#[inline(always)]
fn codes<const FMA: bool>(
    a: &[u8],
    b: &[u8],
    c: &mut [u8],
    p: &BinaryCodes,
    value: impl Fn(u8) -> i32,
    op: impl Fn(f32, f32) -> f32,
) {
    let ((sa, za), (sb, zb), (sc, zc)) = (p.a, p.b, p.c);
    let n = c.len();
    let (a, b) = (&a[..n], &b[..n]);
    // DequantizeLinear's `(v − zero_point) · scale` for each operand, then QuantizeLinear's code
    match reciprocal(sc).filter(|&inv| FMA && p.quotients_are_finite(inv)) {
        Some(inv) => {
            // every sum and quotient finite: no NaN or infinity to carry through the rounding
            for i in 0..n {
                let x = op((value(a[i]) - za) as f32 * sa, (value(b[i]) - zb) as f32 * sb);
                c[i] = round_saturate_finite(finite_quotient(x, sc, inv), zc, p.range) as u8;
            }
        }
        None => {
            for i in 0..n {
                let x = op((value(a[i]) - za) as f32 * sa, (value(b[i]) - zb) as f32 * sb);
                c[i] = quantize_one(x, sc, zc, p.range) as u8;
            }
        }
    }
}

impl BinaryCodes {
    /// Whether every pair of codes gives a finite value and a finite quotient by the output's
    /// scale through `inv` (its reciprocal): then the loop needs none of the NaN and infinity
    /// handling that [`quantize_one`] does. Codes differ from their zero points by less than 2⁸,
    /// so a sum is below 2⁹ times the larger scale and a product below 2¹⁶ times the scales'.
    fn quotients_are_finite(&self, inv: f32) -> bool {
        let (sa, sb) = (f64::from(self.a.0.abs()), f64::from(self.b.0.abs()));
        let largest = if self.multiply {
            65_536.0 * sa * sb
        } else {
            512.0 * sa.max(sb)
        };
        // a margin of 2²⁰ below f32's largest value
        largest * f64::from(inv.abs()) < 2f64.powi(108) && largest < 2f64.powi(108)
    }
}

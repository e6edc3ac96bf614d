//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear over typed buffers, and where a scale or
//! zero point applies ([`Layout`]).
//!
//! Rounding is round-half-to-even and results saturate to the target type, as the ONNX operators say.

use std::ops::Range;

use rayon::prelude::*;

use super::qgemm::Sink;
use crate::cpu::elementwise::PAR_MIN;
use crate::cpu::{Buf, arena, simd};
use crate::error::{EngineError, Result};
use crate::tensor::DataType;

/// How a scale/zero-point tensor maps onto the elements of the tensor it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One value for every element.
    PerTensor,
    /// One value per index of the axis; `inner` = product of the dims after it.
    PerAxis { dim: usize, inner: usize },
    /// One value per block of `block` consecutive indices of the axis, the other dims kept.
    Blocked { dim: usize, inner: usize, block: usize },
}

impl Layout {
    /// The layout of a parameter of shape `param` for a tensor of shape `x` (`axis` normalised).
    /// `what` names the parameter in errors.
    pub(crate) fn new(
        x: &[usize],
        param: &[usize],
        axis: usize,
        block_size: usize,
        what: &str,
    ) -> Result<Layout> {
        let numel: usize = param.iter().product();
        if block_size == 0 && numel == 1 && param.len() <= 1 {
            return Ok(Layout::PerTensor);
        }
        let Some(&dim) = x.get(axis) else {
            return Err(EngineError::invalid(format!(
                "{what} of shape {param:?} needs an axis, but axis {axis} is out of range for an input of rank {}",
                x.len()
            )));
        };
        let inner = x[axis + 1..].iter().product();
        if block_size == 0 {
            if param.len() == 1 && param[0] == dim {
                return Ok(Layout::PerAxis { dim, inner });
            }
            return Err(EngineError::invalid(format!(
                "{what} of shape {param:?} is neither one value nor one per index of axis {axis} \
                 (input shape {x:?}: expected [] or [{dim}]; set block_size for blocked quantization)"
            )));
        }
        let mut want = x.to_vec();
        want[axis] = dim.div_ceil(block_size);
        if param != want.as_slice() {
            return Err(EngineError::invalid(format!(
                "{what} of shape {param:?} does not match blocks of {block_size} along axis {axis} of an \
                 input of shape {x:?} (expected {want:?})"
            )));
        }
        Ok(Layout::Blocked {
            dim,
            inner,
            block: block_size,
        })
    }

    /// Calls `f(elements, first_param, param_step)` for runs of consecutive elements of a tensor of
    /// `len` elements: element `start + j` of a run uses parameter `first_param + j · param_step`.
    pub(crate) fn runs(&self, len: usize, mut f: impl FnMut(Range<usize>, usize, usize)) {
        match *self {
            Layout::PerTensor => f(0..len, 0, 0),
            Layout::PerAxis { dim, inner } => {
                for r in 0..len / inner.max(1) {
                    f(r * inner..(r + 1) * inner, r % dim, 0);
                }
            }
            Layout::Blocked { dim, inner, block } => {
                let blocks = dim.div_ceil(block);
                for r in 0..len / inner.max(1) {
                    let (outer, a) = (r / dim, r % dim);
                    f(
                        r * inner..(r + 1) * inner,
                        (outer * blocks + a / block) * inner,
                        1,
                    );
                }
            }
        }
    }
}

/// The range of an integer type that quantization saturates to.
pub(crate) fn int_range(dtype: DataType) -> Result<(i32, i32)> {
    Ok(match dtype {
        DataType::U8 => (0, 255),
        DataType::I8 => (-128, 127),
        DataType::U16 => (0, 65535),
        DataType::I16 => (-32768, 32767),
        other => {
            return Err(EngineError::unsupported(format!(
                "quantization to {other}: the engine quantizes to UINT8, INT8, UINT16 and INT16 \
                 (float8, int4 and int2 have no KServe datatype)"
            )));
        }
    })
}

/// Integer values (already in range) as a buffer of `dtype` (one of [`int_range`]'s types).
pub(crate) fn int_buf(dtype: DataType, v: Vec<i32>) -> Result<Buf> {
    Ok(match dtype {
        DataType::U8 => Buf::U8(v.into_iter().map(|x| x as u8).collect()),
        DataType::I8 => Buf::I8(v.into_iter().map(|x| x as i8).collect()),
        DataType::U16 => Buf::U16(v.into_iter().map(|x| x as u16).collect()),
        DataType::I16 => Buf::I16(v.into_iter().map(|x| x as i16).collect()),
        DataType::I32 => Buf::I32(v),
        other => return Err(EngineError::internal(format!("int_buf to {other}"))),
    })
}

/// The values of an integer buffer (up to 32 bits) as i32.
pub(crate) fn ints(b: &Buf, what: &str) -> Result<Vec<i32>> {
    Ok(match b {
        Buf::U8(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Buf::I8(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Buf::U16(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Buf::I16(v) => v.iter().map(|&x| i32::from(x)).collect(),
        Buf::I32(v) => v.clone(),
        other => {
            return Err(EngineError::unsupported(format!(
                "{what} of type {}: quantized tensors are UINT8, INT8, UINT16, INT16 or INT32",
                other.dtype()
            )));
        }
    })
}

/// One quantized value: saturate(round_half_even(x / scale) + zero_point).
///
/// The quotient is clamped to the range first, which gives the same result (the bounds are
/// integers) and keeps it below 2²², where adding 1.5·2²³ rounds it half to even (the default
/// rounding mode) into the low bits of the sum, read back as an integer. Neither
/// `round_ties_even` (a libm call on the baseline target) nor the saturating `as i32` (a branch
/// per value) keeps the loop in vector lanes. NaN gives 0, as onnxruntime's conversion does.
#[inline(always)]
pub(crate) fn quantize_one(x: f32, scale: f32, zero_point: i32, range: (i32, i32)) -> i32 {
    round_saturate(x / scale, zero_point, range)
}

/// QuantizeLinear then DequantizeLinear of one value: its code's value, back in FP32.
#[inline(always)]
pub(crate) fn quantize_dequantize_one(x: f32, scale: f32, zero_point: i32, range: (i32, i32)) -> f32 {
    (quantize_one(x, scale, zero_point, range) - zero_point) as f32 * scale
}

/// [`quantize_dequantize_one`] of every value of `v`, in place and in vector lanes: the quotient by
/// [`quotient`] where the caller was compiled with FMA and the scale allows it (the same values;
/// a standalone QDQ pair's loop was bound by the division).
#[inline(always)]
pub(crate) fn quantize_dequantize_in_place<const FMA: bool>(
    v: &mut [f32],
    scale: f32,
    zero_point: i32,
    range: (i32, i32),
) {
    match reciprocal(scale) {
        Some(inv) if FMA => {
            for x in v {
                *x =
                    (round_saturate(quotient(*x, scale, inv), zero_point, range) - zero_point) as f32 * scale;
            }
        }
        _ => v
            .iter_mut()
            .for_each(|x| *x = quantize_dequantize_one(*x, scale, zero_point, range)),
    }
}

/// saturate(round_half_even(v) + zero_point): [`quantize_one`] of the quotient `v = x / scale`.
#[inline(always)]
pub(super) fn round_saturate(v: f32, zero_point: i32, range: (i32, i32)) -> i32 {
    // NaN: 0 once the zero point is added (every quantized type's range holds 0)
    let v = if v.is_nan() { -(zero_point as f32) } else { v };
    round_saturate_finite(v, zero_point, range)
}

/// [`round_saturate`] of a `v` known not to be NaN (a finite quotient): the clamp alone, as
/// compare-and-select (`f32::max` and `min` would also test for NaN).
#[inline(always)]
pub(super) fn round_saturate_finite(v: f32, zero_point: i32, (lo, hi): (i32, i32)) -> i32 {
    let (lo, hi) = ((lo - zero_point) as f32, (hi - zero_point) as f32);
    let v = if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    };
    round_clamped(v, zero_point)
}

/// `round_half_even(v) + zero_point` for a `v` already clamped to the range less the zero point
/// (finite, below 2²² in magnitude): 1.5 · 2²³ added rounds it into the low bits of the sum.
#[inline(always)]
fn round_clamped(v: f32, zero_point: i32) -> i32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 · 2²³: the sum's unit in the last place is 1
    ((v + SHIFT).to_bits() as i32 - SHIFT.to_bits() as i32) + zero_point
}

/// `1 / scale`, when [`quotient`] can divide by `scale` with it: a scale of magnitude 2⁻⁶⁴ to 2⁶⁴
/// (every scale a quantizer picks; others take the division).
#[inline]
pub(super) fn reciprocal(scale: f32) -> Option<f32> {
    const LIMIT: f32 = 18_446_744_073_709_551_616.0; // 2⁶⁴
    (scale.abs() >= 1.0 / LIMIT && scale.abs() <= LIMIT).then(|| 1.0 / scale)
}

/// `x / scale`, correctly rounded as the division is, from `inv` = [`reciprocal`]`(scale)`:
/// `q = x · inv` is within an ulp of the quotient, the residual `x − q · scale` is exact in one
/// fused multiply-add, and `q + residual · inv` rounds to the correctly rounded quotient
/// (Markstein's theorem; `inv` is the correctly rounded reciprocal). That holds while the residual is
/// a normal number, i.e. for |x| ≥ 2⁻¹⁰⁰; below, the quotient may be an ulp off, but by the scale's
/// bounds in [`reciprocal`] it is then below 2⁻³⁶, far from any code but zero. A vector division issues once
/// every 10–16 cycles, a multiply and two fused multiply-adds at two a cycle: QuantizeLinear's
/// and the QDQ pair's loops were bound by the division. Infinite x keeps its infinite product
/// (the residual would be NaN); NaN stays NaN. Callers compiled without FMA divide.
#[inline(always)]
pub(super) fn quotient(x: f32, scale: f32, inv: f32) -> f32 {
    let q = x * inv;
    if q.is_infinite() {
        q
    } else {
        finite_quotient(x, scale, inv)
    }
}

/// [`quotient`] where the caller knows `x · inv` is finite.
#[inline(always)]
pub(super) fn finite_quotient(x: f32, scale: f32, inv: f32) -> f32 {
    let q = x * inv;
    let r = (-q).mul_add(scale, x);
    r.mul_add(inv, q)
}

simd::multiversion! {
    /// `y[i] = quantize_one(x[i], scale, zero_point, range)`, in vector lanes.
    pub(crate) fn quantize_run(x: &[f32], y: &mut [i32], scale: f32, zero_point: i32, range: (i32, i32)) = quantize_lanes;
}

#[inline(always)]
fn quantize_lanes<const FMA: bool>(x: &[f32], y: &mut [i32], scale: f32, zero_point: i32, range: (i32, i32)) {
    codes_into::<FMA, _>(x, y, scale, zero_point, range, |q| q);
}

/// `y[i] = out(quantize_one(x[i], scale, zero_point, range))`, the quotient by [`quotient`] where the
/// caller was compiled with FMA and the scale allows it; the loop of each per-tensor quantize kernel.
#[inline(always)]
fn codes_into<const FMA: bool, T>(
    x: &[f32],
    y: &mut [T],
    scale: f32,
    zero_point: i32,
    range: (i32, i32),
    out: impl Fn(i32) -> T,
) {
    match reciprocal(scale) {
        Some(inv) if FMA => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = out(round_saturate(quotient(v, scale, inv), zero_point, range));
            }
        }
        _ => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = out(quantize_one(v, scale, zero_point, range));
            }
        }
    }
}

simd::multiversion! {
    /// `y[i] = (x[i] − zero_point) · scale` for values whose difference fits i32, in vector lanes.
    pub(crate) fn dequantize_run(x: &[i32], y: &mut [f32], scale: f32, zero_point: i32) = dequantize_lanes;
}

#[inline(always)]
fn dequantize_lanes<const FMA: bool>(x: &[i32], y: &mut [f32], scale: f32, zero_point: i32) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - zero_point) as f32 * scale;
    }
}

/// QLinearConv's and QLinearMatMul's output: `y[i]` the code of `quantize_one((acc[i] + bias) ·
/// mult[i], 1, zero_point, range)` (the bias added with i32 wrapping), `mult` one value or one per
/// element, in vector lanes down to the narrowing of each code.
#[inline(always)]
fn requantize_lanes<T: Code>(
    acc: &[i32],
    y: &mut [T],
    bias: i32,
    mult: &[f32],
    zero_point: i32,
    range: (i32, i32),
) {
    let scaled = |v: i32, m: f32| v.wrapping_add(bias) as f32 * m;
    // an INT32 sum times a finite multiplier below 2⁹⁰ is finite: no NaN or infinity to round
    if mult.iter().all(|m| m.abs() < 1.237_94e27) {
        each_code(acc, y, mult, |v, m| {
            T::of(round_saturate_finite(scaled(v, m), zero_point, range))
        });
    } else {
        each_code(acc, y, mult, |v, m| {
            T::of(quantize_one(scaled(v, m), 1.0, zero_point, range))
        });
    }
}

/// `y[i] = code(acc[i], mult[i])`, `mult` one value or one per element.
#[inline(always)]
fn each_code<T>(acc: &[i32], y: &mut [T], mult: &[f32], code: impl Fn(i32, f32) -> T) {
    if let [m] = mult {
        for (o, &v) in y.iter_mut().zip(acc) {
            *o = code(v, *m);
        }
    } else {
        for ((o, &v), &m) in y.iter_mut().zip(acc).zip(mult) {
            *o = code(v, m);
        }
    }
}

#[inline(always)]
fn requantize_u8_lanes<const FMA: bool>(
    acc: &[i32],
    y: &mut [u8],
    bias: i32,
    mult: &[f32],
    zero_point: i32,
    range: (i32, i32),
) {
    requantize_lanes(acc, y, bias, mult, zero_point, range);
}

#[inline(always)]
fn requantize_i8_lanes<const FMA: bool>(
    acc: &[i32],
    y: &mut [i8],
    bias: i32,
    mult: &[f32],
    zero_point: i32,
    range: (i32, i32),
) {
    requantize_lanes(acc, y, bias, mult, zero_point, range);
}

simd::multiversion! {
    /// [`requantize_lanes`] into UINT8 codes.
    fn requantize_u8(acc: &[i32], y: &mut [u8], bias: i32, mult: &[f32], zero_point: i32, range: (i32, i32)) = requantize_u8_lanes;
}

simd::multiversion! {
    /// [`requantize_lanes`] into INT8 codes.
    fn requantize_i8(acc: &[i32], y: &mut [i8], bias: i32, mult: &[f32], zero_point: i32, range: (i32, i32)) = requantize_i8_lanes;
}

/// An 8-bit code type a requantized product writes.
pub(crate) trait Code: Copy + Default + Send + Sync {
    /// The code of a value already saturated to the type's range.
    fn of(v: i32) -> Self;

    /// [`requantize_lanes`] for this type, compiled for the CPU's vector instructions.
    #[allow(clippy::too_many_arguments)]
    fn requantize(
        isa: simd::Isa,
        acc: &[i32],
        y: &mut [Self],
        bias: i32,
        mult: &[f32],
        zero_point: i32,
        range: (i32, i32),
    );
}

impl Code for u8 {
    fn of(v: i32) -> u8 {
        v as u8
    }

    fn requantize(
        isa: simd::Isa,
        acc: &[i32],
        y: &mut [u8],
        bias: i32,
        mult: &[f32],
        zp: i32,
        range: (i32, i32),
    ) {
        requantize_u8(isa, acc, y, bias, mult, zp, range);
    }
}

impl Code for i8 {
    fn of(v: i32) -> i8 {
        v as i8
    }

    fn requantize(
        isa: simd::Isa,
        acc: &[i32],
        y: &mut [i8],
        bias: i32,
        mult: &[f32],
        zp: i32,
        range: (i32, i32),
    ) {
        requantize_i8(isa, acc, y, bias, mult, zp, range);
    }
}

/// The INT32 bias a requantization adds to the sums before scaling them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bias<'a> {
    None,
    /// one per row of the product (a convolution's output channels)
    Rows(&'a [i32]),
    /// one per column (a matrix product's, the QDQ pass's Gemm bias)
    Columns(&'a [i32]),
}

/// QLinearConv's and QLinearMatMul's output as a product's sink: row `i`, column `j`'s sum becomes
/// the code of `(sum + bias) · row_mult[i] · col_mult[j]` (each parameter one value or one per
/// row / column), so the codes are written as the rows are finished.
pub(crate) struct Requantize<'a, T> {
    bias: Bias<'a>,
    row_mult: &'a [f32],
    col_mult: &'a [f32],
    zero_point: i32,
    range: (i32, i32),
    isa: simd::Isa,
    code: std::marker::PhantomData<T>,
}

impl<'a, T> Requantize<'a, T> {
    pub(crate) fn new(
        bias: Bias<'a>,
        row_mult: &'a [f32],
        col_mult: &'a [f32],
        zero_point: i32,
        range: (i32, i32),
    ) -> Requantize<'a, T> {
        Requantize {
            bias,
            row_mult,
            col_mult,
            zero_point,
            range,
            isa: simd::isa(),
            code: std::marker::PhantomData,
        }
    }
}

impl<T: Code> Sink for Requantize<'_, T> {
    type Out = T;

    fn put(&self, i: usize, j: usize, sums: &[i32], dst: &mut [T]) {
        self.codes(i, j, sums, 0, dst);
    }

    /// The shift joins the bias: the values are read, not changed.
    fn put_shifted(&self, i: usize, j: usize, values: &mut [i32], shift: i32, dst: &mut [T]) {
        self.codes(i, j, values, shift, dst);
    }
}

impl<T: Code> Requantize<'_, T> {
    /// Row `i`'s codes for columns `j…` of `sums` that each fall `shift` short (wrapping).
    fn codes(&self, i: usize, j: usize, sums: &[i32], shift: i32, dst: &mut [T]) {
        let per = |v: &[f32], k: usize| if v.len() == 1 { v[0] } else { v[k] };
        let bias = match self.bias {
            Bias::Rows(b) => b[i],
            Bias::None | Bias::Columns(_) => 0,
        }
        .wrapping_add(shift);
        let row = per(self.row_mult, i);
        let (zp, range) = (self.zero_point, self.range);
        if self.col_mult.len() == 1 && !matches!(self.bias, Bias::Columns(_)) {
            T::requantize(self.isa, sums, dst, bias, &[row * self.col_mult[0]], zp, range);
            return;
        }
        // 64 columns at a time: their multipliers, and their sums with their bias
        let (mut mults, mut biased) = ([0f32; 64], [0i32; 64]);
        for (at, (sums, dst)) in sums.chunks(64).zip(dst.chunks_mut(64)).enumerate() {
            let first = j + at * 64;
            let sums = match self.bias {
                Bias::Columns(b) => {
                    let biased = &mut biased[..sums.len()];
                    for ((t, &s), &b) in biased.iter_mut().zip(sums).zip(&b[first..]) {
                        *t = s.wrapping_add(b);
                    }
                    &*biased
                }
                Bias::None | Bias::Rows(_) => sums,
            };
            let mults = &mut mults[..sums.len()];
            for (k, m) in mults.iter_mut().enumerate() {
                *m = row * per(self.col_mult, first + k);
            }
            T::requantize(self.isa, sums, dst, bias, mults, zp, range);
        }
    }
}

/// QuantizeLinear: `x` with `scale` and `zero_point` laid out by `layout`, saturated to `range`.
pub(crate) fn quantize(
    x: &[f32],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    range: (i32, i32),
) -> Vec<i32> {
    let isa = simd::isa();
    let mut y = vec![0; x.len()];
    layout.runs(x.len(), |r, p, step| {
        if step == 0 {
            let z = zero_point.map_or(0, |z| z[p]);
            quantize_run(isa, &x[r.clone()], &mut y[r], scale[p], z, range);
            return;
        }
        for (j, i) in r.enumerate() {
            let q = p + j * step;
            y[i] = quantize_one(x[i], scale[q], zero_point.map_or(0, |z| z[q]), range);
        }
    });
    y
}

/// QuantizeLinear to UINT8 or INT8 (`dtype`), the codes written straight into the output's buffer
/// (the common case: no i32 values in between); `None` for the other integer types.
pub(crate) fn quantize_8bit(
    x: &[f32],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    dtype: DataType,
) -> Option<Buf> {
    Some(match dtype {
        DataType::U8 => {
            let mut y = vec![0u8; x.len()];
            quantize_bytes(x, scale, zero_point, layout, (0, 255), &mut y);
            Buf::U8(y)
        }
        DataType::I8 => {
            let mut y = vec![0i8; x.len()];
            quantize_bytes(
                x,
                scale,
                zero_point,
                layout,
                (-128, 127),
                bytemuck::cast_slice_mut(&mut y),
            );
            Buf::I8(y)
        }
        _ => return None,
    })
}

/// [`quantize`] into each code's byte: the value for UINT8, its two's complement for INT8 (`range`
/// says which).
fn quantize_bytes(
    x: &[f32],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    range: (i32, i32),
    y: &mut [u8],
) {
    let isa = simd::isa();
    layout.runs(x.len(), |r, p, step| {
        if step == 0 {
            let (s, z) = (scale[p], zero_point.map_or(0, |z| z[p]));
            let x = &x[r.clone()];
            in_pieces(&mut y[r], |piece, y| {
                quantize_bytes_run(isa, &x[piece], y, s, z, range)
            });
            return;
        }
        for (j, i) in r.enumerate() {
            let q = p + j * step;
            y[i] = quantize_one(x[i], scale[q], zero_point.map_or(0, |z| z[q]), range) as u8;
        }
    });
}

simd::multiversion! {
    /// `y[i]` = the byte of `quantize_one(x[i], scale, zero_point, range)` (an 8-bit range: INT8 codes
    /// come out in two's complement), in vector lanes.
    pub(crate) fn quantize_bytes_run(x: &[f32], y: &mut [u8], scale: f32, zero_point: i32, range: (i32, i32)) = quantize_bytes_lanes;
}

#[inline(always)]
fn quantize_bytes_lanes<const FMA: bool>(
    x: &[f32],
    y: &mut [u8],
    scale: f32,
    zero_point: i32,
    range: (i32, i32),
) {
    codes_into::<FMA, _>(x, y, scale, zero_point, range, |q| q as u8);
}

/// DequantizeLinear of UINT8 or INT8 codes, read as they are (no i32 copy of the input first);
/// `None` for other buffers.
pub(crate) fn dequantize_8bit(
    x: &Buf,
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
) -> Option<Vec<f32>> {
    let isa = simd::isa();
    Some(match x {
        Buf::U8(v) => dequantize_from(
            v,
            scale,
            zero_point,
            layout,
            |x, y, s, z| dequantize_u8_run(isa, x, y, s, z),
            i32::from,
        ),
        Buf::I8(v) => dequantize_from(
            v,
            scale,
            zero_point,
            layout,
            |x, y, s, z| dequantize_i8_run(isa, x, y, s, z),
            i32::from,
        ),
        _ => return None,
    })
}

/// [`dequantize`] of codes of type `T`: `run` dequantizes a run of one scale, `value` widens one code.
fn dequantize_from<T: Copy + Sync>(
    x: &[T],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    run: impl Fn(&[T], &mut [f32], f32, i32) + Sync,
    value: impl Fn(T) -> i32,
) -> Vec<f32> {
    // every value is written: the runs cover the tensor
    let mut y = arena::take(x.len());
    layout.runs(x.len(), |r, p, step| {
        if step == 0 {
            let (s, z) = (scale[p], zero_point.map_or(0, |z| z[p]));
            let x = &x[r.clone()];
            in_pieces(&mut y[r], |piece, y| run(&x[piece], y, s, z));
            return;
        }
        for (j, i) in r.enumerate() {
            let q = p + j * step;
            y[i] = (value(x[i]) - zero_point.map_or(0, |z| z[q])) as f32 * scale[q];
        }
    });
    y
}

simd::multiversion! {
    /// `y[i] = (x[i] − zero_point) · scale` of UINT8 codes, in vector lanes.
    pub(crate) fn dequantize_u8_run(x: &[u8], y: &mut [f32], scale: f32, zero_point: i32) = dequantize_u8_lanes;
}

#[inline(always)]
fn dequantize_u8_lanes<const FMA: bool>(x: &[u8], y: &mut [f32], scale: f32, zero_point: i32) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (i32::from(v) - zero_point) as f32 * scale;
    }
}

simd::multiversion! {
    /// `y[i] = (x[i] − zero_point) · scale` of INT8 codes, in vector lanes.
    pub(crate) fn dequantize_i8_run(x: &[i8], y: &mut [f32], scale: f32, zero_point: i32) = dequantize_i8_lanes;
}

#[inline(always)]
fn dequantize_i8_lanes<const FMA: bool>(x: &[i8], y: &mut [f32], scale: f32, zero_point: i32) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (i32::from(v) - zero_point) as f32 * scale;
    }
}

/// DequantizeLinear: (x - zero_point) · scale with the parameters laid out by `layout`. `narrow`
/// says that x and the zero points come from a type of at most 16 bits, so that their difference
/// fits i32; INT32 inputs take the difference in i64.
pub(crate) fn dequantize(
    x: &[i32],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    narrow: bool,
) -> Vec<f32> {
    let isa = simd::isa();
    let mut y = vec![0.0; x.len()];
    layout.runs(x.len(), |r, p, step| {
        if step == 0 && narrow {
            let z = zero_point.map_or(0, |z| z[p]);
            dequantize_run(isa, &x[r.clone()], &mut y[r], scale[p], z);
            return;
        }
        for (j, i) in r.enumerate() {
            let q = p + j * step;
            // i64: an INT32 input minus its zero point may leave the i32 range.
            let centred = i64::from(x[i]) - i64::from(zero_point.map_or(0, |z| z[q]));
            y[i] = centred as f32 * scale[q];
        }
    });
    y
}

/// QuantizeLinear then DequantizeLinear with the same parameters, in one pass: each value rounded
/// and saturated to `range` at its scale and zero point, then taken back to FP32. The values are
/// those of [`dequantize`] of [`quantize`]'s.
pub(crate) fn quantize_dequantize(
    x: &[f32],
    scale: &[f32],
    zero_point: Option<&[i32]>,
    layout: Layout,
    range: (i32, i32),
) -> Vec<f32> {
    let isa = simd::isa();
    // every value is written: the runs cover the tensor
    let mut y = arena::take(x.len());
    if layout == Layout::PerTensor && x.len() >= PAR_MIN {
        // a batch's activations: pieces on the pool's threads, as the element-wise kernels split them
        let (s, z) = (scale[0], zero_point.map_or(0, |z| z[0]));
        y.par_chunks_mut(PAR_MIN / 4)
            .zip(x.par_chunks(PAR_MIN / 4))
            .for_each(|(y, x)| quantize_dequantize_run(isa, x, y, s, z, range));
        return y;
    }
    layout.runs(x.len(), |r, p, step| {
        if step == 0 {
            let z = zero_point.map_or(0, |z| z[p]);
            quantize_dequantize_run(isa, &x[r.clone()], &mut y[r], scale[p], z, range);
            return;
        }
        for (j, i) in r.enumerate() {
            let q = p + j * step;
            let z = zero_point.map_or(0, |z| z[q]);
            y[i] = quantize_dequantize_one(x[i], scale[q], z, range);
        }
    });
    y
}

simd::multiversion! {
    /// `y[i] = (quantize_one(x[i], scale, zero_point, range) − zero_point) · scale`, in vector lanes.
    pub(crate) fn quantize_dequantize_run(
        x: &[f32],
        y: &mut [f32],
        scale: f32,
        zero_point: i32,
        range: (i32, i32),
    ) = quantize_dequantize_lanes;
}

#[inline(always)]
fn quantize_dequantize_lanes<const FMA: bool>(
    x: &[f32],
    y: &mut [f32],
    scale: f32,
    zero_point: i32,
    range: (i32, i32),
) {
    codes_into::<FMA, _>(x, y, scale, zero_point, range, |q| {
        (q - zero_point) as f32 * scale
    });
}

/// DynamicQuantizeLinear: UINT8 values, the scale and the zero point for `x`.
///
/// The range is x's, extended to include 0; an all-zero input gets scale 1 (as onnxruntime does,
/// rather than dividing by zero).
///
/// A large input (an activation of [`PAR_MIN`] values or more) is read in pieces on the pool's threads, both
/// for its range and for its codes: the range of the pieces' ranges is the whole's, so the values are the same.
pub(crate) fn dynamic_quantize(x: &[f32]) -> (Vec<u8>, f32, u8) {
    let isa = simd::isa();
    let (lo, hi) = if x.len() >= PAR_MIN {
        x.par_chunks(PAR_MIN / 4)
            .map(|c| range_with_zero_run(isa, c))
            .reduce(|| (0.0, 0.0), |(l, h), (a, b)| (l.min(a), h.max(b)))
    } else {
        range_with_zero_run(isa, x)
    };
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zero_point = (-lo / scale).clamp(0.0, 255.0).round_ties_even() as i32;
    let mut y = vec![0u8; x.len()];
    in_pieces(&mut y, |piece, y| {
        quantize_bytes_run(isa, &x[piece], y, scale, zero_point, (0, 255))
    });
    (y, scale, zero_point as u8)
}

/// `run(range, piece)` over pieces of `y` (each with its range of indices, for the inputs' matching
/// pieces), on the pool's threads when `y` holds [`PAR_MIN`] values or more (the pieces of an
/// element-wise loop are independent).
pub(super) fn in_pieces<T: Send>(y: &mut [T], run: impl Fn(Range<usize>, &mut [T]) + Sync) {
    const PIECE: usize = PAR_MIN / 4;
    if y.len() >= PAR_MIN {
        y.par_chunks_mut(PIECE)
            .enumerate()
            .for_each(|(k, y)| run(k * PIECE..k * PIECE + y.len(), y));
    } else {
        run(0..y.len(), y);
    }
}

simd::multiversion! {
    /// The smallest and largest of `x` and 0 (NaN ignored), in vector lanes.
    pub(crate) fn range_with_zero_run(x: &[f32]) -> (f32, f32) = range_with_zero_lanes;
}

#[inline(always)]
fn range_with_zero_lanes<const FMA: bool>(x: &[f32]) -> (f32, f32) {
    const LANES: usize = 16;
    let (mut lo, mut hi) = ([0f32; LANES], [0f32; LANES]);
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    // compare-and-select rather than `f32::min`/`max`, whose NaN rule LLVM kept lane by lane
    // (scalar, through the stack); a NaN compares false and is passed over the same way
    for c in chunks {
        for j in 0..LANES {
            lo[j] = if c[j] < lo[j] { c[j] } else { lo[j] };
            hi[j] = if c[j] > hi[j] { c[j] } else { hi[j] };
        }
    }
    let init = rest.iter().fold((0f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
    lo.iter()
        .zip(&hi)
        .fold(init, |(l, h), (&a, &b)| (l.min(a), h.max(b)))
}

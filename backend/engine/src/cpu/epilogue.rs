//! Fused element-wise tails ([`Epilogue`]) compiled for the CPU: applied by the Conv and matrix
//! product kernels to each piece of a row of their output while it is still in L1, and vectorised
//! unary functions over slices.
//!
//! Sigmoid and the erf GELU use the vectorising approximations of `cpu::fastmath`.
//!
//! The output is seen as `rows × row_len` (a Conv's `[N·M, H·W]`, a MatMul's `[batch·M, N]`). Each
//! binary operand is classified once: one value for all (`Scalar`), one value per row (`Row`), one
//! per column (`Col`) or the output's own shape (`Full`); any other broadcast is expanded to `Full`.

use std::borrow::Cow;

use crate::cpu::buf::Buf;
use crate::cpu::buf::In;
use crate::cpu::elementwise::unary_f32;
use crate::cpu::fastmath;
use crate::cpu::movement;
use crate::cpu::quant::linear::quantize_dequantize_in_place;
use crate::cpu::simd::{Isa, multiversion};
use crate::error::{EngineError, Result};
use crate::ir::{BinaryOp, Epilogue, EpilogueStep, UnaryOp};

/// An element-wise tail applied to pieces of rows of a kernel's output.
pub(crate) trait RowEpilogue: Sync {
    /// True when `apply` does nothing (lets a kernel skip the call).
    fn is_noop(&self) -> bool;
    /// Apply to each `rows[i]`, which is row `row0 + i` of the output, columns
    /// `col0..col0 + rows[i].len()`.
    fn apply_rows(&self, row0: usize, col0: usize, rows: &mut [&mut [f32]]);
    /// Hint that rows `row0..row0 + rows`, columns `col0..col0 + cols` will be applied to soon:
    /// operands read there are fetched into the cache meanwhile.
    fn prefetch(&self, _row0: usize, _col0: usize, _rows: usize, _cols: usize) {}
    /// The whole tail as an activation a kernel applies to its registers before storing them
    /// (then the kernel does not call `apply_rows`), when it is one.
    fn in_registers(&self) -> Option<RegisterAct> {
        None
    }
}

/// An activation the matrix-product kernels apply in registers, with the same results as the
/// tail's step (NaN and signed zeros included).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RegisterAct {
    /// `max(x, 0)`, NaN to 0, as [`UnaryOp::Relu`]
    Relu,
    /// below `lo` to `lo`, above `hi` to `hi`, NaN kept, as [`UnaryOp::Clip`]
    Clip(f32, f32),
    /// `x · clamp(x/6 + 1/2, 0, 1)`, as [`UnaryOp::HardSwish`]
    HardSwish,
    /// `1 / (1 + e^−x)` with `fastmath::exp::<true>`, as [`UnaryOp::Sigmoid`] where FMA is used
    Sigmoid,
    /// `x · sigmoid(x)`, as [`UnaryOp::Silu`] where FMA is used
    Silu,
}

/// No tail.
pub(crate) struct NoTail;

impl RowEpilogue for NoTail {
    fn is_noop(&self) -> bool {
        true
    }

    fn apply_rows(&self, _row0: usize, _col0: usize, _rows: &mut [&mut [f32]]) {}
}

/// A compiled [`Epilogue`] for one output tensor.
pub(crate) struct Epi<'a> {
    steps: Vec<Step<'a>>,
    row_len: usize,
    isa: Isa,
}

/// An [`Epi`] seen from a kernel whose row 0 is row `row0` of the whole output (one image, one
/// group, one batch entry).
pub(crate) struct Offset<'e, 'a> {
    epi: &'e Epi<'a>,
    row0: usize,
}

enum Operand<'a> {
    Scalar(f32),
    /// `rows` values
    Row(Vec<f32>),
    /// `row_len` values
    Col(Cow<'a, [f32]>),
    /// `rows × row_len` values
    Full(Cow<'a, [f32]>),
}

/// A binary function with the operand already on the side it goes (`R*`: operand first).
#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    RSub,
    Mul,
    Div,
    RDiv,
    Max,
    Min,
}

enum Step<'a> {
    Unary(UnaryOp),
    Binary(Bin, Operand<'a>),
}

fn f32_of<'a>(b: &'a Buf) -> Cow<'a, [f32]> {
    match b {
        Buf::F32(v) => Cow::Borrowed(v.as_slice()),
        other => Cow::Owned(other.to_f32()),
    }
}

impl<'a> Epi<'a> {
    /// Compile `e` for an output of shape `out` seen as rows of `out[split..]`; operands are node
    /// inputs `ins[step.input]` that broadcast to `out`.
    pub(crate) fn new(e: &Epilogue, ins: &[In<'a>], out: &[usize], split: usize) -> Result<Epi<'a>> {
        Epi::with_isa(e, ins, out, split, crate::cpu::simd::isa())
    }

    /// [`Epi::new`] for a given instruction set (tests compare them).
    pub(crate) fn with_isa(
        e: &Epilogue,
        ins: &[In<'a>],
        out: &[usize],
        split: usize,
        isa: Isa,
    ) -> Result<Epi<'a>> {
        let split = split.min(out.len());
        let row_len: usize = out[split..].iter().product();
        let mut steps = Vec::with_capacity(e.steps.len());
        for s in &e.steps {
            steps.push(match s {
                EpilogueStep::Unary(u) => Step::Unary(*u),
                EpilogueStep::Binary {
                    op,
                    input,
                    operand_first,
                } => {
                    let bin = match (op, operand_first) {
                        (BinaryOp::Add, _) => Bin::Add,
                        (BinaryOp::Sub, false) => Bin::Sub,
                        (BinaryOp::Sub, true) => Bin::RSub,
                        (BinaryOp::Mul, _) => Bin::Mul,
                        (BinaryOp::Div, false) => Bin::Div,
                        (BinaryOp::Div, true) => Bin::RDiv,
                        (BinaryOp::Max, _) => Bin::Max,
                        (BinaryOp::Min, _) => Bin::Min,
                        (other, _) => {
                            return Err(EngineError::internal(format!(
                                "epilogue step {other:?} has no CPU form"
                            )));
                        }
                    };
                    let (b, sb) =
                        ins.get(*input).copied().flatten().ok_or_else(|| {
                            EngineError::internal(format!("missing epilogue input {input}"))
                        })?;
                    Step::Binary(bin, classify(f32_of(b), sb, out, split)?)
                }
            });
        }
        Ok(Epi { steps, row_len, isa })
    }

    /// True when there is nothing to apply.
    pub(crate) fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The view of this tail for a kernel whose row 0 is row `row0` of the output.
    pub(crate) fn offset(&self, row0: usize) -> Offset<'_, 'a> {
        Offset { epi: self, row0 }
    }

    /// Apply to `v`: row `row`, columns `col0..col0 + v.len()` of the output.
    pub(crate) fn apply(&self, row: usize, col0: usize, v: &mut [f32]) {
        self.apply_rows_at(row, col0, &mut [v]);
    }

    /// Fetch into the cache what applying to rows `row0..row0 + rows`, columns
    /// `col0..col0 + cols` will read: the operands that hold a value per element or per column.
    pub(crate) fn prefetch_at(&self, row0: usize, col0: usize, rows: usize, cols: usize) {
        for s in &self.steps {
            match s {
                Step::Binary(_, Operand::Full(d)) => {
                    let at = row0 * self.row_len + col0;
                    if at < d.len() {
                        crate::cpu::simd::prefetch_rows(d[at..].as_ptr(), self.row_len, rows, cols);
                    }
                }
                Step::Binary(_, Operand::Col(c)) if col0 < c.len() => {
                    crate::cpu::simd::prefetch_rows(c[col0..].as_ptr(), 0, 1, cols);
                }
                _ => {}
            }
        }
    }

    /// The whole tail as a [`RegisterAct`], when it is a single step of one.
    pub(crate) fn in_registers(&self) -> Option<RegisterAct> {
        match self.steps.as_slice() {
            [Step::Unary(UnaryOp::Relu)] => Some(RegisterAct::Relu),
            [Step::Unary(UnaryOp::Clip { min, max })] => Some(RegisterAct::Clip(*min as f32, *max as f32)),
            [Step::Unary(UnaryOp::HardSwish)] => Some(RegisterAct::HardSwish),
            // the tiles' exp fuses its multiply-adds, as the tail's does with AVX2 or AVX-512
            [Step::Unary(UnaryOp::Sigmoid)] if self.isa != Isa::Scalar => Some(RegisterAct::Sigmoid),
            [Step::Unary(UnaryOp::Silu)] if self.isa != Isa::Scalar => Some(RegisterAct::Silu),
            _ => None,
        }
    }

    /// Apply to `rows[i]`: row `row0 + i`, columns `col0..col0 + rows[i].len()` of the output.
    pub(crate) fn apply_rows_at(&self, row0: usize, col0: usize, rows: &mut [&mut [f32]]) {
        if !self.steps.is_empty() {
            apply_steps(self.isa, &self.steps, self.row_len, row0, col0, rows);
        }
    }
}

impl RowEpilogue for Offset<'_, '_> {
    fn is_noop(&self) -> bool {
        self.epi.is_empty()
    }

    fn apply_rows(&self, row0: usize, col0: usize, rows: &mut [&mut [f32]]) {
        self.epi.apply_rows_at(self.row0 + row0, col0, rows);
    }

    fn prefetch(&self, row0: usize, col0: usize, rows: usize, cols: usize) {
        self.epi.prefetch_at(self.row0 + row0, col0, rows, cols);
    }

    fn in_registers(&self) -> Option<RegisterAct> {
        self.epi.in_registers()
    }
}

/// Classify an operand of shape `sb` broadcast to `out` for rows split at `split`.
fn classify<'a>(t: Cow<'a, [f32]>, sb: &[usize], out: &[usize], split: usize) -> Result<Operand<'a>> {
    if t.len() == 1 {
        return Ok(Operand::Scalar(t[0]));
    }
    if sb.len() > out.len() {
        return Err(EngineError::internal(format!(
            "epilogue operand {sb:?} does not broadcast to {out:?}"
        )));
    }
    let mut full = vec![1; out.len() - sb.len()];
    full.extend_from_slice(sb);
    if full.iter().zip(out).any(|(&a, &o)| a != o && a != 1) {
        return Err(EngineError::internal(format!(
            "epilogue operand {sb:?} does not broadcast to {out:?}"
        )));
    }
    if full == out {
        return Ok(Operand::Full(t));
    }
    if full[split..].iter().all(|&d| d == 1) {
        return Ok(Operand::Row(movement::expand(&t, &full[..split], &out[..split])));
    }
    if full[..split].iter().all(|&d| d == 1) {
        let col = if full[split..] == out[split..] {
            t
        } else {
            Cow::Owned(movement::expand(&t, &full[split..], &out[split..]))
        };
        return Ok(Operand::Col(col));
    }
    Ok(Operand::Full(Cow::Owned(movement::expand(&t, &full, out))))
}

#[inline(always)]
fn nan_max(x: f32, t: f32) -> f32 {
    if x.is_nan() || t.is_nan() {
        f32::NAN
    } else {
        x.max(t)
    }
}

#[inline(always)]
fn nan_min(x: f32, t: f32) -> f32 {
    if x.is_nan() || t.is_nan() {
        f32::NAN
    } else {
        x.min(t)
    }
}

#[inline(always)]
fn apply_steps_body<const FMA: bool>(
    steps: &[Step<'_>],
    row_len: usize,
    row0: usize,
    col0: usize,
    rows: &mut [&mut [f32]],
) {
    for s in steps {
        match s {
            Step::Unary(u) => unary_rows::<FMA>(*u, rows),
            Step::Binary(bin, t) => {
                let at = At { row_len, row0, col0 };
                match bin {
                    Bin::Add => binary_rows(t, at, rows, |x, t| x + t),
                    Bin::Sub => binary_rows(t, at, rows, |x, t| x - t),
                    Bin::RSub => binary_rows(t, at, rows, |x, t| t - x),
                    Bin::Mul => binary_rows(t, at, rows, |x, t| x * t),
                    Bin::Div => binary_rows(t, at, rows, |x, t| x / t),
                    Bin::RDiv => binary_rows(t, at, rows, |x, t| t / x),
                    Bin::Max => binary_rows(t, at, rows, nan_max),
                    Bin::Min => binary_rows(t, at, rows, nan_min),
                }
            }
        }
    }
}

multiversion! {
    fn apply_steps(steps: &[Step<'_>], row_len: usize, row0: usize, col0: usize, rows: &mut [&mut [f32]]) = apply_steps_body;
}

/// Where a batch of row pieces lies in the output.
#[derive(Clone, Copy)]
struct At {
    row_len: usize,
    row0: usize,
    col0: usize,
}

/// `x = f(x, t)` over the row pieces, `t` taken from the operand at the same place.
#[inline(always)]
fn binary_rows(t: &Operand<'_>, at: At, rows: &mut [&mut [f32]], f: impl Fn(f32, f32) -> f32 + Copy) {
    for (i, v) in rows.iter_mut().enumerate() {
        let row = at.row0 + i;
        let len = v.len();
        let ts: &[f32] = match t {
            Operand::Scalar(t) => {
                let t = *t;
                v.iter_mut().for_each(|x| *x = f(*x, t));
                continue;
            }
            Operand::Row(r) => {
                let t = r[row];
                v.iter_mut().for_each(|x| *x = f(*x, t));
                continue;
            }
            Operand::Col(c) => &c[at.col0..at.col0 + len],
            Operand::Full(d) => &d[row * at.row_len + at.col0..][..len],
        };
        v.iter_mut().zip(ts).for_each(|(x, &t)| *x = f(*x, t));
    }
}

/// `x = f(x)` over the row pieces.
#[inline(always)]
fn map_rows(rows: &mut [&mut [f32]], f: impl Fn(f32) -> f32) {
    for v in rows.iter_mut() {
        v.iter_mut().for_each(|x| *x = f(*x));
    }
}

/// `x = u(x)` over the row pieces, with the match on `u` outside the loops so that each loop
/// vectorises.
#[inline(always)]
fn unary_rows<const FMA: bool>(u: UnaryOp, rows: &mut [&mut [f32]]) {
    match u {
        UnaryOp::Relu => map_rows(rows, |x| x.max(0.0)),
        UnaryOp::LeakyRelu { alpha } => map_rows(rows, |x| if x >= 0.0 { x } else { alpha * x }),
        UnaryOp::HardSigmoid { alpha, beta } => map_rows(rows, |x| {
            crate::cpu::simd::fmadd::<FMA>(alpha, x, beta).clamp(0.0, 1.0)
        }),
        UnaryOp::HardSwish => map_rows(rows, |x| x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)),
        UnaryOp::Clip { min, max } => {
            let (lo, hi) = (min as f32, max as f32);
            map_rows(rows, |x| {
                let y = if x < lo { lo } else { x };
                if y > hi { hi } else { y }
            })
        }
        UnaryOp::Abs => map_rows(rows, |x| x.abs()),
        UnaryOp::Neg => map_rows(rows, |x| -x),
        UnaryOp::Sqrt => map_rows(rows, |x| x.sqrt()),
        UnaryOp::Reciprocal => map_rows(rows, |x| 1.0 / x),
        UnaryOp::Sigmoid => map_rows(rows, fastmath::sigmoid::<FMA>),
        UnaryOp::Tanh => map_rows(rows, fastmath::tanh::<FMA>),
        UnaryOp::Silu => map_rows(rows, |x| x * fastmath::sigmoid::<FMA>(x)),
        UnaryOp::Gelu { tanh: false } => map_rows(rows, fastmath::gelu::<FMA>),
        UnaryOp::Erf => map_rows(rows, fastmath::erf::<FMA>),
        UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        } => rows
            .iter_mut()
            .for_each(|v| quantize_dequantize_in_place::<FMA>(v, scale, zero_point, (lo, hi))),
        other => map_rows(rows, |x| unary_f32(other, x)),
    }
}

#[inline(always)]
fn unary_body<const FMA: bool>(u: UnaryOp, v: &mut [f32]) {
    unary_rows::<FMA>(u, &mut [v]);
}

multiversion! {
    fn unary_isa(u: UnaryOp, v: &mut [f32]) = unary_body;
}

/// Apply `u` in place to every element of `v` (vectorised where `u` allows).
pub(crate) fn unary_slice(u: UnaryOp, v: &mut [f32]) {
    unary_isa(crate::cpu::simd::isa(), u, v);
}

#[cfg(test)]
mod tests;

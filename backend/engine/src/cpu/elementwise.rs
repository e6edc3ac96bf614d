//! Element-wise kernels: unary functions, broadcast binary ops, Where, Cast, epilogues.

use rayon::prelude::*;

use crate::cpu::buf::Buf;
use crate::cpu::epilogue::unary_slice;
use crate::cpu::num::{Num, erf, erf_f32};
use crate::cpu::quant::linear::quantize_dequantize_one;
use crate::error::{EngineError, Result};
use crate::ir::{BinaryOp, UnaryOp};
use crate::tensor::DataType;

/// Element-wise results of at least this many elements are computed over the pool's threads.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// f32 form of a unary function (the hot path).
#[inline]
pub(crate) fn unary_f32(u: UnaryOp, x: f32) -> f32 {
    match u {
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Erf => erf_f32(x),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => {
            if x >= 0.0 {
                1.0 / (1.0 + (-x).exp())
            } else {
                let e = x.exp();
                e / (1.0 + e)
            }
        }
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Not => f32::from(u8::from(x == 0.0)),
        UnaryOp::IsNaN | UnaryOp::IsInf { .. } => f32::from(u8::from(u.test_float(f64::from(x)))),
        UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        } => quantize_dequantize_one(x, scale, zero_point, (lo, hi)),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::LeakyRelu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                alpha * x
            }
        }
        UnaryOp::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * (x.exp() - 1.0)
            }
        }
        UnaryOp::Selu { alpha, gamma } => {
            if x > 0.0 {
                gamma * x
            } else {
                gamma * alpha * (x.exp() - 1.0)
            }
        }
        UnaryOp::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
        UnaryOp::HardSwish => x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0),
        UnaryOp::Silu => x * unary_f32(UnaryOp::Sigmoid, x),
        UnaryOp::Softplus => {
            if x > 20.0 {
                x
            } else {
                x.exp().ln_1p()
            }
        }
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnaryOp::Mish => {
            let sp = if x > 20.0 { x } else { x.exp().ln_1p() };
            x * sp.tanh()
        }
        UnaryOp::Gelu { tanh } => {
            if tanh {
                0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())
            } else {
                0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2))
            }
        }
        UnaryOp::Clip { min, max } => {
            // numpy semantics: lower bound first, then upper (min > max gives max)
            let (lo, hi) = (min as f32, max as f32);
            let y = if x < lo { lo } else { x };
            if y > hi { hi } else { y }
        }
    }
}

/// f64 form of a unary function.
pub(crate) fn unary_f64(u: UnaryOp, x: f64) -> f64 {
    match u {
        UnaryOp::Erf => erf(x),
        UnaryOp::Gelu { tanh: false } => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::Softplus => x.exp().ln_1p(),
        UnaryOp::Mish => x * x.exp().ln_1p().tanh(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Clip { min, max } => x.max(min).min(max),
        UnaryOp::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                f64::from(alpha) * (x.exp() - 1.0)
            }
        }
        UnaryOp::Selu { alpha, gamma } => {
            if x > 0.0 {
                f64::from(gamma) * x
            } else {
                f64::from(gamma) * f64::from(alpha) * (x.exp() - 1.0)
            }
        }
        other => f64::from(unary_f32(other, x as f32)),
    }
}

/// Runs `body(start, piece)` over `res` cut into pieces of whole `unit`-element runs, on the pool's
/// threads when `res` holds at least [`PAR_MIN`] elements (`start`: the piece's first index in `res`).
///
/// `body` is a trait object so that the pool's machinery is compiled once per element type: generic
/// over each operation's closure, the element-wise ops instantiated it about a thousand times, which
/// was most of the engine's build time. The operation's own loop stays monomorphic inside `body`.
fn for_pieces<O: Send>(res: &mut [O], unit: usize, body: &(dyn Fn(usize, &mut [O]) + Sync)) {
    if res.len() < PAR_MIN {
        body(0, res);
        return;
    }
    let piece = (PAR_MIN / 4).div_ceil(unit.max(1)) * unit.max(1);
    res.par_chunks_mut(piece)
        .enumerate()
        .for_each(|(i, d)| body(i * piece, d));
}

/// `f` of each value of `v`, into `res` (as long as `v`).
fn map_into<T: Copy + Send + Sync, O: Send>(v: &[T], f: impl Fn(T) -> O + Sync + Send, res: &mut [O]) {
    for_pieces(res, 1, &|s, d| {
        d.iter_mut().zip(&v[s..]).for_each(|(o, &x)| *o = f(x))
    });
}

fn map_vec<T: Copy + Send + Sync, O: Send + Copy + Default>(
    v: &[T],
    f: impl Fn(T) -> O + Sync + Send,
) -> Vec<O> {
    let mut res = vec![O::default(); v.len()];
    map_into(v, f, &mut res);
    res
}

fn int_unary<T: Num>(u: UnaryOp, v: &[T]) -> Result<Vec<T>> {
    Ok(match u {
        UnaryOp::Abs => map_vec(v, |x| x.abs()),
        UnaryOp::Neg => map_vec(v, |x| x.neg()),
        UnaryOp::Relu => map_vec(v, |x| if x < T::default() { T::default() } else { x }),
        UnaryOp::Clip { min, max } => {
            let lo = if min.is_finite() {
                T::from_f64(min.max(T::min_value().to_f64()))
            } else {
                T::min_value()
            };
            let hi = if max.is_finite() {
                T::from_f64(max.min(T::max_value().to_f64()))
            } else {
                T::max_value()
            };
            map_vec(v, |x| {
                let y = if x < lo { lo } else { x };
                if y > hi { hi } else { y }
            })
        }
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => v.to_vec(),
        UnaryOp::Sign => map_vec(v, |x| {
            if x > T::default() {
                T::from_f64(1.0)
            } else if x < T::default() {
                T::from_f64(-1.0)
            } else {
                x
            }
        }),
        other => {
            return Err(EngineError::unsupported(format!("{other:?} on integer tensors")));
        }
    })
}

/// A unary op on any buffer.
pub(crate) fn unary(u: UnaryOp, x: &Buf) -> Result<Buf> {
    if u.tests_floats() {
        return float_predicate(u, x);
    }
    if matches!(u, UnaryOp::QuantizeDequantize { .. }) && !matches!(x, Buf::F32(_)) {
        // FP32 out, as the pair it replaces (QuantizeLinear also takes FP16, BF16 and INT32)
        return unary(u, &Buf::F32(x.to_f32()));
    }
    Ok(match x {
        Buf::F32(v) => {
            // a piece at a time: copied into a reused buffer, then mapped while in cache
            let mut y = crate::cpu::arena::take(v.len());
            let map = |(y, v): (&mut [f32], &[f32])| {
                y.copy_from_slice(v);
                unary_slice(u, y);
            };
            if y.len() >= PAR_MIN {
                y.par_chunks_mut(PAR_MIN / 4)
                    .zip(v.par_chunks(PAR_MIN / 4))
                    .for_each(map);
            } else {
                map((&mut y, v));
            }
            Buf::F32(y)
        }
        Buf::F64(v) => Buf::F64(map_vec(v, |a| unary_f64(u, a))),
        Buf::F16(v) => Buf::F16(map_vec(v, |a| half::f16::from_f32(unary_f32(u, a.to_f32())))),
        Buf::BF16(v) => Buf::BF16(map_vec(v, |a| half::bf16::from_f32(unary_f32(u, a.to_f32())))),
        Buf::Bool(v) if u == UnaryOp::Not => Buf::Bool(v.iter().map(|b| !b).collect()),
        Buf::I8(v) => Buf::I8(int_unary(u, v)?),
        Buf::I16(v) => Buf::I16(int_unary(u, v)?),
        Buf::I32(v) => Buf::I32(int_unary(u, v)?),
        Buf::I64(v) => Buf::I64(int_unary(u, v)?),
        Buf::U8(v) => Buf::U8(int_unary(u, v)?),
        Buf::U16(v) => Buf::U16(int_unary(u, v)?),
        Buf::U32(v) => Buf::U32(int_unary(u, v)?),
        Buf::U64(v) => Buf::U64(int_unary(u, v)?),
        other => {
            return Err(EngineError::unsupported(format!("{u:?} on {}", other.dtype())));
        }
    })
}

/// A float unary op (not a test: `!u.tests_floats()`) on every value of `y`, in place; pieces on
/// the pool's threads when large.
pub(crate) fn unary_in_place(u: UnaryOp, y: &mut [f32]) {
    if y.len() >= PAR_MIN {
        y.par_chunks_mut(PAR_MIN / 4).for_each(|c| unary_slice(u, c));
    } else {
        unary_slice(u, y);
    }
}

/// IsNaN and IsInf: a BOOL per element of a float buffer.
fn float_predicate(u: UnaryOp, x: &Buf) -> Result<Buf> {
    let test = |v: f64| u.test_float(v);
    Ok(Buf::Bool(match x {
        Buf::F32(v) => v.iter().map(|&a| test(f64::from(a))).collect(),
        Buf::F64(v) => v.iter().map(|&a| test(a)).collect(),
        Buf::F16(v) => v.iter().map(|a| test(a.to_f64())).collect(),
        Buf::BF16(v) => v.iter().map(|a| test(a.to_f64())).collect(),
        other => {
            return Err(EngineError::unsupported(format!("{u:?} on {}", other.dtype())));
        }
    }))
}

/// Broadcast strides of `shape` against `out` (0 on broadcast dims), right-aligned.
pub(crate) fn bstrides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut st = vec![0; r];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        let oi = r - shape.len() + i;
        st[oi] = if shape[i] == 1 && out[oi] != 1 { 0 } else { acc };
        acc *= shape[i];
    }
    st
}

/// Generic broadcast binary map. Rows along the last output dim are processed in parallel.
pub(crate) fn broadcast2<A: Copy + Send + Sync, B: Copy + Send + Sync, O: Copy + Send + Sync + Default>(
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &[usize],
    f: impl Fn(A, B) -> O + Sync + Send,
) -> Vec<O> {
    let mut res = vec![O::default(); out.iter().product()];
    broadcast2_into(a, sa, b, sb, out, f, &mut res);
    res
}

/// [`broadcast2`] of an op whose result has its operands' type, into a buffer from
/// [`Num::output_buffer`] (for f32, a freed activation of the run: no page faults on large outputs).
fn broadcast_same<T: Num>(
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
    out: &[usize],
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    let mut res = T::output_buffer(out.iter().product());
    broadcast2_into(a, sa, b, sb, out, f, &mut res);
    res
}

/// [`broadcast2`] into `res` (`out`'s element count), writing every element.
fn broadcast2_into<A: Copy + Send + Sync, B: Copy + Send + Sync, O: Copy + Send + Sync>(
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &[usize],
    f: impl Fn(A, B) -> O + Sync + Send,
    res: &mut [O],
) {
    let n = res.len();
    if n == 0 {
        return;
    }
    if sa == out && sb == out {
        for_pieces(res, 1, &|s, d| {
            d.iter_mut()
                .zip(a[s..].iter().zip(&b[s..]))
                .for_each(|(o, (&x, &y))| *o = f(x, y))
        });
        return;
    }
    if b.len() == 1 && sa == out {
        let y = b[0];
        return map_into(a, |x| f(x, y), res);
    }
    if a.len() == 1 && sb == out {
        let x = a[0];
        return map_into(b, |y| f(x, y), res);
    }
    let r = out.len();
    let inner = if r == 0 { 1 } else { out[r - 1] };
    let ta = bstrides(sa, out);
    let tb = bstrides(sb, out);
    let (dims, block, runs) = trailing_block(&ta, &tb, out);
    if block >= 8 {
        // Each block of the trailing dims reads each operand contiguously or as one value.
        let lead = &out[..r - dims];
        let offsets = |bi: usize| {
            let mut rem = bi;
            let (mut oa, mut ob) = (0, 0);
            for d in (0..lead.len()).rev() {
                let i = rem % lead[d];
                rem /= lead[d];
                oa += i * ta[d];
                ob += i * tb[d];
            }
            (oa, ob)
        };
        let run = |bi: usize, dst: &mut [O]| {
            let (oa, ob) = offsets(bi);
            match runs {
                (Run::Full, Run::Full) => dst
                    .iter_mut()
                    .zip(&a[oa..oa + block])
                    .zip(&b[ob..ob + block])
                    .for_each(|((o, &x), &y)| *o = f(x, y)),
                (Run::Full, Run::Const) => {
                    let y = b[ob];
                    dst.iter_mut()
                        .zip(&a[oa..oa + block])
                        .for_each(|(o, &x)| *o = f(x, y));
                }
                (Run::Const, Run::Full) => {
                    let x = a[oa];
                    dst.iter_mut()
                        .zip(&b[ob..ob + block])
                        .for_each(|(o, &y)| *o = f(x, y));
                }
                (Run::Const, Run::Const) => dst.fill(f(a[oa], b[ob])),
            }
        };
        for_pieces(res, block, &|s, d| {
            d.chunks_mut(block)
                .enumerate()
                .for_each(|(j, dst)| run(s / block + j, dst))
        });
        return;
    }
    let (ia, ib) = if r == 0 { (0, 0) } else { (ta[r - 1], tb[r - 1]) };
    let row = |row_idx: usize, dst: &mut [O]| {
        // offsets of this row
        let mut rem = row_idx;
        let (mut oa, mut ob) = (0, 0);
        for d in (0..r.saturating_sub(1)).rev() {
            let i = rem % out[d];
            rem /= out[d];
            oa += i * ta[d];
            ob += i * tb[d];
        }
        for (j, o) in dst.iter_mut().enumerate() {
            *o = f(a[oa + j * ia], b[ob + j * ib]);
        }
    };
    for_pieces(res, inner, &|s, d| {
        d.chunks_mut(inner)
            .enumerate()
            .for_each(|(j, dst)| row(s / inner + j, dst))
    });
}

/// How an operand is read over a block of trailing output dims.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    /// contiguously, like the output
    Full,
    /// one value for the whole block
    Const,
}

/// The largest block of trailing output dims over which each operand (broadcast strides `ta`,
/// `tb`) is read as a [`Run`]: (dims, elements, runs of a and b).
fn trailing_block(ta: &[usize], tb: &[usize], out: &[usize]) -> (usize, usize, (Run, Run)) {
    let (mut dims, mut block) = (0, 1);
    let mut runs = None;
    for d in (0..out.len()).rev() {
        if out[d] == 1 {
            dims += 1;
            continue;
        }
        let run = |t: usize| match t {
            0 => Some(Run::Const),
            t if t == block => Some(Run::Full),
            _ => None,
        };
        let (Some(ra), Some(rb)) = (run(ta[d]), run(tb[d])) else {
            break;
        };
        if runs.is_some_and(|r| r != (ra, rb)) {
            break;
        }
        runs = Some((ra, rb));
        block *= out[d];
        dims += 1;
    }
    (dims, block, runs.unwrap_or((Run::Full, Run::Full)))
}

fn num_binary<T: Num>(
    op: BinaryOp,
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
    out: &[usize],
) -> Result<NumOut<T>> {
    Ok(match op {
        BinaryOp::Add => NumOut::Same(broadcast_same(a, sa, b, sb, out, T::add)),
        BinaryOp::Sub => NumOut::Same(broadcast_same(a, sa, b, sb, out, T::sub)),
        BinaryOp::Mul => NumOut::Same(broadcast_same(a, sa, b, sb, out, T::mul)),
        BinaryOp::Div => NumOut::Same(broadcast_same(a, sa, b, sb, out, T::div)),
        BinaryOp::Fmod => NumOut::Same(broadcast_same(a, sa, b, sb, out, T::rem)),
        BinaryOp::Mod => NumOut::Same(broadcast_same(a, sa, b, sb, out, |x, y| {
            // the truncated remainder moved to the divisor's side of zero
            let r = x.rem(y);
            let zero = T::default();
            if r != zero && (r < zero) != (y < zero) {
                r.add(y)
            } else {
                r
            }
        })),
        BinaryOp::Min => NumOut::Same(broadcast_same(a, sa, b, sb, out, |x, y| {
            if T::IS_FLOAT && (x.to_f64().is_nan() || y.to_f64().is_nan()) {
                T::from_f64(f64::NAN)
            } else if y < x {
                y
            } else {
                x
            }
        })),
        BinaryOp::Max => NumOut::Same(broadcast_same(a, sa, b, sb, out, |x, y| {
            if T::IS_FLOAT && (x.to_f64().is_nan() || y.to_f64().is_nan()) {
                T::from_f64(f64::NAN)
            } else if y > x {
                y
            } else {
                x
            }
        })),
        BinaryOp::PRelu => NumOut::Same(broadcast_same(a, sa, b, sb, out, |x, s| {
            if x < T::default() { x.mul(s) } else { x }
        })),
        BinaryOp::Pow => NumOut::Same(broadcast_same(a, sa, b, sb, out, |x, y| {
            T::from_f64(x.to_f64().powf(y.to_f64()))
        })),
        BinaryOp::Equal => NumOut::Bool(broadcast2(a, sa, b, sb, out, |x, y| x == y)),
        BinaryOp::Less => NumOut::Bool(broadcast2(a, sa, b, sb, out, |x, y| x < y)),
        BinaryOp::Greater => NumOut::Bool(broadcast2(a, sa, b, sb, out, |x, y| x > y)),
        BinaryOp::LessOrEqual => NumOut::Bool(broadcast2(a, sa, b, sb, out, |x, y| x <= y)),
        BinaryOp::GreaterOrEqual => NumOut::Bool(broadcast2(a, sa, b, sb, out, |x, y| x >= y)),
        BinaryOp::And | BinaryOp::Or => {
            return Err(EngineError::unsupported("And/Or need BOOL inputs"));
        }
    })
}

enum NumOut<T> {
    Same(Vec<T>),
    Bool(Vec<bool>),
}

macro_rules! bin_arm {
    ($op:expr, $x:expr, $sa:expr, $y:expr, $sb:expr, $out:expr, $var:ident) => {
        match num_binary($op, $x, $sa, $y, $sb, $out)? {
            NumOut::Same(v) => Buf::$var(v),
            NumOut::Bool(v) => Buf::Bool(v),
        }
    };
}

/// A broadcast binary op.
pub(crate) fn binary(
    op: BinaryOp,
    a: &Buf,
    sa: &[usize],
    b: &Buf,
    sb: &[usize],
    out: &[usize],
) -> Result<Buf> {
    if op == BinaryOp::Pow && a.dtype() != b.dtype() {
        // exponent of another type: compute in f64 and keep a's type
        let x = a.to_f64();
        let y = b.to_f64();
        let r = broadcast2(&x, sa, &y, sb, out, f64::powf);
        return Ok(match a {
            Buf::F32(_) => Buf::F32(r.into_iter().map(|v| v as f32).collect()),
            Buf::F64(_) => Buf::F64(r),
            Buf::F16(_) | Buf::BF16(_) => Buf::from_f32(a.dtype(), r.into_iter().map(|v| v as f32).collect()),
            Buf::I32(_) => Buf::I32(r.into_iter().map(|v| v as i32).collect()),
            Buf::I64(_) => Buf::I64(r.into_iter().map(|v| v as i64).collect()),
            other => return Err(EngineError::unsupported(format!("Pow on {}", other.dtype()))),
        });
    }
    Ok(match (a, b) {
        (Buf::F32(x), Buf::F32(y)) => bin_arm!(op, x, sa, y, sb, out, F32),
        (Buf::F64(x), Buf::F64(y)) => bin_arm!(op, x, sa, y, sb, out, F64),
        (Buf::F16(x), Buf::F16(y)) => bin_arm!(op, x, sa, y, sb, out, F16),
        (Buf::BF16(x), Buf::BF16(y)) => bin_arm!(op, x, sa, y, sb, out, BF16),
        (Buf::I8(x), Buf::I8(y)) => bin_arm!(op, x, sa, y, sb, out, I8),
        (Buf::I16(x), Buf::I16(y)) => bin_arm!(op, x, sa, y, sb, out, I16),
        (Buf::I32(x), Buf::I32(y)) => bin_arm!(op, x, sa, y, sb, out, I32),
        (Buf::I64(x), Buf::I64(y)) => bin_arm!(op, x, sa, y, sb, out, I64),
        (Buf::U8(x), Buf::U8(y)) => bin_arm!(op, x, sa, y, sb, out, U8),
        (Buf::U16(x), Buf::U16(y)) => bin_arm!(op, x, sa, y, sb, out, U16),
        (Buf::U32(x), Buf::U32(y)) => bin_arm!(op, x, sa, y, sb, out, U32),
        (Buf::U64(x), Buf::U64(y)) => bin_arm!(op, x, sa, y, sb, out, U64),
        (Buf::Bool(x), Buf::Bool(y)) => match op {
            BinaryOp::And => Buf::Bool(broadcast2(x, sa, y, sb, out, |p, q| p && q)),
            BinaryOp::Or => Buf::Bool(broadcast2(x, sa, y, sb, out, |p, q| p || q)),
            BinaryOp::Equal => Buf::Bool(broadcast2(x, sa, y, sb, out, |p, q| p == q)),
            _ => return Err(EngineError::unsupported(format!("{op:?} on BOOL"))),
        },
        (Buf::Str(x), Buf::Str(y)) if op == BinaryOp::Equal => {
            let idx_a: Vec<usize> = (0..x.len()).collect();
            let idx_b: Vec<usize> = (0..y.len()).collect();
            Buf::Bool(broadcast2(&idx_a, sa, &idx_b, sb, out, |i, j| x[i] == y[j]))
        }
        _ => {
            return Err(EngineError::unsupported(format!(
                "{op:?} on {} and {}",
                a.dtype(),
                b.dtype()
            )));
        }
    })
}

/// Where(cond, x, y) with broadcasting.
pub(crate) fn where_(
    c: &Buf,
    sc: &[usize],
    x: &Buf,
    sx: &[usize],
    y: &Buf,
    sy: &[usize],
    out: &[usize],
) -> Result<Buf> {
    let Buf::Bool(c) = c else {
        return Err(EngineError::invalid("Where condition must be BOOL"));
    };
    let ix: Vec<i64> = (0..x.len() as i64).collect();
    let iy: Vec<usize> = (0..y.len()).collect();
    let sel = broadcast2(c, sc, &ix, sx, out, |c, i| if c { i } else { -1 });
    let yi = broadcast2(&iy, sy, &[0u8], &[], out, |i, _| i);
    fn pick<T: Clone>(xs: &[T], ys: &[T], sel: &[i64], yi: &[usize]) -> Vec<T> {
        sel.iter()
            .zip(yi)
            .map(|(&s, &j)| {
                if s >= 0 {
                    xs[s as usize].clone()
                } else {
                    ys[j].clone()
                }
            })
            .collect()
    }
    crate::cpu::buf::pair_same!(x, y, (a, b) => pick(a, b, &sel, &yi))
        .ok_or_else(|| EngineError::invalid("Where: X and Y have different types"))
}

fn fmt_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "INF".into() } else { "-INF".into() }
    } else {
        format!("{v}")
    }
}

/// Cast to `to`.
pub(crate) fn cast(x: &Buf, to: DataType) -> Result<Buf> {
    if x.dtype() == to {
        return Ok(x.clone());
    }
    if let Buf::Str(s) = x {
        let f: Vec<f64> = s
            .iter()
            .map(|e| {
                let t = String::from_utf8_lossy(e).trim().to_ascii_lowercase();
                match t.as_str() {
                    "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
                    "-inf" | "-infinity" => f64::NEG_INFINITY,
                    "nan" => f64::NAN,
                    _ => t.parse().unwrap_or(f64::NAN),
                }
            })
            .collect();
        return cast(&Buf::F64(f), to);
    }
    if to == DataType::String {
        let v: Vec<Vec<u8>> = match x {
            Buf::F32(v) => v.iter().map(|&f| fmt_float(f64::from(f)).into_bytes()).collect(),
            Buf::Bool(v) => v
                .iter()
                .map(|&b| if b { b"1".to_vec() } else { b"0".to_vec() })
                .collect(),
            Buf::I64(v) => v.iter().map(|i| i.to_string().into_bytes()).collect(),
            _ => x
                .to_f64()
                .into_iter()
                .map(|f| fmt_float(f).into_bytes())
                .collect(),
        };
        return Ok(Buf::Str(v));
    }
    // The integer products' accumulators become floats (a ConvInteger's or MatMulInteger's Cast in
    // `quantize_dynamic` models): converted directly, in vector lanes. Both conversions round the
    // same integer to nearest, so this equals the i128 path below.
    if let (Buf::I32(v), DataType::F32) = (x, to) {
        return Ok(Buf::F32(v.iter().map(|&a| a as f32).collect()));
    }
    // integer → integer keeps exactness through i128
    let int_src: Option<Vec<i128>> = match x {
        Buf::I8(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::I16(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::I32(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::I64(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::U8(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::U16(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::U32(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::U64(v) => Some(v.iter().map(|&a| a as i128).collect()),
        Buf::Bool(v) => Some(v.iter().map(|&a| a as i128).collect()),
        _ => None,
    };
    if let Some(iv) = int_src {
        return Ok(match to {
            DataType::I8 => Buf::I8(iv.iter().map(|&a| a as i8).collect()),
            DataType::I16 => Buf::I16(iv.iter().map(|&a| a as i16).collect()),
            DataType::I32 => Buf::I32(iv.iter().map(|&a| a as i32).collect()),
            DataType::I64 => Buf::I64(iv.iter().map(|&a| a as i64).collect()),
            DataType::U8 => Buf::U8(iv.iter().map(|&a| a as u8).collect()),
            DataType::U16 => Buf::U16(iv.iter().map(|&a| a as u16).collect()),
            DataType::U32 => Buf::U32(iv.iter().map(|&a| a as u32).collect()),
            DataType::U64 => Buf::U64(iv.iter().map(|&a| a as u64).collect()),
            DataType::Bool => Buf::Bool(iv.iter().map(|&a| a != 0).collect()),
            DataType::F32 => Buf::F32(iv.iter().map(|&a| a as f32).collect()),
            DataType::F64 => Buf::F64(iv.iter().map(|&a| a as f64).collect()),
            DataType::F16 => Buf::F16(iv.iter().map(|&a| half::f16::from_f64(a as f64)).collect()),
            DataType::BF16 => Buf::BF16(iv.iter().map(|&a| half::bf16::from_f64(a as f64)).collect()),
            DataType::String => return Err(EngineError::internal("string cast handled above")),
        });
    }
    // float source
    if let (Buf::F32(v), DataType::F16) = (x, to) {
        return Ok(Buf::F16(v.iter().map(|&a| half::f16::from_f32(a)).collect()));
    }
    if let (Buf::F32(v), DataType::BF16) = (x, to) {
        return Ok(Buf::BF16(v.iter().map(|&a| half::bf16::from_f32(a)).collect()));
    }
    let f = x.to_f64();
    Ok(match to {
        DataType::F32 => Buf::F32(f.iter().map(|&a| a as f32).collect()),
        DataType::F64 => Buf::F64(f),
        DataType::F16 => Buf::F16(f.iter().map(|&a| half::f16::from_f64(a)).collect()),
        DataType::BF16 => Buf::BF16(f.iter().map(|&a| half::bf16::from_f64(a)).collect()),
        DataType::I8 => Buf::I8(f.iter().map(|&a| a as i8).collect()),
        DataType::I16 => Buf::I16(f.iter().map(|&a| a as i16).collect()),
        DataType::I32 => Buf::I32(f.iter().map(|&a| a as i32).collect()),
        DataType::I64 => Buf::I64(f.iter().map(|&a| a as i64).collect()),
        DataType::U8 => Buf::U8(f.iter().map(|&a| a as u8).collect()),
        DataType::U16 => Buf::U16(f.iter().map(|&a| a as u16).collect()),
        DataType::U32 => Buf::U32(f.iter().map(|&a| a as u32).collect()),
        DataType::U64 => Buf::U64(f.iter().map(|&a| a as u64).collect()),
        DataType::Bool => Buf::Bool(f.iter().map(|&a| a != 0.0).collect()),
        DataType::String => return Err(EngineError::internal("string cast handled above")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int32_to_float_rounds_as_the_exact_path_does() {
        let v = vec![
            0,
            1,
            -1,
            16_777_217,
            -16_777_219,
            2_147_483_647,
            -2_147_483_648,
            123_456_789,
        ];
        let got = cast(&Buf::I32(v.clone()), DataType::F32).unwrap();
        let want: Vec<f32> = v.iter().map(|&a| i128::from(a) as f32).collect();
        assert!(matches!(got, Buf::F32(ref g) if *g == want), "{got:?}");
    }

    /// Every output element from its multi-index, the slow way.
    fn naive(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize], out: &[usize]) -> Vec<f32> {
        let (ta, tb) = (bstrides(sa, out), bstrides(sb, out));
        let n: usize = out.iter().product();
        (0..n)
            .map(|mut i| {
                let (mut oa, mut ob) = (0, 0);
                for d in (0..out.len()).rev() {
                    let c = i % out[d];
                    i /= out[d];
                    oa += c * ta[d];
                    ob += c * tb[d];
                }
                a[oa] * 10.0 - b[ob]
            })
            .collect()
    }

    #[test]
    fn broadcast_blocks_match_the_index_by_index_form() {
        let shapes: [(&[usize], &[usize], &[usize]); 9] = [
            (&[2, 3, 8, 9], &[2, 3, 1, 1], &[2, 3, 8, 9]),
            (&[1, 3, 1, 1], &[4, 3, 8, 9], &[4, 3, 8, 9]),
            (&[4, 3, 8, 9], &[3, 8, 9], &[4, 3, 8, 9]),
            (&[4, 1, 8, 9], &[1, 3, 1, 1], &[4, 3, 8, 9]),
            (&[5, 1, 16], &[1, 7, 16], &[5, 7, 16]),
            (&[64, 1], &[1, 1, 64], &[1, 64, 64]),
            (&[2, 3, 1, 40], &[2, 3, 5, 1], &[2, 3, 5, 40]),
            (&[300, 200], &[200], &[300, 200]),
            (&[300, 1, 1], &[300, 20, 20], &[300, 20, 20]),
        ];
        for (sa, sb, out) in shapes {
            let a: Vec<f32> = (0..sa.iter().product()).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..sb.iter().product()).map(|i| (i as f32) * 0.5).collect();
            let got = broadcast2(&a, sa, &b, sb, out, |x, y| x * 10.0 - y);
            assert_eq!(got, naive(&a, sa, &b, sb, out), "{sa:?} with {sb:?}");
        }
    }

    /// f32 results land in buffers the run freed, stale values and all: every path must write every element.
    #[test]
    fn f32_results_in_reused_buffers_hold_no_stale_value() {
        let shapes: [(&[usize], &[usize], &[usize]); 6] = [
            (&[1, 144, 56, 56], &[1, 144, 1, 1], &[1, 144, 56, 56]),
            (&[2, 3, 8, 9], &[2, 3, 8, 9], &[2, 3, 8, 9]),
            (&[40_000], &[1], &[40_000]),
            (&[1], &[3, 20], &[3, 20]),
            (&[2, 3, 1, 40], &[2, 3, 5, 1], &[2, 3, 5, 40]),
            (&[5, 1, 3], &[1, 7, 3], &[5, 7, 3]),
        ];
        for (sa, sb, out) in shapes {
            let n: usize = out.iter().product();
            for _ in 0..4 {
                crate::cpu::arena::give(vec![f32::NAN; n.max(1024)]);
            }
            let a: Vec<f32> = (0..sa.iter().product()).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..sb.iter().product()).map(|i| (i as f32) * 0.5).collect();
            let Buf::F32(got) = binary(
                BinaryOp::Sub,
                &Buf::F32(a.iter().map(|x| x * 10.0).collect()),
                sa,
                &Buf::F32(b.clone()),
                sb,
                out,
            )
            .unwrap() else {
                panic!("Sub of f32 gave another type");
            };
            assert_eq!(got, naive(&a, sa, &b, sb, out), "{sa:?} with {sb:?}");
        }
    }
}

//! Element-wise programs and their WGSL code generation.
//!
//! An element-wise chain (a standalone `Add → Relu`, or the epilogue fused into a MatMul/Conv) is a small SSA
//! program over operands. Code generation turns it into `fn ew_out(acc: f32, oidx: u32) -> TO` plus the
//! bindings of its operands: every kernel that supports fusion has an `ew` region where this code goes, and
//! calls `ew_out` with its accumulator and the output's linear index. Broadcast operands are indexed through a
//! small table of output dims and operand strides (uploaded once as a constant); operands with the output's
//! shape or a single element are indexed directly. Scalar attributes (LeakyRelu's alpha, ...) live in the same
//! table, so pipelines are shared by layers that differ only in those values.

use super::dtype::DType;
use super::error::{GpuError, GpuResult};

/// Unary element-wise operations (with their scalar attributes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryOp {
    Neg,
    Abs,
    Sqrt,
    Exp,
    Log,
    Reciprocal,
    Floor,
    Ceil,
    Round,
    Erf,
    Tanh,
    Sigmoid,
    Relu,
    Sin,
    Cos,
    Not,
    /// A float is NaN → bool.
    IsNaN,
    /// A float is −∞ (`negative`) or +∞ (`positive`) → bool.
    IsInf {
        negative: bool,
        positive: bool,
    },
    /// `(clamp(round(x / scale) + zero_point, lo, hi) - zero_point) * scale`, as `quant.wgsl` computes the
    /// pair.
    QuantizeDequantize {
        scale: f32,
        zero_point: i32,
        lo: i32,
        hi: i32,
    },
    Softplus,
    HardSwish,
    /// `x * sigmoid(x)`.
    Silu,
    Sign,
    Mish,
    /// Exact GELU (`x * Φ(x)`).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
    LeakyRelu(f32),
    Elu(f32),
    /// `gamma * (x > 0 ? x : alpha * (exp(x) - 1))`: (alpha, gamma).
    Selu(f32, f32),
    /// `clamp(alpha * x + beta, 0, 1)`: (alpha, beta).
    HardSigmoid(f32, f32),
    /// Clip with constant bounds.
    Clip(f32, f32),
}

/// Binary element-wise operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// Remainder with the divisor's sign (numpy's `mod`).
    Mod,
    /// Remainder with the dividend's sign (C's `fmod`).
    Fmod,
    Pow,
    Min,
    Max,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    And,
    Or,
    /// `x < 0 ? slope * x : x`.
    PRelu,
}

/// One node of an element-wise program; nodes refer to earlier nodes by index.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EwNode {
    /// The producing kernel's accumulator (f32), in a fused epilogue.
    Acc,
    /// Operand `k` at the current element.
    Operand(usize),
    /// A float scalar.
    Const(f32),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    /// `cond ? a : b`.
    Where(usize, usize, usize),
    /// Conversion to a device type.
    Cast(DType, usize),
}

/// An element-wise program: nodes in order; the last node is the result.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EwProgram {
    pub(crate) nodes: Vec<EwNode>,
}

/// How an operand is indexed from the output's linear index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OperandMode {
    /// Same shape as the output.
    Same,
    /// One element.
    Scalar,
    /// Broadcast through strides.
    Strided,
}

/// An operand of a program as code generation sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OperandInfo {
    pub(crate) dtype: DType,
    pub(crate) mode: OperandMode,
    /// Strides (elements) per output dimension, 0 where broadcast; used in `Strided` mode.
    pub(crate) strides: Vec<u32>,
}

impl OperandInfo {
    /// Describes an operand of shape `shape` broadcast to `out` (numpy rules, right-aligned).
    pub(crate) fn broadcast(dtype: DType, shape: &[usize], out: &[usize]) -> GpuResult<Self> {
        let n: usize = shape.iter().product();
        if shape == out {
            return Ok(Self {
                dtype,
                mode: OperandMode::Same,
                strides: Vec::new(),
            });
        }
        if n == 1 {
            return Ok(Self {
                dtype,
                mode: OperandMode::Scalar,
                strides: Vec::new(),
            });
        }
        if shape.len() > out.len() {
            return Err(GpuError::internal(format!(
                "cannot broadcast {shape:?} to {out:?}"
            )));
        }
        let off = out.len() - shape.len();
        let mut strides = vec![0u32; out.len()];
        let mut s = 1usize;
        for d in (0..shape.len()).rev() {
            let od = out[d + off];
            if shape[d] == od {
                strides[d + off] = if od == 1 { 0 } else { s as u32 };
            } else if shape[d] != 1 {
                return Err(GpuError::internal(format!(
                    "cannot broadcast {shape:?} to {out:?}"
                )));
            }
            s *= shape[d];
        }
        if strides.iter().filter(|&&s| s != 0).count() == out.iter().filter(|&&d| d != 1).count()
            && n == out.iter().product::<usize>()
        {
            return Ok(Self {
                dtype,
                mode: OperandMode::Same,
                strides: Vec::new(),
            });
        }
        Ok(Self {
            dtype,
            mode: OperandMode::Strided,
            strides,
        })
    }
}

/// Generated code and the table it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EwCode {
    /// Module-scope WGSL for the kernel's `ew` region.
    pub(crate) wgsl: String,
    /// The table (as u32 words) to bind read-only at `first_binding`, when the code needs one.
    pub(crate) table: Option<Vec<u32>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    F,
    I,
    B,
}

fn ty_of(d: DType) -> Ty {
    match d {
        DType::F32 | DType::F16 => Ty::F,
        DType::I32 => Ty::I,
        DType::Bool => Ty::B,
    }
}

const MAX_RANK: usize = 8;

/// WGSL helpers the generated code may call.
const HELPERS: &str = r#"fn ew_erf(x: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
    let s = sign(x);
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
    return s * y;
}
fn ew_sigmoid(x: f32) -> f32 {
    if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); }
    let e = exp(x);
    return e / (1.0 + e);
}
fn ew_tanh(x: f32) -> f32 {
    // Drivers may evaluate tanh through exp(2x), which cancels for small x (lavapipe loses ~1e-3 relative
    // at 1e-4): use the series there. Large arguments are NaN on some drivers: clamp where tanh is +-1.
    if (abs(x) < 0.01) {
        let x2 = x * x;
        return x * (1.0 - x2 * (1.0 / 3.0 - x2 * (2.0 / 15.0)));
    }
    return tanh(clamp(x, -15.0, 15.0));
}
fn ew_softplus(x: f32) -> f32 {
    // log(1 + e) loses e's digits in f32 when e is small; use its series there.
    let e = exp(-abs(x));
    if (e < 1e-3) {
        return max(x, 0.0) + e * (1.0 - e * (0.5 - e / 3.0));
    }
    return max(x, 0.0) + log(1.0 + e);
}
fn ew_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    if (a >= 0.0) { return pow(a, b); }
    // Negative base: defined for integral exponents only (NaN otherwise, as in C).
    let r = pow(-a, b);
    if (fract(b) != 0.0) { return bitcast<f32>(0x7fc00000u); }
    if (fract(b * 0.5) != 0.0) { return -r; }
    return r;
}
fn ew_ipow(a: i32, b: i32) -> i32 {
    var r = 1;
    var base = a;
    var e = b;
    if (e < 0) { return 0; }
    loop {
        if (e == 0) { break; }
        if ((e & 1) != 0) { r = r * base; }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}
fn ew_fmod(a: f32, b: f32) -> f32 {
    return a - b * trunc(a / b);
}
fn ew_floor_fmod(a: f32, b: f32) -> f32 {
    let r = ew_fmod(a, b);
    if (r != 0.0 && ((r < 0.0) != (b < 0.0))) { return r + b; }
    return r;
}
fn ew_imod(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    let r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) { return r + b; }
    return r;
}
fn ew_itmod(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    return a % b;
}
fn ew_idiv(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    return a / b;
}
fn ew_isnan(x: f32) -> bool {
    let b = bitcast<u32>(x);
    return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u;
}
fn ew_isinf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}
fn ew_fmin(a: f32, b: f32) -> f32 {
    if (ew_isnan(a) || ew_isnan(b)) { return bitcast<f32>(0x7fc00000u); }
    return min(a, b);
}
fn ew_fmax(a: f32, b: f32) -> f32 {
    if (ew_isnan(a) || ew_isnan(b)) { return bitcast<f32>(0x7fc00000u); }
    return max(a, b);
}
"#;

/// Generates the `ew` region for `program` over `operands`, writing `out` (the output's device type and rank).
/// Operand buffers are bound from `first_binding` (after the table, when there is one).
pub(crate) fn generate(
    program: &EwProgram,
    operands: &[OperandInfo],
    out: DType,
    out_shape: &[usize],
    first_binding: u32,
) -> GpuResult<EwCode> {
    if out_shape.len() > MAX_RANK {
        return Err(GpuError::unsupported(format!(
            "element-wise output of rank {} (the wgpu executor handles up to {MAX_RANK})",
            out_shape.len()
        )));
    }
    if program.nodes.is_empty() {
        return Err(GpuError::internal("empty element-wise program"));
    }
    let mut consts: Vec<f32> = Vec::new();
    let strided: Vec<usize> = (0..operands.len())
        .filter(|&k| operands[k].mode == OperandMode::Strided)
        .collect();
    let const_base = 1 + MAX_RANK + MAX_RANK * strided.len();
    let mut body = String::new();
    let mut tys: Vec<Ty> = Vec::with_capacity(program.nodes.len());
    let mut used_operand = vec![false; operands.len()];
    for (i, node) in program.nodes.iter().enumerate() {
        let arg = |j: usize| -> GpuResult<(String, Ty)> {
            if j >= i {
                return Err(GpuError::internal(format!(
                    "element-wise node {i} refers forward to {j}"
                )));
            }
            Ok((format!("v{j}"), tys[j]))
        };
        let mut konst = |v: f32| -> String {
            consts.push(v);
            format!("bitcast<f32>(ew_t[{}u])", const_base + consts.len() - 1)
        };
        let (expr, ty) = match node {
            EwNode::Acc => ("acc".to_owned(), Ty::F),
            EwNode::Operand(k) => {
                let op = operands
                    .get(*k)
                    .ok_or_else(|| GpuError::internal(format!("element-wise operand {k} missing")))?;
                used_operand[*k] = true;
                let idx = match op.mode {
                    OperandMode::Same => "oidx".to_owned(),
                    OperandMode::Scalar => "0u".to_owned(),
                    OperandMode::Strided => format!("o{k}"),
                };
                let raw = format!("ew_in{k}[{idx}]");
                match ty_of(op.dtype) {
                    Ty::F => (format!("f32({raw})"), Ty::F),
                    Ty::I => (raw, Ty::I),
                    Ty::B => (format!("({raw} != 0)"), Ty::B),
                }
            }
            EwNode::Const(v) => (konst(*v), Ty::F),
            EwNode::Unary(op, a) => {
                let (a, t) = arg(*a)?;
                unary(*op, &a, t, &mut konst)?
            }
            EwNode::Binary(op, a, b) => {
                let (a, ta) = arg(*a)?;
                let (b, tb) = arg(*b)?;
                binary(*op, &a, ta, &b, tb)?
            }
            EwNode::Where(c, a, b) => {
                let (c, tc) = arg(*c)?;
                let (a, ta) = arg(*a)?;
                let (b, tb) = arg(*b)?;
                if tc != Ty::B || ta != tb {
                    return Err(GpuError::internal(
                        "Where needs a bool condition and two values of one type",
                    ));
                }
                (format!("select({b}, {a}, {c})"), ta)
            }
            EwNode::Cast(to, a) => {
                let (a, t) = arg(*a)?;
                cast(&a, t, ty_of(*to))
            }
        };
        let wgsl_ty = match ty {
            Ty::F => "f32",
            Ty::I => "i32",
            Ty::B => "bool",
        };
        body.push_str(&format!("    let v{i}: {wgsl_ty} = {expr};\n"));
        tys.push(ty);
    }
    let last = program.nodes.len() - 1;
    let result = cast(&format!("v{last}"), tys[last], ty_of(out)).0;
    let store = match ty_of(out) {
        Ty::F => format!("TO({result})"),
        Ty::I => result,
        Ty::B => format!("select(0, 1, {result})"),
    };

    let needs_table = !strided.is_empty() || !consts.is_empty();
    let mut wgsl = String::new();
    wgsl.push_str(HELPERS);
    let mut binding = first_binding;
    let mut table = None;
    if needs_table {
        wgsl.push_str(&format!(
            "@group(0) @binding({binding}) var<storage, read> ew_t: array<u32>;\n"
        ));
        binding += 1;
        let mut t = vec![0u32; const_base];
        t[0] = out_shape.len() as u32;
        for (d, &n) in out_shape.iter().enumerate() {
            t[1 + d] = n as u32;
        }
        for (s, &k) in strided.iter().enumerate() {
            for (d, &st) in operands[k].strides.iter().enumerate() {
                t[1 + MAX_RANK + MAX_RANK * s + d] = st;
            }
        }
        t.extend(consts.iter().map(|c| c.to_bits()));
        table = Some(t);
    }
    for (k, op) in operands.iter().enumerate() {
        wgsl.push_str(&format!(
            "@group(0) @binding({binding}) var<storage, read> ew_in{k}: array<{}>;\n",
            op.dtype.wgsl()
        ));
        binding += 1;
        let _ = used_operand[k];
    }
    wgsl.push_str("fn ew_out(acc: f32, oidx: u32) -> TO {\n");
    if !strided.is_empty() {
        for &k in &strided {
            wgsl.push_str(&format!("    var o{k} = 0u;\n"));
        }
        wgsl.push_str("    var rem = oidx;\n    let rank = ew_t[0];\n");
        wgsl.push_str("    for (var d = rank; d > 0u; d = d - 1u) {\n");
        wgsl.push_str("        let dim = ew_t[d];\n        let c = rem % dim;\n        rem = rem / dim;\n");
        for (s, &k) in strided.iter().enumerate() {
            wgsl.push_str(&format!(
                "        o{k} = o{k} + c * ew_t[{}u + d - 1u];\n",
                1 + MAX_RANK + MAX_RANK * s
            ));
        }
        wgsl.push_str("    }\n");
    }
    wgsl.push_str(&body);
    wgsl.push_str(&format!("    return {store};\n}}\n"));
    Ok(EwCode { wgsl, table })
}

fn cast(a: &str, from: Ty, to: Ty) -> (String, Ty) {
    let e = match (from, to) {
        (x, y) if x == y => a.to_owned(),
        (Ty::F, Ty::I) => format!("i32(clamp({a}, -2147483648.0, 2147483520.0))"),
        (Ty::I, Ty::F) => format!("f32({a})"),
        (Ty::B, Ty::F) => format!("select(0.0, 1.0, {a})"),
        (Ty::B, Ty::I) => format!("select(0, 1, {a})"),
        (Ty::F, Ty::B) => format!("({a} != 0.0)"),
        (Ty::I, Ty::B) => format!("({a} != 0)"),
        _ => a.to_owned(),
    };
    (e, to)
}

fn unary(op: UnaryOp, a: &str, t: Ty, konst: &mut dyn FnMut(f32) -> String) -> GpuResult<(String, Ty)> {
    use UnaryOp::*;
    // FP32 out whatever x is, as the QuantizeLinear/DequantizeLinear pair it replaces
    let widened;
    let (a, t) = if matches!(op, QuantizeDequantize { .. }) && t != Ty::F {
        widened = format!("f32({a})");
        (widened.as_str(), Ty::F)
    } else {
        (a, t)
    };
    if t == Ty::I {
        let e = match op {
            Neg => format!("-{a}"),
            Abs => format!("abs({a})"),
            Relu => format!("max({a}, 0)"),
            Sign => format!("sign({a})"),
            Clip(lo, hi) => format!("clamp({a}, {}, {})", lo as i32, hi as i32),
            _ => {
                return Err(GpuError::unsupported(format!(
                    "{op:?} on integer tensors (ONNX defines it for floats)"
                )));
            }
        };
        return Ok((e, Ty::I));
    }
    if t == Ty::B {
        return match op {
            Not => Ok((format!("!{a}"), Ty::B)),
            _ => Err(GpuError::unsupported(format!("{op:?} on bool tensors"))),
        };
    }
    let e = match op {
        Neg => format!("-{a}"),
        Abs => format!("abs({a})"),
        Sqrt => format!("sqrt({a})"),
        Exp => format!("exp({a})"),
        Log => format!("log({a})"),
        Reciprocal => format!("(1.0 / {a})"),
        Floor => format!("floor({a})"),
        Ceil => format!("ceil({a})"),
        Round => format!("round({a})"),
        Erf => format!("ew_erf({a})"),
        Tanh => format!("ew_tanh({a})"),
        Sigmoid => format!("ew_sigmoid({a})"),
        Silu => format!("({a} * ew_sigmoid({a}))"),
        Relu => format!("max({a}, 0.0)"),
        Sin => format!("sin({a})"),
        Cos => format!("cos({a})"),
        Softplus => format!("ew_softplus({a})"),
        Sign => format!("sign({a})"),
        Mish => format!("({a} * ew_tanh(ew_softplus({a})))"),
        HardSwish => format!("({a} * clamp({a} / 6.0 + 0.5, 0.0, 1.0))"),
        Gelu => format!("(0.5 * {a} * (1.0 + ew_erf({a} * 0.70710678118654752)))"),
        GeluTanh => {
            format!("(0.5 * {a} * (1.0 + ew_tanh(0.79788456080286536 * ({a} + 0.044715 * {a} * {a} * {a}))))")
        }
        LeakyRelu(alpha) => format!("select({} * {a}, {a}, {a} >= 0.0)", konst(alpha)),
        Elu(alpha) => format!("select({} * (exp({a}) - 1.0), {a}, {a} >= 0.0)", konst(alpha)),
        Selu(alpha, gamma) => format!(
            "({} * select({} * (exp({a}) - 1.0), {a}, {a} > 0.0))",
            konst(gamma),
            konst(alpha)
        ),
        HardSigmoid(alpha, beta) => format!("clamp({} * {a} + {}, 0.0, 1.0)", konst(alpha), konst(beta)),
        Clip(lo, hi) => format!("ew_fmin(ew_fmax({a}, {}), {})", konst(lo), konst(hi)),
        QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        } => {
            let (s, z) = (konst(scale), konst(zero_point as f32));
            format!(
                "((clamp(round({a} / {s}) + {z}, {}, {}) - {z}) * {s})",
                konst(lo as f32),
                konst(hi as f32)
            )
        }
        Not => return Err(GpuError::unsupported("Not on float tensors")),
        // WGSL lets a compiler assume floats are never NaN or infinite (`x != x` may fold to false): the
        // predicates read the bits.
        IsNaN => {
            return Ok((
                format!("((bitcast<u32>({a}) & 0x7fffffffu) > 0x7f800000u)"),
                Ty::B,
            ));
        }
        IsInf { negative, positive } => {
            let tests: Vec<String> = [(positive, "0x7f800000u"), (negative, "0xff800000u")]
                .into_iter()
                .filter(|&(on, _)| on)
                .map(|(_, inf)| format!("(bitcast<u32>({a}) == {inf})"))
                .collect();
            let e = if tests.is_empty() {
                "false".to_owned()
            } else {
                format!("({})", tests.join(" || "))
            };
            return Ok((e, Ty::B));
        }
    };
    Ok((e, Ty::F))
}

fn binary(op: BinaryOp, a: &str, ta: Ty, b: &str, tb: Ty) -> GpuResult<(String, Ty)> {
    use BinaryOp::*;
    // Mixed float/int operands happen only after our own casts; compute in float then.
    let (a, b, t) = if ta == tb {
        (a.to_owned(), b.to_owned(), ta)
    } else if ta == Ty::B || tb == Ty::B {
        if matches!(op, And | Or) {
            (cast(a, ta, Ty::B).0, cast(b, tb, Ty::B).0, Ty::B)
        } else {
            return Err(GpuError::internal(format!("{op:?} of bool and non-bool")));
        }
    } else {
        (cast(a, ta, Ty::F).0, cast(b, tb, Ty::F).0, Ty::F)
    };
    let e = match (op, t) {
        (Add, Ty::F | Ty::I) => format!("({a} + {b})"),
        (Sub, Ty::F | Ty::I) => format!("({a} - {b})"),
        (Mul, Ty::F | Ty::I) => format!("({a} * {b})"),
        (Div, Ty::F) => format!("({a} / {b})"),
        (Div, Ty::I) => format!("ew_idiv({a}, {b})"),
        (Mod, Ty::F) => format!("ew_floor_fmod({a}, {b})"),
        (Mod, Ty::I) => format!("ew_imod({a}, {b})"),
        (Fmod, Ty::F) => format!("ew_fmod({a}, {b})"),
        (Fmod, Ty::I) => format!("ew_itmod({a}, {b})"),
        (Pow, Ty::F) => format!("ew_pow({a}, {b})"),
        (Pow, Ty::I) => format!("ew_ipow({a}, {b})"),
        (Min, Ty::F) => format!("ew_fmin({a}, {b})"),
        (Max, Ty::F) => format!("ew_fmax({a}, {b})"),
        (Min, Ty::I) => format!("min({a}, {b})"),
        (Max, Ty::I) => format!("max({a}, {b})"),
        (PRelu, Ty::F) => format!("select({a} * {b}, {a}, {a} >= 0.0)"),
        (PRelu, Ty::I) => format!("select({a} * {b}, {a}, {a} >= 0)"),
        (Equal, _) => return Ok((format!("({a} == {b})"), Ty::B)),
        (Less, Ty::F | Ty::I) => return Ok((format!("({a} < {b})"), Ty::B)),
        (Greater, Ty::F | Ty::I) => return Ok((format!("({a} > {b})"), Ty::B)),
        (LessOrEqual, Ty::F | Ty::I) => return Ok((format!("({a} <= {b})"), Ty::B)),
        (GreaterOrEqual, Ty::F | Ty::I) => return Ok((format!("({a} >= {b})"), Ty::B)),
        (And, Ty::B) => format!("({a} && {b})"),
        (Or, Ty::B) => format!("({a} || {b})"),
        _ => return Err(GpuError::unsupported(format!("{op:?} on {t:?} operands"))),
    };
    Ok((e, t))
}

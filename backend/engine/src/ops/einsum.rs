//! Einsum, for the equations exporters write: matrix products (batched, with transposed operands,
//! attention's `bhqd,bhkd->bhqk`), transposes and sums over indices.
//!
//! Decomposes at load into ReduceSum, Transpose, Unsqueeze, MatMul and Squeeze, so both executors
//! run it and MatMul's kernels do the work. An equation is refused (naming it) when it has an
//! ellipsis, repeats an index within one operand (diagonals), has more than two operands, or is a
//! product with several contracted indices or several free indices on the right operand.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::ReduceOp;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("Einsum", 12, convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("einsum");

/// A parsed equation: the index letters of each operand and of the output.
#[derive(Debug, PartialEq)]
struct Equation {
    operands: Vec<Vec<char>>,
    output: Vec<char>,
}

fn refuse(equation: &str, why: &str) -> EngineError {
    EngineError::unsupported(format!(
        "Einsum attribute equation='{equation}': {why} (supported: one or two operands, matrix \
         products with at most one contracted index, transposes and sums)"
    ))
}

fn parse(equation: &str) -> Result<Equation> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    if eq.contains("...") {
        return Err(refuse(equation, "an ellipsis"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let operands: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    for letters in operands
        .iter()
        .chain(rhs.map(|r| r.chars().collect::<Vec<_>>()).iter())
    {
        if let Some(c) = letters.iter().find(|c| !c.is_ascii_alphabetic()) {
            return Err(EngineError::invalid(format!(
                "Einsum attribute equation='{equation}' has '{c}', which is not an index letter"
            )));
        }
        for (i, c) in letters.iter().enumerate() {
            if letters[i + 1..].contains(c) {
                return Err(refuse(
                    equation,
                    &format!("index '{c}' repeats within one term (a diagonal)"),
                ));
            }
        }
    }
    let output = match rhs {
        Some(r) => r.chars().collect(),
        // implicit output: the indices that appear once, in alphabetical order
        None => {
            let all: Vec<char> = operands.iter().flatten().copied().collect();
            let mut once: Vec<char> = all
                .iter()
                .copied()
                .filter(|c| all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            once
        }
    };
    if let Some(c) = output
        .iter()
        .find(|c| !operands.iter().flatten().any(|d| d == *c))
    {
        return Err(EngineError::invalid(format!(
            "Einsum attribute equation='{equation}': output index '{c}' appears in no operand"
        )));
    }
    Ok(Equation { operands, output })
}

/// Positions of `want` in `have` (each letter of `want` is in `have`).
fn perm(have: &[char], want: &[char]) -> Vec<usize> {
    want.iter()
        .map(|c| have.iter().position(|h| h == c).unwrap_or(0))
        .collect()
}

/// Sums `x` (indices `letters`) over the indices not in `keep`; returns the new value and indices.
fn sum_out(
    chain: &mut Chain<'_, '_>,
    step: &str,
    x: ValueId,
    letters: &[char],
    keep: &dyn Fn(char) -> bool,
) -> (ValueId, Vec<char>) {
    let axes: Vec<i64> = (0..letters.len())
        .filter(|&i| !keep(letters[i]))
        .map(|i| i as i64)
        .collect();
    if axes.is_empty() {
        return (x, letters.to_vec());
    }
    let kept = letters.iter().copied().filter(|&c| keep(c)).collect();
    let op = Op::Reduce {
        op: ReduceOp::Sum,
        axes,
        keepdims: false,
        noop_with_empty_axes: false,
    };
    (chain.push(step, op, &[x]), kept)
}

/// Transposes `x` from indices `have` to `want` (a permutation of them) when they differ.
fn arrange(chain: &mut Chain<'_, '_>, step: &str, x: ValueId, have: &[char], want: &[char]) -> ValueId {
    if have == want {
        return x;
    }
    chain.push(
        step,
        Op::Transpose {
            perm: perm(have, want),
        },
        &[x],
    )
}

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    if n.op_type != "Einsum" {
        return Err(not_registered(&n.op_type));
    }
    let equation = a.string("equation", "")?;
    let eq = parse(&equation)?;
    let values: Vec<ValueId> = inputs.iter().flatten().copied().collect();
    if values.len() != eq.operands.len() {
        return Err(EngineError::invalid(format!(
            "Einsum attribute equation='{equation}' names {} operands, the node has {} inputs",
            eq.operands.len(),
            values.len()
        )));
    }
    let out = &eq.output;
    let mut chain = Chain::new(cx, name);
    match eq.operands.as_slice() {
        [la] => {
            let (x, letters) = sum_out(&mut chain, "sum", values[0], la, &|c| out.contains(&c));
            let y = arrange(&mut chain, "transpose", x, &letters, out);
            Ok(chain.finish(Op::Identity, &[y]))
        }
        [la, lb] => {
            // indices only one operand has and the output lacks are summed out first
            let (a_val, la) = sum_out(&mut chain, "sum_a", values[0], la, &|c| {
                out.contains(&c) || lb.contains(&c)
            });
            let (b_val, lb) = sum_out(&mut chain, "sum_b", values[1], lb, &|c| {
                out.contains(&c) || la.contains(&c)
            });
            let in_both = |c: &char| la.contains(c) && lb.contains(c);
            let batch: Vec<char> = out.iter().copied().filter(in_both).collect();
            let free_a: Vec<char> = out
                .iter()
                .copied()
                .filter(|c| la.contains(c) && !lb.contains(c))
                .collect();
            let free_b: Vec<char> = out
                .iter()
                .copied()
                .filter(|c| lb.contains(c) && !la.contains(c))
                .collect();
            let contracted: Vec<char> = la
                .iter()
                .copied()
                .filter(|c| in_both(c) && !out.contains(c))
                .collect();
            if contracted.len() > 1 {
                return Err(refuse(&equation, "more than one contracted index"));
            }
            if free_b.len() > 1 {
                return Err(refuse(&equation, "more than one free index on the right operand"));
            }
            // a as [batch…, free_a…, k] and b as [batch…, (1 per extra free_a), k, free_b]; a missing
            // k, m (no free_a) or n (no free_b) becomes a dim of 1 that is squeezed away after
            let order_a: Vec<char> = batch.iter().chain(&free_a).chain(&contracted).copied().collect();
            let order_b: Vec<char> = batch.iter().chain(&contracted).chain(&free_b).copied().collect();
            let mut a_val = arrange(&mut chain, "arrange_a", a_val, &la, &order_a);
            let mut b_val = arrange(&mut chain, "arrange_b", b_val, &lb, &order_b);
            let nb = batch.len() as i64;
            let mut a_axes = Vec::new();
            if free_a.is_empty() {
                a_axes.push(nb);
            }
            if contracted.is_empty() {
                a_axes.push(nb + free_a.len().max(1) as i64);
            }
            if !a_axes.is_empty() {
                a_val = chain.push("lift_a", Op::Unsqueeze { axes: Some(a_axes) }, &[a_val]);
            }
            let extra = free_a.len().saturating_sub(1) as i64;
            let mut b_axes: Vec<i64> = (nb..nb + extra).collect();
            if contracted.is_empty() {
                b_axes.push(nb + extra);
            }
            if free_b.is_empty() {
                b_axes.push(nb + extra + 1);
            }
            if !b_axes.is_empty() {
                b_val = chain.push("lift_b", Op::Unsqueeze { axes: Some(b_axes) }, &[b_val]);
            }
            let matmul = Op::MatMul {
                trans_a: false,
                trans_b: false,
                epilogue: Default::default(),
            };
            let mut y = chain.push("matmul", matmul, &[a_val, b_val]);
            // product indices: batch, free_a (or a 1), free_b (or a 1)
            let m_at = nb + free_a.len().max(1) as i64 - 1;
            let mut squeeze = Vec::new();
            if free_a.is_empty() {
                squeeze.push(m_at);
            }
            if free_b.is_empty() {
                squeeze.push(m_at + 1);
            }
            if !squeeze.is_empty() {
                y = chain.push("squeeze", Op::Squeeze { axes: Some(squeeze) }, &[y]);
            }
            let have: Vec<char> = batch.iter().chain(&free_a).chain(&free_b).copied().collect();
            let y = arrange(&mut chain, "transpose", y, &have, out);
            Ok(chain.finish(Op::Identity, &[y]))
        }
        _ => Err(refuse(&equation, "more than two operands")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implicit_output_keeps_the_indices_that_appear_once_in_order() {
        let eq = parse("ij,jk").unwrap();
        assert_eq!(eq.output, ['i', 'k']);
        assert_eq!(parse("i,i").unwrap().output, Vec::<char>::new());
        assert_eq!(parse("ba").unwrap().output, ['a', 'b']);
    }

    #[test]
    fn unsupported_equations_are_refused_naming_the_equation() {
        for (eq, why) in [("bii->bi", "repeats"), ("...ij,...jk->...ik", "ellipsis")] {
            let e = parse(eq).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
            assert!(e.to_string().contains(eq) && e.to_string().contains(why), "{e}");
        }
        let e = parse("ij->k").unwrap_err();
        assert!(e.to_string().contains("output index 'k'"), "{e}");
    }
}

//! onnxruntime's FusedMatMul (`com.microsoft`): `alpha · op(A) · op(B)`, the form its graph
//! optimiser gives a MatMul that absorbed Transposes and a scalar Mul.
//!
//! Decomposes at load into the IR's MatMul, so both executors run it and the passes see an ordinary
//! product: `transA`/`transB` (the last two dims) become the MatMul's own `trans_a`/`trans_b`,
//! `transBatchA`/`transBatchB` (the first dim moved behind the other batch dims, onnxruntime's
//! `[1, .., rank-2, 0, rank-1]`) become a Transpose, and `alpha` ≠ 1 a Mul by a scalar.

use super::chain::{Chain, decomposed, shape_of};
use super::prelude::*;
use crate::ir::BinaryOp;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("FusedMatMul", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("fused_matmul");

fn convert(
    cx: &mut Ctx<'_>,
    _n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let alpha = a.float("alpha", 1.0)?;
    let mut chain = Chain::new(cx, name);
    let mut operand = |i: usize, what: &str, trans: &str, trans_batch: &str| -> Result<(ValueId, bool)> {
        let x = need(inputs, i, what)?;
        let trans = a.int(trans, 0)? != 0;
        if a.int(trans_batch, 0)? == 0 {
            return Ok((x, trans));
        }
        let rank = shape_of(chain.graph(), x).map(|s| s.len()).ok_or_else(|| {
            EngineError::unsupported(format!(
                "FusedMatMul attribute {trans_batch}=1 on input {what} of unknown rank: give {what} a shape \
                 in the model"
            ))
        })?;
        if rank < 3 {
            // no batch dims: the first dim is one of the two multiplied
            return Ok((x, trans));
        }
        // batch dims 1..rank-2, then dim 0, then the last dim; the last two are swapped by `trans`
        let mut perm: Vec<usize> = (1..rank - 1).collect();
        perm.push(0);
        perm.push(rank - 1);
        let t = chain.push(&format!("{what}_batch_transposed"), Op::Transpose { perm }, &[x]);
        Ok((t, trans))
    };
    let (x, trans_a) = operand(0, "A", "transA", "transBatchA")?;
    let (y, trans_b) = operand(1, "B", "transB", "transBatchB")?;
    let matmul = Op::MatMul {
        trans_a,
        trans_b,
        epilogue: Default::default(),
    };
    if alpha == 1.0 {
        return Ok(chain.finish(matmul, &[x, y]));
    }
    let product = chain.push("product", matmul, &[x, y]);
    let alpha = chain.scalar_like("alpha", alpha, product);
    Ok(chain.finish(Op::Binary(BinaryOp::Mul), &[product, alpha]))
}

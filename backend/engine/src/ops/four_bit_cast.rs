//! Cast and CastLike to INT4 and UINT4, which the graph carries as INT8 and UINT8 (see
//! [`crate::onnx::int4`]).
//!
//! ONNX casts to a 4-bit integer wrap: the value's integer part keeps its low four bits (9 → −7 as
//! INT4, −1 → 15 as UINT4), where a cast to INT8 would keep eight. So the cast goes through INT32,
//! wraps with a numpy-style Mod (the result takes the divisor's sign), and narrows to the byte type,
//! whose range holds every 4-bit value.

use super::chain::Chain;
use super::prelude::*;
use crate::ir::BinaryOp;

/// `x` cast to the 4-bit type that `wide` (INT8 or UINT8) carries, as the node's final op.
pub(super) fn cast(cx: &mut Ctx<'_>, name: &str, x: ValueId, wide: DataType) -> Result<Converted> {
    let mut chain = Chain::new(cx, name);
    let whole = chain.push("int32", Op::Cast { to: DataType::I32 }, &[x]);
    let sixteen = int32(&mut chain, 16);
    let wrapped = if wide == DataType::I8 {
        // ((v + 8) mod 16) − 8 lies in [−8, 7] and equals v modulo 16
        let eight = int32(&mut chain, 8);
        let shifted = chain.binary("shifted", BinaryOp::Add, whole, eight);
        let low = chain.binary("low_bits", BinaryOp::Mod, shifted, sixteen);
        chain.binary("wrapped", BinaryOp::Sub, low, eight)
    } else {
        chain.binary("wrapped", BinaryOp::Mod, whole, sixteen)
    };
    Ok(chain.finish(Op::Cast { to: wide }, &[wrapped]))
}

/// A scalar INT32 constant.
fn int32(chain: &mut Chain<'_, '_>, v: i32) -> ValueId {
    chain.constant(Tensor {
        dtype: DataType::I32,
        shape: Vec::new(),
        data: v.to_le_bytes().to_vec().into(),
    })
}

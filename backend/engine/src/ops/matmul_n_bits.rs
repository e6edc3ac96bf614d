//! onnxruntime's MatMulNBits (`com.microsoft`): `A · dequantize(B)ᵀ + bias` with B's weights quantized
//! to 4 or 8 bits in blocks along K — what onnxruntime's `matmul_4bits_quantizer` and the
//! onnxruntime-genai model builder write for an LLM's linear layers.
//!
//! B, its scales and zero points are model weights, so the loader dequantizes them once into an
//! ordinary `[K, N]` float matrix, `w[k, n] = (code − zero_point) · scale` with the scale and zero
//! point of block `k / block_size` of column n, and the node becomes `MatMul(A, w)` (+ bias). Both
//! executors then run it as any MatMul with a constant weight, and the passes fuse the bias. This
//! trades the 4-bit weight's memory saving for the engine's tuned float kernels; the results are
//! onnxruntime's up to float rounding. `accuracy_level` only permits onnxruntime to compute with less
//! precision than float (it may quantize A to INT8), so it is read and not needed here.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::BinaryOp;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("MatMulNBits", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("matmul_n_bits");

/// Input positions (onnxruntime's contrib operator schema).
const B: usize = 1;
const SCALES: usize = 2;
const ZERO_POINTS: usize = 3;
const G_IDX: usize = 4;
const BIAS: usize = 5;

/// The code widths this module dequantizes.
const BITS: &[i64] = &[4, 8];

/// The attributes that fix B's layout.
struct Layout {
    k: usize,
    n: usize,
    bits: usize,
    block_size: usize,
    /// Blocks along K per column of the weight: `ceil(K / block_size)`.
    blocks: usize,
}

impl Layout {
    fn new(a: &Attrs<'_>) -> Result<Layout> {
        let k = positive(a, "K")?;
        let n = positive(a, "N")?;
        let bits = a.int("bits", 4)?;
        if !BITS.contains(&bits) {
            return Err(EngineError::unsupported(format!(
                "MatMulNBits with bits={bits}: the engine dequantizes 4-bit and 8-bit weights; quantize \
                 the model with bits=4 or bits=8"
            )));
        }
        let block_size = a.int("block_size", 128)?;
        if block_size < 16 || block_size.count_ones() != 1 {
            return Err(EngineError::invalid(format!(
                "MatMulNBits with block_size={block_size}: the operator defines it as a power of two of at \
                 least 16"
            )));
        }
        let block_size = block_size as usize;
        Ok(Layout {
            k,
            n,
            bits: bits as usize,
            block_size,
            blocks: k.div_ceil(block_size),
        })
    }

    /// Bytes of one block of codes.
    fn blob_size(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Bytes of one column's packed UINT8 zero points: `ceil(blocks · bits / 8)`.
    fn packed_zero_points_per_column(&self) -> usize {
        (self.blocks * self.bits).div_ceil(8)
    }
}

/// `[A, B, scales, zero_points?, g_idx?, bias?]` → `[Y]`: A `[..., K]` float, B UINT8
/// `[N, blocks, blob_size]`, scales `[N · blocks]` or `[N, blocks]` of A's type, zero_points packed
/// UINT8 (`[N · ceil(blocks · bits / 8)]`) or of the scales' type (`[N · blocks]`), bias `[N]`.
fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let x = need(inputs, 0, "A")?;
    let b = need(inputs, B, "B")?;
    let scales = need(inputs, SCALES, "scales")?;
    if input(G_IDX).is_some() {
        return Err(EngineError::unsupported(
            "MatMulNBits with g_idx (input 4, act-order group indices): the engine dequantizes blocks of \
             consecutive rows only; re-export the weights without act-order (desc_act=False) or with g_idx \
             folded into the weight order",
        ));
    }
    if inputs.len() > BIAS + 1 {
        return Err(EngineError::unsupported(format!(
            "MatMulNBits has {} inputs; the operator takes at most 6 (A, B, scales, zero_points, g_idx, \
             bias)",
            n.input.len()
        )));
    }
    let layout = Layout::new(a)?;
    let constant = |v: ValueId, what: &str| -> Result<&Tensor> {
        cx.graph.constants.get(&v).ok_or_else(|| {
            EngineError::unsupported(format!(
                "MatMulNBits input {what} is computed in the graph; the engine dequantizes B, scales and \
                 zero_points when the model loads, so they must be initializers (or Constant nodes)"
            ))
        })
    };
    let weight = {
        let codes = constant(b, "B (1)")?;
        let scales = constant(scales, "scales (2)")?;
        let zero_points = input(ZERO_POINTS)
            .map(|z| constant(z, "zero_points (3)"))
            .transpose()?;
        dequantize(&layout, codes, scales, zero_points)?
    };
    // The product is in A's type (T1, which the scales share): an FP16 model gets an FP16 weight,
    // converted once when the plan folds constants.
    let f32_scales = cx.graph.constants.get(&scales).map(|t| t.dtype) == Some(DataType::F32);
    let mut chain = Chain::new(cx, name);
    let w = if f32_scales {
        chain.constant(weight)
    } else {
        chain.cast_like("weight", weight, scales)
    };
    match input(BIAS) {
        None => Ok(chain.finish(super::chain::matmul(), &[x, w])),
        Some(bias) => {
            let y = chain.push("product", super::chain::matmul(), &[x, w]);
            Ok(chain.finish(Op::Binary(BinaryOp::Add), &[y, bias]))
        }
    }
}

/// A required positive integer attribute.
fn positive(a: &Attrs<'_>, name: &str) -> Result<usize> {
    let v = a.int(name, 0)?;
    if v < 1 {
        return Err(EngineError::invalid(format!(
            "MatMulNBits attribute {name} is {v}; it must be given and positive"
        )));
    }
    Ok(v as usize)
}

/// The FP32 `[K, N]` weight that B, its scales and zero points describe.
fn dequantize(l: &Layout, codes: &Tensor, scales: &Tensor, zero_points: Option<&Tensor>) -> Result<Tensor> {
    let want = [l.n, l.blocks, l.blob_size()];
    if codes.dtype != DataType::U8 || codes.shape != want {
        return Err(EngineError::invalid(format!(
            "MatMulNBits input B is {} {:?}; with K={}, N={}, bits={} and block_size={} it must be UINT8 \
             {want:?} ([N, ceil(K / block_size), block_size · bits / 8])",
            codes.dtype, codes.shape, l.k, l.n, l.bits, l.block_size
        )));
    }
    if !scales.dtype.is_float() || scales.len() != l.n * l.blocks {
        return Err(EngineError::invalid(format!(
            "MatMulNBits input scales is {} {:?}; it must be a float tensor of N · ceil(K / block_size) = \
             {} values",
            scales.dtype,
            scales.shape,
            l.n * l.blocks
        )));
    }
    let scales = scales.to_f64_vec()?;
    let zero_points = match zero_points {
        None => ZeroPoints::Default(1 << (l.bits - 1)),
        Some(z) if z.dtype == DataType::U8 => {
            if z.len() != l.n * l.packed_zero_points_per_column() {
                return Err(EngineError::invalid(format!(
                    "MatMulNBits UINT8 zero_points has {} values; with N={} and {} blocks of {}-bit zero \
                     points per column it must have N · ceil(blocks · bits / 8) = {}",
                    z.len(),
                    l.n,
                    l.blocks,
                    l.bits,
                    l.n * l.packed_zero_points_per_column()
                )));
            }
            ZeroPoints::Packed(&z.data)
        }
        Some(z) if z.dtype.is_float() => {
            if z.len() != l.n * l.blocks {
                return Err(EngineError::invalid(format!(
                    "MatMulNBits float zero_points has {} values; it must have one per scale, N · \
                     ceil(K / block_size) = {}",
                    z.len(),
                    l.n * l.blocks
                )));
            }
            ZeroPoints::Float(z.to_f64_vec()?)
        }
        Some(z) => {
            return Err(EngineError::invalid(format!(
                "MatMulNBits zero_points is {}; it must be packed UINT8 or the scales' float type",
                z.dtype
            )));
        }
    };
    let row_bytes = l.blocks * l.blob_size();
    let mut w = vec![0f32; l.k * l.n];
    for col in 0..l.n {
        let column = &codes.data[col * row_bytes..(col + 1) * row_bytes];
        for k in 0..l.k {
            let block = k / l.block_size;
            let scale = scales[col * l.blocks + block];
            let zero = match &zero_points {
                ZeroPoints::Default(z) => f64::from(*z),
                ZeroPoints::Packed(bytes) => {
                    let column = &bytes[col * l.packed_zero_points_per_column()..];
                    f64::from(unpack(column, block, l.bits))
                }
                ZeroPoints::Float(z) => z[col * l.blocks + block],
            };
            // Codes run along K without gaps: the padding of a short last block sits after K.
            let code = f64::from(unpack(column, k, l.bits));
            w[k * l.n + col] = ((code - zero) * scale) as f32;
        }
    }
    Tensor::from_vec(vec![l.k, l.n], w)
}

/// Where the zero points come from.
enum ZeroPoints<'t> {
    /// None given: the middle of the code range, `2^(bits − 1)`.
    Default(u8),
    /// UINT8, packed like the codes.
    Packed(&'t [u8]),
    /// One float per scale.
    Float(Vec<f64>),
}

/// Element `i` of `bits`-bit values packed low bits first into `bytes`.
fn unpack(bytes: &[u8], i: usize, bits: usize) -> u8 {
    let bit = i * bits;
    let mask = ((1u16 << bits) - 1) as u8;
    (bytes[bit / 8] >> (bit % 8)) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_codes_are_read_low_nibble_first() {
        let bytes = [0x21u8, 0x43];
        let got: Vec<u8> = (0..4).map(|i| unpack(&bytes, i, 4)).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        assert_eq!(unpack(&bytes, 1, 8), 0x43);
    }

    /// K = 3 in one block of 16: two columns, the first with zero point 8 (the default), the second
    /// with packed zero point 2.
    #[test]
    fn a_short_last_block_dequantizes_only_k_rows() {
        let l = Layout {
            k: 3,
            n: 2,
            bits: 4,
            block_size: 16,
            blocks: 1,
        };
        let mut codes = vec![0u8; 16];
        codes[0] = 0x9A; // codes 10, 9 of column 0
        codes[1] = 0x07; // code 7
        codes[8] = 0x31; // codes 1, 3 of column 1
        codes[9] = 0x02; // code 2
        let codes = Tensor::from_vec(vec![2, 1, 8], codes).unwrap();
        let scales = Tensor::from_vec(vec![2], vec![0.5f32, 2.0]).unwrap();
        let w = dequantize(&l, &codes, &scales, None).unwrap();
        assert_eq!(w.shape, [3, 2]);
        assert_eq!(w.to_vec::<f32>().unwrap(), [1.0, -14.0, 0.5, -10.0, -0.5, -12.0]);
        let zero = Tensor::from_vec(vec![2], vec![0x08u8, 0x02]).unwrap();
        let w = dequantize(&l, &codes, &scales, Some(&zero)).unwrap();
        assert_eq!(w.to_vec::<f32>().unwrap(), [1.0, -2.0, 0.5, 2.0, -0.5, 0.0]);
    }
}

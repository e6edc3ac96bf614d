//! onnxruntime's DynamicQuantizeLSTM (`com.microsoft`): an LSTM whose W and R are 8-bit codes with
//! scales and zero points — what `onnxruntime.quantization.quantize_dynamic` writes for an LSTM.
//!
//! W and R are model weights, so the loader dequantizes them once, `w = (code − zero_point) · scale`
//! with the scale and zero point of the weight's direction or of its column (one of the 4 · hidden
//! gate rows), transposes them from the operator's `[num_directions, rows, 4 · hidden]` to ONNX LSTM's
//! `[num_directions, 4 · hidden, rows]`, and the node becomes the engine's LSTM with X, B,
//! sequence_lens, initial_h, initial_c and P passed through; both executors run it as any LSTM.
//! onnxruntime's kernel also quantizes X and the hidden state to UINT8 at every step; the engine keeps
//! them float, so its outputs are onnxruntime's float LSTM on the dequantized weights and differ from
//! onnxruntime's quantized kernel by that activation rounding (measured in `tests/contrib_ops.rs`).

use super::chain::{Chain, decomposed};
use super::prelude::*;
use super::rnn::rnn_attrs;
use crate::ir::RnnDirection;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("DynamicQuantizeLSTM", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("dynamic_quantize_lstm");

/// Input positions (onnxruntime's contrib operator schema); 3 to 7 are the LSTM's own.
const W: usize = 1;
const R: usize = 2;
const B: usize = 3;
const P: usize = 7;
const W_SCALE: usize = 8;
const W_ZERO_POINT: usize = 9;
const R_SCALE: usize = 10;
const R_ZERO_POINT: usize = 11;

/// `[X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point, R_scale,
/// R_zero_point]` → `[Y, Y_h, Y_c]`: W INT8 or UINT8 `[num_directions, input_size, 4 · hidden]`, R
/// `[num_directions, hidden, 4 · hidden]`, each scale FP32 with one value per direction or per
/// column, each zero point of its weight's type and its scale's size.
fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let x = need(inputs, 0, "X")?;
    if inputs.len() > R_ZERO_POINT + 1 {
        return Err(EngineError::unsupported(format!(
            "DynamicQuantizeLSTM has {} inputs; the operator takes at most 12 (X, W, R, B, sequence_lens, \
             initial_h, initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point)",
            n.input.len()
        )));
    }
    let attrs = rnn_attrs(a, &["Sigmoid", "Tanh", "Tanh"])?;
    let input_forget = a.int("input_forget", 0)? != 0;
    let dirs = if attrs.direction == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let constant = |i: usize, what: &str| -> Result<&Tensor> {
        let v = need(inputs, i, what)?;
        cx.graph.constants.get(&v).ok_or_else(|| {
            EngineError::unsupported(format!(
                "DynamicQuantizeLSTM input {what} ({i}) is computed in the graph; the engine dequantizes W, \
                 R and their scales and zero points when the model loads, so they must be initializers (or \
                 Constant nodes)"
            ))
        })
    };
    let w = Quantized {
        name: "W",
        codes: constant(W, "W")?,
        scale: constant(W_SCALE, "W_scale")?,
        zero_point: constant(W_ZERO_POINT, "W_zero_point")?,
    }
    .dequantize(dirs)?;
    let r = Quantized {
        name: "R",
        codes: constant(R, "R")?,
        scale: constant(R_SCALE, "R_scale")?,
        zero_point: constant(R_ZERO_POINT, "R_zero_point")?,
    }
    .dequantize(dirs)?;
    // ONNX layout now: W [dirs, 4 · hidden, input], R [dirs, 4 · hidden, hidden].
    let hidden = r.shape[2];
    if r.shape[1] != 4 * hidden || w.shape[1] != 4 * hidden {
        return Err(EngineError::invalid(format!(
            "DynamicQuantizeLSTM inputs W {:?} and R {:?} (transposed to [num_directions, 4 · hidden, \
             rows]) do not agree: R [num_directions, hidden, 4 · hidden] sets hidden = {hidden}, so both \
             must have 4 · hidden = {} columns",
            w.shape,
            r.shape,
            4 * hidden
        )));
    }
    if attrs.hidden_size != 0 && attrs.hidden_size != hidden {
        return Err(EngineError::invalid(format!(
            "DynamicQuantizeLSTM attribute hidden_size is {} but R has hidden size {hidden}; export the node \
             with hidden_size={hidden}",
            attrs.hidden_size
        )));
    }
    let mut chain = Chain::new(cx, name);
    let mut lstm_inputs = vec![Some(x), Some(chain.constant(w)), Some(chain.constant(r))];
    lstm_inputs.extend((B..=P).map(|i| inputs.get(i).copied().flatten()));
    while lstm_inputs.last() == Some(&None) {
        lstm_inputs.pop();
    }
    Ok(chain.finish_optional(Op::Lstm { attrs, input_forget }, lstm_inputs))
}

/// One quantized weight (W or R) with its scale and zero point.
struct Quantized<'t> {
    name: &'static str,
    codes: &'t Tensor,
    scale: &'t Tensor,
    zero_point: &'t Tensor,
}

impl Quantized<'_> {
    /// The FP32 ONNX LSTM weight `[num_directions, 4 · hidden, rows]` for codes
    /// `[num_directions, rows, 4 · hidden]`: `w[d, c, k] = (code[d, k, c] − zero_point) · scale`, with
    /// the scale and zero point of direction d, or of column c of direction d.
    fn dequantize(&self, dirs: usize) -> Result<Tensor> {
        let name = self.name;
        let c = self.codes;
        if !matches!(c.dtype, DataType::I8 | DataType::U8)
            || c.shape.len() != 3
            || c.shape[0] != dirs
            || c.shape[2] == 0
            || !c.shape[2].is_multiple_of(4)
        {
            return Err(EngineError::invalid(format!(
                "DynamicQuantizeLSTM input {name} is {} {:?}; it must be INT8 or UINT8 [num_directions = \
                 {dirs}, rows, 4 · hidden_size] (the operator's layout, transposed from ONNX LSTM's)",
                c.dtype, c.shape
            )));
        }
        let (rows, cols) = (c.shape[1], c.shape[2]);
        let s = self.scale;
        let per_column = match s.len() {
            n if n == dirs && s.dtype.is_float() => false,
            n if n == dirs * cols && s.dtype.is_float() => true,
            _ => {
                return Err(EngineError::invalid(format!(
                    "DynamicQuantizeLSTM input {name}_scale is {} {:?}; it must be FP32 with one value per \
                     direction ([{dirs}]) or per column ([{dirs}, {cols}])",
                    s.dtype, s.shape
                )));
            }
        };
        let z = self.zero_point;
        if z.dtype != c.dtype || z.len() != s.len() {
            return Err(EngineError::invalid(format!(
                "DynamicQuantizeLSTM input {name}_zero_point is {} {:?}; it must have {name}'s type ({}) and \
                 {name}_scale's shape {:?}",
                z.dtype, z.shape, c.dtype, s.shape
            )));
        }
        let codes = c.to_f64_vec()?;
        let scales = s.to_f64_vec()?;
        let zeros = z.to_f64_vec()?;
        let mut w = vec![0f32; dirs * cols * rows];
        for d in 0..dirs {
            for k in 0..rows {
                for col in 0..cols {
                    let q = if per_column { d * cols + col } else { d };
                    // (code − zero) has at most 9 bits, so the f64 product is exact and the cast
                    // rounds once, as an f32 (code − zero) · scale does.
                    let v = (codes[(d * rows + k) * cols + col] - zeros[q]) * scales[q];
                    w[(d * cols + col) * rows + k] = v as f32;
                }
            }
        }
        Tensor::from_vec(vec![dirs, cols, rows], w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two directions, rows = 1, hidden = 1 (4 columns): per-direction and per-column scales, and the
    /// transpose to ONNX's `[num_directions, 4 · hidden, rows]`.
    #[test]
    fn codes_dequantize_per_direction_and_per_column_and_transpose() {
        let codes = Tensor::from_vec(
            vec![2, 2, 4],
            vec![1i8, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0, 0, 0, 0],
        )
        .unwrap();
        let scale = Tensor::from_vec(vec![2], vec![0.5f32, 2.0]).unwrap();
        let zero = Tensor::from_vec(vec![2], vec![1i8, -1]).unwrap();
        let w = Quantized {
            name: "W",
            codes: &codes,
            scale: &scale,
            zero_point: &zero,
        }
        .dequantize(2)
        .unwrap();
        assert_eq!(w.shape, [2, 4, 2]);
        assert_eq!(
            w.to_vec::<f32>().unwrap(),
            [
                0.0, 2.0, 0.5, 2.5, 1.0, 3.0, 1.5, 3.5, 0.0, 2.0, -2.0, 2.0, -4.0, 2.0, -6.0, 2.0
            ]
        );
        let scale = Tensor::from_vec(vec![1, 4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let zero = Tensor::from_vec(vec![1, 4], vec![0i8, 1, 0, 1]).unwrap();
        let codes = Tensor::from_vec(vec![1, 1, 4], vec![1i8, 1, 1, 1]).unwrap();
        let w = Quantized {
            name: "R",
            codes: &codes,
            scale: &scale,
            zero_point: &zero,
        }
        .dequantize(1)
        .unwrap();
        assert_eq!(w.shape, [1, 4, 1]);
        assert_eq!(w.to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 0.0]);
    }

    #[test]
    fn a_zero_point_of_another_type_is_refused_naming_the_input() {
        let codes = Tensor::from_vec(vec![1, 1, 4], vec![1u8, 2, 3, 4]).unwrap();
        let scale = Tensor::from_vec(vec![1], vec![0.5f32]).unwrap();
        let zero = Tensor::from_vec(vec![1], vec![0i8]).unwrap();
        let e = Quantized {
            name: "R",
            codes: &codes,
            scale: &scale,
            zero_point: &zero,
        }
        .dequantize(1)
        .unwrap_err();
        assert!(e.to_string().contains("R_zero_point"), "{e}");
    }
}

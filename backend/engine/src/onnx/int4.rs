//! ONNX's 4-bit integer element types, INT4 and UINT4 (opset 21), carried widened: INT4 as INT8 and
//! UINT4 as UINT8, one element per byte.
//!
//! The KServe V2 protocol has no 4-bit datatype and the executors address bytes, so a 4-bit tensor is
//! unpacked when it is decoded and a 4-bit graph value is declared with the widened type. Every value
//! keeps its 4-bit range, so DequantizeLinear computes the same numbers from either width; the one
//! operator whose result depends on the narrow range, QuantizeLinear, saturates to it when its output
//! is 4-bit (see `ops/quant.rs`).

use bytes::Bytes;

use crate::error::{EngineError, Result};
use crate::onnx::proto::TensorProto;
use crate::tensor::{DataType, Tensor};

/// ONNX `TensorProto.DataType` codes of the 4-bit integers.
pub(crate) const UINT4: i32 = 21;
pub(crate) const INT4: i32 = 22;

/// The type that carries ONNX type `code` when it is a 4-bit integer: UINT8 for UINT4, INT8 for INT4.
pub(crate) fn widened(code: i32) -> Option<DataType> {
    match code {
        UINT4 => Some(DataType::U8),
        INT4 => Some(DataType::I8),
        _ => None,
    }
}

/// The range of the 4-bit type that `wide` carries, for saturating QuantizeLinear.
pub(crate) fn range(wide: DataType) -> (f64, f64) {
    if wide == DataType::I8 {
        (-8.0, 7.0)
    } else {
        (0.0, 15.0)
    }
}

/// The elements of `packed` (two per byte, the first in the low nibble, as ONNX stores them) widened
/// to one byte each: sign-extended for INT8, zero-extended for UINT8.
pub(crate) fn unpack(packed: &[u8], n: usize, wide: DataType) -> Vec<u8> {
    (0..n)
        .map(|i| {
            let nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0F;
            if wide == DataType::I8 {
                // shift the sign bit of the nibble into the byte's, then back with the sign
                (((nibble << 4) as i8) >> 4) as u8
            } else {
                nibble
            }
        })
        .collect()
}

/// Decode a 4-bit tensor of `n` elements whose raw bytes (`raw_data` or an external file) are `raw`,
/// or, when `raw` is empty, whose `int32_data` holds one packed byte (two elements) per entry.
pub(crate) fn decode(
    t: &TensorProto,
    wide: DataType,
    shape: Vec<usize>,
    n: usize,
    raw: Option<&[u8]>,
    what: &str,
) -> Result<Tensor> {
    let bytes = n.div_ceil(2);
    let packed: Vec<u8> = match raw {
        Some(raw) => {
            if raw.len() != bytes {
                return Err(EngineError::invalid(format!(
                    "{what}: 4-bit tensor of shape {shape:?} needs {bytes} bytes (two elements per byte), \
                     found {}",
                    raw.len()
                )));
            }
            raw.to_vec()
        }
        None => {
            if t.int32_data.len() != bytes {
                return Err(EngineError::invalid(format!(
                    "{what}: 4-bit tensor of shape {shape:?} needs {bytes} values in int32_data (two \
                     elements per value), found {}",
                    t.int32_data.len()
                )));
            }
            // each entry holds one packed byte in its low bits
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
    };
    Ok(Tensor {
        dtype: wide,
        shape,
        data: Bytes::from(unpack(&packed, n, wide)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_is_sign_extended_and_uint4_is_not() {
        // 7, -8 | -1, 0 | 3 (a padding nibble after the odd element)
        let packed = [0x87u8, 0x0F, 0xF3];
        let i8s: Vec<i8> = unpack(&packed, 5, DataType::I8)
            .into_iter()
            .map(|b| b as i8)
            .collect();
        assert_eq!(i8s, [7, -8, -1, 0, 3]);
        assert_eq!(unpack(&packed, 5, DataType::U8), [7, 8, 15, 0, 3]);
    }

    #[test]
    fn a_short_raw_buffer_names_the_byte_count() {
        let t = TensorProto {
            dims: vec![5],
            data_type: INT4,
            ..Default::default()
        };
        let e = decode(&t, DataType::I8, vec![5], 5, Some(&[0u8, 0]), "initializer 'w'").unwrap_err();
        assert!(e.to_string().contains("needs 3 bytes"), "{e}");
    }
}

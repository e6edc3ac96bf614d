//! `TensorProto` → [`Tensor`]: raw data, typed fields and external-data files.

use std::path::{Component, Path};

use bytes::Bytes;

use crate::error::{EngineError, Result};
use crate::onnx::int4;
use crate::onnx::proto::TensorProto;
use crate::tensor::{DataType, Tensor, checked_elements};

/// Decode a tensor. `what` names it in errors (e.g. `initializer 'w'`).
/// INT4 and UINT4 tensors come back unpacked, as INT8 and UINT8 (see [`super::int4`]).
pub fn decode_tensor(t: &TensorProto, external_dir: Option<&Path>, what: &str) -> Result<Tensor> {
    let four_bit = int4::widened(t.data_type);
    let dtype = match four_bit {
        Some(wide) => wide,
        None => DataType::from_onnx(t.data_type).ok_or_else(|| {
            EngineError::unsupported(format!(
                "{what}: element type {} ({}) is not supported",
                t.data_type,
                onnx_type_name(t.data_type)
            ))
        })?,
    };
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        shape.push(
            usize::try_from(d).map_err(|_| {
                EngineError::invalid(format!("{what}: negative dimension {d} in {:?}", t.dims))
            })?,
        );
    }
    let n = checked_elements(&shape).map_err(|e| e.context(what))?;
    if four_bit.is_some() {
        let raw = if t.data_location == 1 {
            Some(read_external(t, external_dir, what)?)
        } else if !t.raw_data.is_empty() || n == 0 {
            Some(Bytes::copy_from_slice(&t.raw_data))
        } else {
            None
        };
        return int4::decode(t, dtype, shape, n, raw.as_deref(), what);
    }
    if t.data_location == 1 {
        let bytes = read_external(t, external_dir, what)?;
        return Tensor::new(dtype, shape, bytes).map_err(|e| e.context(what));
    }
    if dtype == DataType::String {
        if t.string_data.len() != n {
            return Err(EngineError::invalid(format!(
                "{what}: shape {:?} needs {n} strings, found {}",
                t.dims,
                t.string_data.len()
            )));
        }
        return Tensor::from_strings(shape, &t.string_data);
    }
    let Some(elem) = dtype.size() else {
        return Err(EngineError::internal("fixed-size dtype without size"));
    };
    if !t.raw_data.is_empty() || n == 0 {
        if t.raw_data.len() != n * elem {
            return Err(EngineError::invalid(format!(
                "{what}: {} tensor of shape {:?} needs {} bytes of raw_data, found {}",
                dtype,
                t.dims,
                n * elem,
                t.raw_data.len()
            )));
        }
        return Ok(Tensor {
            dtype,
            shape,
            data: Bytes::copy_from_slice(&t.raw_data),
        });
    }
    let count = |len: usize, field: &str| -> Result<()> {
        if len != n {
            return Err(EngineError::invalid(format!(
                "{what}: {dtype} tensor of shape {:?} needs {n} values in {field}, found {len}",
                t.dims
            )));
        }
        Ok(())
    };
    let mut out: Vec<u8> = Vec::with_capacity(n * elem);
    match dtype {
        DataType::F32 => {
            count(t.float_data.len(), "float_data")?;
            t.float_data
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DataType::F64 => {
            count(t.double_data.len(), "double_data")?;
            t.double_data
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DataType::I64 => {
            count(t.int64_data.len(), "int64_data")?;
            t.int64_data
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DataType::U32 | DataType::U64 => {
            count(t.uint64_data.len(), "uint64_data")?;
            for v in &t.uint64_data {
                if dtype == DataType::U32 {
                    out.extend_from_slice(&(*v as u32).to_le_bytes());
                } else {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        DataType::I32
        | DataType::I16
        | DataType::U16
        | DataType::I8
        | DataType::U8
        | DataType::Bool
        | DataType::F16
        | DataType::BF16 => {
            count(t.int32_data.len(), "int32_data")?;
            for v in &t.int32_data {
                out.extend_from_slice(&v.to_le_bytes()[..elem]);
            }
        }
        DataType::String => {}
    }
    Ok(Tensor {
        dtype,
        shape,
        data: out.into(),
    })
}

fn read_external(t: &TensorProto, dir: Option<&Path>, what: &str) -> Result<Bytes> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for kv in &t.external_data {
        match kv.key.as_str() {
            "location" => location = Some(kv.value.clone()),
            "offset" => {
                offset = kv.value.parse().map_err(|_| {
                    EngineError::invalid(format!(
                        "{what}: external_data offset '{}' is not a number",
                        kv.value
                    ))
                })?
            }
            "length" => {
                length = Some(kv.value.parse::<u64>().map_err(|_| {
                    EngineError::invalid(format!(
                        "{what}: external_data length '{}' is not a number",
                        kv.value
                    ))
                })?)
            }
            _ => {}
        }
    }
    let location = location
        .ok_or_else(|| EngineError::invalid(format!("{what}: external data without a 'location'")))?;
    let Some(dir) = dir else {
        return Err(EngineError::invalid(format!(
            "{what}: stored in external file '{location}', but the model was given as bytes without a \
             directory; load it from a file path"
        )));
    };
    let rel = Path::new(&location);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(EngineError::invalid(format!(
            "{what}: external data location '{location}' must be a relative path inside the model's folder"
        )));
    }
    let path = dir.join(rel);
    let data = std::fs::read(&path).map_err(|source| EngineError::Io {
        context: format!("{what}: reading external data {}", path.display()),
        source,
    })?;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = match length {
        Some(l) => start.saturating_add(usize::try_from(l).unwrap_or(usize::MAX)),
        None => data.len(),
    };
    if start > data.len() || end > data.len() {
        return Err(EngineError::invalid(format!(
            "{what}: external data range {start}..{end} is outside '{location}' ({} bytes)",
            data.len()
        )));
    }
    Ok(Bytes::copy_from_slice(&data[start..end]))
}

/// ONNX's name for a dtype code, for messages.
pub(crate) fn onnx_type_name(code: i32) -> &'static str {
    match code {
        0 => "UNDEFINED",
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17..=20 => "FLOAT8",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        _ => "unknown",
    }
}

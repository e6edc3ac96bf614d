//! Element types on the device and their conversions at the host boundary.
//!
//! WGSL has no 64-bit integers, no 8/16-bit storage and no f64 in the portable core, so tensors are narrowed
//! on upload and widened on readback: every integer type lives on the device as `i32` (with a range check
//! naming the tensor when a value does not fit), booleans as `i32` 0/1, f64 and bf16 as `f32`, and f16 as
//! `f16` when the adapter has `shader-f16` (else `f32`).

use super::error::{GpuError, GpuResult};

/// Storage type of a tensor on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float (only where the device has `shader-f16`).
    F16,
    /// 32-bit signed integer (every ONNX integer type, narrowed).
    I32,
    /// Boolean stored as an `i32` 0 or 1.
    Bool,
}

impl DType {
    /// The WGSL type an element is stored as.
    pub(crate) fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I32 | DType::Bool => "i32",
        }
    }

    /// Bytes per element in device memory.
    pub(crate) fn size(self) -> usize {
        match self {
            DType::F16 => 2,
            _ => 4,
        }
    }

    /// Whether arithmetic on this type is floating point.
    pub(crate) fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }
}

/// Element type of a host tensor (the ONNX types the executor accepts at its edges).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HostType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl HostType {
    /// Bytes per element on the host.
    pub(crate) fn size(self) -> usize {
        match self {
            HostType::I8 | HostType::U8 | HostType::Bool => 1,
            HostType::F16 | HostType::BF16 | HostType::I16 | HostType::U16 => 2,
            HostType::F32 | HostType::I32 | HostType::U32 => 4,
            HostType::F64 | HostType::I64 | HostType::U64 => 8,
        }
    }

    /// The device type this host type is stored as.
    pub(crate) fn device(self, has_f16: bool) -> DType {
        match self {
            HostType::F32 | HostType::F64 | HostType::BF16 => DType::F32,
            HostType::F16 if has_f16 => DType::F16,
            HostType::F16 => DType::F32,
            HostType::Bool => DType::Bool,
            _ => DType::I32,
        }
    }

    /// Lower-case ONNX-style name for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            HostType::F32 => "float32",
            HostType::F16 => "float16",
            HostType::BF16 => "bfloat16",
            HostType::F64 => "float64",
            HostType::I8 => "int8",
            HostType::I16 => "int16",
            HostType::I32 => "int32",
            HostType::I64 => "int64",
            HostType::U8 => "uint8",
            HostType::U16 => "uint16",
            HostType::U32 => "uint32",
            HostType::U64 => "uint64",
            HostType::Bool => "bool",
        }
    }
}

fn chunks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    // `chunks_exact` yields slices of exactly N bytes, so the conversion cannot fail.
    bytes
        .chunks_exact(N)
        .map(|c| <[u8; N]>::try_from(c).unwrap_or([0; N]))
}

fn narrow_i64(value: i64, tensor: &str, index: usize) -> GpuResult<i32> {
    i32::try_from(value).map_err(|_| {
        GpuError::invalid(format!(
            "tensor '{tensor}': element {index} is {value}, outside the 32-bit range the wgpu executor stores \
             integers in (WGSL has no 64-bit integers); use the CPU executor for this model"
        ))
    })
}

/// Converts host bytes (little-endian, row-major) of `host` type into the device representation `dev`.
/// `tensor` names the tensor in errors.
pub(crate) fn to_device(host: HostType, dev: DType, bytes: &[u8], tensor: &str) -> GpuResult<Vec<u8>> {
    let n = bytes.len() / host.size();
    if bytes.len() != n * host.size() {
        return Err(GpuError::invalid(format!(
            "tensor '{tensor}': {} bytes is not a whole number of {} elements",
            bytes.len(),
            host.name()
        )));
    }
    let mut out = Vec::with_capacity(n * dev.size());
    match dev {
        DType::F32 => {
            for v in floats(host, bytes) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => match host {
            HostType::F16 => out.extend_from_slice(bytes),
            _ => {
                for v in floats(host, bytes) {
                    out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
        },
        DType::I32 | DType::Bool => {
            let as_bool = dev == DType::Bool;
            for (i, v) in ints(host, bytes).enumerate() {
                let v = narrow_i64(v, tensor, i)?;
                let v = if as_bool { i32::from(v != 0) } else { v };
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// Converts device bytes of type `dev` back into host bytes of type `host`.
pub(crate) fn from_device(host: HostType, dev: DType, bytes: &[u8]) -> Vec<u8> {
    let vals_f: Vec<f64>;
    let vals_i: Vec<i64>;
    let mut out = Vec::with_capacity(bytes.len() / dev.size() * host.size());
    let is_float_dev = dev.is_float();
    if is_float_dev {
        vals_f = match dev {
            DType::F16 => chunks::<2>(bytes)
                .map(|c| f64::from(half::f16::from_le_bytes(c).to_f32()))
                .collect(),
            _ => chunks::<4>(bytes)
                .map(|c| f64::from(f32::from_le_bytes(c)))
                .collect(),
        };
        vals_i = Vec::new();
    } else {
        vals_i = chunks::<4>(bytes)
            .map(|c| i64::from(i32::from_le_bytes(c)))
            .collect();
        vals_f = Vec::new();
    }
    let count = if is_float_dev { vals_f.len() } else { vals_i.len() };
    for k in 0..count {
        let f = if is_float_dev { vals_f[k] } else { vals_i[k] as f64 };
        let i = if is_float_dev { vals_f[k] as i64 } else { vals_i[k] };
        match host {
            HostType::F32 => out.extend_from_slice(&(f as f32).to_le_bytes()),
            HostType::F64 => out.extend_from_slice(&f.to_le_bytes()),
            HostType::F16 => out.extend_from_slice(&half::f16::from_f64(f).to_le_bytes()),
            HostType::BF16 => out.extend_from_slice(&half::bf16::from_f64(f).to_le_bytes()),
            HostType::I8 => out.push(i as i8 as u8),
            HostType::U8 => out.push(i as u8),
            HostType::Bool => out.push(u8::from(i != 0)),
            HostType::I16 => out.extend_from_slice(&(i as i16).to_le_bytes()),
            HostType::U16 => out.extend_from_slice(&(i as u16).to_le_bytes()),
            HostType::I32 => out.extend_from_slice(&(i as i32).to_le_bytes()),
            HostType::U32 => out.extend_from_slice(&(i as u32).to_le_bytes()),
            HostType::I64 => out.extend_from_slice(&i.to_le_bytes()),
            HostType::U64 => out.extend_from_slice(&(i as u64).to_le_bytes()),
        }
    }
    out
}

fn floats(host: HostType, bytes: &[u8]) -> Box<dyn Iterator<Item = f32> + '_> {
    match host {
        HostType::F32 => Box::new(chunks::<4>(bytes).map(f32::from_le_bytes)),
        HostType::F64 => Box::new(chunks::<8>(bytes).map(|c| f64::from_le_bytes(c) as f32)),
        HostType::F16 => Box::new(chunks::<2>(bytes).map(|c| half::f16::from_le_bytes(c).to_f32())),
        HostType::BF16 => Box::new(chunks::<2>(bytes).map(|c| half::bf16::from_le_bytes(c).to_f32())),
        _ => Box::new(ints(host, bytes).map(|v| v as f32)),
    }
}

fn ints(host: HostType, bytes: &[u8]) -> Box<dyn Iterator<Item = i64> + '_> {
    match host {
        HostType::I8 => Box::new(bytes.iter().map(|&b| i64::from(b as i8))),
        HostType::U8 | HostType::Bool => Box::new(bytes.iter().map(|&b| i64::from(b))),
        HostType::I16 => Box::new(chunks::<2>(bytes).map(|c| i64::from(i16::from_le_bytes(c)))),
        HostType::U16 => Box::new(chunks::<2>(bytes).map(|c| i64::from(u16::from_le_bytes(c)))),
        HostType::I32 => Box::new(chunks::<4>(bytes).map(|c| i64::from(i32::from_le_bytes(c)))),
        HostType::U32 => Box::new(chunks::<4>(bytes).map(|c| i64::from(u32::from_le_bytes(c)))),
        HostType::I64 => Box::new(chunks::<8>(bytes).map(i64::from_le_bytes)),
        // u64 values above i64::MAX wrap negative here and then fail the i32 range check, as they should.
        HostType::U64 => Box::new(chunks::<8>(bytes).map(|c| u64::from_le_bytes(c) as i64)),
        HostType::F32 | HostType::F64 | HostType::F16 | HostType::BF16 => {
            Box::new(floats(host, bytes).map(|v| v as i64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_is_narrowed_with_a_range_check_naming_the_tensor() {
        let ok: Vec<u8> = [-5i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let dev = to_device(HostType::I64, DType::I32, &ok, "idx").expect("fits");
        assert_eq!(from_device(HostType::I64, DType::I32, &dev), ok);
        let big: Vec<u8> = [1i64 << 40].iter().flat_map(|v| v.to_le_bytes()).collect();
        let err = to_device(HostType::I64, DType::I32, &big, "idx").expect_err("too big");
        assert!(err.message.contains("'idx'") && err.message.contains("1099511627776"));
    }

    #[test]
    fn bool_and_f16_round_trip() {
        let b = [0u8, 1, 1, 0];
        let dev = to_device(HostType::Bool, DType::Bool, &b, "m").expect("bool");
        assert_eq!(dev.len(), 16);
        assert_eq!(from_device(HostType::Bool, DType::Bool, &dev), b);
        let h: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let dev = to_device(HostType::F16, DType::F32, &h, "h").expect("f16");
        assert_eq!(
            dev,
            [1.5f32, -2.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        assert_eq!(from_device(HostType::F16, DType::F32, &dev), h);
    }
}

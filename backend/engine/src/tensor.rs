//! Host tensors exchanged with callers: dtype, shape and little-endian row-major bytes.

use bytes::Bytes;

use crate::error::{EngineError, Result};

/// Element type of a tensor. Discriminants are ONNX `TensorProto.DataType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// 32-bit float (`FP32`).
    F32 = 1,
    /// Unsigned 8-bit integer.
    U8 = 2,
    /// Signed 8-bit integer.
    I8 = 3,
    /// Unsigned 16-bit integer.
    U16 = 4,
    /// Signed 16-bit integer.
    I16 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Signed 64-bit integer.
    I64 = 7,
    /// Variable-length byte strings (Triton `BYTES`): each element is a u32 LE length then the bytes.
    String = 8,
    /// Boolean, one byte per element (0 or 1).
    Bool = 9,
    /// IEEE half precision.
    F16 = 10,
    /// 64-bit float.
    F64 = 11,
    /// Unsigned 32-bit integer.
    U32 = 12,
    /// Unsigned 64-bit integer.
    U64 = 13,
    /// bfloat16.
    BF16 = 16,
}

impl DataType {
    /// Every supported dtype.
    pub const ALL: [DataType; 14] = [
        DataType::F32,
        DataType::U8,
        DataType::I8,
        DataType::U16,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::String,
        DataType::Bool,
        DataType::F16,
        DataType::F64,
        DataType::U32,
        DataType::U64,
        DataType::BF16,
    ];

    /// From an ONNX `TensorProto.DataType` code; `None` for codes this engine does not support
    /// (complex, float8 …) and for INT4/UINT4, which the loader carries as INT8/UINT8
    /// (`onnx::int4`).
    pub fn from_onnx(code: i32) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| *d as i32 == code)
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    /// Bytes per element; `None` for [`DataType::String`].
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::U8 | DataType::I8 => 1,
            DataType::U16 | DataType::I16 | DataType::F16 | DataType::BF16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
            DataType::String => return None,
        })
    }

    /// The KServe V2 / Triton datatype name (`FP32`, `INT64`, `BYTES`, …).
    pub fn triton_name(self) -> &'static str {
        match self {
            DataType::F32 => "FP32",
            DataType::U8 => "UINT8",
            DataType::I8 => "INT8",
            DataType::U16 => "UINT16",
            DataType::I16 => "INT16",
            DataType::I32 => "INT32",
            DataType::I64 => "INT64",
            DataType::String => "BYTES",
            DataType::Bool => "BOOL",
            DataType::F16 => "FP16",
            DataType::F64 => "FP64",
            DataType::U32 => "UINT32",
            DataType::U64 => "UINT64",
            DataType::BF16 => "BF16",
        }
    }

    /// Parse a KServe V2 datatype name.
    pub fn from_triton_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.triton_name() == name)
    }

    /// Floating-point types (F16, BF16, F32, F64).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64
        )
    }

    /// Integer types (signed or unsigned, not bool).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DataType::U8
                | DataType::I8
                | DataType::U16
                | DataType::I16
                | DataType::I32
                | DataType::I64
                | DataType::U32
                | DataType::U64
        )
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.triton_name())
    }
}

/// A Rust scalar type that a [`Tensor`] can hold.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The matching dtype.
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DataType = DataType::$d; })* };
}
element!(f32 => F32, f64 => F64, u8 => U8, i8 => I8, u16 => U16, i16 => I16, i32 => I32, i64 => I64,
    u32 => U32, u64 => U64, half::f16 => F16, half::bf16 => BF16);

/// A vector of elements read as its bytes, so that [`Bytes`] can own it.
struct ElementBytes<T>(Vec<T>);

impl<T: Element> AsRef<[u8]> for ElementBytes<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// A host tensor: little-endian, row-major; BOOL one byte per element; STRING elements serialised as
/// Triton does (u32 LE length + bytes, one after another).
#[derive(Clone, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions (empty for a scalar).
    pub shape: Vec<usize>,
    /// Raw little-endian bytes.
    pub data: Bytes,
}

/// The most elements one value may hold: 2^32, 16 GiB of f32, past any model we serve.
pub(crate) const MAX_ELEMENTS: usize = 1 << 32;

/// The number of elements of `shape`, refused past [`MAX_ELEMENTS`]. Shapes come from model data
/// (initializer dims, Reshape targets, Expand shapes, Tile repeats), so they are checked, not
/// trusted. Zero dims count as one for the bound, so every partial product of a checked shape (a
/// Flatten, a reduction's outer size) fits too, even when another dim makes the total 0.
pub(crate) fn checked_elements(shape: &[usize]) -> Result<usize> {
    let bound = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)));
    match bound {
        Some(b) if b <= MAX_ELEMENTS => Ok(shape.iter().product()),
        _ => Err(EngineError::invalid(format!(
            "shape {shape:?} holds more than {MAX_ELEMENTS} elements, the most one value may hold; \
             check the model's shapes (a Reshape target, an Expand shape, Tile repeats)"
        ))),
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({} {:?}, {} bytes)",
            self.dtype,
            self.shape,
            self.data.len()
        )
    }
}

impl Tensor {
    /// A tensor from raw bytes, checking that the byte length matches dtype and shape.
    pub fn new(dtype: DataType, shape: Vec<usize>, data: Bytes) -> Result<Tensor> {
        let t = Tensor { dtype, shape, data };
        t.validate()?;
        Ok(t)
    }

    /// A tensor of zeros (empty strings for STRING).
    pub(crate) fn zeros(dtype: DataType, shape: Vec<usize>) -> Result<Tensor> {
        let n = checked_elements(&shape)?;
        if dtype == DataType::String {
            return Tensor::from_strings(shape, &vec![Vec::new(); n]);
        }
        let size = dtype
            .size()
            .ok_or_else(|| EngineError::internal(format!("{dtype} has no element size")))?;
        Tensor::new(dtype, shape, Bytes::from(vec![0u8; n * size]))
    }

    /// A tensor holding a copy of typed values.
    pub fn from_slice<T: Element>(shape: Vec<usize>, values: &[T]) -> Result<Tensor> {
        Tensor::from_vec(shape, values.to_vec())
    }

    /// A tensor that takes `values` as its bytes without copying them.
    pub fn from_vec<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(EngineError::invalid(format!(
                "tensor of shape {shape:?} needs {n} elements, got {}",
                values.len()
            )));
        }
        Ok(Tensor {
            dtype: T::DTYPE,
            shape,
            data: Bytes::from_owner(ElementBytes(values)),
        })
    }

    /// A boolean tensor.
    pub fn from_bools(shape: Vec<usize>, values: &[bool]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(EngineError::invalid(format!(
                "tensor of shape {shape:?} needs {n} elements, got {}",
                values.len()
            )));
        }
        Ok(Tensor {
            dtype: DataType::Bool,
            shape,
            data: values.iter().map(|&b| b as u8).collect::<Vec<u8>>().into(),
        })
    }

    /// A string tensor (Triton BYTES serialisation).
    pub fn from_strings(shape: Vec<usize>, values: &[Vec<u8>]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != values.len() {
            return Err(EngineError::invalid(format!(
                "tensor of shape {shape:?} needs {n} elements, got {}",
                values.len()
            )));
        }
        let mut out = Vec::new();
        for v in values {
            let len = u32::try_from(v.len())
                .map_err(|_| EngineError::invalid("string element longer than 4 GiB"))?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(v);
        }
        Ok(Tensor {
            dtype: DataType::String,
            shape,
            data: out.into(),
        })
    }

    /// A scalar f32 tensor.
    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor {
            dtype: DataType::F32,
            shape: vec![],
            data: Bytes::copy_from_slice(&v.to_le_bytes()),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Check that the byte length matches dtype and shape (and that strings are well formed).
    pub fn validate(&self) -> Result<()> {
        let n = checked_elements(&self.shape)?;
        match self.dtype.size() {
            Some(sz) => {
                let want = n.checked_mul(sz).ok_or_else(|| {
                    EngineError::invalid(format!("tensor shape {:?} is too large", self.shape))
                })?;
                if want != self.data.len() {
                    return Err(EngineError::invalid(format!(
                        "{} tensor of shape {:?} needs {want} bytes, got {}",
                        self.dtype,
                        self.shape,
                        self.data.len()
                    )));
                }
            }
            None => {
                self.strings()?;
            }
        }
        Ok(())
    }

    /// Copy out typed values; fails when `T` does not match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(EngineError::invalid(format!(
                "tensor holds {}, asked for {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let sz = std::mem::size_of::<T>();
        if !self.data.len().is_multiple_of(sz) {
            return Err(EngineError::invalid(
                "tensor byte length is not a multiple of its element size",
            ));
        }
        // bytes aligned for T (as they come from a Vec<T>): one copy
        if let Ok(values) = bytemuck::try_cast_slice::<u8, T>(&self.data) {
            return Ok(values.to_vec());
        }
        Ok(self
            .data
            .chunks_exact(sz)
            .map(bytemuck::pod_read_unaligned::<T>)
            .collect())
    }

    /// Copy the values into `dst`, which holds exactly as many.
    pub(crate) fn read_into<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        if T::DTYPE != self.dtype || self.data.len() != std::mem::size_of_val(dst) {
            return Err(EngineError::internal(format!(
                "{} values of {} read into {} of {}",
                self.data.len() / sz.max(1),
                self.dtype,
                dst.len(),
                T::DTYPE
            )));
        }
        match bytemuck::try_cast_slice::<u8, T>(&self.data) {
            Ok(values) => dst.copy_from_slice(values),
            Err(_) => {
                for (d, b) in dst.iter_mut().zip(self.data.chunks_exact(sz)) {
                    *d = bytemuck::pod_read_unaligned(b);
                }
            }
        }
        Ok(())
    }

    /// Boolean values of a BOOL tensor.
    pub fn to_bools(&self) -> Result<Vec<bool>> {
        if self.dtype != DataType::Bool {
            return Err(EngineError::invalid(format!(
                "tensor holds {}, asked for BOOL",
                self.dtype
            )));
        }
        Ok(self.data.iter().map(|&b| b != 0).collect())
    }

    /// Elements of a STRING tensor.
    pub fn strings(&self) -> Result<Vec<Vec<u8>>> {
        if self.dtype != DataType::String {
            return Err(EngineError::invalid(format!(
                "tensor holds {}, asked for BYTES",
                self.dtype
            )));
        }
        let mut out = Vec::with_capacity(self.len());
        let mut rest: &[u8] = &self.data;
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(EngineError::invalid("BYTES tensor: truncated element length"));
            }
            let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            rest = &rest[4..];
            if rest.len() < len {
                return Err(EngineError::invalid("BYTES tensor: element longer than the data"));
            }
            out.push(rest[..len].to_vec());
            rest = &rest[len..];
        }
        if out.len() != self.len() {
            return Err(EngineError::invalid(format!(
                "BYTES tensor of shape {:?} holds {} elements",
                self.shape,
                out.len()
            )));
        }
        Ok(out)
    }

    /// Values converted to f64 (any numeric or bool dtype); used for small host-side parameters.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(match self.dtype {
            DataType::F32 => self.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
            DataType::F64 => self.to_vec::<f64>()?,
            DataType::F16 => self.to_vec::<half::f16>()?.into_iter().map(f64::from).collect(),
            DataType::BF16 => self.to_vec::<half::bf16>()?.into_iter().map(f64::from).collect(),
            DataType::U8 => self.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
            DataType::I8 => self.to_vec::<i8>()?.into_iter().map(f64::from).collect(),
            DataType::U16 => self.to_vec::<u16>()?.into_iter().map(f64::from).collect(),
            DataType::I16 => self.to_vec::<i16>()?.into_iter().map(f64::from).collect(),
            DataType::I32 => self.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
            DataType::U32 => self.to_vec::<u32>()?.into_iter().map(f64::from).collect(),
            DataType::I64 => self.to_vec::<i64>()?.into_iter().map(|v| v as f64).collect(),
            DataType::U64 => self.to_vec::<u64>()?.into_iter().map(|v| v as f64).collect(),
            DataType::Bool => self.data.iter().map(|&b| f64::from(b != 0)).collect(),
            DataType::String => {
                return Err(EngineError::invalid("expected a numeric tensor, got BYTES"));
            }
        })
    }

    /// Values converted to i64 (integer or bool dtypes; floats are truncated).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        Ok(match self.dtype {
            DataType::I64 => self.to_vec::<i64>()?,
            DataType::I32 => self.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
            DataType::U64 => self.to_vec::<u64>()?.into_iter().map(|v| v as i64).collect(),
            _ => self.to_f64_vec()?.into_iter().map(|v| v as i64).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values read back are the same whether the bytes are aligned for the type (one copy) or not
    /// (a request body's payload sliced at any offset), and a destination of the wrong size or
    /// type is refused.
    #[test]
    fn values_read_back_from_aligned_and_unaligned_bytes() {
        let values: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let mut raw = vec![0u8];
        raw.extend_from_slice(bytemuck::cast_slice(&values));
        let unaligned = Bytes::from(raw).slice(1..);
        let aligned = Tensor::from_slice(vec![37], &values).unwrap();
        for t in [aligned, Tensor::new(DataType::F32, vec![37], unaligned).unwrap()] {
            assert_eq!(t.to_vec::<f32>().unwrap(), values);
            let mut dst = vec![0f32; 37];
            t.read_into(&mut dst).unwrap();
            assert_eq!(dst, values);
            assert!(t.read_into(&mut [0f32; 36]).is_err());
            assert!(t.read_into(&mut [0i32; 37]).is_err());
        }
    }
}

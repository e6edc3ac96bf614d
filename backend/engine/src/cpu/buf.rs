//! Typed host buffers used by the CPU kernels, converted from/to [`Tensor`] at the edges.

use half::{bf16, f16};

use crate::error::{EngineError, Result};
use crate::tensor::{DataType, Tensor};

/// A typed, owned element buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    Str(Vec<Vec<u8>>),
}

/// Apply an expression to the inner vector of any variant, producing a value.
/// One input of a node: buffer and shape.
pub(crate) type In<'a> = Option<(&'a Buf, &'a [usize])>;

macro_rules! visit {
    ($b:expr, $v:ident => $e:expr) => {
        match $b {
            Buf::F32($v) => $e,
            Buf::F64($v) => $e,
            Buf::F16($v) => $e,
            Buf::BF16($v) => $e,
            Buf::I8($v) => $e,
            Buf::I16($v) => $e,
            Buf::I32($v) => $e,
            Buf::I64($v) => $e,
            Buf::U8($v) => $e,
            Buf::U16($v) => $e,
            Buf::U32($v) => $e,
            Buf::U64($v) => $e,
            Buf::Bool($v) => $e,
            Buf::Str($v) => $e,
        }
    };
}

/// Apply an expression producing a vector of the same element type, rewrapped in the same variant.
macro_rules! map_same {
    ($b:expr, $v:ident => $e:expr) => {
        match $b {
            Buf::F32($v) => Buf::F32($e),
            Buf::F64($v) => Buf::F64($e),
            Buf::F16($v) => Buf::F16($e),
            Buf::BF16($v) => Buf::BF16($e),
            Buf::I8($v) => Buf::I8($e),
            Buf::I16($v) => Buf::I16($e),
            Buf::I32($v) => Buf::I32($e),
            Buf::I64($v) => Buf::I64($e),
            Buf::U8($v) => Buf::U8($e),
            Buf::U16($v) => Buf::U16($e),
            Buf::U32($v) => Buf::U32($e),
            Buf::U64($v) => Buf::U64($e),
            Buf::Bool($v) => Buf::Bool($e),
            Buf::Str($v) => Buf::Str($e),
        }
    };
}

/// Apply an expression to two buffers of the same variant; `None` when the variants differ.
macro_rules! pair_same {
    ($x:expr, $y:expr, ($a:ident, $b:ident) => $e:expr) => {
        match ($x, $y) {
            (Buf::F32($a), Buf::F32($b)) => Some(Buf::F32($e)),
            (Buf::F64($a), Buf::F64($b)) => Some(Buf::F64($e)),
            (Buf::F16($a), Buf::F16($b)) => Some(Buf::F16($e)),
            (Buf::BF16($a), Buf::BF16($b)) => Some(Buf::BF16($e)),
            (Buf::I8($a), Buf::I8($b)) => Some(Buf::I8($e)),
            (Buf::I16($a), Buf::I16($b)) => Some(Buf::I16($e)),
            (Buf::I32($a), Buf::I32($b)) => Some(Buf::I32($e)),
            (Buf::I64($a), Buf::I64($b)) => Some(Buf::I64($e)),
            (Buf::U8($a), Buf::U8($b)) => Some(Buf::U8($e)),
            (Buf::U16($a), Buf::U16($b)) => Some(Buf::U16($e)),
            (Buf::U32($a), Buf::U32($b)) => Some(Buf::U32($e)),
            (Buf::U64($a), Buf::U64($b)) => Some(Buf::U64($e)),
            (Buf::Bool($a), Buf::Bool($b)) => Some(Buf::Bool($e)),
            (Buf::Str($a), Buf::Str($b)) => Some(Buf::Str($e)),
            _ => None,
        }
    };
}

pub(crate) use map_same;
pub(crate) use pair_same;
pub(crate) use visit;

impl Buf {
    pub(crate) fn dtype(&self) -> DataType {
        match self {
            Buf::F32(_) => DataType::F32,
            Buf::F64(_) => DataType::F64,
            Buf::F16(_) => DataType::F16,
            Buf::BF16(_) => DataType::BF16,
            Buf::I8(_) => DataType::I8,
            Buf::I16(_) => DataType::I16,
            Buf::I32(_) => DataType::I32,
            Buf::I64(_) => DataType::I64,
            Buf::U8(_) => DataType::U8,
            Buf::U16(_) => DataType::U16,
            Buf::U32(_) => DataType::U32,
            Buf::U64(_) => DataType::U64,
            Buf::Bool(_) => DataType::Bool,
            Buf::Str(_) => DataType::String,
        }
    }

    pub(crate) fn len(&self) -> usize {
        visit!(self, v => v.len())
    }

    /// A zero-filled buffer.
    #[allow(dead_code)]
    pub(crate) fn zeros(dtype: DataType, n: usize) -> Buf {
        match dtype {
            DataType::F32 => Buf::F32(vec![0.0; n]),
            DataType::F64 => Buf::F64(vec![0.0; n]),
            DataType::F16 => Buf::F16(vec![f16::ZERO; n]),
            DataType::BF16 => Buf::BF16(vec![bf16::ZERO; n]),
            DataType::I8 => Buf::I8(vec![0; n]),
            DataType::I16 => Buf::I16(vec![0; n]),
            DataType::I32 => Buf::I32(vec![0; n]),
            DataType::I64 => Buf::I64(vec![0; n]),
            DataType::U8 => Buf::U8(vec![0; n]),
            DataType::U16 => Buf::U16(vec![0; n]),
            DataType::U32 => Buf::U32(vec![0; n]),
            DataType::U64 => Buf::U64(vec![0; n]),
            DataType::Bool => Buf::Bool(vec![false; n]),
            DataType::String => Buf::Str(vec![Vec::new(); n]),
        }
    }

    pub(crate) fn from_tensor(t: &Tensor) -> Result<Buf> {
        Ok(match t.dtype {
            DataType::F32 => {
                // into a reused buffer (the last run's input, usually)
                let mut v = crate::cpu::arena::take(t.len());
                t.read_into(&mut v)?;
                Buf::F32(v)
            }
            DataType::F64 => Buf::F64(t.to_vec()?),
            DataType::F16 => Buf::F16(t.to_vec()?),
            DataType::BF16 => Buf::BF16(t.to_vec()?),
            DataType::I8 => Buf::I8(t.to_vec()?),
            DataType::I16 => Buf::I16(t.to_vec()?),
            DataType::I32 => Buf::I32(t.to_vec()?),
            DataType::I64 => Buf::I64(t.to_vec()?),
            DataType::U8 => Buf::U8(t.to_vec()?),
            DataType::U16 => Buf::U16(t.to_vec()?),
            DataType::U32 => Buf::U32(t.to_vec()?),
            DataType::U64 => Buf::U64(t.to_vec()?),
            DataType::Bool => Buf::Bool(t.to_bools()?),
            DataType::String => Buf::Str(t.strings()?),
        })
    }

    /// The values in a tensor, handed over without copying them (booleans and strings, stored
    /// differently in a tensor, are copied).
    pub(crate) fn into_tensor(self, shape: Vec<usize>) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != self.len() {
            return Err(EngineError::internal(format!(
                "buffer of {} elements for shape {shape:?}",
                self.len()
            )));
        }
        match self {
            Buf::F32(v) => Tensor::from_vec(shape, v),
            Buf::F64(v) => Tensor::from_vec(shape, v),
            Buf::F16(v) => Tensor::from_vec(shape, v),
            Buf::BF16(v) => Tensor::from_vec(shape, v),
            Buf::I8(v) => Tensor::from_vec(shape, v),
            Buf::I16(v) => Tensor::from_vec(shape, v),
            Buf::I32(v) => Tensor::from_vec(shape, v),
            Buf::I64(v) => Tensor::from_vec(shape, v),
            Buf::U8(v) => Tensor::from_vec(shape, v),
            Buf::U16(v) => Tensor::from_vec(shape, v),
            Buf::U32(v) => Tensor::from_vec(shape, v),
            Buf::U64(v) => Tensor::from_vec(shape, v),
            Buf::Bool(v) => Tensor::from_bools(shape, &v),
            Buf::Str(v) => Tensor::from_strings(shape, &v),
        }
    }

    /// The values in a tensor of their own (a copy).
    pub(crate) fn to_tensor(&self, shape: Vec<usize>) -> Result<Tensor> {
        self.clone().into_tensor(shape)
    }

    /// Values as f32 (floats converted; other types cast).
    pub(crate) fn to_f32(&self) -> Vec<f32> {
        match self {
            Buf::F32(v) => v.clone(),
            Buf::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Buf::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            _ => self.to_f64().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// Values as f64.
    pub(crate) fn to_f64(&self) -> Vec<f64> {
        match self {
            Buf::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::F64(v) => v.clone(),
            Buf::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Buf::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Buf::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::I16(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::U16(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::U32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Buf::U64(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
            Buf::Str(v) => v
                .iter()
                .map(|s| {
                    std::str::from_utf8(s)
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(f64::NAN)
                })
                .collect(),
        }
    }

    /// Values as i64 (indices).
    pub(crate) fn to_i64(&self) -> Vec<i64> {
        match self {
            Buf::I64(v) => v.clone(),
            Buf::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
            _ => self.to_f64().into_iter().map(|x| x as i64).collect(),
        }
    }

    /// A float buffer of `dtype` from f32 values.
    pub(crate) fn from_f32(dtype: DataType, v: Vec<f32>) -> Buf {
        match dtype {
            DataType::F16 => Buf::F16(v.into_iter().map(f16::from_f32).collect()),
            DataType::BF16 => Buf::BF16(v.into_iter().map(bf16::from_f32).collect()),
            DataType::F64 => Buf::F64(v.into_iter().map(f64::from).collect()),
            _ => Buf::F32(v),
        }
    }
}

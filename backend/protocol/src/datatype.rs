//! Tensor element types as the KServe V2 protocol names them (`"FP32"`, `"BYTES"`, …).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ServeError;

/// A tensor element type, spelled on the wire as in the KServe V2 protocol (`FP32`, `INT64`, `BYTES`, …).
///
/// Data of every type travels little-endian and row-major; `Bool` is one byte per element (0 or 1);
/// `Bytes` elements are each a little-endian `u32` length followed by that many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    /// `BOOL`: one byte, 0 or 1.
    Bool,
    /// `UINT8`.
    Uint8,
    /// `UINT16`.
    Uint16,
    /// `UINT32`.
    Uint32,
    /// `UINT64`.
    Uint64,
    /// `INT8`.
    Int8,
    /// `INT16`.
    Int16,
    /// `INT32`.
    Int32,
    /// `INT64`.
    Int64,
    /// `FP16`: IEEE half precision; binary or raw transports only (never JSON).
    Fp16,
    /// `BF16`: bfloat16; binary or raw transports only (never JSON).
    Bf16,
    /// `FP32`.
    Fp32,
    /// `FP64`.
    Fp64,
    /// `BYTES`: variable-length byte strings (Triton's `TYPE_STRING`).
    Bytes,
}

impl DataType {
    /// Every data type, in the order of the protocol's table.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
    ];

    /// The protocol spelling: `"FP32"`, `"BYTES"`, …
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
        }
    }

    /// Bytes per element, or `None` for `BYTES` (variable length).
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }

    /// Triton's model-config spelling (`TYPE_FP32`, `TYPE_STRING` for `BYTES`).
    pub fn as_config_str(self) -> &'static str {
        match self {
            DataType::Bool => "TYPE_BOOL",
            DataType::Uint8 => "TYPE_UINT8",
            DataType::Uint16 => "TYPE_UINT16",
            DataType::Uint32 => "TYPE_UINT32",
            DataType::Uint64 => "TYPE_UINT64",
            DataType::Int8 => "TYPE_INT8",
            DataType::Int16 => "TYPE_INT16",
            DataType::Int32 => "TYPE_INT32",
            DataType::Int64 => "TYPE_INT64",
            DataType::Fp16 => "TYPE_FP16",
            DataType::Bf16 => "TYPE_BF16",
            DataType::Fp32 => "TYPE_FP32",
            DataType::Fp64 => "TYPE_FP64",
            DataType::Bytes => "TYPE_STRING",
        }
    }

    /// Parses Triton's model-config spelling (`TYPE_FP32`, `TYPE_STRING`).
    pub fn from_config_str(s: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.as_config_str() == s)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DataType {
    type Err = ServeError;

    /// Parses the protocol spelling; the error lists the valid names.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DataType::ALL.into_iter().find(|d| d.as_str() == s).ok_or_else(|| {
            ServeError::invalid_argument(format!(
                "unknown datatype '{s}' (expected one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, \
                 INT32, INT64, FP16, BF16, FP32, FP64, BYTES)"
            ))
        })
    }
}

impl Serialize for DataType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DataType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse()
            .map_err(|e: ServeError| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_the_protocol_table() {
        for d in DataType::ALL {
            assert_eq!(d.as_str().parse::<DataType>().unwrap(), d);
            assert_eq!(DataType::from_config_str(d.as_config_str()), Some(d));
        }
        assert_eq!(DataType::Fp16.element_size(), Some(2));
        assert_eq!(DataType::Bool.element_size(), Some(1));
        assert_eq!(DataType::Bytes.element_size(), None);
        assert_eq!(DataType::Bytes.as_config_str(), "TYPE_STRING");
    }

    #[test]
    fn unknown_names_are_refused_with_the_list_of_valid_ones() {
        let err = "FLOAT32".parse::<DataType>().unwrap_err();
        assert!(
            err.message.contains("'FLOAT32'") && err.message.contains("FP32"),
            "{}",
            err.message
        );
    }
}

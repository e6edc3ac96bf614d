//! Conversions between protocol values and engine values.

use infergate_engine::DataType as EngineType;
use infergate_protocol::DataType;

/// The engine dtype of a protocol datatype.
pub fn engine_dtype(d: DataType) -> EngineType {
    match d {
        DataType::Bool => EngineType::Bool,
        DataType::Uint8 => EngineType::U8,
        DataType::Uint16 => EngineType::U16,
        DataType::Uint32 => EngineType::U32,
        DataType::Uint64 => EngineType::U64,
        DataType::Int8 => EngineType::I8,
        DataType::Int16 => EngineType::I16,
        DataType::Int32 => EngineType::I32,
        DataType::Int64 => EngineType::I64,
        DataType::Fp16 => EngineType::F16,
        DataType::Bf16 => EngineType::BF16,
        DataType::Fp32 => EngineType::F32,
        DataType::Fp64 => EngineType::F64,
        DataType::Bytes => EngineType::String,
    }
}

/// The protocol datatype of an engine dtype.
pub fn protocol_dtype(d: EngineType) -> DataType {
    match d {
        EngineType::Bool => DataType::Bool,
        EngineType::U8 => DataType::Uint8,
        EngineType::U16 => DataType::Uint16,
        EngineType::U32 => DataType::Uint32,
        EngineType::U64 => DataType::Uint64,
        EngineType::I8 => DataType::Int8,
        EngineType::I16 => DataType::Int16,
        EngineType::I32 => DataType::Int32,
        EngineType::I64 => DataType::Int64,
        EngineType::F16 => DataType::Fp16,
        EngineType::BF16 => DataType::Bf16,
        EngineType::F32 => DataType::Fp32,
        EngineType::F64 => DataType::Fp64,
        EngineType::String => DataType::Bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_datatype_maps_both_ways_with_the_same_name() {
        for d in DataType::ALL {
            let e = engine_dtype(d);
            assert_eq!(protocol_dtype(e), d);
            assert_eq!(e.triton_name(), d.as_str());
        }
    }
}

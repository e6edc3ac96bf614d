//! `model_warmup` samples turned into request tensors.

use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use infergate_engine::{DataType as EngineType, Tensor};

use crate::convert::engine_dtype;
use crate::spec::{ModelSpec, WarmupData, WarmupSample};

/// Builds the inputs of one warmup sample, in the order of `input_names` (the engine's signature order).
pub fn sample_inputs(
    spec: &ModelSpec,
    sample: &WarmupSample,
    model_dir: &Path,
    input_names: &[String],
) -> Result<Vec<Tensor>, String> {
    let mut out = Vec::with_capacity(input_names.len());
    for name in input_names {
        let Some(input) = sample.inputs.iter().find(|i| &i.name == name) else {
            return Err(format!(
                "warmup sample '{}' has no data for input '{name}' (every model input needs an entry)",
                sample.name
            ));
        };
        if input.dims.iter().any(|&d| d < 0) {
            return Err(format!(
                "warmup sample '{}' input '{name}': dims {:?} must all be concrete (no -1)",
                sample.name, input.dims
            ));
        }
        let mut shape: Vec<usize> = Vec::with_capacity(input.dims.len() + 1);
        if spec.max_batch_size > 0 {
            shape.push(sample.batch_size.max(1));
        }
        shape.extend(input.dims.iter().map(|&d| d as usize));
        let count: usize = shape.iter().product();
        let dtype = engine_dtype(input.datatype);
        let data = match &input.data {
            WarmupData::Zero => zeros(dtype, count),
            WarmupData::Random => random(dtype, count),
            WarmupData::File(rel) => {
                let path = model_dir.join("warmup").join(rel);
                let bytes = std::fs::read(&path).map_err(|e| {
                    format!(
                        "warmup sample '{}' input '{name}': cannot read {}: {e}",
                        sample.name,
                        path.display()
                    )
                })?;
                Bytes::from(bytes)
            }
        };
        let t = Tensor::new(dtype, shape, data)
            .map_err(|e| format!("warmup sample '{}' input '{name}': {e}", sample.name))?;
        out.push(t);
    }
    Ok(out)
}

fn zeros(dtype: EngineType, count: usize) -> Bytes {
    match dtype.size() {
        Some(size) => Bytes::from(vec![0u8; count * size]),
        // An empty string per element: a zero length prefix.
        None => Bytes::from(vec![0u8; count * 4]),
    }
}

/// Deterministic pseudo-random values: floats in [0, 1), integers 0..=9, booleans, short strings.
fn random(dtype: EngineType, count: usize) -> Bytes {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut b = BytesMut::new();
    for _ in 0..count {
        let r = next();
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
        let small = r % 10;
        match dtype {
            EngineType::F32 => b.put_f32_le(unit as f32),
            EngineType::F64 => b.put_f64_le(unit),
            EngineType::F16 => b.put_u16_le(half::f16::from_f64(unit).to_bits()),
            EngineType::BF16 => b.put_u16_le(half::bf16::from_f64(unit).to_bits()),
            EngineType::Bool => b.put_u8((r & 1) as u8),
            EngineType::U8 | EngineType::I8 => b.put_u8(small as u8),
            EngineType::U16 | EngineType::I16 => b.put_u16_le(small as u16),
            EngineType::U32 | EngineType::I32 => b.put_u32_le(small as u32),
            EngineType::U64 | EngineType::I64 => b.put_u64_le(small),
            EngineType::String => {
                let s = small.to_string();
                b.put_u32_le(s.len() as u32);
                b.put_slice(s.as_bytes());
            }
        }
    }
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{IoSpec, VersionPolicy, WarmupInput};
    use infergate_protocol::DataType;

    fn spec(max_batch_size: usize) -> ModelSpec {
        ModelSpec {
            name: "m".into(),
            platform: "onnxruntime_onnx".into(),
            model_filename: "model.onnx".into(),
            max_batch_size,
            inputs: vec![IoSpec {
                name: "x".into(),
                datatype: DataType::Fp32,
                dims: vec![4],
                optional: false,
            }],
            outputs: vec![],
            version_policy: VersionPolicy::Latest(1),
            instance_groups: vec![],
            batcher: Default::default(),
            warmup: vec![],
            parameters: Default::default(),
        }
    }

    fn sample(data: WarmupData) -> WarmupSample {
        WarmupSample {
            name: "w".into(),
            batch_size: 2,
            inputs: vec![WarmupInput {
                name: "x".into(),
                datatype: DataType::Fp32,
                dims: vec![4],
                data,
            }],
            count: 1,
        }
    }

    #[test]
    fn zero_and_random_samples_have_the_batch_dimension_and_the_right_size() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["x".to_string()];
        let t = sample_inputs(&spec(8), &sample(WarmupData::Zero), dir.path(), &names).unwrap();
        assert_eq!(t[0].shape, vec![2, 4]);
        assert_eq!(t[0].to_vec::<f32>().unwrap(), vec![0.0; 8]);
        let t = sample_inputs(&spec(0), &sample(WarmupData::Random), dir.path(), &names).unwrap();
        assert_eq!(t[0].shape, vec![4]);
        assert!(
            t[0].to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| (0.0..1.0).contains(v))
        );
    }

    #[test]
    fn a_data_file_of_the_wrong_size_and_a_missing_input_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("warmup")).unwrap();
        std::fs::write(dir.path().join("warmup/x.bin"), [0u8; 12]).unwrap();
        let names = vec!["x".to_string()];
        let err = sample_inputs(
            &spec(8),
            &sample(WarmupData::File("x.bin".into())),
            dir.path(),
            &names,
        )
        .unwrap_err();
        assert!(
            err.contains("warmup sample 'w' input 'x'") && err.contains("32 bytes"),
            "{err}"
        );
        let err = sample_inputs(
            &spec(8),
            &sample(WarmupData::Zero),
            dir.path(),
            &["y".to_string()],
        )
        .unwrap_err();
        assert!(err.contains("no data for input 'y'"), "{err}");
    }
}

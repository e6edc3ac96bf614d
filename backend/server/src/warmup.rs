//! `model_warmup` samples turned into request tensors, within a size cap and from files inside the
//! model folder only.

use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use infergate_engine::{DataType as EngineType, Tensor};

use crate::confine;
use crate::convert::engine_dtype;
use crate::spec::{ModelSpec, WarmupData, WarmupSample};

/// Most bytes the warmup samples of one model may hold, all samples together. Triton has no cap; this
/// one keeps a config (a load request's override included) from making the server allocate gigabytes
/// before the model serves. A model that needs more warms up with smaller samples: the point of warmup
/// is to compile and touch every kernel once, not to run production-size batches.
pub const WARMUP_MAX_BYTES: usize = 256 << 20;

/// Bytes of one warmup sample's tensors (a string element counts as its 4-byte length prefix), or why
/// its dims cannot make a tensor (a negative dimension, a product that overflows).
pub fn sample_bytes(spec: &ModelSpec, sample: &WarmupSample) -> Result<usize, String> {
    let mut total: usize = 0;
    for input in &sample.inputs {
        let label = || format!("warmup sample '{}' input '{}'", sample.name, input.name);
        if input.dims.iter().any(|&d| d < 0) {
            return Err(format!(
                "{}: dims {:?} must all be concrete (no -1)",
                label(),
                input.dims
            ));
        }
        let rows = if spec.max_batch_size > 0 {
            sample.batch_size.max(1)
        } else {
            1
        };
        let element = engine_dtype(input.datatype).size().unwrap_or(4);
        let bytes = input
            .dims
            .iter()
            .try_fold(rows.saturating_mul(element), |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
            .and_then(|b| total.checked_add(b));
        total = bytes.filter(|&b| b <= WARMUP_MAX_BYTES).ok_or_else(|| {
            format!(
                "{}: dims {:?} make the warmup samples larger than the limit of {} MiB; warm up with \
                 smaller dims or a smaller batch_size",
                label(),
                input.dims,
                WARMUP_MAX_BYTES >> 20
            )
        })?;
    }
    Ok(total)
}

/// Checks that all warmup samples of a model together stay within [`WARMUP_MAX_BYTES`].
pub fn check_size(spec: &ModelSpec) -> Result<(), String> {
    let mut total: usize = 0;
    for sample in &spec.warmup {
        let bytes = sample_bytes(spec, sample)?;
        total = total
            .checked_add(bytes)
            .filter(|&t| t <= WARMUP_MAX_BYTES)
            .ok_or_else(|| {
                format!(
                    "the warmup samples hold more than the limit of {} MiB together (sample '{}' passes \
                     it); warm up with fewer or smaller samples",
                    WARMUP_MAX_BYTES >> 20,
                    sample.name
                )
            })?;
    }
    Ok(())
}

/// Builds the inputs of one warmup sample, in the order of `input_names` (the engine's signature order).
pub fn sample_inputs(
    spec: &ModelSpec,
    sample: &WarmupSample,
    model_dir: &Path,
    input_names: &[String],
) -> Result<Vec<Tensor>, String> {
    // Validates the dims (concrete, no overflow) and the size before anything is allocated.
    sample_bytes(spec, sample)?;
    let mut out = Vec::with_capacity(input_names.len());
    for name in input_names {
        let Some(input) = sample.inputs.iter().find(|i| &i.name == name) else {
            return Err(format!(
                "warmup sample '{}' has no data for input '{name}' (every model input needs an entry)",
                sample.name
            ));
        };
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
            WarmupData::File(rel) => Bytes::from(
                read_data_file(model_dir, rel)
                    .map_err(|e| format!("warmup sample '{}' input '{name}': {e}", sample.name))?,
            ),
        };
        let t = Tensor::new(dtype, shape, data)
            .map_err(|e| format!("warmup sample '{}' input '{name}': {e}", sample.name))?;
        out.push(t);
    }
    Ok(out)
}

/// Reads `<model>/warmup/<rel>`: a plain relative path that resolves inside the model folder, no
/// larger than the warmup cap (checked before reading).
fn read_data_file(model_dir: &Path, rel: &Path) -> Result<Vec<u8>, String> {
    let rel_text = rel.to_string_lossy();
    confine::check_relative(&rel_text, "input_data_file")?;
    let path = confine::resolve_inside(model_dir, &model_dir.join("warmup").join(rel))?;
    let len = std::fs::metadata(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if len > WARMUP_MAX_BYTES as u64 {
        return Err(format!(
            "{} is {len} bytes, over the warmup limit of {} MiB",
            path.display(),
            WARMUP_MAX_BYTES >> 20
        ));
    }
    std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
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

    #[test]
    fn samples_over_the_cap_or_with_overflowing_dims_are_refused_before_allocating() {
        let mut big = sample(WarmupData::Zero);
        big.inputs[0].dims = vec![1 << 30]; // 2 rows × 2^30 × 4 bytes = 8 GiB
        let mut m = spec(8);
        m.warmup = vec![big.clone()];
        let err = check_size(&m).unwrap_err();
        assert!(
            err.contains("limit of 256 MiB") && err.contains("input 'x'"),
            "{err}"
        );
        let err = sample_inputs(&m, &big, Path::new("."), &["x".to_string()]).unwrap_err();
        assert!(err.contains("limit of 256 MiB"), "{err}");

        big.inputs[0].dims = vec![1 << 32, 1 << 32];
        m.warmup = vec![big];
        assert!(check_size(&m).unwrap_err().contains("limit of 256 MiB"));

        // Two samples each under the cap, over it together.
        let mut half = sample(WarmupData::Zero);
        half.inputs[0].dims = vec![20 << 20]; // 2 rows × 20 Mi × 4 bytes = 160 MiB
        m.warmup = vec![half.clone(), half];
        let err = check_size(&m).unwrap_err();
        assert!(err.contains("together"), "{err}");
    }

    #[test]
    fn a_data_file_outside_the_model_folder_is_not_read() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.bin"), [0u8; 32]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("warmup")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.bin"),
            dir.path().join("warmup/link.bin"),
        )
        .unwrap();
        let names = vec!["x".to_string()];
        let read = |rel: &str| {
            sample_inputs(
                &spec(8),
                &sample(WarmupData::File(rel.into())),
                dir.path(),
                &names,
            )
            .unwrap_err()
        };
        assert!(read("../../secret.bin").contains("no '..'"));
        let abs = outside.path().join("secret.bin");
        assert!(read(abs.to_str().unwrap()).contains("no '..'"));
        let err = read("link.bin");
        assert!(err.contains("outside the model folder"), "{err}");
    }
}

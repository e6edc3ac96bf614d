//! The typed values the server runs a model with, converted once from its `ModelConfig` at load time.

use std::collections::BTreeMap;
use std::path::PathBuf;

use infergate_protocol::{DataType, shape_string};

use crate::batcher::BatcherConfig;

/// Which version folders a model serves (`version_policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The `n` highest versions (Triton's default is `latest { num_versions: 1 }`).
    Latest(u32),
    /// Every version folder.
    All,
    /// Exactly these versions.
    Specific(Vec<u64>),
}

impl VersionPolicy {
    /// The versions to serve among those present (ascending).
    pub fn select(&self, available: &[u64]) -> Vec<u64> {
        let mut v: Vec<u64> = available.to_vec();
        v.sort_unstable();
        v.dedup();
        match self {
            VersionPolicy::All => v,
            VersionPolicy::Latest(n) => {
                let n = (*n).max(1) as usize;
                v.split_off(v.len().saturating_sub(n))
            }
            VersionPolicy::Specific(want) => v.into_iter().filter(|x| want.contains(x)).collect(),
        }
    }
}

/// Where an instance group runs (`instance_group.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    /// `KIND_AUTO`: a hardware GPU through wgpu when there is one, else the CPU executor.
    Auto,
    /// `KIND_CPU`: the CPU executor.
    Cpu,
    /// `KIND_GPU`: wgpu on the best adapter (a hardware GPU, else a software one such as lavapipe); the load
    /// fails, naming the missing driver, when there is no adapter at all.
    Gpu,
}

/// One `instance_group` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceGroup {
    /// Instances in the group.
    pub count: usize,
    /// Where they run.
    pub kind: InstanceKind,
}

/// A model input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Dims without the batch dimension; -1 = any size.
    pub dims: Vec<i64>,
    /// Inputs only: the request may leave it out.
    pub optional: bool,
}

/// Where a warmup input's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarmupData {
    /// All zeros (empty strings for `BYTES`).
    Zero,
    /// Pseudo-random values.
    Random,
    /// Raw little-endian bytes from this file (`<model>/warmup/<file>`).
    File(PathBuf),
}

/// One warmup input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmupInput {
    /// Input name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Dims without the batch dimension.
    pub dims: Vec<i64>,
    /// The values.
    pub data: WarmupData,
}

/// One `model_warmup` sample, run on every instance before the version is reported ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmupSample {
    /// Sample name, for logs and errors.
    pub name: String,
    /// Rows along the batch dimension (0 or 1 for models without batching).
    pub batch_size: usize,
    /// Inputs.
    pub inputs: Vec<WarmupInput>,
    /// Times to run it.
    pub count: usize,
}

/// Everything the server needs to run one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Model name (its folder).
    pub name: String,
    /// `platform` (`onnxruntime_onnx`), or the backend name.
    pub platform: String,
    /// The model file in each version folder (`default_model_filename`, else `model.onnx`).
    pub model_filename: String,
    /// `max_batch_size`; 0 = the model does not batch and shapes are exact.
    pub max_batch_size: usize,
    /// Inputs in config order.
    pub inputs: Vec<IoSpec>,
    /// Outputs in config order.
    pub outputs: Vec<IoSpec>,
    /// Versions to serve.
    pub version_policy: VersionPolicy,
    /// Instances (empty = one `KIND_AUTO` instance).
    pub instance_groups: Vec<InstanceGroup>,
    /// Batching.
    pub batcher: BatcherConfig,
    /// Warmup samples.
    pub warmup: Vec<WarmupSample>,
    /// `parameters` (string values).
    pub parameters: BTreeMap<String, String>,
}

/// Triton's ONNX Runtime backend parameter for the threads of each CPU instance (`0` = the server's
/// default, `--cpu-threads` or the engine's).
pub const INTRA_OP_THREADS_PARAMETER: &str = "intra_op_thread_count";

impl ModelSpec {
    /// Threads of each CPU instance asked for by the config (`intra_op_thread_count`), when set above 0.
    pub fn cpu_threads(&self) -> Option<usize> {
        self.parameters
            .get(INTRA_OP_THREADS_PARAMETER)?
            .trim()
            .parse()
            .ok()
            .filter(|&n| n > 0)
    }
}

impl IoSpec {
    /// The shape as metadata reports it: a leading -1 when the model batches.
    pub fn metadata_shape(&self, max_batch_size: usize) -> Vec<i64> {
        let mut s = Vec::with_capacity(self.dims.len() + 1);
        if max_batch_size > 0 {
            s.push(-1);
        }
        s.extend_from_slice(&self.dims);
        s
    }

    /// Whether a concrete shape (without the batch dimension) fits the dims.
    pub fn accepts(&self, shape: &[i64]) -> bool {
        shape.len() == self.dims.len() && shape.iter().zip(&self.dims).all(|(&s, &d)| d < 0 || s == d)
    }

    /// `[-1,3,224,224]` for messages.
    pub fn shape_text(&self, max_batch_size: usize) -> String {
        shape_string(&self.metadata_shape(max_batch_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_policies_pick_the_right_folders() {
        let avail = [3, 1, 2, 10];
        assert_eq!(VersionPolicy::Latest(1).select(&avail), vec![10]);
        assert_eq!(VersionPolicy::Latest(2).select(&avail), vec![3, 10]);
        assert_eq!(VersionPolicy::Latest(9).select(&avail), vec![1, 2, 3, 10]);
        assert_eq!(VersionPolicy::All.select(&avail), vec![1, 2, 3, 10]);
        assert_eq!(VersionPolicy::Specific(vec![2, 7]).select(&avail), vec![2]);
        assert_eq!(VersionPolicy::Latest(1).select(&[]), Vec::<u64>::new());
    }

    #[test]
    fn metadata_shapes_carry_the_batch_dimension() {
        let io = IoSpec {
            name: "x".into(),
            datatype: DataType::Fp32,
            dims: vec![4],
            optional: false,
        };
        assert_eq!(io.metadata_shape(8), vec![-1, 4]);
        assert_eq!(io.metadata_shape(0), vec![4]);
        assert!(io.accepts(&[4]) && !io.accepts(&[5]) && !io.accepts(&[1, 4]));
    }
}

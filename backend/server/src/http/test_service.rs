//! A small in-memory [`InferenceService`] for the front ends' unit tests: it exercises the transport
//! code only. The integration tests (`tests/frontend_*.rs`) run the real `ServerCore`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, BytesMut};
use infergate_protocol::{
    DataType, InferOutput, InferRequest, InferResponse, InferenceService, LoadParameters, ModelMetadata,
    ModelState, ModelStatistics, Parameters, RepositoryIndexEntry, ServeError, ServerMetadata, TensorData,
    TensorMetadata,
};

/// Models: `add_sub` (FP32 `[-1,4]` ×2 → sum and difference) and `echo` (BYTES `[-1]` → the same).
/// `load_model`/`unload_model` toggle which of them is loaded.
#[derive(Clone)]
pub(crate) struct TestService {
    loaded: Arc<Mutex<BTreeSet<String>>>,
    inferences: Arc<Mutex<u64>>,
}

impl TestService {
    pub(crate) fn new() -> Self {
        let loaded = ["add_sub", "echo"].into_iter().map(String::from).collect();
        TestService {
            loaded: Arc::new(Mutex::new(loaded)),
            inferences: Arc::new(Mutex::new(0)),
        }
    }

    fn is_loaded(&self, name: &str) -> bool {
        self.loaded.lock().is_ok_and(|l| l.contains(name))
    }

    fn check(&self, name: &str, version: Option<u64>) -> Result<(), ServeError> {
        if !["add_sub", "echo"].contains(&name) {
            return Err(ServeError::unknown_model(name));
        }
        if !self.is_loaded(name) || version.is_some_and(|v| v != 1) {
            return Err(ServeError::version_not_ready(name, version));
        }
        Ok(())
    }
}

fn tensor(name: &str, datatype: DataType, shape: &[i64]) -> TensorMetadata {
    TensorMetadata {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
    }
}

impl InferenceService for TestService {
    fn live(&self) -> bool {
        true
    }

    fn ready(&self) -> bool {
        true
    }

    fn server_metadata(&self) -> ServerMetadata {
        ServerMetadata {
            name: "infergate".into(),
            version: "test".into(),
            extensions: vec!["binary_tensor_data".into(), "statistics".into()],
        }
    }

    fn model_ready(&self, name: &str, version: Option<u64>) -> bool {
        self.check(name, version).is_ok()
    }

    fn model_metadata(&self, name: &str, version: Option<u64>) -> Result<ModelMetadata, ServeError> {
        self.check(name, version)?;
        let (inputs, outputs) = if name == "add_sub" {
            (
                vec![
                    tensor("INPUT0", DataType::Fp32, &[-1, 4]),
                    tensor("INPUT1", DataType::Fp32, &[-1, 4]),
                ],
                vec![
                    tensor("OUTPUT0", DataType::Fp32, &[-1, 4]),
                    tensor("OUTPUT1", DataType::Fp32, &[-1, 4]),
                ],
            )
        } else {
            (
                vec![tensor("INPUT", DataType::Bytes, &[-1])],
                vec![tensor("OUTPUT", DataType::Bytes, &[-1])],
            )
        };
        Ok(ModelMetadata {
            name: name.into(),
            versions: vec!["1".into()],
            platform: "test".into(),
            inputs,
            outputs,
        })
    }

    fn model_config(&self, name: &str, version: Option<u64>) -> Result<serde_json::Value, ServeError> {
        let md = self.model_metadata(name, version)?;
        let io = |t: &TensorMetadata| serde_json::json!({"name": t.name, "data_type": t.datatype.as_config_str(), "dims": &t.shape[1..]});
        Ok(serde_json::json!({
            "name": name, "platform": "test", "backend": "", "max_batch_size": 8,
            "input": md.inputs.iter().map(io).collect::<Vec<_>>(),
            "output": md.outputs.iter().map(io).collect::<Vec<_>>(),
            "dynamic_batching": {"preferred_batch_size": [4], "max_queue_delay_microseconds": 100},
        }))
    }

    fn model_statistics(
        &self,
        name: Option<&str>,
        version: Option<u64>,
    ) -> Result<Vec<ModelStatistics>, ServeError> {
        let names: Vec<&str> = match name {
            Some(n) => {
                self.check(n, version)?;
                vec![n]
            }
            None => vec!["add_sub", "echo"],
        };
        let count = self.inferences.lock().map(|c| *c).unwrap_or(0);
        Ok(names
            .into_iter()
            .map(|n| ModelStatistics {
                name: n.into(),
                version: "1".into(),
                inference_count: if n == "add_sub" { count } else { 0 },
                ..ModelStatistics::default()
            })
            .collect())
    }

    async fn infer(&self, request: InferRequest) -> Result<InferResponse, ServeError> {
        self.check(&request.model_name, request.model_version)?;
        let wanted =
            |name: &str| request.outputs.is_empty() || request.outputs.iter().any(|o| o.name == name);
        let mut outputs = Vec::new();
        if request.model_name == "add_sub" {
            let get = |n: &str| {
                request
                    .input(n)
                    .ok_or_else(|| ServeError::invalid_argument(format!("model 'add_sub' needs input '{n}'")))
            };
            let (a, b) = (get("INPUT0")?, get("INPUT1")?);
            if a.datatype != DataType::Fp32 || a.shape != b.shape || a.shape.len() != 2 || a.shape[1] != 4 {
                return Err(ServeError::invalid_argument(
                    "model 'add_sub': inputs must be FP32 [n,4] of equal shape",
                ));
            }
            let f = |d: &TensorData| {
                d.as_bytes()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect::<Vec<_>>()
            };
            let (x, y) = (f(&a.data), f(&b.data));
            for (name, op) in [("OUTPUT0", 1.0f32), ("OUTPUT1", -1.0)] {
                if wanted(name) {
                    let mut out = BytesMut::with_capacity(x.len() * 4);
                    x.iter().zip(&y).for_each(|(p, q)| out.put_f32_le(p + op * q));
                    outputs.push(InferOutput {
                        name: name.into(),
                        datatype: DataType::Fp32,
                        shape: a.shape.clone(),
                        parameters: Parameters::new(),
                        data: TensorData::new(out.freeze()),
                    });
                }
            }
            if let Ok(mut c) = self.inferences.lock() {
                *c += a.shape[0] as u64;
            }
        } else {
            let input = request
                .input("INPUT")
                .ok_or_else(|| ServeError::invalid_argument("model 'echo' needs input 'INPUT'"))?;
            outputs.push(InferOutput {
                name: "OUTPUT".into(),
                datatype: input.datatype,
                shape: input.shape.clone(),
                parameters: Parameters::new(),
                data: input.data.clone(),
            });
        }
        Ok(InferResponse {
            model_name: request.model_name.clone(),
            model_version: "1".into(),
            id: request.id.clone(),
            parameters: Parameters::new(),
            outputs,
        })
    }

    fn repository_index(&self, ready_only: bool) -> Vec<RepositoryIndexEntry> {
        ["add_sub", "echo"]
            .into_iter()
            .filter(|n| !ready_only || self.is_loaded(n))
            .map(|n| RepositoryIndexEntry {
                name: n.into(),
                version: Some("1".into()),
                state: Some(if self.is_loaded(n) {
                    ModelState::Ready
                } else {
                    ModelState::Unavailable
                }),
                reason: if self.is_loaded(n) {
                    String::new()
                } else {
                    "unloaded".into()
                },
            })
            .collect()
    }

    async fn load_model(&self, name: &str, parameters: LoadParameters) -> Result<(), ServeError> {
        if !["add_sub", "echo"].contains(&name) {
            return Err(ServeError::invalid_argument(format!(
                "failed to load '{name}': no such model folder"
            )));
        }
        if parameters
            .config
            .as_deref()
            .is_some_and(|c| serde_json::from_str::<serde_json::Value>(c).is_err())
        {
            return Err(ServeError::invalid_argument(format!(
                "failed to load '{name}': the config is not JSON"
            )));
        }
        if let Ok(mut l) = self.loaded.lock() {
            l.insert(name.into());
        }
        Ok(())
    }

    async fn unload_model(&self, name: &str, _unload_dependents: bool) -> Result<(), ServeError> {
        self.check(name, None)?;
        if let Ok(mut l) = self.loaded.lock() {
            l.remove(name);
        }
        Ok(())
    }
}

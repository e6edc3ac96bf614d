//! A loaded model: the optimised IR, its signature, and specialisation to concrete input shapes.

use std::path::Path;
use std::sync::Arc;

use crate::error::{EngineError, Result};
pub use crate::ir::Dim;
use crate::ir::{ConcreteGraph, Graph};
use crate::stages::Stages;
use crate::tensor::{DataType, Tensor};

/// Name, dtype and dims of a model input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Dimensions.
    pub dims: Vec<Dim>,
}

impl TensorSpec {
    /// Dims as Triton prints them (`-1` for dynamic).
    pub fn dims_i64(&self) -> Vec<i64> {
        self.dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => *n as i64,
                Dim::Dynamic(_) => -1,
            })
            .collect()
    }
}

/// The inputs and outputs of a model, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    /// Inputs the caller provides.
    pub inputs: Vec<TensorSpec>,
    /// Outputs the model returns.
    pub outputs: Vec<TensorSpec>,
}

/// What specialisation needs to know about one input: its shape and, for *host inputs* (inputs
/// whose values decide shapes, e.g. a Reshape target fed as an input), its value.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    /// Concrete shape.
    pub shape: Vec<usize>,
    /// The value; required for inputs listed by [`Model::host_inputs`], ignored otherwise.
    pub value: Option<Tensor>,
}

/// A parsed, shape-inferred and optimised model. Cheap to share (`Arc<Model>`); immutable.
#[derive(Debug, Clone)]
pub struct Model {
    pub(crate) graph: Graph,
    pub(crate) signature: Signature,
    pub(crate) host_inputs: Vec<usize>,
    /// The model's stages when a value it computes decides shapes (see [`crate::stages`]).
    pub(crate) stages: Option<Arc<Stages>>,
}

impl Model {
    /// Load an ONNX file; external-data files are looked up beside it.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
            context: format!("reading model file {}", path.display()),
            source,
        })?;
        let dir = path.parent().map(Path::to_path_buf);
        Model::from_bytes(&bytes, dir.as_deref())
    }

    /// Parse an ONNX model from memory. `external_data_dir` is where external tensor files live
    /// (`None` refuses external data).
    pub fn from_bytes(bytes: &[u8], external_data_dir: Option<&Path>) -> Result<Model> {
        let graph = crate::onnx::load_graph(bytes, external_data_dir)?;
        Model::from_graph(graph)
    }

    /// Build a model from an IR graph (already converted from ONNX): optimises it and derives the
    /// signature.
    pub fn from_graph(graph: Graph) -> Result<Model> {
        Model::from_optimised(crate::passes::optimise(graph)?)
    }

    /// A model of an optimised graph: its host inputs, its stages where it has any, its signature.
    pub(crate) fn from_optimised(graph: Graph) -> Result<Model> {
        let stages = Stages::plan(&graph)?.map(Arc::new);
        let (host_inputs, signature) = match &stages {
            Some(s) => (
                s.host_inputs(),
                Signature {
                    inputs: crate::specialise::input_specs(&graph)?,
                    outputs: s.output_specs.clone(),
                },
            ),
            None => {
                let host_inputs = crate::specialise::host_inputs(&graph);
                let signature = crate::specialise::infer_signature(&graph, &host_inputs)?;
                (host_inputs, signature)
            }
        };
        Ok(Model {
            graph,
            signature,
            host_inputs,
            stages,
        })
    }

    /// For a model that runs in stages (its shapes depend on values it computes, as a detector's
    /// NonMaxSuppression; see `docs/engine.md`), the stage before the first cut: for a detector, its
    /// network. `None` for most models. A [`Session`](crate::Session) runs every stage.
    pub fn first_stage(&self) -> Option<&Arc<Model>> {
        self.stages.as_ref().and_then(|s| s.first.as_ref())
    }

    /// Inputs and outputs.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The optimised IR.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Indices (into the signature's inputs) of inputs whose *values* decide shapes or parameters;
    /// a plan is specialised for their values as well as for all input shapes. Empty for most
    /// exported models.
    pub fn host_inputs(&self) -> &[usize] {
        &self.host_inputs
    }

    /// Check request inputs against the signature (names, dtypes, ranks, fixed dims) and return
    /// them in signature order. Errors name the input and what was expected.
    pub fn check_inputs(&self, inputs: Vec<(String, Tensor)>) -> Result<Vec<Tensor>> {
        let mut slots: Vec<Option<Tensor>> = vec![None; self.signature.inputs.len()];
        for (name, t) in inputs {
            let Some(i) = self.signature.inputs.iter().position(|s| s.name == name) else {
                let known: Vec<&str> = self.signature.inputs.iter().map(|s| s.name.as_str()).collect();
                return Err(EngineError::invalid(format!(
                    "unexpected input '{name}' (the model's inputs are: {})",
                    known.join(", ")
                )));
            };
            let spec = &self.signature.inputs[i];
            if t.dtype != spec.dtype {
                return Err(EngineError::invalid(format!(
                    "input '{name}': expected datatype {}, got {}",
                    spec.dtype, t.dtype
                )));
            }
            let shape_ok = t.shape.len() == spec.dims.len()
                && t.shape.iter().zip(&spec.dims).all(|(n, d)| match d {
                    Dim::Fixed(f) => f == n,
                    Dim::Dynamic(_) => true,
                });
            if !shape_ok {
                let want: Vec<String> = spec.dims.iter().map(|d| d.to_string()).collect();
                let hint = if t.shape.len() + 1 == spec.dims.len() {
                    " (is the batch dimension missing?)"
                } else {
                    ""
                };
                return Err(EngineError::invalid(format!(
                    "input '{name}': expected shape [{}], got {:?}{hint}",
                    want.join(","),
                    t.shape
                )));
            }
            t.validate().map_err(|e| e.context(format!("input '{name}'")))?;
            if slots[i].replace(t).is_some() {
                return Err(EngineError::invalid(format!("input '{name}' given twice")));
            }
        }
        let mut out = Vec::with_capacity(slots.len());
        for (slot, spec) in slots.into_iter().zip(&self.signature.inputs) {
            out.push(slot.ok_or_else(|| {
                EngineError::invalid(format!(
                    "missing input '{}' ({} [{}])",
                    spec.name,
                    spec.dtype,
                    spec.dims
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ))
            })?);
        }
        Ok(out)
    }

    /// Specialise the graph to concrete inputs (one [`PlanInput`] per signature input): shapes
    /// become concrete, shape-only subgraphs and host inputs are computed, dynamic parameters become
    /// attributes. Errors name the node and what was expected.
    pub fn specialise(&self, inputs: &[PlanInput]) -> Result<ConcreteGraph> {
        crate::specialise::specialise(&self.graph, &self.signature, &self.host_inputs, inputs)
    }

    /// [`Model::specialise`] for request tensors (in signature order): uses their shapes, and the
    /// values of host inputs.
    pub fn specialise_for(&self, inputs: &[Tensor]) -> Result<ConcreteGraph> {
        let plan: Vec<PlanInput> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| PlanInput {
                shape: t.shape.clone(),
                value: self.host_inputs.contains(&i).then(|| t.clone()),
            })
            .collect();
        self.specialise(&plan)
    }
}

//! Specialisation: from an [`crate::ir::Graph`] with symbolic dims to a [`ConcreteGraph`].

use crate::error::{EngineError, Result};
use crate::ir::{ConcreteGraph, Graph};
use crate::model::{PlanInput, Signature};

/// Indices of graph inputs whose values feed parameter inputs (shapes, axes, …).
pub fn host_inputs(graph: &Graph) -> Vec<usize> {
    let _ = graph;
    Vec::new()
}

/// The signature of a graph, with output dims inferred.
pub fn infer_signature(graph: &Graph, host_inputs: &[usize]) -> Result<Signature> {
    let _ = (graph, host_inputs);
    Ok(Signature::default())
}

/// Specialise `graph` to concrete inputs.
pub fn specialise(
    graph: &Graph,
    signature: &Signature,
    host_inputs: &[usize],
    inputs: &[PlanInput],
) -> Result<ConcreteGraph> {
    let _ = (graph, signature, host_inputs, inputs);
    Err(EngineError::unsupported("specialisation is being written"))
}

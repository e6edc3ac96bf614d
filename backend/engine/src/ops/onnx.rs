//! The ONNX side of the registry: one [`OnnxOp`] per (domain, op_type, opset range), the context a
//! converter writes helper values into, and the attribute helpers converters share.

use std::collections::HashSet;

use crate::error::{EngineError, Result};
use crate::ir::{AutoPad, Graph, Node, Op, ValueId};
use crate::onnx::attrs::Attrs;
use crate::onnx::proto::{GraphProto, NodeProto};
use crate::onnx::{MAX_OPSET, MIN_OPSET};
use crate::tensor::{DataType, Tensor};

use super::Family;

/// onnxruntime's contrib operator domain (its optimiser's fused transformer ops).
pub(crate) const MICROSOFT: &str = "com.microsoft";

/// Converts one ONNX node (its inputs already resolved) into IR.
pub(crate) type ConvertFn =
    fn(&mut Ctx<'_>, &NodeProto, &str, &Attrs<'_>, &[Option<ValueId>]) -> Result<Converted>;

/// One ONNX operator the engine converts.
pub(crate) struct OnnxOp {
    /// Operator set domain (`""` is the default ONNX domain).
    pub(crate) domain: &'static str,
    /// ONNX `op_type`.
    pub(crate) op_type: &'static str,
    /// First opset version of the domain whose definition the converter implements.
    pub(crate) since: i64,
    /// Last opset version accepted (the loader's newest for the default domain).
    pub(crate) until: i64,
    /// The converter.
    pub(crate) convert: ConvertFn,
    /// The family of the IR ops it becomes (for the generated operator list).
    pub(crate) family: &'static Family,
}

impl std::fmt::Debug for OnnxOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxOp")
            .field("domain", &self.domain)
            .field("op_type", &self.op_type)
            .field("since", &self.since)
            .field("until", &self.until)
            .field("family", &self.family.name)
            .finish()
    }
}

impl OnnxOp {
    /// A default-domain operator defined since opset `since` and still current.
    pub(crate) const fn new(
        op_type: &'static str,
        since: i64,
        convert: ConvertFn,
        family: &'static Family,
    ) -> OnnxOp {
        OnnxOp {
            domain: "",
            op_type,
            since,
            until: MAX_OPSET,
            convert,
            family,
        }
    }

    /// An operator of onnxruntime's `com.microsoft` domain (its opset 1, the only one there is).
    pub(crate) const fn microsoft(
        op_type: &'static str,
        convert: ConvertFn,
        family: &'static Family,
    ) -> OnnxOp {
        OnnxOp {
            domain: MICROSOFT,
            op_type,
            since: 1,
            until: 1,
            convert,
            family,
        }
    }

    /// The opsets the loader accepts this operator in (for the default domain, never below the
    /// loader's oldest).
    pub(crate) fn opsets(&self) -> (i64, i64) {
        if self.domain.is_empty() {
            (self.since.max(MIN_OPSET), self.until)
        } else {
            (self.since, self.until)
        }
    }
}

/// The converter of `op_type` in `domain` at `opset`. The error names the operator and, when the
/// operator is known for other opsets, the opsets it is supported in.
pub(crate) fn lookup(domain: &str, op_type: &str, opset: i64) -> Result<&'static OnnxOp> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    let mut known = None;
    for o in super::registry().filter(|o| o.domain == domain && o.op_type == op_type) {
        let (lo, hi) = o.opsets();
        if (lo..=hi).contains(&opset) {
            return Ok(o);
        }
        known = Some((lo, hi));
    }
    Err(match known {
        Some((lo, hi)) => EngineError::unsupported(format!(
            "operator {op_type} is supported in opsets {lo} to {hi}, the model imports opset {opset}"
        )),
        None => not_registered(op_type),
    })
}

/// The error for an operator no module converts.
pub(crate) fn not_registered(op_type: &str) -> EngineError {
    EngineError::unsupported(format!("operator {op_type} is not supported"))
}

/// What a node became.
pub(crate) enum Converted {
    /// One op with these inputs, writing the node's outputs.
    Node(Op, Vec<Option<ValueId>>),
    /// Helper nodes first, then the op writing the node's outputs.
    Chain(Vec<Node>, Op, Vec<Option<ValueId>>),
    /// As `Chain`, and each `(i, v)` makes node output `i` a copy of the helper value `v` (the op
    /// does not write that output).
    ChainWithCopies(Vec<Node>, Op, Vec<Option<ValueId>>, Vec<(usize, ValueId)>),
    /// A constant value for the single output.
    Constant(Tensor),
    /// An op holding subgraphs (If, Loop, Scan) with its inputs: the loader converts each graph, in
    /// the order of [`Op::subgraphs_mut`], into the op's (empty) subgraph slots.
    WithSubgraphs(Op, Vec<Option<ValueId>>, Vec<GraphProto>),
    /// Inference-mode Dropout whose mask output is used: identity plus an all-true mask.
    DropoutWithMask(ValueId),
}

/// Where a converter adds helper values: the graph being built and the model's opset.
pub(crate) struct Ctx<'g> {
    /// The graph being built.
    pub(crate) graph: &'g mut Graph,
    /// The nodes of the same graph converted before this one, in topological order (the loader adds
    /// them to `graph` only when the whole graph is converted).
    pub(crate) earlier: &'g [Node],
    /// The model's default-domain opset.
    pub(crate) opset: i64,
    /// Graph inputs and initializers the model declares INT4 or UINT4, which the graph carries as INT8
    /// and UINT8 (see [`crate::onnx::int4`]).
    pub(crate) four_bit: &'g HashSet<ValueId>,
}

impl Ctx<'_> {
    /// An anonymous constant (an attribute turned into an input).
    pub(crate) fn constant(&mut self, hint: &str, t: Tensor) -> ValueId {
        let id = self
            .graph
            .add_value(format!("{hint}#const{}", self.graph.values.len()), Some(t.dtype));
        self.graph.values[id.0].shape = Some(t.shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
        self.graph.constants.insert(id, t);
        id
    }

    /// An anonymous intermediate value.
    pub(crate) fn temp(&mut self, hint: &str) -> ValueId {
        self.graph
            .add_value(format!("{hint}#tmp{}", self.graph.values.len()), None)
    }
}

/// ONNX `auto_pad`.
pub(crate) fn auto_pad(s: &str) -> Result<AutoPad> {
    Ok(match s {
        "" | "NOTSET" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(EngineError::invalid(format!("unknown auto_pad '{other}'"))),
    })
}

/// A 1-D INT64 tensor (an attribute list turned into an input).
pub(crate) fn ints_const(v: &[i64]) -> Tensor {
    Tensor {
        dtype: DataType::I64,
        shape: vec![v.len()],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
    }
}

/// A required input of the node.
pub(crate) fn need(inputs: &[Option<ValueId>], i: usize, what: &str) -> Result<ValueId> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::invalid(format!("required input {i} ({what}) is missing")))
}

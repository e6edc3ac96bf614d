//! The engine's intermediate representation: a graph of [`Op`]s over values identified by
//! [`ValueId`]s, before ([`Graph`]) and after ([`ConcreteGraph`]) specialisation to input shapes.

mod op;
mod quant;

use std::collections::BTreeMap;

pub use op::{
    AutoPad, BinaryOp, CoordTransform, Epilogue, EpilogueStep, GridMode, GridPadding, NearestMode, Op,
    PadMode, ReduceOp, ResizeMode, RnnActivation, RnnAttrs, RnnDirection, ScatterReduction, UnaryOp,
};
pub use quant::{ConvWindow, QuantOp};

use crate::tensor::{DataType, Tensor};

/// One dimension of a signature tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A size chosen per request, with its symbolic name when the model gives one (`batch`, `seq`).
    Dynamic(Option<String>),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Dynamic(Some(s)) => write!(f, "{s}"),
            Dim::Dynamic(None) => write!(f, "-1"),
        }
    }
}

/// Index of a value in a graph's value table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// What is known about a value before specialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// The ONNX name (unique in the model; inlined branches get a prefix).
    pub name: String,
    /// Element type when known.
    pub dtype: Option<DataType>,
    /// Shape with symbolic dims when known.
    pub shape: Option<Vec<Dim>>,
}

/// One operation: `outputs = op(inputs)`. Optional inputs/outputs that are absent are `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The ONNX node name (or `op_type#index` when the model left it empty), used in errors.
    pub name: String,
    /// What the node computes.
    pub op: Op,
    /// Inputs by position (see each [`Op`] variant).
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs by position.
    pub outputs: Vec<Option<ValueId>>,
}

impl Node {
    /// The input at `i`, if present.
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// The output at `i`, if present.
    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs.get(i).copied().flatten()
    }
}

/// A subgraph: an `If` branch or a `Loop`/`Scan` body. Its nodes are in topological order and share
/// the enclosing graph's value table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Branch {
    /// The subgraph's formal inputs (a body's iteration values; empty for an `If` branch).
    pub inputs: Vec<ValueId>,
    /// Nodes (they may read values of the enclosing graph).
    pub nodes: Vec<Node>,
    /// The values it yields (one per `If` output; a body's per-iteration outputs).
    pub outputs: Vec<ValueId>,
}

/// A model's graph before specialisation: dims may be symbolic, ops may take parameter inputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    /// Value table, indexed by [`ValueId`].
    pub values: Vec<ValueInfo>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// Graph inputs (excluding initializers), in signature order.
    pub inputs: Vec<ValueId>,
    /// Graph outputs in signature order.
    pub outputs: Vec<ValueId>,
    /// Values known at load time (initializers, Constant nodes, folded subgraphs).
    pub constants: BTreeMap<ValueId, Tensor>,
}

impl Graph {
    /// Add a value and return its id.
    pub fn add_value(&mut self, name: impl Into<String>, dtype: Option<DataType>) -> ValueId {
        self.values.push(ValueInfo {
            name: name.into(),
            dtype,
            shape: None,
        });
        ValueId(self.values.len() - 1)
    }

    /// Name of a value, for messages.
    pub fn name(&self, id: ValueId) -> &str {
        self.values.get(id.0).map(|v| v.name.as_str()).unwrap_or("?")
    }

    /// For each value, how many node inputs (including branches) and graph outputs read it.
    pub fn use_counts(&self) -> Vec<usize> {
        fn count(nodes: &[Node], c: &mut [usize]) {
            for n in nodes {
                for i in n.inputs.iter().flatten() {
                    c[i.0] += 1;
                }
                for b in n.op.subgraphs() {
                    count(&b.nodes, c);
                    for o in &b.outputs {
                        c[o.0] += 1;
                    }
                }
            }
        }
        let mut c = vec![0; self.values.len()];
        count(&self.nodes, &mut c);
        for o in &self.outputs {
            c[o.0] += 1;
        }
        c
    }
}

/// Everything known about a value after specialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcreteValue {
    /// The ONNX name.
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Concrete shape.
    pub shape: Vec<usize>,
}

impl ConcreteValue {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the value has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A graph specialised to concrete input shapes (and host-input values): every value has a dtype
/// and a shape, shape-only subgraphs and constants are computed, every node is in concrete form
/// (see [`Op`]). This is what executors run. Value ids are dense: every entry of `values` is used.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcreteGraph {
    /// Value table, indexed by [`ValueId`].
    pub values: Vec<ConcreteValue>,
    /// Nodes in execution (topological) order.
    pub nodes: Vec<Node>,
    /// One value per signature input. An input whose value is also in `constants` (a host input
    /// whose value the plan was specialised for) need not be uploaded.
    pub inputs: Vec<ValueId>,
    /// One value per signature output; may be an input or a constant.
    pub outputs: Vec<ValueId>,
    /// Constant tensors (weights and folded values) read by nodes or outputs.
    pub constants: BTreeMap<ValueId, Tensor>,
}

impl ConcreteGraph {
    /// The value's info.
    pub fn value(&self, id: ValueId) -> &ConcreteValue {
        &self.values[id.0]
    }

    /// For each value, the index of the last node that reads it (`nodes.len()` for graph outputs,
    /// `None` when nothing reads it). Executors free or reuse buffers after that node.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                last[v.0] = Some(i);
            }
        }
        for o in &self.outputs {
            last[o.0] = Some(self.nodes.len());
        }
        last
    }
}

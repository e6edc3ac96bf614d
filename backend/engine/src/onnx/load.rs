//! `ModelProto` → [`Graph`]: opset checks, name resolution, topological order, node conversion.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use prost::Message;

use crate::error::{EngineError, Result};
use crate::ir::{Branch, Dim, Graph, Node, Op, ValueId};
use crate::onnx::int4;
use crate::onnx::proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto};
use crate::onnx::tensor::{decode_tensor, onnx_type_name};
use crate::ops::Converted;
use crate::tensor::{DataType, Tensor};

use super::{MAX_OPSET, MIN_OPSET};

/// Decode and convert a model.
pub fn load_graph(bytes: &[u8], external_dir: Option<&Path>) -> Result<Graph> {
    if bytes.is_empty() {
        return Err(EngineError::invalid("the model file is empty"));
    }
    let model = ModelProto::decode(bytes).map_err(|e| {
        EngineError::invalid(format!(
            "not a valid ONNX model (protobuf decoding failed: {e}); is the file truncated or not ONNX?"
        ))
    })?;
    let Some(graph) = model.graph.as_ref() else {
        return Err(EngineError::invalid(
            "the ONNX model has no graph (is this an ONNX file? ModelProto.graph is missing)",
        ));
    };
    if model.ir_version <= 0 {
        return Err(EngineError::invalid(
            "the ONNX model has no ir_version; the file is not an ONNX model or is corrupt",
        ));
    }
    let mut opset = None;
    let mut domain_opsets = HashMap::new();
    for o in &model.opset_import {
        match o.domain.as_str() {
            "" | "ai.onnx" => opset = Some(o.version),
            d => {
                domain_opsets.insert(d.to_owned(), o.version);
            }
        }
    }
    let opset = match opset {
        Some(v) => v,
        None if model.opset_import.is_empty() => {
            return Err(EngineError::invalid("the ONNX model declares no opset_import"));
        }
        None => MIN_OPSET,
    };
    if opset > MAX_OPSET {
        return Err(EngineError::unsupported(format!(
            "the model uses opset {opset} of the default ONNX domain; this engine supports opsets \
             {MIN_OPSET} to {MAX_OPSET} (re-export with opset_version={MAX_OPSET} or lower)"
        )));
    }
    if opset < MIN_OPSET {
        return Err(EngineError::unsupported(format!(
            "the model uses opset {opset}; this engine supports opsets {MIN_OPSET} to {MAX_OPSET} \
             (convert it with onnx.version_converter)"
        )));
    }
    let mut cx = Loader {
        graph: Graph::default(),
        scopes: vec![HashMap::new()],
        opset,
        domain_opsets,
        external_dir,
        unsupported: Vec::new(),
        four_bit: HashSet::new(),
        functions: model
            .functions
            .iter()
            .map(|f| format!("{}:{}", f.domain, f.name))
            .collect(),
    };
    cx.load_main(graph)?;
    Ok(cx.graph)
}

struct Loader<'a> {
    graph: Graph,
    scopes: Vec<HashMap<String, ValueId>>,
    opset: i64,
    /// Opsets the model imports for other domains (`com.microsoft`), by domain.
    domain_opsets: HashMap<String, i64>,
    external_dir: Option<&'a Path>,
    unsupported: Vec<String>,
    /// Graph inputs and initializers the model declares INT4 or UINT4 (carried as INT8 and UINT8).
    four_bit: HashSet<ValueId>,
    functions: HashSet<String>,
}

/// A decoded value type: dtype and dims.
fn value_type(v: &ValueInfoProto) -> Result<Option<(DataType, Option<Vec<Dim>>)>> {
    let Some(t) = v.r#type.as_ref() else {
        return Ok(None);
    };
    let Some(tt) = t.tensor_type.as_ref() else {
        let kind = if t.sequence_type.is_some() {
            "a sequence"
        } else if t.map_type.is_some() {
            "a map"
        } else if t.optional_type.is_some() {
            "an optional"
        } else if t.sparse_tensor_type.is_some() {
            "a sparse tensor"
        } else {
            return Ok(None);
        };
        return Err(EngineError::unsupported(format!(
            "graph value '{}' is {kind}; only dense tensors are supported",
            v.name
        )));
    };
    let dtype = match int4::widened(tt.elem_type) {
        Some(wide) => wide,
        None => DataType::from_onnx(tt.elem_type).ok_or_else(|| {
            EngineError::unsupported(format!(
                "graph value '{}' has element type {} ({}), which is not supported",
                v.name,
                tt.elem_type,
                onnx_type_name(tt.elem_type)
            ))
        })?,
    };
    let dims = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match (d.dim_value, &d.dim_param) {
                (Some(v), _) if v >= 0 => Dim::Fixed(v as usize),
                (_, Some(p)) if !p.is_empty() => Dim::Dynamic(Some(p.clone())),
                _ => Dim::Dynamic(None),
            })
            .collect()
    });
    Ok(Some((dtype, dims)))
}

/// True when `v` is declared INT4 or UINT4.
fn declared_four_bit(v: &ValueInfoProto) -> bool {
    v.r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .is_some_and(|tt| int4::widened(tt.elem_type).is_some())
}

impl<'a> Loader<'a> {
    fn load_main(&mut self, g: &GraphProto) -> Result<()> {
        if !g.sparse_initializer.is_empty() {
            return Err(EngineError::unsupported("sparse initializers are not supported"));
        }
        let initializer_names: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
        for t in &g.initializer {
            if t.name.is_empty() {
                return Err(EngineError::invalid("an initializer has no name"));
            }
            let tensor = decode_tensor(t, self.external_dir, &format!("initializer '{}'", t.name))?;
            let id = self.define_constant(&t.name, tensor)?;
            if int4::widened(t.data_type).is_some() {
                self.four_bit.insert(id);
            }
        }
        for vi in &g.input {
            if initializer_names.contains(vi.name.as_str()) {
                // An input with a default value (IR < 4 style): treated as a constant.
                continue;
            }
            let (dtype, dims) = value_type(vi)?.ok_or_else(|| {
                EngineError::invalid(format!("graph input '{}' has no tensor type", vi.name))
            })?;
            let dims = dims.ok_or_else(|| {
                EngineError::unsupported(format!(
                    "graph input '{}' has no shape (its rank must be known)",
                    vi.name
                ))
            })?;
            let id = self.define(&vi.name, Some(dtype))?;
            self.graph.values[id.0].shape = Some(dims);
            self.graph.inputs.push(id);
            if declared_four_bit(vi) {
                self.four_bit.insert(id);
            }
        }
        let nodes = self.convert_nodes(&g.node)?;
        self.graph.nodes = nodes;
        if !self.unsupported.is_empty() {
            let n = self.unsupported.len();
            return Err(EngineError::unsupported(format!(
                "{n} unsupported node{}: {}",
                if n == 1 { "" } else { "s" },
                self.unsupported.join("; ")
            )));
        }
        for vi in &g.output {
            let id = self.lookup(&vi.name).ok_or_else(|| {
                EngineError::invalid(format!(
                    "graph output '{}' is not produced by any node, initializer or input",
                    vi.name
                ))
            })?;
            if let Some((dtype, dims)) = value_type(vi)? {
                let v = &mut self.graph.values[id.0];
                v.dtype.get_or_insert(dtype);
                if v.shape.is_none() {
                    v.shape = dims;
                }
            }
            self.graph.outputs.push(id);
        }
        if self.graph.outputs.is_empty() {
            return Err(EngineError::invalid("the graph has no outputs"));
        }
        Ok(())
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<ValueId> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    fn define(&mut self, name: &str, dtype: Option<DataType>) -> Result<ValueId> {
        let scope = self
            .scopes
            .last_mut()
            .ok_or_else(|| EngineError::internal("no scope"))?;
        if scope.contains_key(name) {
            return Err(EngineError::invalid(format!(
                "tensor name '{name}' is defined twice (ONNX requires unique names)"
            )));
        }
        let id = self.graph.add_value(name, dtype);
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name.to_string(), id);
        }
        Ok(id)
    }

    fn define_constant(&mut self, name: &str, t: Tensor) -> Result<ValueId> {
        let id = self.define(name, Some(t.dtype))?;
        self.graph.values[id.0].shape = Some(t.shape.iter().map(|&d| Dim::Fixed(d)).collect());
        self.graph.constants.insert(id, t);
        Ok(id)
    }

    /// An anonymous intermediate value.
    fn temp(&mut self, hint: &str) -> ValueId {
        self.graph
            .add_value(format!("{hint}#tmp{}", self.graph.values.len()), None)
    }

    /// Names a node reads, including names its subgraphs read from enclosing scopes.
    fn free_inputs(n: &NodeProto) -> Vec<String> {
        let mut out: Vec<String> = n.input.iter().filter(|s| !s.is_empty()).cloned().collect();
        for a in &n.attribute {
            for g in a.g.iter().chain(a.graphs.iter()) {
                let mut produced: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
                produced.extend(g.input.iter().map(|v| v.name.as_str()));
                for sn in &g.node {
                    produced.extend(sn.output.iter().map(String::as_str));
                }
                for sn in &g.node {
                    for i in Self::free_inputs(sn) {
                        if !produced.contains(i.as_str()) {
                            out.push(i);
                        }
                    }
                }
                for o in &g.output {
                    if !produced.contains(o.name.as_str()) {
                        out.push(o.name.clone());
                    }
                }
            }
        }
        out
    }

    /// Sort nodes topologically (exporters usually already do), then convert them in order.
    fn convert_nodes(&mut self, nodes: &[NodeProto]) -> Result<Vec<Node>> {
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                if producer.insert(o.as_str(), i).is_some() || self.lookup(o).is_some() {
                    return Err(EngineError::invalid(format!(
                        "tensor '{o}' is produced twice (second time by node {})",
                        node_label(n, i)
                    )));
                }
            }
        }
        let deps: Vec<Vec<usize>> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut d = Vec::new();
                for name in Self::free_inputs(n) {
                    if let Some(&p) = producer.get(name.as_str()) {
                        if self.lookup(&name).is_none() {
                            d.push(p);
                        }
                    } else if self.lookup(&name).is_none() {
                        // reported below with the node that reads it
                        let _ = i;
                    }
                }
                d
            })
            .collect();
        // Missing references first: they are clearer than "cycle".
        for (i, n) in nodes.iter().enumerate() {
            for name in Self::free_inputs(n) {
                if !producer.contains_key(name.as_str()) && self.lookup(&name).is_none() {
                    return Err(EngineError::invalid(format!(
                        "node {} reads tensor '{name}', which no node, initializer or graph input produces",
                        node_label(n, i)
                    )));
                }
            }
        }
        let order = topo_order(&deps).map_err(|stuck| {
            let names: Vec<String> = stuck.iter().take(8).map(|&i| node_label(&nodes[i], i)).collect();
            EngineError::invalid(format!(
                "the graph has a cycle through nodes {} (ONNX graphs must be acyclic)",
                names.join(", ")
            ))
        })?;
        let mut out = Vec::new();
        for i in order {
            let n = &nodes[i];
            match self.convert_node(n, i, &out) {
                Ok(mut v) => out.append(&mut v),
                Err(e) if e.kind() == crate::ErrorKind::Unsupported => {
                    self.unsupported.push(format!("{} ({})", node_label(n, i), e));
                    // define its outputs so later nodes still resolve
                    for o in n.output.iter().filter(|o| !o.is_empty()) {
                        if self.lookup(o).is_none() {
                            self.define(o, None)?;
                        }
                    }
                }
                Err(e) => return Err(e.context(format!("node {}", node_label(n, i)))),
            }
        }
        Ok(out)
    }

    /// Converts one node; `earlier` holds the nodes of its graph converted before it (in topological
    /// order), so a converter can read how a value it takes was made.
    fn convert_node(&mut self, n: &NodeProto, index: usize, earlier: &[Node]) -> Result<Vec<Node>> {
        match n.domain.as_str() {
            "" | "ai.onnx" => {}
            d if crate::ops::registry().any(|o| o.domain == d) => {}
            d => {
                let what = if self.functions.contains(&format!("{d}:{}", n.op_type)) {
                    "a model-local function"
                } else {
                    "an operator"
                };
                return Err(EngineError::unsupported(format!(
                    "{what} of domain '{d}'; only the default ONNX domain is supported"
                )));
            }
        }
        let name = if n.name.is_empty() {
            format!("{}#{index}", n.op_type)
        } else {
            n.name.clone()
        };
        let inputs: Vec<Option<ValueId>> = n
            .input
            .iter()
            .map(|s| {
                if s.is_empty() {
                    Ok(None)
                } else {
                    self.lookup(s)
                        .map(Some)
                        .ok_or_else(|| EngineError::invalid(format!("input '{s}' is not defined")))
                }
            })
            .collect::<Result<_>>()?;
        let attrs = crate::onnx::attrs::Attrs::new(n)?;
        // Outputs are defined after conversion so a converter can create helper values first.
        let opset = match n.domain.as_str() {
            "" | "ai.onnx" => self.opset,
            // onnxruntime's tools often leave the contrib domain out of opset_import; it has one opset
            d => self.domain_opsets.get(d).copied().unwrap_or(1),
        };
        let op = crate::ops::lookup(&n.domain, &n.op_type, opset)?;
        let mut cx = crate::ops::Ctx {
            graph: &mut self.graph,
            earlier,
            opset: self.opset,
            four_bit: &self.four_bit,
        };
        let conv = (op.convert)(&mut cx, n, &name, &attrs, &inputs)?;
        let mut outputs = Vec::with_capacity(n.output.len());
        for o in &n.output {
            outputs.push(if o.is_empty() {
                None
            } else {
                Some(self.define(o, None)?)
            });
        }
        let mut nodes = Vec::new();
        match conv {
            Converted::Node(op, ins) => {
                nodes.push(Node {
                    name,
                    op,
                    inputs: ins,
                    outputs,
                });
            }
            Converted::Chain(mut pre, op, ins) => {
                nodes.append(&mut pre);
                nodes.push(Node {
                    name,
                    op,
                    inputs: ins,
                    outputs,
                });
            }
            Converted::ChainWithCopies(mut pre, op, ins, copies) => {
                nodes.append(&mut pre);
                let mut own = outputs.clone();
                for &(i, _) in &copies {
                    if let Some(slot) = own.get_mut(i) {
                        *slot = None;
                    }
                }
                while own.len() > 1 && own.last() == Some(&None) {
                    own.pop();
                }
                nodes.push(Node {
                    name: name.clone(),
                    op,
                    inputs: ins,
                    outputs: own,
                });
                for (i, v) in copies {
                    if let Some(Some(out)) = outputs.get(i) {
                        nodes.push(Node {
                            name: format!("{name}/output{i}"),
                            op: Op::Identity,
                            inputs: vec![Some(v)],
                            outputs: vec![Some(*out)],
                        });
                    }
                }
            }
            Converted::Constant(t) => {
                let id = outputs
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| EngineError::invalid("Constant node without an output"))?;
                self.graph.values[id.0].dtype = Some(t.dtype);
                self.graph.values[id.0].shape = Some(t.shape.iter().map(|&d| Dim::Fixed(d)).collect());
                self.graph.constants.insert(id, t);
            }
            Converted::DropoutWithMask(x) => {
                let shape = self.temp(&name);
                nodes.push(Node {
                    name: format!("{name}/data"),
                    op: Op::Identity,
                    inputs: vec![Some(x)],
                    outputs: vec![outputs[0]],
                });
                nodes.push(Node {
                    name: format!("{name}/shape"),
                    op: Op::Shape { start: 0, end: None },
                    inputs: vec![Some(x)],
                    outputs: vec![Some(shape)],
                });
                let value = Tensor::from_bools(vec![1], &[true])?;
                nodes.push(Node {
                    name: format!("{name}/mask"),
                    op: Op::ConstantOfShape { value },
                    inputs: vec![Some(shape)],
                    outputs: vec![outputs.get(1).copied().flatten()],
                });
            }
            Converted::WithSubgraphs(mut op, ins, graphs) => {
                let what = op.name();
                let slots = op.subgraphs_mut();
                if slots.len() != graphs.len() {
                    return Err(EngineError::internal(format!(
                        "{what} has {} subgraphs, its converter gave {}",
                        slots.len(),
                        graphs.len()
                    )));
                }
                for (slot, g) in slots.into_iter().zip(&graphs) {
                    *slot = self.convert_subgraph(g, what)?;
                }
                nodes.push(Node {
                    name,
                    op,
                    inputs: ins,
                    outputs,
                });
            }
        }
        Ok(nodes)
    }

    /// Converts a subgraph (an If branch, a Loop or Scan body) in a scope of its own: its inputs
    /// and initializers are defined there, and its nodes may read the enclosing scopes.
    fn convert_subgraph(&mut self, g: &GraphProto, what: &str) -> Result<Branch> {
        self.scopes.push(HashMap::new());
        let res = (|| {
            for t in &g.initializer {
                let tensor = decode_tensor(t, self.external_dir, &format!("initializer '{}'", t.name))?;
                let id = self.define_constant(&t.name, tensor)?;
                if int4::widened(t.data_type).is_some() {
                    self.four_bit.insert(id);
                }
            }
            let mut inputs = Vec::with_capacity(g.input.len());
            for vi in &g.input {
                let (dtype, dims) = value_type(vi)
                    .map_err(|e| e.context(format!("{what} subgraph input '{}'", vi.name)))?
                    .unzip();
                let id = self.define(&vi.name, dtype)?;
                self.graph.values[id.0].shape = dims.flatten();
                inputs.push(id);
            }
            let nodes = self.convert_nodes(&g.node)?;
            let mut outputs = Vec::new();
            for o in &g.output {
                outputs.push(self.lookup(&o.name).ok_or_else(|| {
                    EngineError::invalid(format!("{what} subgraph output '{}' is not produced", o.name))
                })?);
            }
            Ok(Branch {
                inputs,
                nodes,
                outputs,
            })
        })();
        self.scopes.pop();
        res
    }
}

fn node_label(n: &NodeProto, i: usize) -> String {
    if n.name.is_empty() {
        format!("#{i} ({})", n.op_type)
    } else {
        format!("'{}' ({})", n.name, n.op_type)
    }
}

/// Kahn's algorithm keeping the original order among ready nodes; on a cycle returns the nodes left.
fn topo_order(deps: &[Vec<usize>]) -> std::result::Result<Vec<usize>, Vec<usize>> {
    let n = deps.len();
    let mut indeg = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &p in d {
            indeg[i] += 1;
            users[p].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err((0..n).filter(|&i| indeg[i] > 0).collect())
    }
}

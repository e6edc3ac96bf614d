//! Operators the loader decomposes into other IR ops (a chain of nodes), and the builder their
//! converters use.
//!
//! A decomposed operator has no IR op of its own: both executors run it through the ops it becomes,
//! and the passes see those ops (a decomposed LayerNormalization's scale is an ordinary Mul). Its
//! module's [`Family`] exists only to name the module in the operator list; none of its functions is
//! ever reached.

use super::prelude::*;

/// The family of a module whose operators are all decomposed at load.
pub(crate) const fn decomposed(name: &'static str) -> Family {
    Family {
        name,
        plan_time: false,
        value_dependent_shapes: false,
        param_input: no_params,
        resolve: never_resolved,
        cpu: never_run,
        wgpu: never_lowered,
    }
}

fn no_params(_op: &Op, _i: usize) -> bool {
    false
}

fn never_resolved(op: &Op, _ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    Err(wrong_family(op, "decomposed"))
}

fn never_run(
    op: &Op,
    _ins: &[In<'_>],
    _outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    Err(wrong_family(op, "decomposed"))
}

fn never_lowered(_c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    Err(gpu_wrong_family(&n.op, "decomposed"))
}

/// Builds the nodes that come before a converted node's final op.
pub(crate) struct Chain<'c, 'g> {
    cx: &'c mut Ctx<'g>,
    name: String,
    nodes: Vec<Node>,
}

impl<'c, 'g> Chain<'c, 'g> {
    /// A chain for the node called `name`.
    pub(crate) fn new(cx: &'c mut Ctx<'g>, name: &str) -> Self {
        Chain {
            cx,
            name: name.to_owned(),
            nodes: Vec::new(),
        }
    }

    /// Adds `op` over `inputs`, named `<node>/<step>`; returns its (single) output.
    pub(crate) fn push(&mut self, step: &str, op: Op, inputs: &[ValueId]) -> ValueId {
        let out = self.cx.temp(&self.name);
        self.nodes.push(Node {
            name: format!("{}/{step}", self.name),
            op,
            inputs: inputs.iter().copied().map(Some).collect(),
            outputs: vec![Some(out)],
        });
        out
    }

    /// Adds `op` over `inputs` with `n` outputs (a Split); returns them.
    pub(crate) fn push_multi(&mut self, step: &str, op: Op, inputs: &[ValueId], n: usize) -> Vec<ValueId> {
        let outs: Vec<ValueId> = (0..n).map(|_| self.cx.temp(&self.name)).collect();
        self.nodes.push(Node {
            name: format!("{}/{step}", self.name),
            op,
            inputs: inputs.iter().copied().map(Some).collect(),
            outputs: outs.iter().copied().map(Some).collect(),
        });
        outs
    }

    /// `a <op> b`.
    pub(crate) fn binary(&mut self, step: &str, op: crate::ir::BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        self.push(step, Op::Binary(op), &[a, b])
    }

    /// A scalar with the element type of `like` (a f32 constant cast when the type is known).
    pub(crate) fn scalar_like(&mut self, step: &str, v: f32, like: ValueId) -> ValueId {
        let c = self.cx.constant(&self.name, Tensor::scalar_f32(v));
        self.push(step, Op::CastLike, &[c, like])
    }

    /// Tensor `t` converted to the element type of `like`.
    pub(crate) fn cast_like(&mut self, step: &str, t: Tensor, like: ValueId) -> ValueId {
        let c = self.cx.constant(&self.name, t);
        self.push(step, Op::CastLike, &[c, like])
    }

    /// Tensor `t` as a constant of the graph.
    pub(crate) fn constant(&mut self, t: Tensor) -> ValueId {
        self.cx.constant(&self.name, t)
    }

    /// A scalar INT64 constant.
    pub(crate) fn scalar_i64(&mut self, v: i64) -> ValueId {
        let t = Tensor {
            dtype: DataType::I64,
            shape: Vec::new(),
            data: v.to_le_bytes().to_vec().into(),
        };
        self.cx.constant(&self.name, t)
    }

    /// A 1-D INT64 constant.
    pub(crate) fn ints(&mut self, v: &[i64]) -> ValueId {
        self.cx.constant(&self.name, ints_const(v))
    }

    /// The length of `v`'s axis `axis` as a scalar INT64: steps `step` (Shape) and `{step}_scalar`.
    pub(crate) fn axis_len(&mut self, step: &str, v: ValueId, axis: i64) -> ValueId {
        let len = self.push(
            step,
            Op::Shape {
                start: axis,
                end: Some(axis + 1),
            },
            &[v],
        );
        self.push(
            &format!("{step}_scalar"),
            Op::Squeeze { axes: Some(vec![0]) },
            &[len],
        )
    }

    /// `0, 1, …, len − 1` as INT64, `len` a scalar INT64.
    pub(crate) fn positions(&mut self, step: &str, len: ValueId) -> ValueId {
        let zero = self.scalar_i64(0);
        let one = self.scalar_i64(1);
        self.push(step, Op::Range, &[zero, len, one])
    }

    /// The graph being built (to read what the loader knows of a value).
    pub(crate) fn graph(&self) -> &crate::ir::Graph {
        self.cx.graph
    }

    /// The nodes converted before this one (to read how a value was made).
    pub(crate) fn earlier(&self) -> &[Node] {
        self.cx.earlier
    }

    /// The chain ending in `op` over `inputs`, which writes the node's outputs.
    pub(crate) fn finish(self, op: Op, inputs: &[ValueId]) -> Converted {
        Converted::Chain(self.nodes, op, inputs.iter().copied().map(Some).collect())
    }

    /// As [`Chain::finish`] with optional inputs (`None`: an optional input left out, which keeps
    /// the positions of those after it).
    pub(crate) fn finish_optional(self, op: Op, inputs: Vec<Option<ValueId>>) -> Converted {
        Converted::Chain(self.nodes, op, inputs)
    }

    /// As [`Chain::finish`], and node output `i` is a copy of value `v` for each `(i, v)` of
    /// `copies` (an intermediate the operator also returns, such as a residual sum).
    pub(crate) fn finish_with_copies(
        self,
        op: Op,
        inputs: &[ValueId],
        copies: Vec<(usize, ValueId)>,
    ) -> Converted {
        Converted::ChainWithCopies(self.nodes, op, inputs.iter().copied().map(Some).collect(), copies)
    }
}

/// `MatMul` without transposes or epilogue (the passes fuse what follows it).
pub(crate) fn matmul() -> Op {
    Op::MatMul {
        trans_a: false,
        trans_b: false,
        epilogue: Default::default(),
    }
}

/// `[batch, seq, heads, d]` ↔ `[batch, heads, seq, d]`.
pub(crate) fn transpose_heads() -> Op {
    Op::Transpose {
        perm: vec![0, 2, 1, 3],
    }
}

/// The shape the loader knows for `v` (declared, or a constant's).
pub(crate) fn shape_of(g: &crate::ir::Graph, v: ValueId) -> Option<Vec<crate::ir::Dim>> {
    if let Some(t) = g.constants.get(&v) {
        return Some(t.shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
    }
    g.values[v.0].shape.clone()
}

/// Dim `axis` of `v` when the model fixes it.
pub(crate) fn fixed_dim(g: &crate::ir::Graph, v: ValueId, axis: usize) -> Option<usize> {
    match shape_of(g, v)?.get(axis)? {
        crate::ir::Dim::Fixed(d) => Some(*d),
        crate::ir::Dim::Dynamic(_) => None,
    }
}

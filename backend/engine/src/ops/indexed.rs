//! Indexed operators: CumSum, Trilu, OneHot, GatherND, ScatterND, ScatterElements.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators. The wgpu
//! executor runs them with existing kernels (a constant mask, a triangular matrix product, an
//! element-wise comparison, a gather of slices) and kernels of their own for ScatterElements and
//! ScatterND (one invocation per output element, looping along the indices' axis or over the index
//! tuples, so duplicates combine in index order as on the CPU).

use super::prelude::*;
use crate::cpu::indexed;
use crate::ir::ScatterReduction;
use crate::wgpu::DType;
use crate::wgpu::expr::{BinaryOp, EwNode, EwProgram};
use crate::wgpu::host_type;
use crate::wgpu::kernels::{copy, elementwise, gather, matmul, scatter};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("CumSum", 11, convert, &FAMILY),
    OnnxOp::new("Trilu", 14, convert, &FAMILY),
    OnnxOp::new("OneHot", 9, convert, &FAMILY),
    OnnxOp::new("GatherND", 11, convert, &FAMILY),
    OnnxOp::new("ScatterND", 11, convert, &FAMILY),
    OnnxOp::new("ScatterElements", 11, convert, &FAMILY),
];

/// The operators of this module the wgpu executor refuses (for the generated operator list); none
/// today, kept so that an operator with only a CPU kernel is refused when a wgpu session is created.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const CPU_ONLY: &[&str] = &[];

/// The IR ops of this module: CumSum, Trilu, OneHot, GatherNd, ScatterNd, ScatterElements.
pub(super) static FAMILY: Family = Family {
    name: "indexed",
    plan_time: false,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let ins = inputs.to_vec();
    let op = match n.op_type.as_str() {
        "CumSum" => Op::CumSum {
            axis: 0,
            exclusive: flag(a, "CumSum", "exclusive")?,
            reverse: flag(a, "CumSum", "reverse")?,
        },
        "Trilu" => Op::Trilu {
            upper: flag_default(a, "Trilu", "upper", 1)?,
            k: 0,
        },
        "OneHot" => Op::OneHot {
            axis: a.int("axis", -1)?,
            depth: 0,
        },
        "GatherND" => {
            let b = a.int("batch_dims", 0)?;
            if b < 0 {
                return Err(EngineError::invalid(format!(
                    "GatherND attribute batch_dims is {b}; it must be 0 or more"
                )));
            }
            Op::GatherNd {
                batch_dims: b as usize,
            }
        }
        "ScatterND" => Op::ScatterNd {
            reduction: scatter_reduction(a, "ScatterND", cx.opset)?,
        },
        "ScatterElements" => Op::ScatterElements {
            axis: a.int("axis", 0)?,
            reduction: scatter_reduction(a, "ScatterElements", cx.opset)?,
        },
        other => return Err(not_registered(other)),
    };
    Ok(Converted::Node(op, ins))
}

/// The `reduction` attribute of ScatterND/ScatterElements (add and mul since opset 16, where the
/// attribute entered; max and min since opset 18).
fn scatter_reduction(a: &Attrs<'_>, op: &str, opset: i64) -> Result<ScatterReduction> {
    let r = a.string("reduction", "none")?;
    Ok(match r.as_str() {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" if opset >= 18 => ScatterReduction::Max,
        "min" if opset >= 18 => ScatterReduction::Min,
        other => {
            return Err(EngineError::unsupported(format!(
                "{op} attribute reduction='{other}' in opset {opset} (supported: none, add, mul; max and min \
                 from opset 18)"
            )));
        }
    })
}

/// A 0/1 attribute with default 0.
fn flag(a: &Attrs<'_>, op: &str, name: &str) -> Result<bool> {
    flag_default(a, op, name, 0)
}

fn flag_default(a: &Attrs<'_>, op: &str, name: &str, default: i64) -> Result<bool> {
    match a.int(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(EngineError::invalid(format!(
            "{op} attribute {name} is {v}; it must be 0 or 1"
        ))),
    }
}

fn param_input(op: &Op, i: usize) -> bool {
    match op {
        // CumSum's axis, Trilu's k, OneHot's depth decide the plan
        Op::CumSum { .. } | Op::Trilu { .. } | Op::OneHot { .. } => i == 1,
        _ => false,
    }
}

/// The single value of a parameter input.
fn scalar_param(v: InVal<'_>, what: &str) -> Result<i64> {
    let vals = host_ints(v, what)?;
    match vals.as_slice() {
        [x] => Ok(*x),
        _ => Err(EngineError::invalid(format!(
            "{what} must hold one value, got {} (shape {:?})",
            vals.len(),
            v.shape
        ))),
    }
}

fn numeric(dtype: DataType, op: &str) -> Result<()> {
    if matches!(dtype, DataType::Bool | DataType::String) {
        return Err(EngineError::unsupported(format!(
            "{op} on {dtype} tensors (numeric types only)"
        )));
    }
    Ok(())
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::CumSum {
            exclusive, reverse, ..
        } => {
            let x = req(ins, 0, "x")?;
            numeric(x.dtype, "CumSum")?;
            let axis = scalar_param(req(ins, 1, "axis")?, "CumSum axis")?;
            let axis = norm_axis(axis, x.shape.len(), "CumSum axis")?;
            Ok(Resolved::Op {
                op: Op::CumSum {
                    axis: axis as i64,
                    exclusive: *exclusive,
                    reverse: *reverse,
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, x.shape.to_vec())],
            })
        }
        Op::Trilu { upper, .. } => {
            let x = req(ins, 0, "input")?;
            if x.shape.len() < 2 {
                return Err(EngineError::invalid(format!(
                    "Trilu needs a tensor of rank 2 or more (a matrix or a batch of them), got shape {:?}",
                    x.shape
                )));
            }
            let k = match opt(ins, 1) {
                Some(v) => scalar_param(v, "Trilu k")?,
                None => 0,
            };
            Ok(Resolved::Op {
                op: Op::Trilu { upper: *upper, k },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, x.shape.to_vec())],
            })
        }
        Op::OneHot { axis, .. } => {
            let idx = req(ins, 0, "indices")?;
            numeric(idx.dtype, "OneHot indices")?;
            let d = req(ins, 1, "depth")?;
            let depth = host_f64(d, "OneHot depth")?;
            let depth = match depth.as_slice() {
                [v] if *v >= 1.0 => *v as usize,
                _ => {
                    return Err(EngineError::invalid(format!(
                        "OneHot depth must be one positive value, got {depth:?}"
                    )));
                }
            };
            let values = req(ins, 2, "values")?;
            if values.shape.iter().product::<usize>() != 2 {
                return Err(EngineError::invalid(format!(
                    "OneHot values must hold two elements [off_value, on_value], got shape {:?}",
                    values.shape
                )));
            }
            let axis = norm_axis(*axis, idx.shape.len() + 1, "OneHot axis")?;
            let mut out = idx.shape.to_vec();
            out.insert(axis, depth);
            Ok(Resolved::Op {
                op: Op::OneHot {
                    axis: axis as i64,
                    depth,
                },
                inputs: vec![Some(0), Some(2)],
                outputs: vec![(values.dtype, out)],
            })
        }
        Op::GatherNd { batch_dims } => {
            let data = req(ins, 0, "data")?;
            let idx = req(ins, 1, "indices")?;
            let k = nd_index_depth(data.shape, idx, *batch_dims, "GatherND")?;
            let q = idx.shape.len();
            let mut out = idx.shape[..q - 1].to_vec();
            out.extend_from_slice(&data.shape[batch_dims + k..]);
            Ok(concrete(op.clone(), 2, vec![(data.dtype, out)]))
        }
        Op::ScatterNd { reduction } => {
            let data = req(ins, 0, "data")?;
            let idx = req(ins, 1, "indices")?;
            let upd = req(ins, 2, "updates")?;
            if *reduction != ScatterReduction::None {
                numeric(data.dtype, "ScatterND with a reduction")?;
            }
            let k = nd_index_depth(data.shape, idx, 0, "ScatterND")?;
            let q = idx.shape.len();
            let mut want = idx.shape[..q - 1].to_vec();
            want.extend_from_slice(&data.shape[k..]);
            if upd.shape != want.as_slice() || upd.dtype != data.dtype {
                return Err(EngineError::invalid(format!(
                    "ScatterND updates must be {} {want:?} (indices' leading dims, then data's dims after \
                     the indexed ones), got {} {:?}",
                    data.dtype, upd.dtype, upd.shape
                )));
            }
            Ok(concrete(op.clone(), 3, vec![(data.dtype, data.shape.to_vec())]))
        }
        Op::ScatterElements { axis, reduction } => {
            let data = req(ins, 0, "data")?;
            let idx = req(ins, 1, "indices")?;
            let upd = req(ins, 2, "updates")?;
            if *reduction != ScatterReduction::None {
                numeric(data.dtype, "ScatterElements with a reduction")?;
            }
            let axis = norm_axis(*axis, data.shape.len(), "ScatterElements axis")?;
            if !matches!(idx.dtype, DataType::I64 | DataType::I32) {
                return Err(EngineError::invalid(format!(
                    "ScatterElements indices must be INT64 or INT32, got {}",
                    idx.dtype
                )));
            }
            let fits = idx.shape.len() == data.shape.len()
                && idx
                    .shape
                    .iter()
                    .zip(data.shape)
                    .enumerate()
                    .all(|(j, (&i, &d))| j == axis || i <= d);
            if !fits || upd.shape != idx.shape || upd.dtype != data.dtype {
                return Err(EngineError::invalid(format!(
                    "ScatterElements: indices {:?} must have data's rank and fit inside data {:?} off the axis, \
                     and updates ({} {:?}) must have the indices' shape and data's type ({})",
                    idx.shape, data.shape, upd.dtype, upd.shape, data.dtype
                )));
            }
            let op = Op::ScatterElements {
                axis: axis as i64,
                reduction: *reduction,
            };
            Ok(concrete(op, 3, vec![(data.dtype, data.shape.to_vec())]))
        }
        other => Err(wrong_family(other, "indexed")),
    }
}

/// Checks GatherND/ScatterND indices against data; returns the length of an index tuple.
fn nd_index_depth(data: &[usize], idx: InVal<'_>, batch_dims: usize, op: &str) -> Result<usize> {
    if !matches!(idx.dtype, DataType::I64 | DataType::I32) {
        return Err(EngineError::invalid(format!(
            "{op} indices must be INT64, got {}",
            idx.dtype
        )));
    }
    let q = idx.shape.len();
    if q < 1 || data.is_empty() {
        return Err(EngineError::invalid(format!(
            "{op} needs data and indices of rank 1 or more, got {data:?} and {:?}",
            idx.shape
        )));
    }
    if batch_dims >= q.min(data.len()) || data[..batch_dims] != idx.shape[..batch_dims] {
        return Err(EngineError::invalid(format!(
            "{op} batch_dims {batch_dims}: data {data:?} and indices {:?} must share that many leading dims, \
             and both must have more",
            idx.shape
        )));
    }
    let k = idx.shape[q - 1];
    if k < 1 || batch_dims + k > data.len() {
        return Err(EngineError::invalid(format!(
            "{op} indices {:?}: the last dim ({k}) indexes data's dims after batch_dims and must be 1 to {}",
            idx.shape,
            data.len() - batch_dims
        )));
    }
    Ok(k)
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    _outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let y = match op {
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => {
            let (x, sx) = arg(ins, 0)?;
            indexed::cumsum_buf(x, sx, *axis as usize, *exclusive, *reverse)?
        }
        Op::Trilu { upper, k } => {
            let (x, sx) = arg(ins, 0)?;
            indexed::trilu_buf(x, sx, *upper, *k)
        }
        Op::OneHot { axis, depth } => {
            let (idx, si) = arg(ins, 0)?;
            let (values, _) = arg(ins, 1)?;
            indexed::one_hot_buf(&idx.to_i64(), si, *axis as usize, *depth, values)?
        }
        Op::GatherNd { batch_dims } => {
            let (data, sd) = arg(ins, 0)?;
            let (idx, si) = arg(ins, 1)?;
            indexed::gather_nd_buf(data, sd, &idx.to_i64(), si, *batch_dims)?
        }
        Op::ScatterNd { reduction } => {
            let (data, sd) = arg(ins, 0)?;
            let (idx, si) = arg(ins, 1)?;
            let (upd, _) = arg(ins, 2)?;
            indexed::scatter_nd_buf(data, sd, &idx.to_i64(), si, upd, *reduction)?
        }
        Op::ScatterElements { axis, reduction } => {
            let (data, sd) = arg(ins, 0)?;
            let (idx, si) = arg(ins, 1)?;
            let (upd, _) = arg(ins, 2)?;
            indexed::scatter_elements_buf(data, sd, &idx.to_i64(), si, upd, *axis as usize, *reduction)?
        }
        other => return Err(wrong_family(other, "indexed")),
    };
    Ok(vec![y])
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    match &n.op {
        Op::Trilu { upper, k } => {
            // the triangle as a constant BOOL mask over the last two dims, broadcast over the batch
            let x = c.input(n, 0)?;
            let r = x.rank();
            let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
            let mask: Vec<u8> = (0..rows * cols)
                .map(|at| {
                    let (i, j) = ((at / cols) as i64, (at % cols) as i64);
                    u8::from(if *upper { j - i >= *k } else { j - i <= *k })
                })
                .collect();
            let name = c.out_name(n, 0);
            let host = host_type(DataType::Bool, "Trilu mask")?;
            let m =
                c.b.constant(&format!("{name}.mask"), host, &[rows, cols], &mask)?;
            let prog = EwProgram {
                nodes: vec![
                    EwNode::Operand(0),
                    EwNode::Operand(1),
                    EwNode::Const(0.0),
                    EwNode::Cast(x.dtype, 2),
                    EwNode::Where(0, 1, 3),
                ],
            };
            let y = elementwise::elementwise(&mut c.b, &name, &prog, &[&m, &x], x.dtype, &x.shape)?;
            c.set(n, 0, y)
        }
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => {
            // y[o, j, i] = Σ_l M[j, l] · x[o, l, i]: one batched product with a 0/1 triangle
            let x = c.input(n, 0)?;
            let axis = *axis as usize;
            let len = x.shape[axis];
            let outer: usize = x.shape[..axis].iter().product();
            let inner: usize = x.shape[axis + 1..].iter().product();
            let name = c.out_name(n, 0);
            let triangle: Vec<f32> = (0..len * len)
                .map(|at| {
                    let (j, l) = (at / len, at % len);
                    let summed = match (*reverse, *exclusive) {
                        (false, false) => l <= j,
                        (false, true) => l < j,
                        (true, false) => l >= j,
                        (true, true) => l > j,
                    };
                    f32::from(u8::from(summed))
                })
                .collect();
            let m =
                c.b.constant_f32(&format!("{name}.triangle"), &[len, len], &triangle)?;
            let xf = to_f32(c, &format!("{name}.f32"), &x)?;
            let view = c.b.alias(&xf, &[outer, len, inner])?;
            let out = c.dev_type(Compiler::out_id(n, 0)?)?;
            let y = matmul::matmul(&mut c.b, &name, &m, &view, false, false, out, &Default::default())?;
            c.set(n, 0, y)
        }
        Op::OneHot { axis, depth } => {
            let idx = c.input(n, 0)?;
            let values = c.input(n, 1)?;
            let axis = *axis as usize;
            let name = c.out_name(n, 0);
            let out_shape = c.out_shape(n, 0)?;
            // indices with a 1 where the new axis goes, against positions 0..depth along it
            let mut lifted = idx.shape.clone();
            lifted.insert(axis, 1);
            let idx = c.b.alias(&idx, &lifted)?;
            let mut iota_shape = vec![*depth];
            iota_shape.extend(std::iter::repeat_n(1, idx.rank() - axis - 1));
            let iota: Vec<f32> = (0..*depth).map(|v| v as f32).collect();
            let iota =
                c.b.constant_f32(&format!("{name}.positions"), &iota_shape, &iota)?;
            let off = copy::slice(&mut c.b, &format!("{name}.off"), &values, &[0], &[1], &[1])?;
            let on = copy::slice(&mut c.b, &format!("{name}.on"), &values, &[1], &[1], &[1])?;
            let prog = EwProgram {
                nodes: vec![
                    EwNode::Operand(0),
                    EwNode::Cast(DType::F32, 0),
                    EwNode::Const(0.0),
                    EwNode::Binary(BinaryOp::Less, 1, 2),
                    EwNode::Const(*depth as f32),
                    EwNode::Binary(BinaryOp::Add, 1, 4),
                    // negative indices count from the end
                    EwNode::Where(3, 5, 1),
                    EwNode::Operand(1),
                    EwNode::Binary(BinaryOp::Equal, 6, 7),
                    EwNode::Operand(2),
                    EwNode::Operand(3),
                    EwNode::Where(8, 9, 10),
                ],
            };
            let out = c.dev_type(Compiler::out_id(n, 0)?)?;
            let y =
                elementwise::elementwise(&mut c.b, &name, &prog, &[&idx, &iota, &on, &off], out, &out_shape)?;
            c.set(n, 0, y)
        }
        Op::GatherNd { batch_dims } => gather_nd(c, n, *batch_dims),
        Op::ScatterNd { reduction } => {
            let data = c.input(n, 0)?;
            let idx = c.input(n, 1)?;
            let upd = c.input(n, 2)?;
            let name = c.out_name(n, 0);
            let y = scatter::scatter_nd(&mut c.b, &name, &data, &idx, &upd, *reduction)?;
            c.set(n, 0, y)
        }
        Op::ScatterElements { axis, reduction } => {
            let data = c.input(n, 0)?;
            let idx = c.input(n, 1)?;
            let upd = c.input(n, 2)?;
            let name = c.out_name(n, 0);
            let y =
                scatter::scatter_elements(&mut c.b, &name, &data, &idx, &upd, *axis as usize, *reduction)?;
            c.set(n, 0, y)
        }
        other => Err(gpu_wrong_family(other, "indexed")),
    }
}

/// `x` as f32 on the device (a copy when it is another type).
fn to_f32(c: &mut Compiler<'_>, name: &str, x: &DTensor) -> GpuResult<DTensor> {
    if x.dtype == DType::F32 {
        return Ok(x.clone());
    }
    let prog = EwProgram {
        nodes: vec![EwNode::Operand(0), EwNode::Cast(DType::F32, 0)],
    };
    elementwise::elementwise(&mut c.b, name, &prog, &[x], DType::F32, &x.shape)
}

/// GatherND as a gather of slices: each index tuple becomes the row number of its slice in data
/// viewed as `[rows, slice]`, computed element-wise (exact while data has under 2^24 rows).
fn gather_nd(c: &mut Compiler<'_>, n: &Node, batch_dims: usize) -> GpuResult<()> {
    let data = c.input(n, 0)?;
    let idx = c.input(n, 1)?;
    let name = c.out_name(n, 0);
    let q = idx.rank();
    let k = idx.shape[q - 1];
    let tuple_shape = idx.shape[..q - 1].to_vec();
    let indexed = &data.shape[batch_dims..batch_dims + k];
    let rows_per_batch: usize = indexed.iter().product();
    let batches: usize = data.shape[..batch_dims].iter().product();
    if batches * rows_per_batch >= 1 << 24 {
        return Err(GpuError::unsupported(format!(
            "GatherND over {} slices (the wgpu executor computes slice numbers in f32, exact below 2^24); \
             serve this model with a KIND_CPU instance group",
            batches * rows_per_batch
        )));
    }
    // row = batch · rows_per_batch + Σ_j fix(idx_j) · stride_j, with fix(v) = v < 0 ? v + dim : v
    let mut operands = Vec::with_capacity(k + 1);
    let mut prog = vec![EwNode::Const(0.0)];
    let mut acc = 0;
    let mut stride = rows_per_batch;
    for (j, &dim) in indexed.iter().enumerate() {
        stride /= dim;
        let mut starts = vec![0i64; q];
        starts[q - 1] = j as i64;
        let mut sizes = tuple_shape.clone();
        sizes.push(1);
        let part = copy::slice(
            &mut c.b,
            &format!("{name}.index{j}"),
            &idx,
            &starts,
            &vec![1; q],
            &sizes,
        )?;
        operands.push(c.b.alias(&part, &tuple_shape)?);
        let base = prog.len();
        prog.extend([
            EwNode::Operand(j),
            EwNode::Cast(DType::F32, base),
            EwNode::Const(0.0),
            EwNode::Binary(BinaryOp::Less, base + 1, base + 2),
            EwNode::Const(dim as f32),
            EwNode::Binary(BinaryOp::Add, base + 1, base + 4),
            EwNode::Where(base + 3, base + 5, base + 1),
            EwNode::Const(stride as f32),
            EwNode::Binary(BinaryOp::Mul, base + 6, base + 7),
            EwNode::Binary(BinaryOp::Add, acc, base + 8),
        ]);
        acc = prog.len() - 1;
    }
    if batch_dims > 0 {
        // each tuple's batch number, broadcast over the tuples of its batch
        let mut batch_shape = tuple_shape[..batch_dims].to_vec();
        batch_shape.extend(std::iter::repeat_n(1, tuple_shape.len() - batch_dims));
        let first_rows: Vec<f32> = (0..batches).map(|b| (b * rows_per_batch) as f32).collect();
        let t =
            c.b.constant_f32(&format!("{name}.batch_rows"), &batch_shape, &first_rows)?;
        operands.push(t);
        prog.push(EwNode::Operand(operands.len() - 1));
        prog.push(EwNode::Binary(BinaryOp::Add, acc, prog.len() - 1));
    }
    let refs: Vec<&DTensor> = operands.iter().collect();
    let rows = elementwise::elementwise(
        &mut c.b,
        &format!("{name}.rows"),
        &EwProgram { nodes: prog },
        &refs,
        DType::I32,
        &tuple_shape,
    )?;
    let slice: usize = data.shape[batch_dims + k..].iter().product();
    let table = c.b.alias(&data, &[batches * rows_per_batch, slice])?;
    let y = gather::gather(&mut c.b, &name, &table, &rows, 0)?;
    c.set(n, 0, y)
}

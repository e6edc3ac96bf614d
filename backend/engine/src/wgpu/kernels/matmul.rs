//! MatMul and Gemm: the tiled, register-blocked kernel in `matmul.wgsl`, with a fused epilogue.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::expr::{self, EwNode, EwProgram, OperandInfo};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder};
use crate::wgpu::template::{KernelSource, Template};

/// The kernel file.
pub(crate) const WGSL: &str = include_str!("matmul.wgsl");

/// A fused tail: the program (its `Acc` node is the product) and its extra operands.
#[derive(Clone, Debug, Default)]
pub(crate) struct Epilogue<'a> {
    pub(crate) program: Option<EwProgram>,
    pub(crate) operands: Vec<&'a DTensor>,
    /// The shape operands broadcast against, when it is not the kernel's own output shape (a 1x1
    /// convolution run as a matmul indexes its epilogue by the convolution's `[N, OC, H, W]`).
    pub(crate) shape: Option<Vec<usize>>,
}

/// Rows per invocation for `m` output rows: small M (a batch-1 dense layer) does not pay for 64-row tiles.
/// The packed integer products (`idot.rs`) tile the same way.
pub(super) fn rows_per_invocation(m: usize) -> u32 {
    if m <= 16 {
        1
    } else if m <= 32 {
        2
    } else {
        4
    }
}

fn kernel(rm: u32, ta: bool, tb: bool, types: [DType; 3], ew: Option<String>) -> GpuResult<KernelSource> {
    let mut t = Template::new("matmul", WGSL)
        .alias("TA", types[0].wgsl())
        .alias("TB", types[1].wgsl())
        .alias("TO", types[2].wgsl())
        .constant("RM", format!("{rm}u"))
        .constant("TRANS_A", ta)
        .constant("TRANS_B", tb);
    if let Some(code) = ew {
        t = t.region("ew", code);
    }
    t.build()
}

/// `y = epilogue(op(a) x op(b))` where a is `[batch.., M, K]` (or `[.., K, M]` with `trans_a`) and b is
/// `[batch.., K, N]` (or `[.., N, K]` with `trans_b`); batch dims broadcast. Output `[batch.., M, N]`
/// with `out_batch` the broadcast batch dims. Every tensor has rank >= 2 here (callers promote 1-D).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    b: &mut PlanBuilder,
    name: &str,
    a: &DTensor,
    bm: &DTensor,
    trans_a: bool,
    trans_b: bool,
    out_dtype: DType,
    epilogue: &Epilogue<'_>,
) -> GpuResult<DTensor> {
    if a.rank() < 2 || bm.rank() < 2 {
        return Err(GpuError::internal(format!(
            "matmul '{name}' needs rank >= 2 operands"
        )));
    }
    let (ar, br) = (a.rank(), bm.rank());
    let (m, ka) = if trans_a {
        (a.shape[ar - 1], a.shape[ar - 2])
    } else {
        (a.shape[ar - 2], a.shape[ar - 1])
    };
    let (kb, n) = if trans_b {
        (bm.shape[br - 1], bm.shape[br - 2])
    } else {
        (bm.shape[br - 2], bm.shape[br - 1])
    };
    if ka != kb {
        return Err(GpuError::invalid(format!(
            "matmul '{name}': inner dims differ ({:?} x {:?})",
            a.shape, bm.shape
        )));
    }
    let k = ka;
    let a_batch = &a.shape[..ar - 2];
    let b_batch = &bm.shape[..br - 2];
    let rank = a_batch.len().max(b_batch.len());
    if rank > 8 {
        return Err(GpuError::unsupported(format!(
            "matmul '{name}' with {rank} batch dims"
        )));
    }
    let mut out_batch = vec![0usize; rank];
    let mut a_strides = vec![0u32; rank];
    let mut b_strides = vec![0u32; rank];
    let (mut sa, mut sb) = ((m * k) as u32, (k * n) as u32);
    for d in (0..rank).rev() {
        let da = (d + a_batch.len())
            .checked_sub(rank)
            .map(|i| a_batch[i])
            .unwrap_or(1);
        let db = (d + b_batch.len())
            .checked_sub(rank)
            .map(|i| b_batch[i])
            .unwrap_or(1);
        if da != db && da != 1 && db != 1 {
            return Err(GpuError::invalid(format!(
                "matmul '{name}': batch dims of {:?} and {:?} do not broadcast",
                a.shape, bm.shape
            )));
        }
        out_batch[d] = da.max(db);
        a_strides[d] = if da == 1 { 0 } else { sa };
        b_strides[d] = if db == 1 { 0 } else { sb };
        sa *= da as u32;
        sb *= db as u32;
    }
    let batch: usize = out_batch.iter().product();
    let mut out_shape = out_batch.clone();
    out_shape.extend([m, n]);
    let y = b.temp(name, out_dtype, &out_shape)?;

    let (ew, table, operands) = match &epilogue.program {
        Some(prog) => {
            let ew_shape = epilogue.shape.clone().unwrap_or_else(|| out_shape.clone());
            let infos = epilogue
                .operands
                .iter()
                .map(|t| OperandInfo::broadcast(t.dtype, &t.shape, &ew_shape))
                .collect::<GpuResult<Vec<_>>>()?;
            let code = expr::generate(prog, &infos, out_dtype, &ew_shape, 4)?;
            let table = match code.table {
                Some(t) => Some(b.constant_u32(&format!("{name}.ew_table"), &t)?),
                None => None,
            };
            (Some(code.wgsl), table, epilogue.operands.clone())
        }
        None => (None, None, Vec::new()),
    };
    let rm = rows_per_invocation(m);
    let kernel = kernel(rm, trans_a, trans_b, [a.dtype, bm.dtype, out_dtype], ew)?;
    let batch_dims: Vec<u32> = out_batch.iter().map(|&d| d as u32).collect();
    let params = Params::new()
        .u4([m as u32, n as u32, k as u32, rank as u32])
        .dims8(&batch_dims)
        .dims8(&a_strides)
        .dims8(&b_strides);
    let mut binds = vec![Bind::R(a), Bind::R(bm), Bind::W(&y)];
    if let Some(t) = &table {
        binds.push(Bind::R(t));
    }
    binds.extend(operands.iter().map(|t| Bind::R(t)));
    let tm = 16 * rm as usize;
    if batch > 65_535 {
        return Err(GpuError::unsupported(format!(
            "matmul '{name}' with {batch} batches (limit 65535)"
        )));
    }
    b.dispatch(
        &kernel,
        params,
        &binds,
        [n.div_ceil(64) as u32, m.div_ceil(tm) as u32, batch as u32],
    )?;
    Ok(y)
}

/// A program `acc * alpha + beta * c` (Gemm's scaling and bias), as the start of an epilogue.
/// Returns the program and whether operand 0 is c.
pub(crate) fn gemm_prologue(alpha: f32, beta: f32, has_c: bool) -> EwProgram {
    let mut nodes = vec![EwNode::Acc];
    if alpha != 1.0 {
        nodes.push(EwNode::Const(alpha));
        nodes.push(EwNode::Binary(expr::BinaryOp::Mul, 0, 1));
    }
    if has_c && beta != 0.0 {
        let acc = nodes.len() - 1;
        nodes.push(EwNode::Operand(0));
        let mut c = nodes.len() - 1;
        if beta != 1.0 {
            nodes.push(EwNode::Const(beta));
            nodes.push(EwNode::Binary(expr::BinaryOp::Mul, c, c + 1));
            c = nodes.len() - 1;
        }
        nodes.push(EwNode::Binary(expr::BinaryOp::Add, acc, c));
    }
    EwProgram { nodes }
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut v = Vec::new();
    for (rm, ta, tb) in [
        (1, false, false),
        (2, true, false),
        (4, false, true),
        (4, true, true),
    ] {
        v.push(kernel(rm, ta, tb, [DType::F32, DType::F32, DType::F32], None)?);
    }
    v.push(kernel(
        4,
        false,
        false,
        [DType::F16, DType::F16, DType::F16],
        None,
    )?);
    let bias = OperandInfo::broadcast(DType::F32, &[8], &[4, 8])?;
    let mut prog = gemm_prologue(0.5, 2.0, true);
    let last = prog.nodes.len() - 1;
    prog.nodes.push(EwNode::Unary(expr::UnaryOp::Relu, last));
    let code = expr::generate(&prog, &[bias], DType::F32, &[4, 8], 4)?;
    v.push(kernel(
        4,
        false,
        false,
        [DType::F32, DType::F32, DType::F32],
        Some(code.wgsl),
    )?);
    Ok(v)
}

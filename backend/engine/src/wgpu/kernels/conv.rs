//! Conv (implicit GEMM, direct depthwise path, 1x1 as a matmul) and ConvTranspose launchers.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::expr::{self, OperandInfo};
use crate::wgpu::kernels::matmul::{self, Epilogue};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
#[cfg(test)]
use crate::wgpu::template::KernelSource;
use crate::wgpu::template::Template;

/// The implicit-GEMM kernel file.
pub(crate) const WGSL: &str = include_str!("conv.wgsl");
/// The direct (depthwise) kernel file.
pub(crate) const WGSL_DIRECT: &str = include_str!("conv_direct.wgsl");
/// The transposed-convolution kernel file.
pub(crate) const WGSL_TRANSPOSE: &str = include_str!("conv_transpose.wgsl");

/// Geometry of a convolution over up to three spatial dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub(crate) kernel: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    /// `[begin.., end..]` per spatial dim.
    pub(crate) pads: Vec<usize>,
    pub(crate) dilations: Vec<usize>,
    pub(crate) group: usize,
}

/// Spatial values padded on the left to three dims with `fill`.
fn three(v: &[usize], fill: usize) -> [u32; 3] {
    let mut out = [fill as u32; 3];
    let off = 3 - v.len();
    for (i, &x) in v.iter().enumerate() {
        out[off + i] = x as u32;
    }
    out
}

fn v4(v: [u32; 3], w: u32) -> [u32; 4] {
    [v[0], v[1], v[2], w]
}

fn ew_region(
    b: &mut PlanBuilder,
    name: &str,
    epilogue: &Epilogue<'_>,
    out_dtype: DType,
    out_shape: &[usize],
) -> GpuResult<(Option<String>, Option<DTensor>)> {
    match &epilogue.program {
        None => Ok((None, None)),
        Some(prog) => {
            let infos = epilogue
                .operands
                .iter()
                .map(|t| OperandInfo::broadcast(t.dtype, &t.shape, out_shape))
                .collect::<GpuResult<Vec<_>>>()?;
            let code = expr::generate(prog, &infos, out_dtype, out_shape, 4)?;
            let table = match code.table {
                Some(t) => Some(b.constant_u32(&format!("{name}.ew_table"), &t)?),
                None => None,
            };
            Ok((Some(code.wgsl), table))
        }
    }
}

fn template(name: &'static str, src: &'static str, types: [DType; 3], ew: Option<String>) -> Template {
    let mut t = Template::new(name, src)
        .alias("TX", types[0].wgsl())
        .alias("TW", types[1].wgsl())
        .alias("TO", types[2].wgsl());
    if let Some(code) = ew {
        t = t.region("ew", code);
    }
    t
}

fn check(name: &str, x: &DTensor, w: &DTensor, g: &ConvGeom) -> GpuResult<usize> {
    let sp = x.rank().saturating_sub(2);
    if !(1..=3).contains(&sp)
        || w.rank() != x.rank()
        || g.kernel.len() != sp
        || g.strides.len() != sp
        || g.dilations.len() != sp
        || g.pads.len() != 2 * sp
        || g.group == 0
    {
        return Err(GpuError::unsupported(format!(
            "conv '{name}': x {:?}, w {:?}, {g:?} (the wgpu executor runs 1-D to 3-D convolutions)",
            x.shape, w.shape
        )));
    }
    Ok(sp)
}

/// Cross-correlation `y = epilogue(conv(x, w))` with `out_shape` `[N, OC, *spatial]`. The epilogue's operands
/// broadcast against `out_shape` (a bias is an operand shaped `[OC, 1, ..]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    w: &DTensor,
    g: &ConvGeom,
    out_shape: &[usize],
    out_dtype: DType,
    epilogue: &Epilogue<'_>,
) -> GpuResult<DTensor> {
    let sp = check(name, x, w, g)?;
    let (n, c) = (x.shape[0], x.shape[1]);
    let oc = w.shape[0];
    if !c.is_multiple_of(g.group) || !oc.is_multiple_of(g.group) || w.shape[1] * g.group != c {
        return Err(GpuError::invalid(format!(
            "conv '{name}': {c} input channels, {oc} output channels and weights {:?} do not fit group {}",
            w.shape, g.group
        )));
    }
    let in_sp = &x.shape[2..];
    let out_sp = &out_shape[2..];
    let pointwise = g.group == 1
        && g.kernel.iter().all(|&k| k == 1)
        && g.strides.iter().all(|&s| s == 1)
        && g.pads.iter().all(|&p| p == 0);
    if pointwise {
        // y[n] = W[OC, C] x X[n][C, HW]: the matmul's output layout is the convolution's.
        let hw: usize = in_sp.iter().product();
        let wm = b.alias(w, &[oc, c])?;
        let xm = b.alias(x, &[n, c, hw])?;
        let ep = Epilogue {
            program: epilogue.program.clone(),
            operands: epilogue.operands.clone(),
            shape: Some(out_shape.to_vec()),
        };
        let y = matmul::matmul(b, name, &wm, &xm, false, false, out_dtype, &ep)?;
        return b.alias(&y, out_shape);
    }
    let y = b.temp(name, out_dtype, out_shape)?;
    let (ew, table) = ew_region(b, name, epilogue, out_dtype, out_shape)?;
    let in3 = three(in_sp, 1);
    let out3 = three(out_sp, 1);
    let ker3 = three(&g.kernel, 1);
    let pads3 = three(&g.pads[..sp], 0);
    let params = Params::new()
        .u4([n as u32, c as u32, oc as u32, g.group as u32])
        .u4(v4(in3, in3.iter().product()))
        .u4(v4(out3, out3.iter().product()))
        .u4(v4(ker3, ker3.iter().product()))
        .u4(v4(three(&g.strides, 1), 0))
        .u4(v4(pads3, 0))
        .u4(v4(three(&g.dilations, 1), 0));
    let mut binds = vec![Bind::R(x), Bind::R(w), Bind::W(&y)];
    if let Some(t) = &table {
        binds.push(Bind::R(t));
    }
    binds.extend(epilogue.operands.iter().map(|t| Bind::R(t)));
    let cg = c / g.group;
    let total = y.numel();
    if g.group > 1 && cg <= 4 {
        let kernel = template("conv_direct", WGSL_DIRECT, [x.dtype, w.dtype, out_dtype], ew).build()?;
        let params = params.u4([total as u32, 0, 0, 0]);
        b.dispatch(&kernel, params, &binds, grid_1d(total, WG))?;
    } else {
        let m = oc / g.group;
        let rm: u32 = if m <= 16 {
            1
        } else if m <= 32 {
            2
        } else {
            4
        };
        let kernel = template("conv", WGSL, [x.dtype, w.dtype, out_dtype], ew)
            .constant("RM", format!("{rm}u"))
            .build()?;
        let cols = n * out3.iter().map(|&v| v as usize).product::<usize>();
        let grid = [
            cols.div_ceil(64) as u32,
            m.div_ceil(16 * rm as usize) as u32,
            g.group as u32,
        ];
        if grid[0] > 65_535 {
            return Err(GpuError::unsupported(format!(
                "conv '{name}': {cols} output pixels per channel exceed one dispatch; use a smaller batch"
            )));
        }
        b.dispatch(&kernel, params, &binds, grid)?;
    }
    Ok(y)
}

/// Transposed convolution with resolved pads; `out_shape` is `[N, OC, *spatial]`, w is `[C, OC/group, *k]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_transpose(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    w: &DTensor,
    g: &ConvGeom,
    out_shape: &[usize],
    out_dtype: DType,
    epilogue: &Epilogue<'_>,
) -> GpuResult<DTensor> {
    let sp = check(name, x, w, g)?;
    let (n, c) = (x.shape[0], x.shape[1]);
    let oc = out_shape[1];
    if w.shape[0] != c || w.shape[1] * g.group != oc {
        return Err(GpuError::invalid(format!(
            "conv_transpose '{name}': weights {:?} do not fit {c} input and {oc} output channels in group {}",
            w.shape, g.group
        )));
    }
    let y = b.temp(name, out_dtype, out_shape)?;
    let (ew, table) = ew_region(b, name, epilogue, out_dtype, out_shape)?;
    let in3 = three(&x.shape[2..], 1);
    let out3 = three(&out_shape[2..], 1);
    let ker3 = three(&g.kernel, 1);
    let total = y.numel();
    let params = Params::new()
        .u4([n as u32, c as u32, oc as u32, g.group as u32])
        .u4(v4(in3, in3.iter().product()))
        .u4(v4(out3, out3.iter().product()))
        .u4(v4(ker3, ker3.iter().product()))
        .u4(v4(three(&g.strides, 1), 0))
        .u4(v4(three(&g.pads[..sp], 0), 0))
        .u4(v4(three(&g.dilations, 1), 0))
        .u4([total as u32, 0, 0, 0]);
    let mut binds = vec![Bind::R(x), Bind::R(w), Bind::W(&y)];
    if let Some(t) = &table {
        binds.push(Bind::R(t));
    }
    binds.extend(epilogue.operands.iter().map(|t| Bind::R(t)));
    let kernel = template(
        "conv_transpose",
        WGSL_TRANSPOSE,
        [x.dtype, w.dtype, out_dtype],
        ew,
    )
    .build()?;
    b.dispatch(&kernel, params, &binds, grid_1d(total, WG))?;
    Ok(y)
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let f = [DType::F32; 3];
    let h = [DType::F16; 3];
    let bias = OperandInfo::broadcast(DType::F32, &[4, 1, 1], &[1, 4, 3, 3])?;
    let prog = expr::EwProgram {
        nodes: vec![
            expr::EwNode::Acc,
            expr::EwNode::Operand(0),
            expr::EwNode::Binary(expr::BinaryOp::Add, 0, 1),
            expr::EwNode::Unary(expr::UnaryOp::HardSwish, 2),
        ],
    };
    let code = expr::generate(&prog, &[bias], DType::F32, &[1, 4, 3, 3], 4)?;
    Ok(vec![
        template("conv", WGSL, f, None).constant("RM", "2u").build()?,
        template("conv", WGSL, h, Some(code.wgsl.clone())).build()?,
        template("conv_direct", WGSL_DIRECT, f, Some(code.wgsl.clone())).build()?,
        template("conv_direct", WGSL_DIRECT, h, None).build()?,
        template("conv_transpose", WGSL_TRANSPOSE, f, Some(code.wgsl)).build()?,
        template("conv_transpose", WGSL_TRANSPOSE, h, None).build()?,
    ])
}

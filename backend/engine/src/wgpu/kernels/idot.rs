//! Integer products with packed dot products: MatMulInteger (`igemm_dp4.wgsl`) and 2-D ConvInteger
//! (`iconv_dp4.wgsl`) on 8-bit codes, both tiled around `idot_tile.wgsl`. They compute what the direct
//! kernels of `quant.rs` compute, bit for bit; the launchers there pick these where the codes are 8-bit and
//! the shape suits a tile.

use crate::wgpu::error::GpuResult;
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder};
use crate::wgpu::template::{KernelSource, Template};

use super::matmul::rows_per_invocation;
use super::quant::{IconvGeom, IgemmShape, batch_words};

/// The packed integer matmul kernel (the shared tile step first).
pub(crate) const WGSL_GEMM: &str = concat!(include_str!("idot_tile.wgsl"), include_str!("igemm_dp4.wgsl"));
/// The packed integer convolution kernel (the shared tile step first).
pub(crate) const WGSL_CONV: &str = concat!(include_str!("idot_tile.wgsl"), include_str!("iconv_dp4.wgsl"));

/// Columns of a workgroup tile.
const TN: usize = 64;
/// The most workgroups along one dispatch dimension.
const MAX_GROUPS: usize = 65_535;

/// The offsets that make two operands' codes signed bytes (128 for uint8, 0 for int8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteCodes {
    pub(crate) a: i32,
    pub(crate) b: i32,
}

fn kernel(name: &'static str, base: &'static str, rm: u32) -> GpuResult<KernelSource> {
    Template::new(name, base).constant("RM", format!("{rm}u")).build()
}

/// Whether the packed matmul takes this shape: its batches are one dispatch dimension.
pub(crate) fn gemm_fits(s: &IgemmShape) -> bool {
    s.batch.iter().product::<usize>() <= MAX_GROUPS
        && s.n.div_ceil(TN) <= MAX_GROUPS
        && s.m.div_ceil(16) <= MAX_GROUPS
}

/// MatMulInteger's accumulators into `y` (`[batch…, m, n]`, i32); zero points per tensor or per row of a /
/// per column of b (by their length).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    b: &mut PlanBuilder,
    s: &IgemmShape,
    codes: ByteCodes,
    a: &DTensor,
    bm: &DTensor,
    a_zp: &DTensor,
    b_zp: &DTensor,
    y: &DTensor,
) -> GpuResult<()> {
    let params = Params::new()
        .u4([s.m as u32, s.k as u32, s.n as u32, s.batch.len() as u32])
        .u4([
            u32::from(a_zp.numel() > 1),
            u32::from(b_zp.numel() > 1),
            codes.a as u32,
            codes.b as u32,
        ])
        .u4(batch_words(&s.batch))
        .u4(batch_words(&s.a_strides))
        .u4(batch_words(&s.b_strides));
    let rm = rows_per_invocation(s.m);
    let batch: usize = s.batch.iter().product();
    b.dispatch(
        &kernel("igemm_dp4", WGSL_GEMM, rm)?,
        params,
        &[Bind::R(a), Bind::R(bm), Bind::R(a_zp), Bind::R(b_zp), Bind::W(y)],
        [
            s.n.div_ceil(TN) as u32,
            s.m.div_ceil(16 * rm as usize) as u32,
            batch as u32,
        ],
    )
}

/// Whether the packed convolution takes this geometry: groups of at least 8 output channels (a depthwise
/// convolution would leave most of a tile's rows idle; the direct kernel suits it better), the groups and
/// position tiles within one dispatch dimension each.
pub(crate) fn conv_fits(g: &IconvGeom) -> bool {
    let positions = g.out[0] * g.out[2] * g.out[3];
    g.out[1] / g.group >= 8 && g.group <= MAX_GROUPS && positions.div_ceil(TN) <= MAX_GROUPS
}

/// ConvInteger's accumulators into `y` (`[n, m, oh, ow]`, i32); w's zero point per tensor or per output
/// channel, x's per tensor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    b: &mut PlanBuilder,
    g: &IconvGeom,
    codes: ByteCodes,
    x: &DTensor,
    w: &DTensor,
    x_zp: &DTensor,
    w_zp: &DTensor,
    y: &DTensor,
) -> GpuResult<()> {
    let u = |v: usize| v as u32;
    let mg = g.out[1] / g.group;
    let cg = g.channels / g.group;
    let k = cg * g.kernel[0] * g.kernel[1];
    let positions = g.out[0] * g.out[2] * g.out[3];
    let params = Params::new()
        .u4([u(mg), u(k), u(positions), u(cg)])
        .u4([u32::from(w_zp.numel() > 1), 0, codes.a as u32, codes.b as u32])
        .u4([u(g.channels), u(g.input[0]), u(g.input[1]), u(g.out[1])])
        .u4([u(g.out[2]), u(g.out[3]), u(g.kernel[0]), u(g.kernel[1])])
        .u4([
            u(g.strides[0]),
            u(g.strides[1]),
            u(g.pad_begin[0]),
            u(g.pad_begin[1]),
        ])
        .u4([u(g.dilations[0]), u(g.dilations[1]), 0, 0]);
    let rm = rows_per_invocation(mg);
    b.dispatch(
        &kernel("iconv_dp4", WGSL_CONV, rm)?,
        params,
        &[Bind::R(w), Bind::R(x), Bind::R(w_zp), Bind::R(x_zp), Bind::W(y)],
        [
            positions.div_ceil(TN) as u32,
            mg.div_ceil(16 * rm as usize) as u32,
            g.group as u32,
        ],
    )
}

/// Representative specialisations, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut out = Vec::new();
    for rm in [1, 2, 4] {
        out.push(kernel("igemm_dp4", WGSL_GEMM, rm)?);
        out.push(kernel("iconv_dp4", WGSL_CONV, rm)?);
    }
    Ok(out)
}

//! Quantization launchers: QuantizeLinear/DequantizeLinear (`quant.wgsl`), DynamicQuantizeLinear's range
//! (`dynamic_range.wgsl`), integer matmul (`igemm.wgsl`), integer 2-D convolution (`iconv.wgsl`) and the
//! requantization of QLinearMatMul/QLinearConv (`requantize.wgsl`). Integer tensors are i32 on the device.
//! Products of 8-bit codes run on the packed dot-product kernels of `idot.rs`; the direct kernels here take
//! wider codes and the shapes those do not.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

use super::idot::{self, ByteCodes};

/// The QuantizeLinear/DequantizeLinear kernel file.
pub(crate) const WGSL: &str = include_str!("quant.wgsl");
/// The DynamicQuantizeLinear range kernel file.
pub(crate) const WGSL_DYNAMIC_RANGE: &str = include_str!("dynamic_range.wgsl");
/// The integer matmul kernel file.
pub(crate) const WGSL_IGEMM: &str = include_str!("igemm.wgsl");
/// The integer convolution kernel file.
pub(crate) const WGSL_ICONV: &str = include_str!("iconv.wgsl");
/// The requantization kernel file.
pub(crate) const WGSL_REQUANTIZE: &str = include_str!("requantize.wgsl");

/// Where a scale and zero point apply, as `quant.wgsl` reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ParamLayout {
    /// one value
    PerTensor,
    /// one per index of an axis of `dim`, `inner` elements after it
    PerAxis { dim: usize, inner: usize },
    /// one per block of `block` indices of the axis, other dims kept
    Blocked { dim: usize, inner: usize, block: usize },
}

impl ParamLayout {
    fn words(self) -> [u32; 3] {
        match self {
            ParamLayout::PerTensor => [0, 1, 1],
            ParamLayout::PerAxis { dim, inner } => [1, dim as u32, inner as u32],
            ParamLayout::Blocked { dim, inner, .. } => [2, dim as u32, inner as u32],
        }
    }

    fn block(self) -> i32 {
        match self {
            ParamLayout::Blocked { block, .. } => block as i32,
            _ => 0,
        }
    }
}

fn quant_kernel(x: DType, s: DType, y: DType, quantize: bool) -> GpuResult<KernelSource> {
    Template::new("quant", WGSL)
        .alias("TX", x.wgsl())
        .alias("TS", s.wgsl())
        .alias("TY", y.wgsl())
        .constant("QUANTIZE", quantize)
        .build()
}

/// QuantizeLinear: `x` (float or i32) to i32 values saturated to `range`.
pub(crate) fn quantize(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    scale: &DTensor,
    zero_point: &DTensor,
    layout: ParamLayout,
    range: (i32, i32),
) -> GpuResult<DTensor> {
    let y = b.temp(name, DType::I32, &x.shape)?;
    let [kind, dim, inner] = layout.words();
    let params =
        Params::new()
            .u4([x.numel() as u32, kind, dim, inner])
            .i4([layout.block(), range.0, range.1, 0]);
    b.dispatch(
        &quant_kernel(x.dtype, scale.dtype, DType::I32, true)?,
        params,
        &[Bind::R(x), Bind::R(scale), Bind::R(zero_point), Bind::W(&y)],
        grid_1d(x.numel(), WG),
    )?;
    Ok(y)
}

/// DequantizeLinear: integer `x` to `out` floats.
pub(crate) fn dequantize(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    scale: &DTensor,
    zero_point: &DTensor,
    layout: ParamLayout,
    out: DType,
) -> GpuResult<DTensor> {
    if x.dtype != DType::I32 || !out.is_float() {
        return Err(GpuError::internal(format!(
            "dequantize '{name}': {:?} to {out:?}",
            x.dtype
        )));
    }
    let y = b.temp(name, out, &x.shape)?;
    let [kind, dim, inner] = layout.words();
    let params = Params::new()
        .u4([x.numel() as u32, kind, dim, inner])
        .i4([layout.block(), 0, 0, 0]);
    b.dispatch(
        &quant_kernel(x.dtype, scale.dtype, out, false)?,
        params,
        &[Bind::R(x), Bind::R(scale), Bind::R(zero_point), Bind::W(&y)],
        grid_1d(x.numel(), WG),
    )?;
    Ok(y)
}

/// DynamicQuantizeLinear: the UINT8 values (as i32), the scale `[]` and the zero point `[]` of f32 `x`.
pub(crate) fn dynamic_quantize(
    b: &mut PlanBuilder,
    names: [&str; 3],
    x: &DTensor,
) -> GpuResult<[DTensor; 3]> {
    if x.dtype != DType::F32 {
        return Err(GpuError::invalid(format!(
            "DynamicQuantizeLinear '{}': x must be FP32",
            names[0]
        )));
    }
    let scale = b.temp(names[1], DType::F32, &[])?;
    let zero_point = b.temp(names[2], DType::I32, &[])?;
    b.dispatch(
        &Template::new("dynamic_range", WGSL_DYNAMIC_RANGE).build()?,
        Params::new().u4([x.numel() as u32, 0, 0, 0]),
        &[Bind::R(x), Bind::W(&scale), Bind::W(&zero_point)],
        [1, 1, 1],
    )?;
    let y = quantize(
        b,
        names[0],
        x,
        &scale,
        &zero_point,
        ParamLayout::PerTensor,
        (0, 255),
    )?;
    Ok([y, scale, zero_point])
}

/// The shape of a batched integer matmul: `m × k · k × n` per output matrix, with the output's batch
/// dims and each operand's matrix stride per batch dim (0 where it broadcasts).
#[derive(Clone, Debug)]
pub(crate) struct IgemmShape {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) batch: Vec<usize>,
    pub(crate) a_strides: Vec<usize>,
    pub(crate) b_strides: Vec<usize>,
}

/// Up to four per-batch-dim values of an [`IgemmShape`] as one params word, unused dims 1.
pub(super) fn batch_words(v: &[usize]) -> [u32; 4] {
    let mut w = [1u32; 4];
    for (d, &x) in v.iter().enumerate() {
        w[d] = x as u32;
    }
    w
}

/// MatMulInteger's accumulators `[batch…, m, n]` (i32); zero points per tensor or per row of a /
/// per column of b (by their length). With 8-bit codes (`codes`: their offsets to signed bytes) the packed
/// kernel of `idot.rs` runs, otherwise the direct one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn igemm(
    b: &mut PlanBuilder,
    name: &str,
    s: &IgemmShape,
    codes: Option<ByteCodes>,
    a: &DTensor,
    bm: &DTensor,
    a_zp: &DTensor,
    b_zp: &DTensor,
) -> GpuResult<DTensor> {
    if s.batch.len() > 4 {
        return Err(GpuError::unsupported(format!(
            "integer matmul '{name}': {} batch dims; the wgpu kernel takes up to 4 (the CPU executor takes any)",
            s.batch.len()
        )));
    }
    let mut shape = s.batch.clone();
    shape.extend([s.m, s.n]);
    let y = b.temp(name, DType::I32, &shape)?;
    if let Some(codes) = codes.filter(|_| idot::gemm_fits(s)) {
        idot::gemm(b, s, codes, a, bm, a_zp, b_zp, &y)?;
        return Ok(y);
    }
    let params = Params::new()
        .u4([s.m as u32, s.k as u32, s.n as u32, y.numel() as u32])
        .u4([
            u32::from(a_zp.numel() > 1),
            u32::from(b_zp.numel() > 1),
            s.batch.len() as u32,
            0,
        ])
        .u4(batch_words(&s.batch))
        .u4(batch_words(&s.a_strides))
        .u4(batch_words(&s.b_strides));
    b.dispatch(
        &Template::new("igemm", WGSL_IGEMM).build()?,
        params,
        &[Bind::R(a), Bind::R(bm), Bind::R(a_zp), Bind::R(b_zp), Bind::W(&y)],
        grid_1d(y.numel(), WG),
    )?;
    Ok(y)
}

/// The geometry of a 2-D integer convolution (1-D ones come with height 1).
#[derive(Clone, Debug)]
pub(crate) struct IconvGeom {
    /// output shape `[n, m, oh, ow]`
    pub(crate) out: [usize; 4],
    pub(crate) channels: usize,
    pub(crate) group: usize,
    pub(crate) input: [usize; 2],
    pub(crate) kernel: [usize; 2],
    pub(crate) strides: [usize; 2],
    pub(crate) pad_begin: [usize; 2],
    pub(crate) dilations: [usize; 2],
}

/// ConvInteger's accumulators `[n, m, oh, ow]` (i32). With 8-bit codes (`codes`: the offsets of w's and x's
/// codes to signed bytes) and groups of several channels the packed kernel of `idot.rs` runs, otherwise the
/// direct one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn iconv(
    b: &mut PlanBuilder,
    name: &str,
    g: &IconvGeom,
    codes: Option<ByteCodes>,
    x: &DTensor,
    w: &DTensor,
    x_zp: &DTensor,
    w_zp: &DTensor,
) -> GpuResult<DTensor> {
    let y = b.temp(name, DType::I32, &g.out)?;
    if let Some(codes) = codes.filter(|_| idot::conv_fits(g)) {
        idot::conv(b, g, codes, x, w, x_zp, w_zp, &y)?;
        return Ok(y);
    }
    let u = |v: usize| v as u32;
    let params = Params::new()
        .u4([u(y.numel()), u(g.channels), u(g.out[1]), u(g.group)])
        .u4([u(g.input[0]), u(g.input[1]), u(g.out[2]), u(g.out[3])])
        .u4([u(g.kernel[0]), u(g.kernel[1]), u(g.strides[0]), u(g.strides[1])])
        .u4([
            u(g.pad_begin[0]),
            u(g.pad_begin[1]),
            u(g.dilations[0]),
            u(g.dilations[1]),
        ])
        .u4([u32::from(w_zp.numel() > 1), 0, 0, 0]);
    b.dispatch(
        &Template::new("iconv", WGSL_ICONV).build()?,
        params,
        &[Bind::R(x), Bind::R(w), Bind::R(x_zp), Bind::R(w_zp), Bind::W(&y)],
        grid_1d(y.numel(), WG),
    )?;
    Ok(y)
}

/// How the two input scales of a requantization are indexed: `(i / inner) % dim` (dim 1 = per tensor).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScaleIndex {
    pub(crate) dim: usize,
    pub(crate) inner: usize,
}

/// QLinearMatMul/QLinearConv's output: `clamp(round((acc + bias) · s1 · s2 / y_scale) + y_zp, range)`,
/// the bias indexed on its own (one per output channel while the scale may be one per tensor).
#[allow(clippy::too_many_arguments)]
pub(crate) fn requantize(
    b: &mut PlanBuilder,
    name: &str,
    acc: &DTensor,
    s1: (&DTensor, ScaleIndex),
    s2: (&DTensor, ScaleIndex),
    y_scale: &DTensor,
    y_zp: &DTensor,
    bias: Option<(&DTensor, ScaleIndex)>,
    range: (i32, i32),
) -> GpuResult<DTensor> {
    if s1.0.dtype != s2.0.dtype || s1.0.dtype != y_scale.dtype {
        return Err(GpuError::invalid(format!(
            "'{name}': the scales must have one type"
        )));
    }
    let y = b.temp(name, DType::I32, &acc.shape)?;
    let zeros;
    let (bias_t, bias_index) = match bias {
        Some(t) => t,
        None => {
            zeros = b.constant_i32(&format!("{name}#nobias"), &[1], &[0])?;
            (&zeros, ScaleIndex { dim: 1, inner: 1 })
        }
    };
    let params = Params::new()
        .u4([
            acc.numel() as u32,
            s1.1.dim as u32,
            s1.1.inner as u32,
            u32::from(bias.is_some()),
        ])
        .u4([
            s2.1.dim as u32,
            s2.1.inner as u32,
            bias_index.dim as u32,
            bias_index.inner as u32,
        ])
        .i4([range.0, range.1, 0, 0]);
    b.dispatch(
        &Template::new("requantize", WGSL_REQUANTIZE)
            .alias("TS", s1.0.dtype.wgsl())
            .build()?,
        params,
        &[
            Bind::R(acc),
            Bind::R(s1.0),
            Bind::R(s2.0),
            Bind::R(y_scale),
            Bind::R(y_zp),
            Bind::R(bias_t),
            Bind::W(&y),
        ],
        grid_1d(acc.numel(), WG),
    )?;
    Ok(y)
}

/// Representative specialisations, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    Ok(vec![
        quant_kernel(DType::F32, DType::F32, DType::I32, true)?,
        quant_kernel(DType::F16, DType::F16, DType::I32, true)?,
        quant_kernel(DType::I32, DType::F32, DType::F32, false)?,
        quant_kernel(DType::I32, DType::F16, DType::F16, false)?,
        Template::new("dynamic_range", WGSL_DYNAMIC_RANGE).build()?,
        Template::new("igemm", WGSL_IGEMM).build()?,
        Template::new("iconv", WGSL_ICONV).build()?,
        Template::new("requantize", WGSL_REQUANTIZE)
            .alias("TS", "f32")
            .build()?,
        Template::new("requantize", WGSL_REQUANTIZE)
            .alias("TS", "f16")
            .build()?,
    ])
}

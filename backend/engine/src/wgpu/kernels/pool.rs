//! Pooling and Resize launchers.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
#[cfg(test)]
use crate::wgpu::template::KernelSource;
use crate::wgpu::template::Template;

/// The pooling kernel file.
pub(crate) const WGSL: &str = include_str!("pool.wgsl");
/// The resize kernel file.
pub(crate) const WGSL_RESIZE: &str = include_str!("resize.wgsl");

/// Pooling window geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PoolGeom {
    pub(crate) kernel: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) pads: Vec<usize>,
    pub(crate) dilations: Vec<usize>,
}

fn three(v: &[usize], fill: usize) -> [u32; 3] {
    let mut out = [fill as u32; 3];
    let off = 3 - v.len();
    for (i, &x) in v.iter().enumerate() {
        out[off + i] = x as u32;
    }
    out
}

/// What kind of pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    Max { indices: bool, col_major: bool },
    Average { count_include_pad: bool },
}

/// Max or average pooling to `out_shape` `[N, C, *spatial]`; returns y and (for MaxPool with indices) the
/// flat indices.
pub(crate) fn pool(
    b: &mut PlanBuilder,
    names: [&str; 2],
    x: &DTensor,
    g: &PoolGeom,
    kind: PoolKind,
    out_shape: &[usize],
) -> GpuResult<(DTensor, Option<DTensor>)> {
    let sp = x.rank().saturating_sub(2);
    if !(1..=3).contains(&sp) || g.kernel.len() != sp || g.pads.len() != 2 * sp {
        return Err(GpuError::unsupported(format!(
            "pool '{}': input {:?} with window {:?} (the wgpu executor pools 1 to 3 spatial dims)",
            names[0], x.shape, g.kernel
        )));
    }
    let y = b.temp(names[0], x.dtype, out_shape)?;
    let (is_max, want_idx, col, count_pad) = match kind {
        PoolKind::Max { indices, col_major } => (true, indices, col_major, false),
        PoolKind::Average { count_include_pad } => (false, false, false, count_include_pad),
    };
    let idx = b.temp(names[1], DType::I32, if want_idx { out_shape } else { &[1] })?;
    let in3 = three(&x.shape[2..], 1);
    let out3 = three(&out_shape[2..], 1);
    let n = y.numel();
    let params = Params::new()
        .u4([n as u32, (x.shape[0] * x.shape[1]) as u32, sp as u32, 0])
        .u4([in3[0], in3[1], in3[2], in3.iter().product()])
        .u4([out3[0], out3[1], out3[2], out3.iter().product()])
        .u4([
            three(&g.kernel, 1)[0],
            three(&g.kernel, 1)[1],
            three(&g.kernel, 1)[2],
            0,
        ])
        .u4({
            let s = three(&g.strides, 1);
            [s[0], s[1], s[2], 0]
        })
        .u4({
            let s = three(&g.pads[..sp], 0);
            [s[0], s[1], s[2], 0]
        })
        .u4({
            let s = three(&g.pads[sp..], 0);
            [s[0], s[1], s[2], 0]
        })
        .u4({
            let s = three(&g.dilations, 1);
            [s[0], s[1], s[2], 0]
        });
    let k = Template::new("pool", WGSL)
        .alias("T", x.dtype.wgsl())
        .constant("MAX", is_max)
        .constant("COUNT_PAD", count_pad)
        .constant("INDICES", want_idx)
        .constant("COL_MAJOR", col)
        .build()?;
    b.dispatch(
        &k,
        params,
        &[Bind::R(x), Bind::W(&y), Bind::W(&idx)],
        grid_1d(n, WG),
    )?;
    Ok((y, want_idx.then_some(idx)))
}

/// Resize interpolation, numbered as the kernel's constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ResizeSpec {
    /// 0 nearest, 1 linear, 2 cubic.
    pub(crate) mode: u32,
    /// 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners, 3 asymmetric, 4 tf_crop_and_resize,
    /// 5 half_pixel_symmetric.
    pub(crate) coord: u32,
    /// 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil.
    pub(crate) nearest: u32,
    pub(crate) extrapolation: f32,
    /// Cubic coefficient `a`.
    pub(crate) cubic_a: f32,
    /// Cubic: drop taps outside the input and renormalise.
    pub(crate) exclude_outside: bool,
}

/// Resize `x` to `out_shape` with per-dim `scales` (and `roi` `[start.., end..]` for tf_crop_and_resize).
pub(crate) fn resize(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    spec: ResizeSpec,
    scales: &[f32],
    roi: &[f32],
    out_shape: &[usize],
) -> GpuResult<DTensor> {
    let r = x.rank();
    if r > 8 || scales.len() != r || out_shape.len() != r {
        return Err(GpuError::unsupported(format!(
            "Resize '{name}': input {:?}, scales {scales:?}, output {out_shape:?}",
            x.shape
        )));
    }
    if spec.mode == 1 && !x.dtype.is_float() {
        return Err(GpuError::unsupported(format!(
            "Resize '{name}': linear interpolation of integers"
        )));
    }
    let y = b.temp(name, x.dtype, out_shape)?;
    let n = y.numel();
    let mut rs = vec![0.0f32; 8];
    let mut re = vec![1.0f32; 8];
    if roi.len() == 2 * r {
        rs[..r].copy_from_slice(&roi[..r]);
        re[..r].copy_from_slice(&roi[r..]);
    }
    let mut sc = vec![1.0f32; 8];
    sc[..r].copy_from_slice(scales);
    let od: Vec<u32> = out_shape.iter().map(|&d| d as u32).collect();
    let id: Vec<u32> = x.shape.iter().map(|&d| d as u32).collect();
    let params = Params::new()
        .u4([
            n as u32,
            r as u32,
            spec.extrapolation.to_bits(),
            spec.cubic_a.to_bits(),
        ])
        .dims8(&od)
        .dims8(&id)
        .floats(&sc)
        .floats(&rs)
        .floats(&re);
    let k = Template::new("resize", WGSL_RESIZE)
        .alias("T", x.dtype.wgsl())
        .constant("MODE", format!("{}u", spec.mode))
        .constant("COORD", format!("{}u", spec.coord))
        .constant("NEAREST", format!("{}u", spec.nearest))
        .constant("EXCLUDE_OUTSIDE", spec.exclude_outside)
        .build()?;
    b.dispatch(&k, params, &[Bind::R(x), Bind::W(&y)], grid_1d(n, WG))?;
    Ok(y)
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut v = vec![
        Template::new("pool", WGSL)
            .alias("T", "f16")
            .constant("MAX", true)
            .constant("INDICES", true)
            .constant("COL_MAJOR", true)
            .build()?,
        Template::new("pool", WGSL)
            .alias("T", "f32")
            .constant("MAX", false)
            .constant("COUNT_PAD", true)
            .build()?,
    ];
    for mode in 0..3 {
        for coord in 0..6 {
            v.push(
                Template::new("resize", WGSL_RESIZE)
                    .alias("T", if mode == 0 { "i32" } else { "f16" })
                    .constant("EXCLUDE_OUTSIDE", mode == 2)
                    .constant("MODE", format!("{mode}u"))
                    .constant("COORD", format!("{coord}u"))
                    .constant("NEAREST", format!("{}u", coord % 4))
                    .build()?,
            );
        }
    }
    Ok(v)
}

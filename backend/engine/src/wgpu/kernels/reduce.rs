//! Reductions, Softmax/LogSoftmax, LayerNorm/InstanceNorm, ArgMax/ArgMin and TopK launchers.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::kernels::copy::strides;
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
#[cfg(test)]
use crate::wgpu::template::KernelSource;
use crate::wgpu::template::Template;

/// The reduction kernel file.
pub(crate) const WGSL: &str = include_str!("reduce.wgsl");
/// The softmax kernel file.
pub(crate) const WGSL_SOFTMAX: &str = include_str!("softmax.wgsl");
/// The normalisation kernel file.
pub(crate) const WGSL_NORM: &str = include_str!("norm.wgsl");
/// The ArgMax/TopK kernel file.
pub(crate) const WGSL_ARGTOPK: &str = include_str!("argtopk.wgsl");

/// Reduction kinds, numbered as the kernel's `OP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Sum = 0,
    Mean = 1,
    Max = 2,
    Min = 3,
    Prod = 4,
    L1 = 5,
    L2 = 6,
    SumSquare = 7,
    LogSum = 8,
    LogSumExp = 9,
}

/// Whether `rows` rows of `len` elements are reduced by a workgroup each (through workgroup memory) rather
/// than by one invocation each. Barriers are costly (lavapipe runs a workgroup's invocations as coroutines),
/// so a workgroup per row pays off only for long rows, or when there are too few rows to fill the device.
pub(crate) fn cooperative(rows: usize, len: usize) -> bool {
    len >= 1024 || (rows <= 64 && len >= 128)
}

/// Workgroups for a kernel that reduces `rows` rows, cooperatively or one per invocation (64 per workgroup).
fn reduce_grid(rows: usize, coop: bool) -> [u32; 3] {
    if coop { rows_grid(rows) } else { grid_1d(rows, WG) }
}

/// Workgroups for `n` independent rows, folded to stay under 65,535 per dimension.
fn rows_grid(n: usize) -> [u32; 3] {
    let n = n.max(1);
    let x = n.min(65_535);
    [x as u32, n.div_ceil(x) as u32, 1]
}

/// Reduces `x` over `axes` (sorted, distinct); `keepdims` only changes the output's shape.
pub(crate) fn reduce(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    op: Reduction,
    axes: &[usize],
    keepdims: bool,
) -> GpuResult<DTensor> {
    if x.rank() > 8 {
        return Err(GpuError::unsupported(format!(
            "reduce '{name}' over rank {}",
            x.rank()
        )));
    }
    let xs = strides(&x.shape);
    let (mut kd, mut ks, mut rd, mut rs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::new();
    for (d, (&dim, &stride)) in x.shape.iter().zip(&xs).enumerate() {
        if axes.contains(&d) {
            rd.push(dim as u32);
            rs.push(stride as u32);
            if keepdims {
                out.push(1);
            }
        } else {
            kd.push(dim as u32);
            ks.push(stride as u32);
            out.push(dim);
        }
    }
    let r: usize = rd.iter().map(|&v| v as usize).product();
    let out_dtype = match x.dtype {
        DType::Bool => DType::I32,
        t => t,
    };
    let y = b.temp(name, out_dtype, &out)?;
    let n = y.numel();
    let coop = cooperative(n, r);
    let k = Template::new("reduce", WGSL)
        .alias("T", x.dtype.wgsl())
        .alias("TO", out_dtype.wgsl())
        .constant("OP", format!("{}u", op as u32))
        .constant("COOP", coop)
        .build()?;
    let params = Params::new()
        .u4([n as u32, r as u32, kd.len() as u32, rd.len() as u32])
        .dims8(&kd)
        .dims8(&ks)
        .dims8(&rd)
        .dims8(&rs);
    b.dispatch(&k, params, &[Bind::R(x), Bind::W(&y)], reduce_grid(n, coop))?;
    Ok(y)
}

/// `[outer, L, inner]` sizes of `shape` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Softmax or LogSoftmax along `axis`; with `coerce_2d` over every dim from `axis` on; with
/// `nan_rows_to_zero`, zeros for a row whose softmax is NaN.
pub(crate) fn softmax(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    axis: usize,
    log: bool,
    coerce_2d: bool,
    nan_rows_to_zero: bool,
) -> GpuResult<DTensor> {
    let (outer, l, inner) = if coerce_2d {
        (
            x.shape[..axis].iter().product(),
            x.shape[axis..].iter().product(),
            1,
        )
    } else {
        around(&x.shape, axis)
    };
    let y = b.temp(name, x.dtype, &x.shape)?;
    let rows = outer * inner;
    let coop = cooperative(rows, l);
    let k = Template::new("softmax", WGSL_SOFTMAX)
        .alias("T", x.dtype.wgsl())
        .constant("LOG", log)
        .constant("COOP", coop)
        .constant("NAN_ROWS_TO_ZERO", nan_rows_to_zero)
        .build()?;
    let params = Params::new().u4([rows as u32, l as u32, inner as u32, 0]);
    b.dispatch(&k, params, &[Bind::R(x), Bind::W(&y)], reduce_grid(rows, coop))?;
    Ok(y)
}

/// Normalisation outputs: y and, when asked, mean and inverse standard deviation per row.
pub(crate) struct Normalised {
    pub(crate) y: DTensor,
    pub(crate) stats: Option<DTensor>,
}

/// LayerNormalization over dims `axis..` (scale/bias have `L` elements), or InstanceNormalization (per
/// channel scale/bias, rows are (n, c)) when `instance`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn normalise(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    scale: &DTensor,
    bias: Option<&DTensor>,
    axis: usize,
    epsilon: f32,
    instance: bool,
    want_stats: bool,
) -> GpuResult<Normalised> {
    let (rows, l, channels) = if instance {
        if x.rank() < 2 {
            return Err(GpuError::invalid(format!(
                "InstanceNormalization '{name}' needs rank >= 2"
            )));
        }
        (x.shape[0] * x.shape[1], x.shape[2..].iter().product(), x.shape[1])
    } else {
        (
            x.shape[..axis].iter().product::<usize>(),
            x.shape[axis..].iter().product::<usize>(),
            0,
        )
    };
    let want = if instance { channels } else { l };
    for t in [Some(scale), bias].into_iter().flatten() {
        if t.numel() != want {
            return Err(GpuError::invalid(format!(
                "normalisation '{name}': scale/bias of shape {:?} for {want} elements per row",
                t.shape
            )));
        }
    }
    let y = b.temp(name, x.dtype, &x.shape)?;
    let stats = b.temp(
        &format!("{name}.stats"),
        DType::F32,
        &[if want_stats { 2 * rows } else { 1 }],
    )?;
    let k = Template::new("norm", WGSL_NORM)
        .alias("T", x.dtype.wgsl())
        .alias("TS", scale.dtype.wgsl())
        .constant("INSTANCE", instance)
        .constant("HAS_BIAS", bias.is_some())
        .constant("STATS", want_stats)
        .constant("COOP", cooperative(rows, l))
        .build()?;
    if let Some(bt) = bias
        && bt.dtype != scale.dtype
    {
        return Err(GpuError::invalid(format!(
            "normalisation '{name}': scale and bias types differ"
        )));
    }
    let params = Params::new().u4([rows as u32, l as u32, channels as u32, epsilon.to_bits()]);
    let bias = bias.unwrap_or(scale);
    b.dispatch(
        &k,
        params,
        &[
            Bind::R(x),
            Bind::R(scale),
            Bind::R(bias),
            Bind::W(&y),
            Bind::W(&stats),
        ],
        rows_grid(rows),
    )?;
    Ok(Normalised {
        y,
        stats: want_stats.then_some(stats),
    })
}

/// Indices of the max (or min) along `axis` (i32 on the device, int64 to callers).
pub(crate) fn arg_reduce(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    axis: usize,
    max: bool,
    keepdims: bool,
    last_index: bool,
) -> GpuResult<DTensor> {
    let (outer, l, inner) = around(&x.shape, axis);
    if l == 0 {
        return Err(GpuError::invalid(format!(
            "ArgMax/ArgMin '{name}' over an empty axis"
        )));
    }
    let mut out = x.shape.clone();
    if keepdims {
        out[axis] = 1;
    } else {
        out.remove(axis);
    }
    let y = b.temp(name, DType::I32, &out)?;
    let unused = b.temp(&format!("{name}.unused"), x.dtype, &[1])?;
    let k = Template::new("argtopk", WGSL_ARGTOPK)
        .alias("T", x.dtype.wgsl())
        .constant("TOPK", false)
        .constant("LARGEST", max)
        .constant("LAST_INDEX", last_index)
        .build()?;
    let n = outer * inner;
    let params = Params::new().u4([n as u32, l as u32, inner as u32, 1]);
    b.dispatch(
        &k,
        params,
        &[Bind::R(x), Bind::W(&unused), Bind::W(&y)],
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// TopK along `axis`: (values, indices), sorted.
pub(crate) fn top_k(
    b: &mut PlanBuilder,
    names: [&str; 2],
    x: &DTensor,
    axis: usize,
    k: usize,
    largest: bool,
) -> GpuResult<(DTensor, DTensor)> {
    let (outer, l, inner) = around(&x.shape, axis);
    if k > l {
        return Err(GpuError::invalid(format!(
            "TopK '{}': k = {k} exceeds the axis length {l}",
            names[0]
        )));
    }
    let mut out = x.shape.clone();
    out[axis] = k;
    let values = b.temp(names[0], x.dtype, &out)?;
    let indices = b.temp(names[1], DType::I32, &out)?;
    let kern = Template::new("argtopk", WGSL_ARGTOPK)
        .alias("T", x.dtype.wgsl())
        .constant("TOPK", true)
        .constant("LARGEST", largest)
        .build()?;
    let n = outer * inner;
    let params = Params::new().u4([n as u32, l as u32, inner as u32, k as u32]);
    b.dispatch(
        &kern,
        params,
        &[Bind::R(x), Bind::W(&values), Bind::W(&indices)],
        grid_1d(n, WG),
    )?;
    Ok((values, indices))
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut v = Vec::new();
    for op in 0..10 {
        for coop in [true, false] {
            v.push(
                Template::new("reduce", WGSL)
                    .alias("T", if op % 2 == 0 { "f16" } else { "f32" })
                    .alias("TO", if op % 2 == 0 { "f16" } else { "f32" })
                    .constant("OP", format!("{op}u"))
                    .constant("COOP", coop)
                    .build()?,
            );
        }
    }
    v.push(
        Template::new("reduce", WGSL)
            .alias("T", "i32")
            .alias("TO", "i32")
            .build()?,
    );
    v.push(
        Template::new("softmax", WGSL_SOFTMAX)
            .alias("T", "f16")
            .constant("LOG", true)
            .build()?,
    );
    v.push(
        Template::new("norm", WGSL_NORM)
            .alias("T", "f16")
            .alias("TS", "f16")
            .constant("INSTANCE", true)
            .constant("HAS_BIAS", false)
            .constant("STATS", true)
            .build()?,
    );
    v.push(
        Template::new("argtopk", WGSL_ARGTOPK)
            .alias("T", "i32")
            .constant("TOPK", true)
            .constant("LARGEST", false)
            .constant("LAST_INDEX", true)
            .build()?,
    );
    v.push(Template::new("argtopk", WGSL_ARGTOPK).alias("T", "f16").build()?);
    Ok(v)
}

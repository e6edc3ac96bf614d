//! WGSL kernels, each a `.wgsl` file beside the Rust that launches it.

pub(crate) mod conv;
pub(crate) mod copy;
pub(crate) mod elementwise;
pub(crate) mod gather;
pub(crate) mod grid_sample;
pub(crate) mod idot;
pub(crate) mod matmul;
pub(crate) mod pool;
pub(crate) mod quant;
pub(crate) mod reduce;
pub(crate) mod rnn;
pub(crate) mod roi_align;
pub(crate) mod scatter;

/// Every kernel file with its name, for the naga validation test.
#[cfg(test)]
pub(crate) const ALL: &[(&str, &str)] = &[
    ("elementwise", elementwise::WGSL),
    ("matmul", matmul::WGSL),
    ("conv", conv::WGSL),
    ("conv_direct", conv::WGSL_DIRECT),
    ("conv_transpose", conv::WGSL_TRANSPOSE),
    ("copy", copy::WGSL),
    ("gather", gather::WGSL),
    ("pad", gather::WGSL_PAD),
    ("pool", pool::WGSL),
    ("resize", pool::WGSL_RESIZE),
    ("reduce", reduce::WGSL),
    ("softmax", reduce::WGSL_SOFTMAX),
    ("norm", reduce::WGSL_NORM),
    ("argtopk", reduce::WGSL_ARGTOPK),
    ("lstm", rnn::WGSL_LSTM),
    ("gru", rnn::WGSL_GRU),
    ("gru_reset", rnn::WGSL_GRU_RESET),
    ("quant", quant::WGSL),
    ("dynamic_range", quant::WGSL_DYNAMIC_RANGE),
    ("igemm", quant::WGSL_IGEMM),
    ("iconv", quant::WGSL_ICONV),
    ("igemm_dp4", idot::WGSL_GEMM),
    ("iconv_dp4", idot::WGSL_CONV),
    ("requantize", quant::WGSL_REQUANTIZE),
    ("scatter", scatter::WGSL),
    ("scatter_nd", scatter::WGSL_ND),
    ("roi_align", roi_align::WGSL),
    ("grid_sample", grid_sample::WGSL),
];

/// Representative specialisations of every kernel, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> crate::wgpu::error::GpuResult<Vec<crate::wgpu::template::KernelSource>> {
    let mut v = Vec::new();
    v.extend(elementwise::variants()?);
    v.extend(matmul::variants()?);
    v.extend(conv::variants()?);
    v.extend(copy::variants()?);
    v.extend(gather::variants()?);
    v.extend(pool::variants()?);
    v.extend(reduce::variants()?);
    v.extend(rnn::variants()?);
    v.extend(quant::variants()?);
    v.extend(idot::variants()?);
    v.extend(scatter::variants()?);
    v.extend(roi_align::variants()?);
    v.extend(grid_sample::variants()?);
    Ok(v)
}

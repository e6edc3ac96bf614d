//! WGSL kernels, each a `.wgsl` file beside the Rust that launches it.

pub(crate) mod elementwise;

/// Every kernel file with its name, for the naga validation test.
#[cfg(test)]
pub(crate) const ALL: &[(&str, &str)] = &[("elementwise", elementwise::WGSL)];

/// Representative specialisations of every kernel, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> crate::wgpu::error::GpuResult<Vec<crate::wgpu::template::KernelSource>> {
    let mut v = Vec::new();
    v.extend(elementwise::variants()?);
    Ok(v)
}

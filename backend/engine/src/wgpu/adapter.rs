//! Adapter choice: a real GPU first, then the CPU adapter (Mesa lavapipe), overridable by config and by the
//! `WGPU_BACKEND` / `WGPU_ADAPTER_NAME` environment variables.

use super::error::{GpuError, GpuResult};

/// The backends the engine is built with (the workspace's `wgpu` features): the native compute APIs. wgpu's
/// OpenGL backend is left out; its compute support is a subset, and it cost every build a GL stack and
/// a GLSL shader writer.
const BUILT_BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN
    .union(wgpu::Backends::METAL)
    .union(wgpu::Backends::DX12);

/// Which wgpu adapter a `ExecutorKind::Wgpu` session uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdapterChoice {
    /// A real GPU first, then the CPU adapter (lavapipe); `WGPU_BACKEND` / `WGPU_ADAPTER_NAME` apply.
    #[default]
    Auto,
    /// Only a hardware GPU; fail when there is none.
    Hardware,
    /// Only a software (CPU) adapter such as lavapipe.
    Software,
    /// The first adapter whose name contains this string (case-insensitive).
    Named(String),
}

/// Which adapters a session may run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum AdapterKind {
    /// A discrete, integrated or virtual GPU if there is one, else the CPU adapter.
    #[default]
    Auto,
    /// Only a real GPU; fail when there is none.
    Gpu,
    /// Only a software (CPU) adapter such as lavapipe.
    Cpu,
}

/// A resolved adapter request (config merged with the environment).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct AdapterRequest {
    /// Kind of adapter wanted.
    pub(crate) kind: AdapterKind,
    /// Case-insensitive substring of the adapter name (`WGPU_ADAPTER_NAME` overrides).
    pub(crate) name: Option<String>,
    /// Backends to consider, as `WGPU_BACKEND` spells them (`vulkan`, `metal`, `dx12`; comma separated);
    /// `WGPU_BACKEND` overrides. `None` means all backends.
    pub(crate) backends: Option<String>,
}

impl AdapterRequest {
    /// Applies `WGPU_ADAPTER_NAME` and `WGPU_BACKEND` over the configured values: operators can redirect a
    /// deployment to another adapter without editing model configs.
    pub(crate) fn with_env(mut self) -> Self {
        if let Some(name) = std::env::var("WGPU_ADAPTER_NAME")
            .ok()
            .filter(|s| !s.trim().is_empty())
        {
            self.name = Some(name);
        }
        if let Some(b) = std::env::var("WGPU_BACKEND")
            .ok()
            .filter(|s| !s.trim().is_empty())
        {
            self.backends = Some(b);
        }
        self
    }

    pub(crate) fn backends(&self) -> GpuResult<wgpu::Backends> {
        match &self.backends {
            None => Ok(BUILT_BACKENDS),
            Some(text) => {
                let b = wgpu::Backends::from_comma_list(text) & BUILT_BACKENDS;
                if b.is_empty() {
                    Err(GpuError::invalid(format!(
                        "wgpu backend list '{text}' names no backend this build has (use vulkan, metal or dx12)"
                    )))
                } else {
                    Ok(b)
                }
            }
        }
    }
}

/// Preference order: discrete > integrated > virtual > other > CPU; native APIs before OpenGL.
fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let api = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        _ => 1,
    };
    (ty, api)
}

fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?})", info.name, info.device_type, info.backend)
}

/// Picks the adapter for `request` among those the instance can see.
pub(crate) fn select(instance: &wgpu::Instance, request: &AdapterRequest) -> GpuResult<wgpu::Adapter> {
    let backends = request.backends()?;
    let all = pollster::block_on(instance.enumerate_adapters(backends));
    let seen: Vec<String> = all.iter().map(|a| describe(&a.get_info())).collect();
    let mut candidates: Vec<wgpu::Adapter> = all
        .into_iter()
        .filter(|a| {
            a.get_downlevel_capabilities()
                .flags
                .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS)
        })
        .filter(|a| {
            let info = a.get_info();
            let is_cpu = info.device_type == wgpu::DeviceType::Cpu;
            let kind_ok = match request.kind {
                AdapterKind::Auto => true,
                AdapterKind::Gpu => !is_cpu,
                AdapterKind::Cpu => is_cpu,
            };
            let name_ok = request
                .name
                .as_ref()
                .is_none_or(|n| info.name.to_lowercase().contains(&n.trim().to_lowercase()));
            kind_ok && name_ok
        })
        .collect();
    candidates.sort_by_key(|a| rank(&a.get_info()));
    candidates.into_iter().next().ok_or_else(|| {
        let wanted = match request.kind {
            AdapterKind::Auto => "any adapter",
            AdapterKind::Gpu => "a GPU adapter",
            AdapterKind::Cpu => "a CPU adapter",
        };
        let name = request
            .name
            .as_ref()
            .map(|n| format!(" whose name contains '{n}' (WGPU_ADAPTER_NAME)"))
            .unwrap_or_default();
        let found = if seen.is_empty() {
            "no adapters at all".to_owned()
        } else {
            format!("only {}", seen.join(", "))
        };
        GpuError::unsupported(format!(
            "wgpu found no usable adapter: wanted {wanted}{name} on backends {backends:?} with compute shaders, \
             found {found}. Install Mesa's software Vulkan driver (`apt-get install mesa-vulkan-drivers`, lavapipe) \
             for a CPU adapter, or fix WGPU_BACKEND / WGPU_ADAPTER_NAME"
        ))
    })
}

//! One device per adapter per process: the wgpu device and queue, its real limits, the pipeline cache, and the
//! dedicated thread that submits work and polls for completion so that async callers never block.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use super::adapter::{self, AdapterRequest};
use super::error::{GpuError, GpuErrorKind, GpuResult};
use super::fault;
use super::memory;
use super::template::KernelSource;

/// The device half shared by the context and its submission thread.
pub(crate) struct GpuDevice {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) has_f16: bool,
    /// Bytes the engine's plans hold on this device (shared by every device on the same adapter).
    pub(crate) memory: Arc<AtomicU64>,
    lost: Arc<Mutex<Option<String>>>,
}

impl GpuDevice {
    /// `Err(DeviceLost)` once the device has been lost.
    pub(crate) fn check_alive(&self) -> GpuResult<()> {
        if let Some(switch) = fault::device_pulled() {
            self.device.destroy();
            self.mark_lost(&format!(
                "destroyed because {} exists ({})",
                switch.display(),
                fault::FAULT_GPU_LOST
            ));
        }
        match self.lost.lock().map(|g| g.clone()) {
            Ok(None) => Ok(()),
            Ok(Some(why)) => Err(lost_error(&self.info, &why)),
            Err(_) => Err(GpuError::lost("device state poisoned")),
        }
    }

    /// Puts the device into the lost state (every waiting and later request fails).
    pub(crate) fn mark_lost(&self, why: &str) {
        if let Ok(mut g) = self.lost.lock() {
            g.get_or_insert_with(|| why.to_owned());
        }
    }

    /// Runs `f` inside validation and out-of-memory error scopes and turns what they catch into errors.
    /// Blocks on the scopes' results: call it from a blocking context.
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> GpuResult<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        self.check_alive()?;
        if let Some(e) = o {
            return Err(GpuError::exhausted(format!(
                "{what}: the device ({}) is out of memory: {e}",
                self.info.name
            )));
        }
        if let Some(e) = v {
            return Err(GpuError::internal(format!("{what}: wgpu validation failed: {e}")));
        }
        Ok(value)
    }
}

fn lost_error(info: &wgpu::AdapterInfo, why: &str) -> GpuError {
    GpuError::lost(format!(
        "the wgpu device '{}' was lost ({why}); requests fail until the model is rebuilt on a new device",
        info.name
    ))
}

type Job = Box<dyn FnOnce(&GpuDevice) + Send>;

/// The driver-level pipeline cache (Vulkan), kept on disk so that compiled shaders survive restarts.
struct DriverCache {
    cache: wgpu::PipelineCache,
    path: PathBuf,
    dirty: AtomicBool,
}

/// Where the driver pipeline cache lives: `INFERGATE_PIPELINE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/infergate/wgpu`, else `$HOME/.cache/infergate/wgpu`; `INFERGATE_PIPELINE_CACHE=off`
/// disables it.
fn cache_dir() -> Option<PathBuf> {
    if std::env::var("INFERGATE_PIPELINE_CACHE").is_ok_and(|v| v == "off" || v == "0") {
        return None;
    }
    if let Some(d) = std::env::var_os("INFERGATE_PIPELINE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("infergate").join("wgpu"))
}

/// A device with its pipeline cache and submission thread. Shared by every session on the same adapter.
pub(crate) struct GpuContext {
    pub(crate) dev: Arc<GpuDevice>,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    driver_cache: Option<DriverCache>,
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl GpuContext {
    /// Creates a device on the adapter `request` selects, with the adapter's real limits.
    pub(crate) fn create(request: &AdapterRequest) -> GpuResult<Arc<Self>> {
        if let Some(switch) = fault::device_pulled() {
            return Err(GpuError::lost(format!(
                "no wgpu device while {} exists ({}); remove the file to give the device back",
                switch.display(),
                fault::FAULT_GPU_LOST
            )));
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = request.backends()?;
        let instance = wgpu::Instance::new(desc);
        let adapter = adapter::select(&instance, request)?;
        let info = adapter.get_info();
        let has_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let mut features = wgpu::Features::empty();
        if has_f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        let cache_path = adapter
            .features()
            .contains(wgpu::Features::PIPELINE_CACHE)
            .then(|| Some(cache_dir()?.join(format!("{}.bin", wgpu::util::pipeline_cache_key(&info)?))))
            .flatten();
        if cache_path.is_some() {
            features |= wgpu::Features::PIPELINE_CACHE;
        }
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("infergate"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::unsupported(format!("wgpu adapter '{}' refused a device: {e}", info.name)))?;
        let lost = Arc::new(Mutex::new(None));
        {
            let lost = Arc::clone(&lost);
            device.set_device_lost_callback(move |reason, message| {
                if let Ok(mut g) = lost.lock() {
                    g.get_or_insert_with(|| format!("{reason:?}: {message}"));
                }
            });
        }
        // Errors outside our error scopes are bugs; log them instead of wgpu's default panic.
        device.on_uncaptured_error(Arc::new(|e| {
            tracing::error!(error = %e, "uncaptured wgpu error");
        }));
        tracing::info!(adapter = %info.name, backend = ?info.backend, device_type = ?info.device_type,
            max_binding = limits.max_storage_buffer_binding_size, f16 = has_f16, "wgpu device ready");
        let dev = Arc::new(GpuDevice {
            device,
            queue,
            memory: memory::counter(&info.name),
            info,
            limits,
            has_f16,
            lost,
        });
        let driver_cache = cache_path.map(|path| {
            let data = std::fs::read(&path).ok();
            // SAFETY: `data` is only ever what `PipelineCache::get_data` returned on an adapter with the same
            // `pipeline_cache_key` (the file is named by that key and written whole, by rename, in
            // `save_pipeline_cache`). wgpu checks its header (adapter, driver validation key, length) and the
            // driver checks its own; with `fallback` an unusable file yields an empty cache, not an error.
            #[allow(unsafe_code)]
            let cache = unsafe {
                dev.device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                    label: Some("infergate"),
                    data: data.as_deref(),
                    fallback: true,
                })
            };
            tracing::debug!(path = %path.display(), loaded = data.is_some(), "wgpu pipeline cache");
            DriverCache {
                cache,
                path,
                dirty: AtomicBool::new(false),
            }
        });
        let (tx, rx) = mpsc::channel::<Job>();
        let thread_dev = Arc::clone(&dev);
        thread::Builder::new()
            .name("infergate-wgpu".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&thread_dev);
                }
            })
            .map_err(|e| GpuError::internal(format!("cannot start the wgpu submission thread: {e}")))?;
        Ok(Arc::new(Self {
            dev,
            pipelines: Mutex::new(HashMap::new()),
            driver_cache,
            jobs: Mutex::new(tx),
        }))
    }

    /// The process-wide context for `request` (after applying the environment): devices and pipelines are
    /// shared by every session on one adapter. A lost device is replaced on the next call.
    pub(crate) fn shared(request: &AdapterRequest) -> GpuResult<Arc<Self>> {
        static REGISTRY: OnceLock<Mutex<HashMap<AdapterRequest, Arc<GpuContext>>>> = OnceLock::new();
        let request = request.clone().with_env();
        let registry = REGISTRY.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = registry
            .lock()
            .map_err(|_| GpuError::internal("wgpu context registry poisoned"))?;
        if let Some(ctx) = map.get(&request)
            && ctx.dev.check_alive().is_ok()
        {
            return Ok(Arc::clone(ctx));
        }
        let ctx = Self::create(&request)?;
        map.insert(request, Arc::clone(&ctx));
        Ok(ctx)
    }

    /// The compiled pipeline for `source`, created once per device. Blocking (shader compilation).
    pub(crate) fn pipeline(&self, source: &KernelSource) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self
            .pipelines
            .lock()
            .map_err(|_| GpuError::internal("pipeline cache poisoned"))?
            .get(&source.wgsl)
        {
            return Ok(Arc::clone(p));
        }
        let device = &self.dev.device;
        let pipeline = self
            .dev
            .scoped(&format!("compiling kernel '{}'", source.name), || {
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(source.name),
                    source: wgpu::ShaderSource::Wgsl(source.wgsl.as_str().into()),
                });
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(source.name),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &[],
                        // Kernels initialise their workgroup memory; zeroing it costs time on every dispatch.
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: self.driver_cache.as_ref().map(|c| &c.cache),
                })
            })
            .map_err(|e| {
                if e.kind == GpuErrorKind::Internal {
                    GpuError::internal(format!("{e}\n--- source ---\n{}", source.wgsl))
                } else {
                    e
                }
            })?;
        let pipeline = Arc::new(pipeline);
        if let Some(c) = &self.driver_cache {
            c.dirty.store(true, Ordering::Relaxed);
        }
        self.pipelines
            .lock()
            .map_err(|_| GpuError::internal("pipeline cache poisoned"))?
            .insert(source.wgsl.clone(), Arc::clone(&pipeline));
        Ok(pipeline)
    }

    /// Writes the driver pipeline cache to disk when pipelines were added since the last save (after a plan
    /// is compiled). Failures only cost the next start its warm cache, so they are logged, not returned.
    pub(crate) fn save_pipeline_cache(&self) {
        let Some(c) = &self.driver_cache else {
            return;
        };
        if !c.dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let Some(data) = c.cache.get_data() else {
            return;
        };
        let tmp = c.path.with_extension(format!("tmp{}", std::process::id()));
        let written = c
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, &data))
            .and_then(|()| std::fs::rename(&tmp, &c.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(path = %c.path.display(), error = %e, "cannot save the wgpu pipeline cache");
        }
    }

    /// Number of distinct pipelines compiled on this device.
    pub(crate) fn pipeline_count(&self) -> usize {
        self.pipelines.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Runs `f` on the submission thread and awaits its result without blocking the async runtime.
    /// Fails with `DeviceLost` at once when the device is gone, and when it is lost while waiting.
    pub(crate) async fn on_device<T, F>(&self, f: F) -> GpuResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&GpuDevice) -> GpuResult<T> + Send + 'static,
    {
        self.dev.check_alive()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |dev: &GpuDevice| {
            let result = dev.check_alive().and_then(|()| f(dev));
            // The receiver may have given up (request cancelled); nothing to do then.
            let _ = tx.send(result);
        });
        self.jobs
            .lock()
            .map_err(|_| GpuError::internal("submission queue poisoned"))?
            .send(job)
            .map_err(|_| GpuError::lost("the wgpu submission thread has stopped"))?;
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(self
                .dev
                .check_alive()
                .err()
                .unwrap_or_else(|| GpuError::lost("the wgpu submission thread dropped a request"))),
        }
    }
}

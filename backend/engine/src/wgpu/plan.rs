//! A compiled execution plan for one set of concrete input shapes (one batch-size bucket).
//!
//! The builder records dispatches against logical values; `finish` plans the buffer pool by value lifetimes,
//! creates every buffer, uniform block and bind group once, and the plan then runs with one upload
//! (`write_buffer` of all inputs packed together), one command buffer holding every dispatch, and one readback
//! (every output copied into one mappable buffer).

use std::num::NonZeroU64;
use std::sync::Arc;

use wgpu::util::DeviceExt;

use super::context::{GpuContext, GpuDevice};
use super::dtype::{self, DType, HostType};
use super::error::{GpuError, GpuResult};
use super::memory::Allocation;
use super::pool;
use super::template::KernelSource;

/// Index of a logical value (a buffer-sized piece of device memory) in a plan.
pub(crate) type ValueId = usize;

/// A tensor on the device: a view of a value with a dtype and shape. Reshapes are new views of one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DTensor {
    pub(crate) value: ValueId,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
}

impl DTensor {
    /// Number of elements.
    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Rank.
    pub(crate) fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// Uniform parameters of one dispatch, written as a sequence of 16-byte `vec4<u32>` slots so that the WGSL
/// struct layout is trivially the same (every params struct in our shaders has only `vec4` members).
#[derive(Clone, Debug, Default)]
pub(crate) struct Params {
    words: Vec<u32>,
}

impl Params {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// One `vec4<u32>`.
    pub(crate) fn u4(mut self, v: [u32; 4]) -> Self {
        self.words.extend_from_slice(&v);
        self
    }

    /// One `vec4<i32>` (bit-identical in the buffer).
    pub(crate) fn i4(self, v: [i32; 4]) -> Self {
        self.u4(v.map(|x| x as u32))
    }

    /// `array<vec4<u32>, 2>`: up to eight values, zero padded.
    pub(crate) fn dims8(mut self, v: &[u32]) -> Self {
        let mut w = [0u32; 8];
        w[..v.len()].copy_from_slice(v);
        self.words.extend_from_slice(&w);
        self
    }

    /// `array<vec4<u32>, N>` holding `values` (f32 bits), zero padded to a multiple of four.
    pub(crate) fn floats(mut self, values: &[f32]) -> Self {
        self.words.extend(values.iter().map(|v| v.to_bits()));
        while !self.words.len().is_multiple_of(4) {
            self.words.push(0);
        }
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        if b.is_empty() {
            b.resize(16, 0);
        }
        b
    }
}

/// Invocations per workgroup of every kernel file (`const WG: u32 = 64u;`): two NVIDIA warps, one AMD wave,
/// eight lavapipe SIMD rows — small enough that tiny tensors do not run mostly idle invocations.
pub(crate) const WG: u32 = 64;

/// Workgroup counts for `n` invocations at `wg` per workgroup, folded into two dimensions so that no
/// dimension exceeds 65,535. Shaders compute the linear index as `gid.x + gid.y * nwg.x * WG`.
pub(crate) fn grid_1d(n: usize, wg: u32) -> [u32; 3] {
    let groups = n.div_ceil(wg as usize).max(1);
    let x = groups.min(65_535);
    let y = groups.div_ceil(x);
    [x as u32, y as u32, 1]
}

#[derive(Clone, Debug)]
enum ValueKind {
    Input,
    Const(Vec<u8>),
    Temp,
}

#[derive(Clone, Debug)]
struct ValueInfo {
    name: String,
    kind: ValueKind,
    bytes: u64,
}

struct StepRec {
    kernel: &'static str,
    pipeline: Arc<wgpu::ComputePipeline>,
    params: Vec<u8>,
    bindings: Vec<(ValueId, bool)>,
    grid: [u32; 3],
}

/// One storage binding of a dispatch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bind<'a> {
    /// Read-only storage.
    R(&'a DTensor),
    /// Read-write storage.
    W(&'a DTensor),
}

/// A graph input of the plan.
#[derive(Clone, Debug)]
pub(crate) struct InputSpec {
    pub(crate) name: String,
    pub(crate) host: HostType,
    pub(crate) tensor: DTensor,
}

/// A graph output of the plan.
#[derive(Clone, Debug)]
pub(crate) struct OutputSpec {
    pub(crate) name: String,
    pub(crate) host: HostType,
    pub(crate) tensor: DTensor,
}

/// Records a plan. Blocking (pipeline compilation): call from a blocking context.
pub(crate) struct PlanBuilder {
    pub(crate) ctx: Arc<GpuContext>,
    values: Vec<ValueInfo>,
    steps: Vec<StepRec>,
    inputs: Vec<InputSpec>,
    outputs: Vec<OutputSpec>,
}

fn padded(bytes: u64) -> u64 {
    bytes.max(4).div_ceil(4) * 4
}

impl PlanBuilder {
    pub(crate) fn new(ctx: Arc<GpuContext>) -> Self {
        Self {
            ctx,
            values: Vec::new(),
            steps: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// Whether the device stores f16 natively.
    pub(crate) fn has_f16(&self) -> bool {
        self.ctx.dev.has_f16
    }

    fn new_value(
        &mut self,
        name: &str,
        kind: ValueKind,
        dtype: DType,
        shape: &[usize],
    ) -> GpuResult<DTensor> {
        let numel: usize = shape.iter().product();
        let bytes = (numel * dtype.size()) as u64;
        let limit = self.ctx.dev.limits.max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(GpuError::exhausted(format!(
                "tensor '{name}' of shape {shape:?} ({bytes} bytes as {}) exceeds the device's \
                 max_storage_buffer_binding_size of {limit} bytes on '{}'; use a smaller batch or the CPU executor",
                dtype.wgsl(),
                self.ctx.dev.info.name
            )));
        }
        self.values.push(ValueInfo {
            name: name.to_owned(),
            kind,
            bytes: padded(bytes),
        });
        Ok(DTensor {
            value: self.values.len() - 1,
            dtype,
            shape: shape.to_vec(),
        })
    }

    /// Declares a graph input.
    pub(crate) fn input(&mut self, name: &str, host: HostType, shape: &[usize]) -> GpuResult<DTensor> {
        let dt = host.device(self.has_f16());
        let t = self.new_value(name, ValueKind::Input, dt, shape)?;
        self.inputs.push(InputSpec {
            name: name.to_owned(),
            host,
            tensor: t.clone(),
        });
        Ok(t)
    }

    /// Adds a constant (weights), converted from host bytes.
    pub(crate) fn constant(
        &mut self,
        name: &str,
        host: HostType,
        shape: &[usize],
        bytes: &[u8],
    ) -> GpuResult<DTensor> {
        let dt = host.device(self.has_f16());
        self.constant_as(name, host, dt, shape, bytes)
    }

    /// Adds a constant stored as device type `dt`.
    pub(crate) fn constant_as(
        &mut self,
        name: &str,
        host: HostType,
        dt: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> GpuResult<DTensor> {
        let numel: usize = shape.iter().product();
        if bytes.len() != numel * host.size() {
            return Err(GpuError::invalid(format!(
                "constant '{name}': {} bytes for shape {shape:?} of {}",
                bytes.len(),
                host.name()
            )));
        }
        let data = dtype::to_device(host, dt, bytes, name)?;
        self.new_value(name, ValueKind::Const(data), dt, shape)
    }

    /// A constant f32 tensor (for kernels' own tables and tests).
    pub(crate) fn constant_f32(&mut self, name: &str, shape: &[usize], values: &[f32]) -> GpuResult<DTensor> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant_as(name, HostType::F32, DType::F32, shape, &bytes)
    }

    /// A constant i32 tensor.
    pub(crate) fn constant_i32(&mut self, name: &str, shape: &[usize], values: &[i32]) -> GpuResult<DTensor> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant_as(name, HostType::I32, DType::I32, shape, &bytes)
    }

    /// A constant table of u32 words (stored as an i32 tensor of the same bits).
    pub(crate) fn constant_u32(&mut self, name: &str, values: &[u32]) -> GpuResult<DTensor> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant_as(name, HostType::I32, DType::I32, &[values.len()], &bytes)
    }

    /// A fresh intermediate tensor (memory comes from the lifetime-planned pool).
    pub(crate) fn temp(&mut self, name: &str, dtype: DType, shape: &[usize]) -> GpuResult<DTensor> {
        self.new_value(name, ValueKind::Temp, dtype, shape)
    }

    /// A reshaped view of `t` (Reshape, Flatten, Squeeze, Unsqueeze, Identity): no dispatch, no copy.
    pub(crate) fn alias(&self, t: &DTensor, shape: &[usize]) -> GpuResult<DTensor> {
        let n: usize = shape.iter().product();
        if n != t.numel() {
            return Err(GpuError::internal(format!(
                "reshape of '{}' from {:?} to {shape:?} changes the element count",
                self.values[t.value].name, t.shape
            )));
        }
        Ok(DTensor {
            value: t.value,
            dtype: t.dtype,
            shape: shape.to_vec(),
        })
    }

    /// The name a value was created with.
    pub(crate) fn name_of(&self, t: &DTensor) -> &str {
        &self.values[t.value].name
    }

    /// The kernels dispatched so far, in order (for tests that check which kernel a launcher picked).
    #[cfg(test)]
    pub(crate) fn kernel_names(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.kernel).collect()
    }

    /// Records one dispatch: binding 0 is the params uniform, then `binds` in order as bindings 1, 2, ...
    /// (`Bind::R` read-only storage, `Bind::W` read-write storage) — the layout the kernel file declares.
    pub(crate) fn dispatch(
        &mut self,
        kernel: &KernelSource,
        params: Params,
        binds: &[Bind<'_>],
        grid: [u32; 3],
    ) -> GpuResult<()> {
        for w in binds.iter().filter_map(|b| match b {
            Bind::W(t) => Some(t),
            Bind::R(_) => None,
        }) {
            if binds
                .iter()
                .any(|b| matches!(b, Bind::R(r) if r.value == w.value))
            {
                return Err(GpuError::internal(format!(
                    "kernel '{}' would bind '{}' read-only and read-write in one dispatch",
                    kernel.name, self.values[w.value].name
                )));
            }
            if matches!(self.values[w.value].kind, ValueKind::Input | ValueKind::Const(_)) {
                return Err(GpuError::internal(format!(
                    "kernel '{}' would write the input or constant '{}'",
                    kernel.name, self.values[w.value].name
                )));
            }
        }
        let max = self.ctx.dev.limits.max_storage_buffers_per_shader_stage as usize;
        if binds.len() > max {
            return Err(GpuError::unsupported(format!(
                "kernel '{}' needs {} storage buffers; the device allows {max} per shader stage",
                kernel.name,
                binds.len()
            )));
        }
        if grid.contains(&0) {
            return Ok(());
        }
        let pipeline = self.ctx.pipeline(kernel)?;
        let bindings = binds
            .iter()
            .map(|b| match b {
                Bind::R(t) => (t.value, false),
                Bind::W(t) => (t.value, true),
            })
            .collect();
        self.steps.push(StepRec {
            kernel: kernel.name,
            pipeline,
            params: params.bytes(),
            bindings,
            grid,
        });
        Ok(())
    }

    /// Declares a graph output.
    pub(crate) fn output(&mut self, name: &str, host: HostType, tensor: &DTensor) {
        self.outputs.push(OutputSpec {
            name: name.to_owned(),
            host,
            tensor: tensor.clone(),
        });
    }

    /// Plans the pool, creates buffers and bind groups.
    pub(crate) fn finish(self) -> GpuResult<Plan> {
        let dev = Arc::clone(&self.ctx.dev);
        let limits = &dev.limits;
        let storage_align = u64::from(limits.min_storage_buffer_offset_alignment).max(4);
        let uniform_align = u64::from(limits.min_uniform_buffer_offset_alignment).max(16);
        let n_steps = self.steps.len();

        // Lifetimes of temporaries: first and last step touching them; outputs live to the end.
        let mut first = vec![usize::MAX; self.values.len()];
        let mut last = vec![0usize; self.values.len()];
        let mut written = vec![false; self.values.len()];
        for (i, s) in self.steps.iter().enumerate() {
            for &(v, w) in &s.bindings {
                if !w && !written[v] && matches!(self.values[v].kind, ValueKind::Temp) {
                    return Err(GpuError::internal(format!(
                        "kernel '{}' reads '{}' before anything writes it",
                        s.kernel, self.values[v].name
                    )));
                }
                written[v] |= w;
                first[v] = first[v].min(i);
                last[v] = last[v].max(i);
            }
        }
        for o in &self.outputs {
            last[o.tensor.value] = n_steps;
            if matches!(self.values[o.tensor.value].kind, ValueKind::Temp) && !written[o.tensor.value] {
                return Err(GpuError::internal(format!(
                    "output '{}' is never computed",
                    o.name
                )));
            }
        }
        let temps: Vec<pool::Interval> = self
            .values
            .iter()
            .enumerate()
            .filter(|(v, info)| matches!(info.kind, ValueKind::Temp) && first[*v] != usize::MAX)
            .map(|(v, info)| pool::Interval {
                value: v,
                bytes: info.bytes,
                first: first[v],
                last: last[v],
            })
            .collect();
        let assignment = pool::assign(&temps);

        let usage_storage =
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let mut loc: Vec<Option<(usize, u64)>> = vec![None; self.values.len()];
        let mut buffers: Vec<wgpu::Buffer> = Vec::new();
        let device = &dev.device;

        // Pool slots.
        let pool_base = buffers.len();
        let slot_buffers = dev.scoped("allocating the buffer pool", || {
            assignment
                .slot_sizes
                .iter()
                .enumerate()
                .map(|(k, &size)| {
                    device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some(&format!("pool{k}")),
                        size,
                        usage: usage_storage,
                        mapped_at_creation: false,
                    })
                })
                .collect::<Vec<_>>()
        })?;
        buffers.extend(slot_buffers);
        for (v, slot) in &assignment.slot_of {
            loc[*v] = Some((pool_base + slot, 0));
        }

        // Constants, packed into chunks no larger than the binding limit.
        let chunk_limit = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut const_loc: Vec<(ValueId, usize, u64)> = Vec::new();
        for (v, info) in self.values.iter().enumerate() {
            if let ValueKind::Const(data) = &info.kind {
                let need = info.bytes;
                let fits = chunks
                    .last()
                    .map(|c| (c.len() as u64).div_ceil(storage_align) * storage_align + need <= chunk_limit)
                    .unwrap_or(false);
                if !fits {
                    chunks.push(Vec::new());
                }
                let c = chunks.len() - 1;
                let chunk = &mut chunks[c];
                let off = (chunk.len() as u64).div_ceil(storage_align) * storage_align;
                chunk.resize(off as usize, 0);
                chunk.extend_from_slice(data);
                chunk.resize((off + need) as usize, 0);
                const_loc.push((v, c, off));
            }
        }
        let const_base = buffers.len();
        let const_buffers = dev.scoped("uploading weights", || {
            chunks
                .iter()
                .enumerate()
                .map(|(k, data)| {
                    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some(&format!("weights{k}")),
                        contents: data,
                        usage: usage_storage,
                    })
                })
                .collect::<Vec<_>>()
        })?;
        buffers.extend(const_buffers);
        for (v, c, off) in const_loc {
            loc[v] = Some((const_base + c, off));
        }

        // Inputs: one buffer, one write per execution.
        let mut input_bytes = 0u64;
        let mut input_slots = Vec::new();
        for spec in &self.inputs {
            let off = input_bytes.div_ceil(storage_align) * storage_align;
            input_bytes = off + self.values[spec.tensor.value].bytes;
            input_slots.push(off);
        }
        let input_buffer_index = buffers.len();
        let input_buffer = dev.scoped("allocating the input buffer", || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("inputs"),
                size: input_bytes.max(4),
                usage: usage_storage,
                mapped_at_creation: false,
            })
        })?;
        buffers.push(input_buffer);
        for (spec, off) in self.inputs.iter().zip(&input_slots) {
            loc[spec.tensor.value] = Some((input_buffer_index, *off));
        }

        // Uniform parameters of every dispatch in one buffer.
        let mut params = Vec::new();
        let mut param_offsets = Vec::with_capacity(n_steps);
        for s in &self.steps {
            let off = (params.len() as u64).div_ceil(uniform_align) * uniform_align;
            params.resize(off as usize, 0);
            params.extend_from_slice(&s.params);
            param_offsets.push(off);
        }
        params.resize(params.len().max(16), 0);
        let params_buffer = dev.scoped("uploading dispatch parameters", || {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &params,
                usage: wgpu::BufferUsages::UNIFORM,
            })
        })?;

        // Outputs: one readback buffer.
        let mut readback_bytes = 0u64;
        let mut outputs = Vec::new();
        for o in &self.outputs {
            let (buffer, offset) = loc[o.tensor.value]
                .ok_or_else(|| GpuError::internal(format!("output '{}' has no storage", o.name)))?;
            let bytes = (o.tensor.numel() * o.tensor.dtype.size()) as u64;
            let copy = padded(bytes);
            outputs.push(ReadbackSlot {
                spec: o.clone(),
                buffer,
                offset,
                bytes,
                copy,
                readback_offset: readback_bytes,
            });
            readback_bytes += copy;
        }
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: readback_bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });

        // Bind groups, created once.
        let mut steps = Vec::with_capacity(n_steps);
        let bind_groups = dev.scoped("creating bind groups", || -> GpuResult<Vec<wgpu::BindGroup>> {
            let mut groups = Vec::with_capacity(n_steps);
            for (s, &poff) in self.steps.iter().zip(&param_offsets) {
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params_buffer,
                        offset: poff,
                        size: NonZeroU64::new(s.params.len() as u64),
                    }),
                }];
                for (k, &(v, _)) in s.bindings.iter().enumerate() {
                    let (b, off) = loc[v].ok_or_else(|| {
                        GpuError::internal(format!("'{}' has no storage", self.values[v].name))
                    })?;
                    entries.push(wgpu::BindGroupEntry {
                        binding: k as u32 + 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &buffers[b],
                            offset: off,
                            size: NonZeroU64::new(self.values[v].bytes),
                        }),
                    });
                }
                groups.push(device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(s.kernel),
                    layout: &s.pipeline.get_bind_group_layout(0),
                    entries: &entries,
                }));
            }
            Ok(groups)
        })??;
        for (s, bg) in self.steps.into_iter().zip(bind_groups) {
            steps.push(Step {
                pipeline: s.pipeline,
                bind_group: bg,
                grid: s.grid,
            });
        }
        let device_bytes =
            buffers.iter().map(wgpu::Buffer::size).sum::<u64>() + params_buffer.size() + readback.size();
        let held = Allocation::new(&dev.memory, device_bytes);
        Ok(Plan {
            uploaded: vec![true; self.inputs.len()],
            dev,
            steps,
            buffers,
            input_buffer: input_buffer_index,
            input_bytes,
            inputs: self.inputs.into_iter().zip(input_slots).collect(),
            outputs,
            readback,
            readback_bytes,
            _params: params_buffer,
            device_bytes,
            _held: held,
            pool_slots: assignment.slot_sizes.len(),
        })
    }
}

struct Step {
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    grid: [u32; 3],
}

struct ReadbackSlot {
    spec: OutputSpec,
    buffer: usize,
    offset: u64,
    bytes: u64,
    copy: u64,
    readback_offset: u64,
}

/// A host tensor in the executor's terms: element type, shape, little-endian row-major bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostTensor {
    pub(crate) host: HostType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<u8>,
}

/// A compiled plan: pipelines, pool buffers, bind groups; run it with [`Plan::run`].
pub(crate) struct Plan {
    /// Per graph input (signature order): whether the plan uploads it (false for host inputs whose values
    /// the plan was specialised for).
    pub(crate) uploaded: Vec<bool>,
    dev: Arc<GpuDevice>,
    steps: Vec<Step>,
    buffers: Vec<wgpu::Buffer>,
    input_buffer: usize,
    input_bytes: u64,
    inputs: Vec<(InputSpec, u64)>,
    outputs: Vec<ReadbackSlot>,
    readback: wgpu::Buffer,
    readback_bytes: u64,
    _params: wgpu::Buffer,
    device_bytes: u64,
    /// `device_bytes`, counted in the device's total for as long as the plan lives.
    _held: Allocation,
    pool_slots: usize,
}

impl Plan {
    /// Bytes of device memory this plan holds (pool, weights, inputs, parameters, readback).
    pub(crate) fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// Number of dispatches one execution records.
    pub(crate) fn dispatch_count(&self) -> usize {
        self.steps.len()
    }

    /// Number of pool buffers the lifetime planner needed.
    pub(crate) fn pool_slots(&self) -> usize {
        self.pool_slots
    }

    /// Packs host inputs (in the plan's input order) into the upload image, narrowing types.
    pub(crate) fn pack_inputs(&self, inputs: &[HostTensor]) -> GpuResult<Vec<u8>> {
        if inputs.len() != self.inputs.len() {
            return Err(GpuError::invalid(format!(
                "expected {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            )));
        }
        let mut packed = vec![0u8; self.input_bytes as usize];
        for ((spec, off), t) in self.inputs.iter().zip(inputs) {
            if t.shape != spec.tensor.shape {
                return Err(GpuError::invalid(format!(
                    "input '{}': expected shape {:?}, got {:?}",
                    spec.name, spec.tensor.shape, t.shape
                )));
            }
            let data = if t.host == spec.host || spec.tensor.dtype == t.host.device(self.dev.has_f16) {
                dtype::to_device(t.host, spec.tensor.dtype, &t.data, &spec.name)?
            } else {
                return Err(GpuError::invalid(format!(
                    "input '{}': expected {}, got {}",
                    spec.name,
                    spec.host.name(),
                    t.host.name()
                )));
            };
            let off = *off as usize;
            packed[off..off + data.len()].copy_from_slice(&data);
        }
        Ok(packed)
    }

    /// Executes on the calling thread (the submission thread): one upload, one command buffer, one submit,
    /// one readback. Returns the outputs in declaration order.
    pub(crate) fn execute(&self, dev: &GpuDevice, packed: &[u8]) -> GpuResult<Vec<HostTensor>> {
        let device = &dev.device;
        let submission = dev.scoped("executing the plan", || {
            if !packed.is_empty() {
                dev.queue
                    .write_buffer(&self.buffers[self.input_buffer], 0, packed);
            }
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("infergate plan"),
            });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("infergate plan"),
                    timestamp_writes: None,
                });
                for s in &self.steps {
                    pass.set_pipeline(&s.pipeline);
                    pass.set_bind_group(0, &s.bind_group, &[]);
                    pass.dispatch_workgroups(s.grid[0], s.grid[1], s.grid[2]);
                }
            }
            for o in &self.outputs {
                encoder.copy_buffer_to_buffer(
                    &self.buffers[o.buffer],
                    o.offset,
                    &self.readback,
                    o.readback_offset,
                    o.copy,
                );
            }
            dev.queue.submit([encoder.finish()])
        })?;
        let (tx, rx) = std::sync::mpsc::channel();
        self.readback
            .slice(..self.readback_bytes.max(4))
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        if let Err(e) = device.poll(wgpu::PollType::Wait {
            submission_index: Some(submission),
            timeout: None,
        }) {
            dev.mark_lost(&format!("waiting for the GPU failed: {e}"));
        }
        dev.check_alive()?;
        match rx.try_recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                dev.mark_lost(&format!("mapping the readback buffer failed: {e}"));
                dev.check_alive()?;
            }
            Err(_) => {
                dev.mark_lost("the readback never completed");
                dev.check_alive()?;
            }
        }
        let mut outputs = Vec::with_capacity(self.outputs.len());
        {
            let view = self
                .readback
                .slice(..self.readback_bytes.max(4))
                .get_mapped_range()
                .map_err(|e| GpuError::internal(format!("reading back outputs: {e}")))?;
            for o in &self.outputs {
                let start = o.readback_offset as usize;
                let raw = &view[start..start + o.bytes as usize];
                outputs.push(HostTensor {
                    host: o.spec.host,
                    shape: o.spec.tensor.shape.clone(),
                    data: dtype::from_device(o.spec.host, o.spec.tensor.dtype, raw),
                });
            }
        }
        self.readback.unmap();
        Ok(outputs)
    }
}

/// Runs `plan` asynchronously on its context's submission thread.
pub(crate) async fn run(
    ctx: &GpuContext,
    plan: Arc<Plan>,
    inputs: Vec<HostTensor>,
) -> GpuResult<Vec<HostTensor>> {
    let packed = plan.pack_inputs(&inputs)?;
    ctx.on_device(move |dev| plan.execute(dev, &packed)).await
}

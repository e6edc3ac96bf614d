//! Helpers shared by the kernel tests.

use std::sync::Arc;

use crate::wgpu::adapter::AdapterRequest;
use crate::wgpu::context::GpuContext;
use crate::wgpu::dtype::HostType;
use crate::wgpu::error::GpuResult;
use crate::wgpu::plan::{self, DTensor, HostTensor, PlanBuilder};

/// The shared test device; panics with the adapter error (which names `mesa-vulkan-drivers`) when none exists.
pub(super) fn ctx() -> Arc<GpuContext> {
    match GpuContext::shared(&AdapterRequest::default()) {
        Ok(c) => c,
        Err(e) => panic!("wgpu kernel tests need an adapter: {e}"),
    }
}

pub(super) fn f32s(shape: &[usize], values: &[f32]) -> HostTensor {
    assert_eq!(shape.iter().product::<usize>(), values.len());
    HostTensor {
        host: HostType::F32,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub(super) fn i64s(shape: &[usize], values: &[i64]) -> HostTensor {
    HostTensor {
        host: HostType::I64,
        shape: shape.to_vec(),
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub(super) fn bools(shape: &[usize], values: &[bool]) -> HostTensor {
    HostTensor {
        host: HostType::Bool,
        shape: shape.to_vec(),
        data: values.iter().map(|&v| u8::from(v)).collect(),
    }
}

pub(super) fn as_f32(t: &HostTensor) -> Vec<f32> {
    assert_eq!(t.host, HostType::F32);
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn as_i64(t: &HostTensor) -> Vec<i64> {
    assert_eq!(t.host, HostType::I64);
    t.data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Deterministic pseudo-random values in [-1, 1).
pub(super) fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Builds a plan with `build` (declaring inputs in the order of `inputs`), runs it once, returns outputs.
pub(super) fn run(
    inputs: Vec<HostTensor>,
    build: impl FnOnce(&mut PlanBuilder, &[DTensor]) -> GpuResult<Vec<DTensor>>,
) -> Vec<HostTensor> {
    let ctx = ctx();
    let mut b = PlanBuilder::new(Arc::clone(&ctx));
    let ins: Vec<DTensor> = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| b.input(&format!("in{k}"), t.host, &t.shape).expect("input"))
        .collect();
    let outs = match build(&mut b, &ins) {
        Ok(o) => o,
        Err(e) => panic!("building the plan failed: {e}"),
    };
    for (k, o) in outs.iter().enumerate() {
        let host = match o.dtype {
            crate::wgpu::dtype::DType::I32 => HostType::I64,
            crate::wgpu::dtype::DType::Bool => HostType::Bool,
            _ => HostType::F32,
        };
        b.output(&format!("out{k}"), host, o);
    }
    let plan = Arc::new(
        b.finish()
            .unwrap_or_else(|e| panic!("finishing the plan failed: {e}")),
    );
    pollster::block_on(plan::run(&ctx, plan, inputs))
        .unwrap_or_else(|e| panic!("running the plan failed: {e}"))
}

/// Asserts `got` is within `atol + rtol * |want|` of `want`, elementwise.
#[track_caller]
pub(super) fn assert_close(got: &[f32], want: &[f32], rtol: f32, atol: f32) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan()) || g == w;
        assert!(ok, "element {i}: got {g}, want {w} (rtol {rtol}, atol {atol})");
    }
}

//! Device-level behaviour: a lost device, tensors over the binding limit, f16 storage.

use std::sync::Arc;

use super::support::*;
use crate::wgpu::adapter::AdapterRequest;
use crate::wgpu::context::GpuContext;
use crate::wgpu::dtype::{DType, HostType};
use crate::wgpu::error::GpuErrorKind;
use crate::wgpu::expr::{EwNode, EwProgram, UnaryOp};
use crate::wgpu::kernels::elementwise::elementwise;
use crate::wgpu::kernels::matmul::{Epilogue, matmul};
use crate::wgpu::plan::{self, HostTensor, PlanBuilder};

#[test]
fn a_lost_device_fails_waiting_and_later_requests_with_device_lost() {
    // A private device, so that losing it does not disturb the other tests.
    let ctx = GpuContext::create(&AdapterRequest::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut b = PlanBuilder::new(Arc::clone(&ctx));
    let x = b.input("x", HostType::F32, &[4]).expect("input");
    let prog = EwProgram {
        nodes: vec![EwNode::Operand(0), EwNode::Unary(UnaryOp::Neg, 0)],
    };
    let y = elementwise(&mut b, "y", &prog, &[&x], DType::F32, &[4]).expect("kernel");
    b.output("y", HostType::F32, &y);
    let plan = Arc::new(b.finish().expect("plan"));
    let input = || vec![f32s(&[4], &[1.0, 2.0, 3.0, 4.0])];
    let ok = pollster::block_on(plan::run(&ctx, Arc::clone(&plan), input())).expect("runs");
    assert_eq!(as_f32(&ok[0]), vec![-1.0, -2.0, -3.0, -4.0]);

    ctx.dev.device.destroy();
    for _ in 0..2 {
        let err =
            pollster::block_on(plan::run(&ctx, Arc::clone(&plan), input())).expect_err("device is gone");
        assert_eq!(err.kind, GpuErrorKind::DeviceLost, "{err}");
        assert!(err.message.contains("lost"), "{err}");
    }
}

#[test]
fn a_tensor_over_the_binding_limit_is_refused_naming_it_and_the_limit() {
    let ctx = ctx();
    let limit = ctx.dev.limits.max_storage_buffer_binding_size;
    let mut b = PlanBuilder::new(Arc::clone(&ctx));
    let n = (limit / 4 + 1) as usize;
    let err = b
        .temp("huge_activation", DType::F32, &[n])
        .expect_err("over the limit");
    assert_eq!(err.kind, GpuErrorKind::ResourceExhausted);
    assert!(err.message.contains("huge_activation"), "{err}");
    assert!(err.message.contains(&limit.to_string()), "{err}");
}

#[test]
fn f16_tensors_are_stored_as_f16_when_the_adapter_has_shader_f16() {
    let ctx = ctx();
    let (m, n, k) = (3, 5, 4);
    let a = rand(m * k, 111);
    let bv = rand(k * n, 112);
    let h = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
            .collect()
    };
    let ins = vec![
        HostTensor {
            host: HostType::F16,
            shape: vec![m, k],
            data: h(&a),
        },
        HostTensor {
            host: HostType::F16,
            shape: vec![k, n],
            data: h(&bv),
        },
    ];
    let mut b = PlanBuilder::new(Arc::clone(&ctx));
    let xa = b.input("a", HostType::F16, &[m, k]).expect("a");
    let xb = b.input("b", HostType::F16, &[k, n]).expect("b");
    let want_dt = if ctx.dev.has_f16 { DType::F16 } else { DType::F32 };
    assert_eq!(xa.dtype, want_dt);
    let y = matmul(&mut b, "y", &xa, &xb, false, false, want_dt, &Epilogue::default()).expect("matmul");
    b.output("y", HostType::F16, &y);
    let plan = Arc::new(b.finish().expect("plan"));
    let out = pollster::block_on(plan::run(&ctx, plan, ins)).expect("runs");
    let got: Vec<f32> = out[0]
        .data
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    let mut want = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k)
                .map(|kk| {
                    half::f16::from_f32(a[i * k + kk]).to_f32() * half::f16::from_f32(bv[kk * n + j]).to_f32()
                })
                .sum();
        }
    }
    assert_close(&got, &want, 2e-3, 2e-3);
}

//! ONNX node conformance tests (onnx 1.22.0 wheel) on the CPU executor, and the wheel's `light_*`
//! model tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use infergate_engine::ExecutorKind;
use support::conformance::{parse_excused, run_suite};

#[test]
fn onnx_node_tests_on_cpu() {
    let excused = parse_excused(include_str!("conformance/excused_cpu.txt"));
    let report = run_suite(ExecutorKind::Cpu, &excused);
    let failures = report.failures();
    for (name, why) in &failures {
        eprintln!("FAIL {name}: {why}");
    }
    let rate = report.pass_rate();
    eprintln!(
        "conformance (cpu): {} passed, {} failed, {} excused; pass rate {:.1}%",
        report.passed(),
        failures.len(),
        report.excused,
        rate * 100.0
    );
    assert!(rate >= 0.95, "pass rate {:.1}% is below 95%", rate * 100.0);
    assert!(
        failures.is_empty(),
        "{} selected tests fail on the CPU executor (excuse them with a reason or fix them)",
        failures.len()
    );
}

/// The wheel's `light_*` models: input `arange(n).reshape(shape) / n`, one expected output.
#[test]
fn onnx_light_models_on_cpu() {
    use infergate_engine::{Model, Session, SessionOptions, Tensor};
    use std::sync::Arc;
    let root = support::python::onnx_package_dir().join("backend/test/data/light");
    // light_vgg19 (20 GFLOP, 550 MB of folded weights) is too heavy for a debug-build CI run.
    // AlexNet, Inception v1 and ZFNet-512 use LRN.
    let run = [
        "light_squeezenet",
        "light_shufflenet",
        "light_resnet50",
        "light_inception_v2",
        "light_densenet121",
        "light_bvlc_alexnet",
        "light_inception_v1",
        "light_zfnet512",
    ];
    for name in run {
        let model = Arc::new(
            Model::load(root.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        let spec = &model.signature().inputs[0];
        let shape: Vec<usize> = spec
            .dims
            .iter()
            .map(|d| match d {
                infergate_engine::Dim::Fixed(n) => *n,
                infergate_engine::Dim::Dynamic(_) => 1,
            })
            .collect();
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|i| i as f32 / n as f32).collect();
        let session = Session::new(model.clone(), SessionOptions::default()).unwrap();
        let out = session
            .run_blocking(vec![(spec.name.clone(), Tensor::from_vec(shape, data).unwrap())])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let bytes = std::fs::read(root.join(format!("{name}_output_0.pb"))).unwrap();
        let want = infergate_engine::onnx::decode_tensor(
            &<infergate_engine::onnx::proto::TensorProto as prost::Message>::decode(bytes.as_slice())
                .unwrap(),
            None,
            name,
        )
        .unwrap();
        support::conformance::compare(&out[0].0, &out[0].1, &want, 1e-3, 1e-7)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("{name}: ok");
    }
}

//! ONNX node conformance tests (onnx 1.22.0 wheel) on the wgpu executor, through the suite runner shared with
//! the CPU executor. Runs on lavapipe in CI; with no wgpu adapter it fails, naming `mesa-vulkan-drivers`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use infergate_engine::{AdapterChoice, ExecutorKind};
use support::conformance::{parse_excused, run_suite};

/// Selected tests the wgpu executor does not run, each with its reason. The first group is refused at load by
/// the shared loader (the same reasons as the CPU executor's list); the rest are wgpu-specific.
const EXCUSED: &str = "\
test_batchnorm_epsilon_training_mode: training-mode BatchNormalization (running statistics outputs); refused at load
test_batchnorm_example_training_mode: training-mode BatchNormalization (running statistics outputs); refused at load
test_identity_opt: optional-typed graph values; only dense tensors are supported
test_identity_sequence: sequence-typed graph values; only dense tensors are supported
test_not_2d: model declares opset 1; opsets below 7 are outside the supported range
test_not_3d: model declares opset 1; opsets below 7 are outside the supported range
test_not_4d: model declares opset 1; opsets below 7 are outside the supported range
test_resize_downsample_scales_cubic_antialias: Resize antialias=1 is refused at load (not implemented)
test_resize_downsample_scales_linear_antialias: Resize antialias=1 is refused at load (not implemented)
test_resize_downsample_sizes_cubic_antialias: Resize antialias=1 is refused at load (not implemented)
test_resize_downsample_sizes_linear_antialias: Resize antialias=1 is refused at load (not implemented)
test_training_dropout: training-mode Dropout draws random masks; refused at load
test_training_dropout_default: training-mode Dropout draws random masks; refused at load
test_training_dropout_default_mask: training-mode Dropout draws random masks; refused at load
test_training_dropout_mask: training-mode Dropout draws random masks; refused at load
test_training_dropout_zero_ratio: training_mode is a graph input, so the loader cannot prove it false and refuses it
test_training_dropout_zero_ratio_mask: training_mode is a graph input, so the loader cannot prove it false and refuses it
test_einsum_batch_diagonal: Einsum with an ellipsis ('...ii->...i'); refused at load naming the equation
test_equal_string: string tensors cannot live in GPU buffers; the executor refuses them with a message naming the CPU executor
test_equal_string_broadcast: string tensors cannot live in GPU buffers; the executor refuses them with a message naming the CPU executor
test_affine_grid_2d_align_corners_expanded: the size input is a graph input, so the expanded function's Expand/ConstantOfShape shapes depend on request data (data-dependent shapes are not supported yet)
test_affine_grid_2d_expanded: the size input is a graph input, so the expanded function's Expand/ConstantOfShape shapes depend on request data (data-dependent shapes are not supported yet)
test_affine_grid_3d_align_corners_expanded: the size input is a graph input, so the expanded function's Expand/ConstantOfShape shapes depend on request data (data-dependent shapes are not supported yet)
test_affine_grid_3d_expanded: the size input is a graph input, so the expanded function's Expand/ConstantOfShape shapes depend on request data (data-dependent shapes are not supported yet)
test_gridsample_volumetric_bilinear_align_corners_0: volumetric (5-D) GridSample; only 4-D inputs are supported and the 5-D form is refused naming the rank
test_gridsample_volumetric_bilinear_align_corners_1: volumetric (5-D) GridSample; only 4-D inputs are supported and the 5-D form is refused naming the rank
test_gridsample_volumetric_nearest_align_corners_0: volumetric (5-D) GridSample; only 4-D inputs are supported and the 5-D form is refused naming the rank
test_gridsample_volumetric_nearest_align_corners_1: volumetric (5-D) GridSample; only 4-D inputs are supported and the 5-D form is refused naming the rank
";

#[test]
fn onnx_node_tests_on_wgpu() {
    let excused = parse_excused(EXCUSED);
    let report = run_suite(ExecutorKind::Wgpu(AdapterChoice::Auto), &excused);
    let failures = report.failures();
    for (name, why) in &failures {
        eprintln!("FAIL {name}: {why}");
    }
    let rate = report.pass_rate();
    eprintln!(
        "conformance (wgpu): {} passed, {} failed, {} excused; pass rate {:.1}%",
        report.passed(),
        failures.len(),
        report.excused,
        rate * 100.0
    );
    assert!(rate >= 0.95, "pass rate {:.1}% is below 95%", rate * 100.0);
    assert!(
        failures.is_empty(),
        "{} selected tests fail on the wgpu executor (excuse them with a reason or fix them)",
        failures.len()
    );
}

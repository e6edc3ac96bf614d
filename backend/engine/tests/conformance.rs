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

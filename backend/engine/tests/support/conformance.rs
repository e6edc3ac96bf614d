//! The ONNX node-test conformance suite, generic over the executor.
//!
//! `run_suite(kind, excused)` runs every test of `tests/conformance/selected.txt` (from the onnx
//! 1.22.0 wheel) that is not excused, compares outputs with the suite's tolerances and returns a
//! report; callers assert on it. Other executors call this from their own test file with their own
//! excused list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use infergate_engine::onnx::{decode_tensor, proto::TensorProto};
use infergate_engine::{DataType, ExecutorKind, Model, Session, SessionOptions, Tensor};
use prost::Message;

/// Outcome of one test.
#[derive(Debug, Clone)]
pub enum Outcome {
    Pass,
    Fail(String),
}

/// Outcome of a suite run.
#[derive(Debug, Default)]
pub struct Report {
    pub results: BTreeMap<String, Outcome>,
    pub excused: usize,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.results
            .values()
            .filter(|o| matches!(o, Outcome::Pass))
            .count()
    }

    pub fn failures(&self) -> Vec<(&String, &String)> {
        self.results
            .iter()
            .filter_map(|(k, v)| match v {
                Outcome::Fail(m) => Some((k, m)),
                Outcome::Pass => None,
            })
            .collect()
    }

    /// Fraction of the selected (run + excused) tests that passed.
    pub fn pass_rate(&self) -> f64 {
        let total = self.results.len() + self.excused;
        if total == 0 {
            0.0
        } else {
            self.passed() as f64 / total as f64
        }
    }
}

/// Default tolerances of the onnx backend test runner, and the named looser ones.
pub fn tolerance(test: &str) -> (f64, f64) {
    // (rtol, atol)
    const FAMILIES: &[(&str, f64, f64)] = &[
        // f16/bf16 data: half-precision rounding of the reference
        ("_fp16", 1e-3, 1e-3),
        ("_float16", 1e-3, 1e-3),
        ("bfloat16", 1e-2, 1e-2),
        // long recurrences accumulate f32 rounding differently from numpy's f64 reference
        ("test_gru", 1e-3, 1e-6),
        ("test_lstm", 1e-3, 1e-6),
        ("test_simple_rnn", 1e-3, 1e-6),
        // transcendental approximations (erf, tanh-GELU) in f32
        ("test_gelu", 1e-3, 1e-6),
        ("test_erf", 1e-3, 1e-6),
        ("test_layer_normalization", 1e-3, 1e-6),
        ("test_resize", 1e-3, 1e-6),
    ];
    for (pat, r, a) in FAMILIES {
        if test.contains(pat) {
            return (*r, *a);
        }
    }
    (1e-3, 1e-7)
}

pub fn node_test_root() -> PathBuf {
    crate::support::python::onnx_package_dir().join("backend/test/data/node")
}

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// Test names of `selected.txt`.
pub fn selected() -> Vec<String> {
    let text = std::fs::read_to_string(conformance_dir().join("selected.txt")).expect("selected.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Parse an excused list: `test_name: reason` per line, `#` comments.
pub fn parse_excused(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            l.split_once(':')
                .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        })
        .collect()
}

/// A tensor from a `TensorProto` file (the suites' `input_*.pb` / `output_*.pb`).
pub fn read_pb(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tp = TensorProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", path.display()))?;
    decode_tensor(&tp, None, &path.display().to_string()).map_err(|e| e.to_string())
}

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        v.push(p);
    }
    v
}

/// Compare one output; returns a description of the first mismatch.
pub fn compare(name: &str, got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    compare_steps(name, got, want, rtol, atol, 0)
}

/// As [`compare`], and integer elements may differ by up to `steps`.
pub fn compare_steps(
    name: &str,
    got: &Tensor,
    want: &Tensor,
    rtol: f64,
    atol: f64,
    steps: i64,
) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!(
            "output '{name}': dtype {} but expected {}",
            got.dtype, want.dtype
        ));
    }
    if got.shape != want.shape {
        return Err(format!(
            "output '{name}': shape {:?} but expected {:?}",
            got.shape, want.shape
        ));
    }
    match want.dtype {
        DataType::String => {
            if got.strings().map_err(|e| e.to_string())? != want.strings().map_err(|e| e.to_string())? {
                return Err(format!("output '{name}': strings differ"));
            }
        }
        DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16 => {
            let g = got.to_f64_vec().map_err(|e| e.to_string())?;
            let w = want.to_f64_vec().map_err(|e| e.to_string())?;
            for (i, (a, e)) in g.iter().zip(&w).enumerate() {
                let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= atol + rtol * e.abs();
                if !ok {
                    return Err(format!(
                        "output '{name}'[{i}]: got {a}, expected {e} (rtol {rtol}, atol {atol})"
                    ));
                }
            }
        }
        _ => {
            let g = got.to_i64_vec().map_err(|e| e.to_string())?;
            let w = want.to_i64_vec().map_err(|e| e.to_string())?;
            if let Some(i) = (0..g.len()).find(|&i| (g[i] - w[i]).abs() > steps) {
                return Err(format!(
                    "output '{name}'[{i}]: got {}, expected {} (within {steps})",
                    g[i], w[i]
                ));
            }
        }
    }
    Ok(())
}

/// Run one node test directory with the tolerance its name picks ([`tolerance`]).
pub fn run_one(dir: &Path, kind: &ExecutorKind) -> Result<(), String> {
    let test = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (rtol, atol) = tolerance(&test);
    run_one_within(dir, kind, rtol, atol)
}

/// Run one directory in the node-test layout, comparing outputs within `rtol` and `atol`.
pub fn run_one_within(dir: &Path, kind: &ExecutorKind, rtol: f64, atol: f64) -> Result<(), String> {
    run_one_within_steps(dir, kind, rtol, atol, 0)
}

/// As [`run_one_within`], and integer outputs may differ from the expected ones by up to `steps`
/// (quantized outputs whose reference rounds a differently computed float: one quantization step).
pub fn run_one_within_steps(
    dir: &Path,
    kind: &ExecutorKind,
    rtol: f64,
    atol: f64,
    steps: i64,
) -> Result<(), String> {
    let model = Model::load(dir.join("model.onnx")).map_err(|e| format!("load: {e}"))?;
    let model = Arc::new(model);
    let session = Session::new(
        model.clone(),
        SessionOptions {
            executor: kind.clone(),
            threads: Some(1),
            plan_cache_size: 2,
        },
    )
    .map_err(|e| format!("session: {e}"))?;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    for set in sets {
        let ins = numbered(&set, "input");
        let outs = numbered(&set, "output");
        let sig = model.signature();
        let mut inputs = Vec::new();
        for (i, p) in ins.iter().enumerate() {
            let spec = sig
                .inputs
                .get(i)
                .ok_or_else(|| format!("input file {i} has no model input"))?;
            inputs.push((spec.name.clone(), read_pb(p)?));
        }
        let got = session.run_blocking(inputs).map_err(|e| format!("run: {e}"))?;
        if got.len() != outs.len() {
            return Err(format!("{} outputs, expected {}", got.len(), outs.len()));
        }
        for ((name, g), p) in got.iter().zip(&outs) {
            compare_steps(name, g, &read_pb(p)?, rtol, atol, steps)?;
        }
    }
    Ok(())
}

/// Run the selected suite on `kind`, skipping `excused` (name → reason).
pub fn run_suite(kind: ExecutorKind, excused: &BTreeMap<String, String>) -> Report {
    let root = node_test_root();
    assert!(
        root.is_dir(),
        "onnx node tests not found at {} (is onnx 1.22.0 in the venv? run `make venv`)",
        root.display()
    );
    let mut report = Report::default();
    for name in selected() {
        if excused.contains_key(&name) {
            report.excused += 1;
            continue;
        }
        let dir = root.join(&name);
        let outcome = match std::panic::catch_unwind(|| run_one(&dir, &kind)) {
            Ok(Ok(())) => Outcome::Pass,
            Ok(Err(e)) => Outcome::Fail(e),
            Err(_) => Outcome::Fail("PANIC".into()),
        };
        report.results.insert(name, outcome);
    }
    report
}

//! The zoo of real exported models (`zoo/export_zoo.py`), made or found in the cache by
//! `scripts/ensure-zoo.sh`, and the comparison of a session's outputs with onnxruntime's on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use infergate_engine::{Model, Session, Tensor};

use super::conformance::{compare, read_pb};

/// The zoo's folder (models, `manifest.json`, `ref/<name>/b<N>/`), exported once per machine.
pub fn zoo_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ensure-zoo.sh");
        let out = Command::new("bash")
            .arg(&script)
            .env("INFERGATE_PYTHON", super::python::python())
            .output()
            .expect("start bash for scripts/ensure-zoo.sh");
        assert!(
            out.status.success(),
            "scripts/ensure-zoo.sh failed (run `make zoo` to see why):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// The manifest's entry for `name`.
pub fn spec(name: &str) -> serde_json::Value {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(zoo_dir().join("manifest.json")).unwrap()).unwrap();
    manifest
        .get(name)
        .unwrap_or_else(|| panic!("zoo model '{name}' is not in the manifest"))
        .clone()
}

/// The test inputs of `name` at batch `b`, in the model's input order.
pub fn ref_inputs(model: &Model, name: &str, b: usize) -> Vec<(String, Tensor)> {
    let set = zoo_dir().join("ref").join(name).join(format!("b{b}"));
    model
        .signature()
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                s.name.clone(),
                read_pb(&set.join(format!("input_{i}.pb"))).unwrap(),
            )
        })
        .collect()
}

/// Loads zoo model `name`.
pub fn load(name: &str) -> Arc<Model> {
    let path = zoo_dir().join(format!("{name}.onnx"));
    Arc::new(Model::load(&path).unwrap_or_else(|e| panic!("{name}: load {}: {e}", path.display())))
}

/// Runs `session` on the reference inputs of `name` at each batch (twice from batch 2) and compares every output with
/// onnxruntime's: |got - want| <= rtol * |want| + atol * max(1, max|want|) (the tolerance grows with the
/// output's magnitude: random-weight networks reach large activations, where an absolute bound says nothing).
pub fn check(session: &Session, model: &Model, name: &str, batches: &[usize], rtol: f64, atol: f64) {
    // a batch the CPU executor can split runs whole first, then split (`cpu/split.rs`; the serial
    // way runs the same one-sample plan): running each batch twice checks both plans
    let runs = batches
        .iter()
        .flat_map(|&b| if b >= 2 { vec![b, b] } else { vec![b] });
    for b in runs {
        let set = zoo_dir().join("ref").join(name).join(format!("b{b}"));
        let outputs = futures::executor::block_on(session.run(ref_inputs(model, name, b)))
            .unwrap_or_else(|e| panic!("{name} batch {b}: {e}"));
        assert_eq!(
            outputs.len(),
            model.signature().outputs.len(),
            "{name}: one result per declared output"
        );
        for (i, (oname, got)) in outputs.iter().enumerate() {
            let want = read_pb(&set.join(format!("output_{i}.pb"))).unwrap();
            let scale = want
                .to_f64_vec()
                .map(|v| v.iter().fold(0f64, |m, x| m.max(x.abs())))
                .unwrap_or(1.0)
                .max(1.0);
            compare(oname, got, &want, rtol, atol * scale)
                .unwrap_or_else(|e| panic!("{name} batch {b}: {e} (output scale {scale:.3e})"));
        }
    }
}

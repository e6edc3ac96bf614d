//! Finding the project's Python (onnx, onnxruntime) for tests.

use std::path::PathBuf;
use std::process::Command;

/// The venv's Python: `$INFERGATE_PYTHON`, else `~/.cache/infergate/venv/bin/python`.
/// Panics with a message naming `make venv` when neither works.
pub fn python() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("INFERGATE_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/infergate/venv/bin/python")))
        .chain(std::iter::once(PathBuf::from(
            "/root/.cache/infergate/venv/bin/python",
        )))
        .collect();
    for c in &candidates {
        if c.exists() {
            return c.clone();
        }
    }
    panic!(
        "no Python venv with onnx/onnxruntime found (tried {candidates:?}); run `make venv` (or `make test`, \
         which creates it) or set INFERGATE_PYTHON"
    );
}

/// Run a Python snippet; returns stdout. Panics with stderr on failure.
pub fn run_python(code: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("failed to start the venv's python");
    if !out.status.success() {
        panic!(
            "python failed ({}):\n{}\n(is the venv complete? run `make venv`)",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory of the installed `onnx` package.
pub fn onnx_package_dir() -> PathBuf {
    let f = run_python("import onnx, os; print(os.path.dirname(onnx.__file__))", &[]);
    PathBuf::from(f.trim())
}

/// Writes the networks of `models/export_models.py` (`size` ci or bench) and onnxruntime's outputs at
/// `batches` (e.g. "1,3,16") into `folder` under the test target's temporary directory; returns it.
pub fn export_models(folder: &str, size: &str, batches: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/export_models.py");
    let status = Command::new(python())
        .arg(&script)
        .arg(&dir)
        .args(["--size", size, "--reference", batches])
        .status()
        .expect("start python");
    assert!(
        status.success(),
        "export_models.py failed (run `make venv` for onnx/onnxruntime)"
    );
    dir
}

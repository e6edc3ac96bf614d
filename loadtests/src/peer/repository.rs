//! The Triton peer's model repository, generated from the backend's: for each model the same config.pbtxt
//! with `backend: "python"` in place of `platform: "onnxruntime_onnx"` (same I/O, same batching, same instance
//! group), and each version folder's model.onnx with [`MODEL_PY`] beside it. Only the line naming what runs the
//! model differs between the two servers. The model.py feeds a model's first input: models with one input.

use std::path::Path;

use super::PeerError;

/// The Python backend's model: onnxruntime on each dynamic batch at once.
pub(super) const MODEL_PY: &str = include_str!("model.py");

/// The line of the backend's config.pbtxt that the peer's replaces.
const PLATFORM: &str = r#"platform: "onnxruntime_onnx""#;

/// The peer's config.pbtxt for the backend's `config`: [`PLATFORM`] becomes the Python backend.
pub(super) fn python_config(model: &str, config: &str) -> Result<String, PeerError> {
    let lines: Vec<&str> = config.lines().collect();
    if lines.iter().filter(|l| l.trim() == PLATFORM).count() != 1 {
        return Err(PeerError::Repository(format!(
            "model '{model}': its config.pbtxt needs exactly one line `{PLATFORM}` (the peer runs ONNX models \
             through onnxruntime, and writes `backend: \"python\"` there)"
        )));
    }
    let mut out: Vec<&str> = lines
        .into_iter()
        .map(|l| {
            if l.trim() == PLATFORM {
                r#"backend: "python""#
            } else {
                l
            }
        })
        .collect();
    out.push("");
    Ok(out.join("\n"))
}

/// Writes the peer's repository for `models` of the backend's repository `from` into `into`.
pub(super) fn write(from: &Path, models: &[String], into: &Path) -> Result<(), PeerError> {
    for model in models {
        let source = from.join(model);
        let config_file = source.join("config.pbtxt");
        let config = std::fs::read_to_string(&config_file).map_err(PeerError::io(&config_file))?;
        let target = into.join(model);
        std::fs::create_dir_all(&target).map_err(PeerError::io(&target))?;
        let written = target.join("config.pbtxt");
        std::fs::write(&written, python_config(model, &config)?).map_err(PeerError::io(&written))?;
        let mut versions = 0;
        for entry in std::fs::read_dir(&source).map_err(PeerError::io(&source))? {
            let entry = entry.map_err(PeerError::io(&source))?;
            let onnx = entry.path().join("model.onnx");
            let numbered = entry.file_name().to_string_lossy().parse::<u64>().is_ok();
            if !numbered || !onnx.is_file() {
                continue;
            }
            let version = target.join(entry.file_name());
            std::fs::create_dir_all(&version).map_err(PeerError::io(&version))?;
            // A copy: Triton resolves the repository's real path, and the pod's copy is removed after the run.
            std::fs::copy(&onnx, version.join("model.onnx")).map_err(PeerError::io(&onnx))?;
            std::fs::write(version.join("model.py"), MODEL_PY).map_err(PeerError::io(&version))?;
            versions += 1;
        }
        if versions == 0 {
            return Err(PeerError::Repository(format!(
                "model '{model}': no version folder with a model.onnx in {} (is it a zoo model missing from pod.zoo?)",
                source.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"name: "rec"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [3, 48, 320] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [-1, 6625] } ]
dynamic_batching { }
"#;

    #[test]
    fn only_the_platform_line_changes_and_each_version_gets_the_model_py() {
        let peer = python_config("rec", CONFIG).unwrap();
        assert_eq!(peer, CONFIG.replace(PLATFORM, r#"backend: "python""#));
        let dir = tempfile::tempdir().unwrap();
        let (from, into) = (dir.path().join("ours"), dir.path().join("peer"));
        std::fs::create_dir_all(from.join("rec/1")).unwrap();
        std::fs::create_dir_all(from.join("rec/notes")).unwrap();
        std::fs::write(from.join("rec/config.pbtxt"), CONFIG).unwrap();
        std::fs::write(from.join("rec/1/model.onnx"), b"onnx").unwrap();
        write(&from, &["rec".into()], &into).unwrap();
        assert_eq!(std::fs::read(into.join("rec/1/model.onnx")).unwrap(), b"onnx");
        assert_eq!(
            std::fs::read_to_string(into.join("rec/1/model.py")).unwrap(),
            MODEL_PY
        );
        assert!(
            !into.join("rec/notes").exists(),
            "only numbered version folders are served"
        );
    }

    #[test]
    fn configs_the_model_py_cannot_serve_are_refused_naming_why() {
        let e = python_config("rec", &CONFIG.replace(PLATFORM, r#"backend: "python""#)).unwrap_err();
        assert!(e.to_string().contains("needs exactly one line"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ours/rec")).unwrap();
        std::fs::write(dir.path().join("ours/rec/config.pbtxt"), CONFIG).unwrap();
        let e = write(
            &dir.path().join("ours"),
            &["rec".into()],
            &dir.path().join("peer"),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("no version folder with a model.onnx"),
            "{e}"
        );
    }
}

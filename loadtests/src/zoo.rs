//! Models of the engine's zoo (real exports, `backend/engine/zoo/`) in a case's repository: the case commits
//! each model's config.pbtxt, `scripts/ensure-zoo.sh` exports the ONNX files once per machine into a cache,
//! and [`repository`] puts the two together in a folder the pod (and a peer) can serve.

use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use crate::repository_edit;

/// Why the zoo's models could not be put into the repository.
#[derive(Debug, Error)]
pub enum ZooError {
    /// The script that finds or exports the zoo failed.
    #[error("{script} failed (run `make zoo` to see why; it needs the project venv: `make venv`):\n{stderr}")]
    Script {
        /// The script.
        script: PathBuf,
        /// Its error output.
        stderr: String,
    },
    /// The zoo has no such model.
    #[error(
        "zoo model '{model}' not found at {path}: is it one of backend/engine/zoo/export_zoo.py's exports?"
    )]
    NoModel {
        /// The name in `pod.zoo`.
        model: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// The zoo's folder of exports, from `scripts/ensure-zoo.sh` (which exports them first when the cache is
/// missing or stale, as the engine's zoo tests do): `INFERGATE_ZOO_CACHE` and `INFERGATE_PYTHON` pass through.
pub fn folder() -> Result<PathBuf, ZooError> {
    // The script belongs to the checkout this tool was built from.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ensure-zoo.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|source| ZooError::Io {
            path: script.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(ZooError::Script {
            script,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Copies the case's repository `models` into `into` and puts each zoo export `NAME.onnx` of `zoo` at
/// `NAME/1/model.onnx` in it. Copies, not links: the backend refuses model files that resolve outside their
/// model folder.
pub fn repository(models: &Path, names: &[String], zoo: &Path, into: &Path) -> Result<(), ZooError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ZooError::Io { path, source }
    };
    repository_edit::fresh_copy(models, into).map_err(io(into))?;
    for name in names {
        let from = zoo.join(format!("{name}.onnx"));
        if !from.is_file() {
            return Err(ZooError::NoModel {
                model: name.clone(),
                path: from,
            });
        }
        let version = into.join(name).join("1");
        std::fs::create_dir_all(&version).map_err(io(&version))?;
        let to = version.join("model.onnx");
        std::fs::copy(&from, &to).map_err(io(&to))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_land_beside_the_committed_configs_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (case, zoo, into) = (
            dir.path().join("case"),
            dir.path().join("zoo"),
            dir.path().join("repo"),
        );
        std::fs::create_dir_all(case.join("rec")).unwrap();
        std::fs::write(case.join("rec/config.pbtxt"), "name: \"rec\"\n").unwrap();
        std::fs::create_dir_all(&zoo).unwrap();
        std::fs::write(zoo.join("rec.onnx"), b"onnx bytes").unwrap();
        repository(&case, &["rec".into()], &zoo, &into).unwrap();
        assert_eq!(
            std::fs::read(into.join("rec/1/model.onnx")).unwrap(),
            b"onnx bytes"
        );
        assert!(into.join("rec/config.pbtxt").is_file());
        let e = repository(&case, &["det".into()], &zoo, &into).unwrap_err();
        assert!(e.to_string().contains("zoo model 'det' not found at"), "{e}");
    }
}

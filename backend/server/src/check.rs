//! `infergate-backend check <repo>`: validates a repository without serving it — every config (through
//! infergate-config) and every selected version's ONNX model (through the engine), listing every problem.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use infergate_engine::{Dim, ExecutorKind, Model, Session, SessionOptions, Tensor};

use crate::confine;
use crate::manifest::{self, ManifestOutcome};
use crate::model_config;
use crate::repository::scan;
use crate::version::check_signature;

/// What a check found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Model folders checked.
    pub models: usize,
    /// Version folders checked.
    pub versions: usize,
    /// Problems that stop a model from loading (`<path>: message`).
    pub problems: Vec<String>,
    /// Things worth knowing that do not stop it (`<path>[:line:col]: warning: message`).
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// True when every model can load.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks every model of these repositories. `run` also executes each version once on zero inputs.
pub fn check_repositories(roots: &[PathBuf], strict_model_config: bool, run: bool) -> CheckReport {
    let mut r = CheckReport::default();
    for root in roots {
        if !root.is_dir() {
            r.problems.push(format!(
                "{}: not a folder (expected a model repository)",
                root.display()
            ));
        }
    }
    let folders = scan::model_folders(roots);
    for (root, reason) in &folders.unreadable {
        if root.is_dir() {
            r.problems
                .push(format!("{}: cannot be read: {reason}", root.display()));
        }
    }
    r.problems.extend(folders.clashes.into_values());
    for (name, dir) in &folders.found {
        r.models += 1;
        check_model(name, dir, strict_model_config, run, &mut r);
    }
    if r.models == 0 && r.problems.is_empty() {
        for root in roots {
            r.warnings
                .push(format!("{}: warning: no model folders found", root.display()));
        }
    }
    r
}

fn check_model(name: &str, dir: &Path, strict: bool, run: bool, r: &mut CheckReport) {
    let file = match model_config::read_config_file(dir, name) {
        Ok(f) => f,
        Err(e) => {
            r.problems.push(e);
            return;
        }
    };
    if let Some(f) = &file {
        r.warnings.extend(f.warnings.iter().cloned());
    } else if strict {
        r.problems.push(format!(
            "{}: no config.pbtxt or config.yaml (--strict-model-config)",
            dir.display()
        ));
        return;
    }
    let config = file.map(|f| f.config);
    let available = scan::versions(dir);
    let selected = config.clone().unwrap_or_default().select_versions(&available);
    if selected.is_empty() {
        r.problems.push(if available.is_empty() {
            format!(
                "{}: no numeric version folder (e.g. {0}/1/model.onnx)",
                dir.display()
            )
        } else {
            format!("{}: no version folder matches the version_policy", dir.display())
        });
        return;
    }
    let filename = config
        .as_ref()
        .map_or("model.onnx", |c| c.model_filename())
        .to_string();
    let mut models: Vec<(u64, Arc<Model>)> = Vec::new();
    for v in selected {
        r.versions += 1;
        let vdir = dir.join(v.to_string());
        match manifest::verify(&vdir) {
            Ok(ManifestOutcome::Verified(_)) | Ok(ManifestOutcome::Absent) => {}
            Err(problems) => r.problems.extend(problems),
        }
        let path = vdir.join(&filename);
        // A missing file is reported by the load below; one that resolves outside the folder is not read.
        let escapes = path.exists().then(|| confine::resolve_inside(dir, &path).err());
        if let Some(e) = escapes.flatten() {
            r.problems.push(e);
            continue;
        }
        match Model::load(&path) {
            Ok(m) => models.push((v, Arc::new(m))),
            Err(e) => r.problems.push(format!("{}: {e}", path.display())),
        }
    }
    let Some((first_v, first)) = models.first().cloned() else {
        return;
    };
    let complete = if model_config::needs_autocomplete(config.as_ref()) {
        if let Some((v, _)) = models.iter().find(|(_, m)| m.signature() != first.signature()) {
            r.problems.push(format!(
                "{}: config auto-complete is ambiguous: versions {first_v} and {v} have different signatures",
                dir.display()
            ));
            return;
        }
        match model_config::autocomplete(config, name, first.signature()) {
            Ok(c) => {
                r.warnings.push(format!(
                    "{}: warning: no config file; derived from the ONNX model (max_batch_size {})",
                    dir.display(),
                    c.max_batch_size
                ));
                c
            }
            Err(e) => {
                r.problems.push(format!("{}: {e}", dir.display()));
                return;
            }
        }
    } else {
        config.unwrap_or_default()
    };
    let spec = match model_config::to_spec(&complete, &Default::default()) {
        Ok(s) => s,
        Err(e) => {
            r.problems.push(format!("{}: {e}", dir.display()));
            return;
        }
    };
    for (v, model) in &models {
        if let Err(e) = check_signature(&spec, model.signature()) {
            r.problems.push(format!("{}/{v}: {e}", dir.display()));
            continue;
        }
        for sample in &spec.warmup {
            let names: Vec<String> = model.signature().inputs.iter().map(|s| s.name.clone()).collect();
            if let Err(e) = crate::warmup::sample_inputs(&spec, sample, dir, &names) {
                r.problems.push(format!("{}/{v}: {e}", dir.display()));
            }
        }
        if run && let Err(e) = run_once(model.clone()) {
            r.problems.push(format!(
                "{}/{v}: running on zero inputs failed: {e}",
                dir.display()
            ));
        }
    }
}

/// Runs the model once on zero inputs (dynamic dims = 1) with the CPU executor.
fn run_once(model: Arc<Model>) -> Result<(), String> {
    let mut inputs = Vec::new();
    for s in &model.signature().inputs {
        let shape: Vec<usize> = s
            .dims
            .iter()
            .map(|d| if let Dim::Fixed(n) = d { *n } else { 1 })
            .collect();
        let n: usize = shape.iter().product();
        let bytes = match s.dtype.size() {
            Some(size) => vec![0u8; n * size],
            None => vec![0u8; n * 4],
        };
        let t = Tensor::new(s.dtype, shape, bytes.into()).map_err(|e| e.to_string())?;
        inputs.push((s.name.clone(), t));
    }
    let session = Session::new(
        model,
        SessionOptions {
            executor: ExecutorKind::Cpu,
            ..SessionOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    session
        .run_blocking(inputs)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_repository_checks_clean() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/models");
        let r = check_repositories(&[root], true, false);
        assert!(r.ok(), "{:#?}", r.problems);
        assert_eq!((r.models, r.versions), (2, 3));
    }

    #[test]
    fn every_problem_of_every_model_is_listed() {
        let d = tempfile::tempdir().unwrap();
        // A config error, a model without versions, and an ONNX file that is not ONNX.
        std::fs::create_dir_all(d.path().join("bad_config/1")).unwrap();
        std::fs::write(
            d.path().join("bad_config/config.pbtxt"),
            "name: \"bad_config\"\nmax_batch_size: \"x\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(d.path().join("no_versions")).unwrap();
        std::fs::create_dir_all(d.path().join("garbage/1")).unwrap();
        std::fs::write(d.path().join("garbage/1/model.onnx"), b"not onnx").unwrap();
        let r = check_repositories(&[d.path().to_path_buf()], false, false);
        assert_eq!(r.models, 3);
        assert_eq!(r.problems.len(), 3, "{:#?}", r.problems);
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("config.pbtxt") && p.contains("max_batch_size")),
            "{:#?}",
            r.problems
        );
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("no_versions") && p.contains("no numeric version folder"))
        );
        assert!(r.problems.iter().any(|p| p.contains("garbage/1/model.onnx")));
    }
}

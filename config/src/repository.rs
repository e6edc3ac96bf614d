//! Triton model repository layout: `<repo>/<model>/config.pbtxt` (or `config.yaml`) and numeric version
//! folders. Lifecycle (loading, polling, unloading) stays in the backend; this only reads the layout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::file::read_config_file;
use crate::model::{ModelConfig, load_model_config};

/// What [`scan_repository`] found.
#[derive(Debug, Clone)]
pub struct RepositoryScan {
    /// The repository folder.
    pub root: PathBuf,
    /// One entry per model folder, sorted by name.
    pub models: Vec<ModelEntry>,
    /// Notes (warnings) about entries that were ignored: files at the top level, non-numeric folders, ...
    pub notes: Diagnostics,
}

/// One model folder.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Folder name (the model's name).
    pub name: String,
    /// The model folder.
    pub dir: PathBuf,
    /// `config.pbtxt` or `config.yaml`, when there is one.
    pub config_file: Option<PathBuf>,
    /// The parsed and validated config (name checked against the folder), or every problem in it.
    pub config: Result<ModelConfig, Diagnostics>,
    /// Warnings from validation and what infergate does not support (which may include errors:
    /// see [`ModelConfig::support_diagnostics`]).
    pub warnings: Diagnostics,
    /// Numeric version folders, by version.
    pub versions: BTreeMap<u64, PathBuf>,
}

impl ModelEntry {
    /// Version numbers found, ascending.
    pub fn version_numbers(&self) -> Vec<u64> {
        self.versions.keys().copied().collect()
    }

    /// Versions selected by the config's version policy (highest first); empty when the config is invalid.
    pub fn selected_versions(&self) -> Vec<u64> {
        match &self.config {
            Ok(c) => c.select_versions(&self.version_numbers()),
            Err(_) => Vec::new(),
        }
    }
}

fn note(file: &Path, message: String) -> Diagnostic {
    Diagnostic::warning(file, Pos::default(), message)
}

/// Reads one model folder's config, checking the name against the folder.
pub fn load_model_dir(dir: &Path) -> (Option<PathBuf>, Result<ModelConfig, Diagnostics>, Diagnostics) {
    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let pbtxt = dir.join("config.pbtxt");
    let yaml = ["config.yaml", "config.yml"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.exists());
    let file = match (pbtxt.exists(), yaml) {
        (true, Some(y)) => {
            let d = Diagnostic::error(
                &y,
                Pos::default(),
                format!("model '{folder}' has both config.pbtxt and {}", y.display()),
            )
            .with_hint("keep one of them");
            return (Some(pbtxt), Err(Diagnostics::single(d)), Diagnostics::new());
        }
        (true, None) => pbtxt,
        (false, Some(y)) => y,
        (false, None) => {
            let d = Diagnostic::error(
                dir,
                Pos::default(),
                format!("model folder '{folder}' has no config.pbtxt or config.yaml"),
            )
            .with_hint("add a config.pbtxt naming the model's inputs and outputs");
            return (None, Err(Diagnostics::single(d)), Diagnostics::new());
        }
    };
    let text = match read_config_file(&file) {
        Ok(t) => t,
        Err(d) => return (Some(file), Err(d), Diagnostics::new()),
    };
    let mut loaded = match load_model_config(&text, &file) {
        Ok(l) => l,
        Err(d) => return (Some(file), Err(d), Diagnostics::new()),
    };
    if let Err(d) = loaded.check_folder_name(&folder, &file) {
        let mut all = Diagnostics::single(d);
        all.extend(loaded.warnings.0);
        return (Some(file), Err(all), Diagnostics::new());
    }
    let mut warnings = loaded.warnings;
    warnings.extend(loaded.config.support_diagnostics(&file, Some(&loaded.spans)));
    (Some(file), Ok(loaded.config), warnings)
}

/// Lists a model repository: each model folder with its parsed config (or its problems) and its numeric
/// version folders. Hidden entries (`.git`, Kubernetes' `..data`) are skipped; other non-model entries
/// are ignored with a note.
pub fn scan_repository(dir: &Path) -> Result<RepositoryScan, Diagnostics> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Diagnostics::single(Diagnostic::error(
            dir,
            Pos::default(),
            format!("cannot read the model repository: {e}"),
        ))
    })?;
    let mut models = Vec::new();
    let mut notes = Diagnostics::new();
    let mut names: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    names.sort();
    for (name, path) in names {
        if !path.is_dir() {
            notes.push(note(&path, format!("'{name}' is not a model folder; ignored")));
            continue;
        }
        let (config_file, config, warnings) = load_model_dir(&path);
        let mut versions = BTreeMap::new();
        if let Ok(children) = std::fs::read_dir(&path) {
            let mut children: Vec<_> = children.filter_map(Result::ok).map(|e| e.path()).collect();
            children.sort();
            for child in children {
                let cname = child
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if !child.is_dir() || cname.starts_with('.') || cname == "warmup" {
                    continue;
                }
                match cname.parse::<u64>() {
                    Ok(v) if cname.bytes().all(|b| b.is_ascii_digit()) => {
                        if let Some(prev) = versions.insert(v, child.clone()) {
                            notes.push(note(&child, format!("model '{name}': '{cname}' and '{}' are both version {v}; using '{cname}'", prev.display())));
                        }
                    }
                    _ => notes.push(note(
                        &child,
                        format!("model '{name}': folder '{cname}' is not a numeric version folder; ignored"),
                    )),
                }
            }
        }
        let mut warnings = warnings;
        if versions.is_empty() && config.is_ok() {
            warnings.push(
                Diagnostic::warning(
                    &path,
                    Pos::default(),
                    format!("model '{name}' has no version folders, so nothing will be served"),
                )
                .with_hint("put the model file in a numbered folder, e.g. 1/model.onnx"),
            );
        }
        if let Ok(c) = &config {
            if let Some(crate::model::VersionPolicy::Specific { versions: wanted }) = &c.version_policy {
                for v in wanted {
                    if !versions.keys().any(|have| i64::try_from(*have).ok() == Some(*v)) {
                        warnings.push(Diagnostic::warning(
                            config_file.as_deref().unwrap_or(&path),
                            Pos::default(),
                            format!(
                                "model '{name}': version_policy asks for version {v}, which has no folder"
                            ),
                        ));
                    }
                }
            }
            let filename = c.model_filename();
            for (v, vdir) in &versions {
                if c.platform != "ensemble" && !vdir.join(filename).exists() {
                    warnings.push(Diagnostic::warning(
                        vdir,
                        Pos::default(),
                        format!("model '{name}' version {v} has no {filename}"),
                    ));
                }
            }
        }
        models.push(ModelEntry {
            name,
            dir: path,
            config_file,
            config,
            warnings,
            versions,
        });
    }
    Ok(RepositoryScan {
        root: dir.to_path_buf(),
        models,
        notes,
    })
}

/// Every problem in a model repository, at the model-config level (the backend adds ONNX checks):
/// invalid configs, unsupported features, missing version folders and model files, ignored entries.
pub fn check_model_repository(dir: &Path) -> Diagnostics {
    let scan = match scan_repository(dir) {
        Ok(s) => s,
        Err(d) => return d,
    };
    let mut out = Diagnostics::new();
    if scan.models.is_empty() {
        out.push(Diagnostic::warning(
            dir,
            Pos::default(),
            "the repository holds no model folders",
        ));
    }
    for m in scan.models {
        if let Err(d) = m.config {
            out.extend(d.0);
        }
        out.extend(m.warnings.0);
    }
    out.extend(scan.notes.0);
    out
}

/// Every problem in a gateway routes file (errors and warnings).
pub fn check_gateway_file(file: &Path) -> Diagnostics {
    let text = match read_config_file(file) {
        Ok(t) => t,
        Err(d) => return d,
    };
    match crate::routes::load_gateway_config(&text, file) {
        Ok((_, warnings)) => warnings,
        Err(d) => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = "name: \"NAME\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 4\n\
input { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] }\noutput { name: \"y\" data_type: TYPE_FP32 dims: [ 2 ] }\n";

    fn model(repo: &Path, folder: &str, name: &str, versions: &[&str]) {
        let dir = repo.join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.pbtxt"), CFG.replace("NAME", name)).unwrap();
        for v in versions {
            std::fs::create_dir_all(dir.join(v)).unwrap();
            std::fs::write(dir.join(v).join("model.onnx"), b"onnx").unwrap();
        }
    }

    #[test]
    fn scans_models_versions_and_notes() {
        let repo = tempfile::tempdir().unwrap();
        model(repo.path(), "simple", "simple", &["1", "2", "10"]);
        std::fs::create_dir_all(repo.path().join("simple/backup")).unwrap();
        std::fs::create_dir_all(repo.path().join("simple/warmup")).unwrap();
        model(repo.path(), "renamed", "resnet", &["1"]);
        std::fs::create_dir_all(repo.path().join("empty")).unwrap();
        std::fs::write(repo.path().join("README.md"), "hi").unwrap();
        std::fs::create_dir_all(repo.path().join(".git")).unwrap();
        let scan = scan_repository(repo.path()).unwrap();
        let names: Vec<&str> = scan.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, vec!["empty", "renamed", "simple"]);
        let simple = &scan.models[2];
        assert_eq!(simple.version_numbers(), vec![1, 2, 10]);
        assert_eq!(simple.selected_versions(), vec![10]);
        assert_eq!(simple.config.as_ref().unwrap().name, "simple");
        let renamed = scan.models[1].config.as_ref().unwrap_err().to_string();
        assert!(
            renamed.contains("model name 'resnet' differs from its folder name 'renamed'"),
            "{renamed}"
        );
        let empty = scan.models[0].config.as_ref().unwrap_err().to_string();
        assert!(
            empty.contains("model folder 'empty' has no config.pbtxt or config.yaml"),
            "{empty}"
        );
        let notes = scan.notes.to_string();
        assert!(
            notes.contains("'README.md' is not a model folder; ignored"),
            "{notes}"
        );
        assert!(
            notes.contains("model 'simple': folder 'backup' is not a numeric version folder; ignored"),
            "{notes}"
        );
        assert!(!notes.contains("warmup") && !notes.contains(".git"), "{notes}");
    }

    #[test]
    fn check_lists_every_problem() {
        let repo = tempfile::tempdir().unwrap();
        model(repo.path(), "good", "good", &["1"]);
        model(repo.path(), "noversions", "noversions", &[]);
        model(repo.path(), "wrongname", "other", &["1"]);
        std::fs::create_dir_all(repo.path().join("nofile/3")).unwrap();
        std::fs::write(
            repo.path().join("nofile/config.pbtxt"),
            CFG.replace("NAME", "nofile"),
        )
        .unwrap();
        std::fs::create_dir_all(repo.path().join("python")).unwrap();
        std::fs::write(
            repo.path().join("python/config.pbtxt"),
            CFG.replace("NAME", "python")
                .replace("platform: \"onnxruntime_onnx\"", "backend: \"python\""),
        )
        .unwrap();
        let all: Vec<String> = check_model_repository(repo.path())
            .iter()
            .map(ToString::to_string)
            .collect();
        let has = |s: &str| all.iter().any(|d| d.contains(s));
        assert!(
            has("warning: model 'noversions' has no version folders"),
            "{all:#?}"
        );
        assert!(
            has("model name 'other' differs from its folder name 'wrongname'"),
            "{all:#?}"
        );
        assert!(
            has("warning: model 'nofile' version 3 has no model.onnx"),
            "{all:#?}"
        );
        assert!(
            has("python/config.pbtxt:2:10: model 'python': backend 'python' is not supported by infergate"),
            "{all:#?}"
        );
        assert!(!has("'good'"), "{all:#?}");
        let d = check_model_repository(&repo.path().join("missing"));
        assert!(d.has_errors());
        assert!(d.to_string().contains("cannot read the model repository"), "{d}");
    }

    #[test]
    fn the_local_example_repository_checks_clean() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/models");
        let d = check_model_repository(&repo);
        assert!(!d.has_errors(), "{d}");
    }

    #[test]
    fn gateway_check() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("routes.yaml");
        std::fs::write(
            &f,
            "routes:\n  - name: r\n    destinations: [{ upstream: nope }]\n",
        )
        .unwrap();
        let d = check_gateway_file(&f);
        assert!(d.has_errors());
        assert!(d.to_string().contains("unknown upstream 'nope'"), "{d}");
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/routes.yaml");
        assert!(check_gateway_file(&example).is_empty());
    }
}

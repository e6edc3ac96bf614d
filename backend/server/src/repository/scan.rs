//! Reading a repository's layout: model folders, numeric version folders, and fingerprints that tell
//! whether anything in them changed.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::model_config::CONFIG_FILES;

/// What a look at the repository folders found.
#[derive(Debug, Default)]
pub struct Folders {
    /// Model folders by name.
    pub found: BTreeMap<String, PathBuf>,
    /// Names found in two repositories, with the error to report.
    pub clashes: BTreeMap<String, String>,
    /// Repository folders that could not be listed (missing, unmounted, no permission), with the reason.
    /// What they held is unknown, not absent: callers must not read it as "every model was removed".
    pub unreadable: BTreeMap<PathBuf, String>,
}

/// Model folders of the repositories, by name.
pub fn model_folders(roots: &[PathBuf]) -> Folders {
    let mut out = Folders::default();
    for root in roots {
        let entries = match std::fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) => {
                out.unreadable.insert(root.clone(), e.to_string());
                continue;
            }
        };
        for e in entries.flatten() {
            let path = e.path();
            // Follow symlinks (Kubernetes volumes): a folder is whatever resolves to one.
            if !path.is_dir() {
                continue;
            }
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            if let Some(first) = out.found.get(&name) {
                out.clashes.insert(
                    name.clone(),
                    format!(
                        "model '{name}' is in two repositories ({} and {}); model names must be unique",
                        first.display(),
                        path.display()
                    ),
                );
                continue;
            }
            out.found.insert(name, path);
        }
    }
    out
}

/// Numeric version folders of a model folder, ascending. Other entries are ignored, as Triton does.
pub fn versions(model_dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(model_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()))
        .collect();
    v.sort_unstable();
    v
}

/// A fingerprint of every file under `dir` (relative path, size, modification time): changes when a
/// file is added, removed, replaced or rewritten.
pub fn tree_fingerprint(dir: &Path) -> u64 {
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    let mut h = DefaultHasher::new();
    files.hash(&mut h);
    h.finish()
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u64, u128)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.push((rel, meta.len(), mtime));
        }
    }
}

/// The fingerprint of a model's config file (0 when it has none).
pub fn config_fingerprint(model_dir: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    for f in CONFIG_FILES {
        if let Ok(bytes) = std::fs::read(model_dir.join(f)) {
            f.hash(&mut h);
            bytes.hash(&mut h);
        }
    }
    h.finish()
}

/// The fingerprint of a whole model folder (config and every version folder).
pub fn model_fingerprint(model_dir: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    config_fingerprint(model_dir).hash(&mut h);
    tree_fingerprint(model_dir).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_versions_and_fingerprints() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for v in ["1", "2", "10", "notes", ".hidden"] {
            std::fs::create_dir_all(a.path().join("m").join(v)).unwrap();
        }
        std::fs::create_dir_all(b.path().join("m")).unwrap();
        std::fs::create_dir_all(b.path().join("n")).unwrap();
        std::fs::write(a.path().join("README"), "not a model").unwrap();
        let missing = a.path().join("not-mounted");
        let folders = model_folders(&[a.path().to_path_buf(), b.path().to_path_buf(), missing.clone()]);
        assert_eq!(folders.found.keys().collect::<Vec<_>>(), vec!["m", "n"]);
        assert!(folders.clashes["m"].contains("two repositories"));
        assert_eq!(folders.unreadable.keys().collect::<Vec<_>>(), vec![&missing]);
        let m = a.path().join("m");
        assert_eq!(versions(&m), vec![1, 2, 10]);
        let before = model_fingerprint(&m);
        assert_eq!(before, model_fingerprint(&m));
        std::fs::write(m.join("2").join("model.onnx"), b"x").unwrap();
        let after = model_fingerprint(&m);
        assert_ne!(before, after);
        std::fs::write(m.join("config.pbtxt"), b"name: \"m\"").unwrap();
        assert_ne!(after, model_fingerprint(&m));
    }
}

//! Keeping the files a model names inside its model folder. A config (from the folder or from a load
//! request) names files by relative path — `default_model_filename`, warmup `input_data_file` — and
//! the repository may hold symlinks; none of them may make the server read a file outside the folder
//! (`../../etc/passwd`, `/etc/shadow`, a symlink to either).

use std::path::{Component, Path, PathBuf};

/// Checks that `rel` is a plain relative path (only normal components: no `..`, no leading `/`, no
/// drive prefix, not empty). `what` names the setting in the error.
pub fn check_relative(rel: &str, what: &str) -> Result<(), String> {
    let plain = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "{what} '{rel}' must be a relative path inside the model folder (no '..', no leading '/'), \
             e.g. 'model.onnx'"
        ))
    }
}

/// Resolves `path` (a file under `folder`) through any symlinks and checks that it stays inside
/// `folder` (itself resolved, so a model folder mounted through symlinks, as Kubernetes volumes are,
/// is fine). Returns the resolved path to read.
pub fn resolve_inside(folder: &Path, path: &Path) -> Result<PathBuf, String> {
    let real_folder = folder
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", folder.display()))?;
    let real = path
        .canonicalize()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if real.starts_with(&real_folder) {
        Ok(real)
    } else {
        Err(format!(
            "{} resolves to {}, outside the model folder {}; a model's files must live in its folder \
             (copy the file in instead of linking to it)",
            path.display(),
            real.display(),
            real_folder.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_pass() {
        for ok in ["model.onnx", "sub/model.onnx", "x.bin"] {
            check_relative(ok, "file").unwrap();
        }
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "./../x"] {
            let e = check_relative(bad, "default_model_filename").unwrap_err();
            assert!(
                e.contains("default_model_filename") && e.contains("no '..'"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_symlink_out_of_the_folder_is_refused_and_one_inside_is_followed() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, b"x").unwrap();
        let model = tempfile::tempdir().unwrap();
        std::fs::write(model.path().join("real.onnx"), b"y").unwrap();
        std::os::unix::fs::symlink(&secret, model.path().join("out.onnx")).unwrap();
        std::os::unix::fs::symlink("real.onnx", model.path().join("in.onnx")).unwrap();

        let e = resolve_inside(model.path(), &model.path().join("out.onnx")).unwrap_err();
        assert!(
            e.contains("outside the model folder") && e.contains("secret"),
            "{e}"
        );
        let r = resolve_inside(model.path(), &model.path().join("in.onnx")).unwrap();
        assert!(r.ends_with("real.onnx"), "{}", r.display());
    }
}

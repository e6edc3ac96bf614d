//! Integrity manifests: `<model>/<version>/MANIFEST.sha256`, verified before a version loads.
//!
//! Format (the output of `sha256sum`, run inside the version folder): one line per file,
//! `<64 lowercase or uppercase hex digits><two spaces, or a space and '*'><path relative to the version
//! folder, '/'-separated>`. Blank lines and lines starting with `#` are ignored. Every file under the
//! version folder except the manifest itself must be listed, and every listed file must exist with that
//! digest: a file added, removed or changed after the manifest was written fails the load.
//!
//! Make one with: `cd <model>/<version> && find . -type f ! -name MANIFEST.sha256 -printf '%P\n' | sort |
//! xargs -d '\n' sha256sum > MANIFEST.sha256` (or `deploy/local/make_models.py`'s `write_manifest`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path};

use sha2::{Digest, Sha256};

/// The manifest's file name inside a version folder.
pub const MANIFEST_FILE: &str = "MANIFEST.sha256";

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestOutcome {
    /// No manifest in the folder.
    Absent,
    /// Every file matched; this many files were checked.
    Verified(usize),
}

/// Verifies `version_dir` against its manifest, if it has one. The error lists every problem.
pub fn verify(version_dir: &Path) -> Result<ManifestOutcome, Vec<String>> {
    let path = version_dir.join(MANIFEST_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ManifestOutcome::Absent),
        Err(e) => return Err(vec![format!("{}: cannot read the manifest: {e}", path.display())]),
    };
    let mut problems = Vec::new();
    let listed = parse(&text, &mut problems);
    let mut present = Vec::new();
    if let Err(e) = list_files(version_dir, version_dir, &mut present) {
        problems.push(format!(
            "{}: cannot list the version folder: {e}",
            version_dir.display()
        ));
    }
    for rel in &present {
        if !listed.contains_key(rel) {
            problems.push(format!(
                "{}: file '{rel}' is not listed in {MANIFEST_FILE} (add its sha256, or remove the file)",
                version_dir.display()
            ));
        }
    }
    for (rel, want) in &listed {
        let file = version_dir.join(rel);
        match sha256_file(&file) {
            Ok(got) if got.eq_ignore_ascii_case(want) => {}
            Ok(got) => problems.push(format!(
                "{}: sha256 mismatch for '{rel}': the manifest says {want}, the file has {got} \
                 (the file changed after the manifest was written)",
                version_dir.display()
            )),
            Err(e) => problems.push(format!(
                "{}: '{rel}' is listed in {MANIFEST_FILE} but cannot be read: {e}",
                version_dir.display()
            )),
        }
    }
    if problems.is_empty() {
        Ok(ManifestOutcome::Verified(listed.len()))
    } else {
        Err(problems)
    }
}

fn parse(text: &str, problems: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let (digest, rest) = line.split_at(line.find([' ', '\t']).unwrap_or(line.len()));
        let rel = rest
            .strip_prefix("  ")
            .or_else(|| rest.strip_prefix(" *"))
            .unwrap_or("");
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) || rel.is_empty() {
            problems.push(format!(
                "{MANIFEST_FILE}:{n}: expected '<sha256 hex>  <relative path>', got '{line}'"
            ));
            continue;
        }
        let safe = Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !safe {
            problems.push(format!(
                "{MANIFEST_FILE}:{n}: path '{rel}' must stay inside the version folder (no '/', '..' or '.' parts)"
            ));
            continue;
        }
        if out.insert(rel.to_string(), digest.to_string()).is_some() {
            problems.push(format!("{MANIFEST_FILE}:{n}: '{rel}' is listed twice"));
        }
    }
    out
}

fn list_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let ty = entry.file_type()?;
        if ty.is_dir() {
            list_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let rel = rel.join("/");
            if rel != MANIFEST_FILE {
                out.push(rel);
            }
        }
    }
    Ok(())
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, content: &[u8]) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn manifest_for(dir: &Path, files: &[&str]) {
        let lines: Vec<String> = files
            .iter()
            .map(|f| format!("{}  {f}", sha256_file(&dir.join(f)).unwrap()))
            .collect();
        std::fs::write(dir.join(MANIFEST_FILE), lines.join("\n") + "\n").unwrap();
    }

    #[test]
    fn a_matching_manifest_verifies_and_no_manifest_is_fine() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "model.onnx", b"onnx bytes");
        assert_eq!(verify(d.path()), Ok(ManifestOutcome::Absent));
        write(d.path(), "weights/w.bin", b"weights");
        manifest_for(d.path(), &["model.onnx", "weights/w.bin"]);
        assert_eq!(verify(d.path()), Ok(ManifestOutcome::Verified(2)));
    }

    #[test]
    fn changed_unlisted_and_missing_files_are_all_reported() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "model.onnx", b"onnx bytes");
        write(d.path(), "gone.bin", b"x");
        manifest_for(d.path(), &["model.onnx", "gone.bin"]);
        write(d.path(), "model.onnx", b"tampered");
        std::fs::remove_file(d.path().join("gone.bin")).unwrap();
        write(d.path(), "extra.txt", b"?");
        let problems = verify(d.path()).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("sha256 mismatch for 'model.onnx'"))
        );
        assert!(problems.iter().any(|p| p.contains("'extra.txt' is not listed")));
        assert!(problems.iter().any(|p| p.contains("'gone.bin' is listed")));
    }

    #[test]
    fn malformed_lines_and_escaping_paths_are_refused() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "model.onnx", b"m");
        let good = sha256_file(&d.path().join("model.onnx")).unwrap();
        let text = format!("# comment\n{good}  model.onnx\nnot-a-digest  x\n{good}  ../etc/passwd\n");
        std::fs::write(d.path().join(MANIFEST_FILE), text).unwrap();
        let problems = verify(d.path()).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains(":3: expected")),
            "{problems:#?}"
        );
        assert!(
            problems.iter().any(|p| p.contains(":4: path '../etc/passwd'")),
            "{problems:#?}"
        );
    }
}

//! The pod's own copy of its model repository, and the edits the repository drills make to it while the
//! backends serve: a tree of files written over it (a corrupted model, a new version, a mismatched manifest),
//! and the whole folder taken away and put back (a volume that failed to mount).

use std::path::{Path, PathBuf};

/// The suffix the repository folder is renamed to while it is "unreadable".
const AWAY: &str = "unreadable";

/// Copies the folder `from` to `to` (which must not exist).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Makes `repo` hold exactly the files of `from`: files whose bytes differ are rewritten, missing ones
/// written, and files and folders `from` lacks removed. Files already equal are left alone, so their
/// modification times (and the backend's fingerprints of the models that did not change) stay as they were.
pub fn sync_tree(from: &Path, repo: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(repo)?;
    for entry in std::fs::read_dir(repo)? {
        let entry = entry?;
        let wanted = from.join(entry.file_name());
        let is_dir = entry.file_type()?.is_dir();
        if is_dir && !wanted.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else if !is_dir && !wanted.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = repo.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path(), &target)?;
        } else {
            let bytes = std::fs::read(entry.path())?;
            if std::fs::read(&target).ok().as_deref() != Some(bytes.as_slice()) {
                std::fs::write(&target, bytes)?;
            }
        }
    }
    Ok(())
}

/// Where `repo` goes while it is unreadable.
fn away(repo: &Path) -> PathBuf {
    let mut name = repo.as_os_str().to_owned();
    name.push(".");
    name.push(AWAY);
    PathBuf::from(name)
}

/// Takes the repository folder away (renamed aside, so that its path cannot be listed) or puts it back.
/// A rename rather than a permission change: the drills may run as root, who reads through any mode.
pub fn set_readable(repo: &Path, readable: bool) -> std::io::Result<()> {
    let aside = away(repo);
    if readable {
        if !repo.exists() {
            std::fs::rename(&aside, repo)?;
        }
    } else if repo.exists() {
        std::fs::rename(repo, &aside)?;
    }
    Ok(())
}

/// Makes a fresh copy of `from` at `repo`, removing what an earlier run left there (and aside).
pub fn fresh_copy(from: &Path, repo: &Path) -> std::io::Result<()> {
    for old in [repo.to_path_buf(), away(repo)] {
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
    }
    copy_tree(from, repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    #[test]
    fn sync_rewrites_what_differs_and_leaves_equal_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, repo) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("repo"),
        );
        write(&a, "m/config.pbtxt", b"config");
        write(&a, "m/1/model.onnx", b"v1");
        write(&a, "gone/1/model.onnx", b"old");
        write(&b, "m/config.pbtxt", b"config");
        write(&b, "m/1/model.onnx", b"v1");
        write(&b, "m/2/model.onnx", b"v2");
        fresh_copy(&a, &repo).unwrap();
        let config = repo.join("m/config.pbtxt");
        let before = std::fs::metadata(&config).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        sync_tree(&b, &repo).unwrap();
        assert_eq!(std::fs::read(repo.join("m/2/model.onnx")).unwrap(), b"v2");
        assert!(
            !repo.join("gone").exists(),
            "a folder the new tree lacks is removed"
        );
        assert_eq!(
            std::fs::metadata(&config).unwrap().modified().unwrap(),
            before,
            "an equal file is not rewritten"
        );

        set_readable(&repo, false).unwrap();
        assert!(std::fs::read_dir(&repo).is_err(), "taken away");
        set_readable(&repo, true).unwrap();
        assert_eq!(std::fs::read(repo.join("m/1/model.onnx")).unwrap(), b"v1");
        // A second fresh copy clears what was there.
        set_readable(&repo, false).unwrap();
        fresh_copy(&a, &repo).unwrap();
        assert!(repo.join("gone/1/model.onnx").is_file() && !repo.join("m/2").exists());
    }
}

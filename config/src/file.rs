//! Reading config files safely: size cap before reading, UTF-8 text only, clear errors for missing,
//! unreadable, dangling-symlink and binary files.

use std::io::Read;
use std::path::Path;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::{MAX_CONFIG_BYTES, too_large};

fn whole_file(file: &Path, message: String) -> Diagnostics {
    Diagnostics::single(Diagnostic::error(file, Pos::default(), message))
}

/// Reads a config file as text, refusing files over [`MAX_CONFIG_BYTES`] before reading them.
pub fn read_config_file(file: &Path) -> Result<String, Diagnostics> {
    let meta = match std::fs::metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Ok(target) = std::fs::read_link(file) {
                return Err(whole_file(
                    file,
                    format!(
                        "the file is a dangling symbolic link to '{}' (its target does not exist)",
                        target.display()
                    ),
                ));
            }
            return Err(whole_file(file, "the file does not exist".to_string()));
        }
        Err(e) => return Err(whole_file(file, format!("cannot read the file: {e}"))),
    };
    if meta.is_dir() {
        return Err(whole_file(
            file,
            "this is a folder, not a config file".to_string(),
        ));
    }
    if meta.len() > MAX_CONFIG_BYTES as u64 {
        return Err(Diagnostics::single(too_large(file, meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    let opened =
        std::fs::File::open(file).map_err(|e| whole_file(file, format!("cannot read the file: {e}")))?;
    opened
        .take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| whole_file(file, format!("cannot read the file: {e}")))?;
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(Diagnostics::single(too_large(file, bytes.len() as u64)));
    }
    text_from_bytes(bytes, file)
}

/// Checks that bytes are config text (UTF-8, no NUL bytes).
pub(crate) fn text_from_bytes(bytes: Vec<u8>, file: &Path) -> Result<String, Diagnostics> {
    if let Some(at) = bytes.iter().position(|b| *b == 0) {
        return Err(Diagnostics::single(
            Diagnostic::error(
                file,
                offset_pos(&bytes, at),
                "the file contains NUL bytes; it looks binary, not a text config",
            )
            .with_hint("check that this is the right file"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Diagnostics::single(
            Diagnostic::error(file, offset_pos(e.as_bytes(), at), "the file is not UTF-8 text")
                .with_hint("save it as UTF-8"),
        )
    })
}

fn offset_pos(bytes: &[u8], at: usize) -> Pos {
    let before = &bytes[..at.min(bytes.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    Pos { line, column }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_get_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.yaml");
        assert!(
            read_config_file(&missing)
                .unwrap_err()
                .to_string()
                .ends_with(": the file does not exist")
        );

        let link = dir.path().join("dangling.yaml");
        std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
        let e = read_config_file(&link).unwrap_err().to_string();
        assert!(e.contains("dangling symbolic link to"), "{e}");

        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES + 10]).unwrap();
        let e = read_config_file(&big).unwrap_err().to_string();
        assert!(e.contains("over the 1048576-byte limit"), "{e}");

        let bin = dir.path().join("model.onnx");
        std::fs::write(&bin, b"ab\ncd\x00\x01\x02").unwrap();
        let e = read_config_file(&bin).unwrap_err().to_string();
        assert!(e.contains(":2:3: the file contains NUL bytes"), "{e}");

        let latin1 = dir.path().join("l.yaml");
        std::fs::write(&latin1, b"name: caf\xe9\n").unwrap();
        let e = read_config_file(&latin1).unwrap_err().to_string();
        assert!(e.contains(":1:10: the file is not UTF-8 text"), "{e}");

        assert!(
            read_config_file(dir.path())
                .unwrap_err()
                .to_string()
                .contains("this is a folder")
        );

        let ok = dir.path().join("ok.yaml");
        std::fs::write(&ok, "a: 1\n").unwrap();
        assert_eq!(read_config_file(&ok).unwrap(), "a: 1\n");
    }

    #[test]
    fn unreadable_paths_get_clear_errors() {
        // A path through a regular file cannot be read, even by root (permission bits would not stop root).
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("plain.yaml");
        std::fs::write(&f, "a: 1\n").unwrap();
        let e = read_config_file(&f.join("routes.yaml")).unwrap_err().to_string();
        assert!(
            e.ends_with("routes.yaml: cannot read the file: Not a directory (os error 20)"),
            "{e}"
        );
    }
}

//! `--model-memory-limit`: a cap on the bytes of model files that loaded versions may hold, checked before a
//! version is parsed, so a model too large for the pod is refused with a message instead of the whole process
//! meeting the OOM killer (and every loaded model with it).
//!
//! A version reserves the size of its folder's files (the model and any external weights: what the engine
//! reads into memory) before it is read, and gives it back when the version is dropped, after it has drained.
//! During a reload the new version reserves beside the old one, because both are in memory at the switch.

use std::path::Path;
use std::sync::{Arc, Mutex};

/// The cap and what is reserved under it. Shared by every load of the process.
#[derive(Debug, Default)]
pub struct MemoryBudget {
    limit: Option<u64>,
    reserved: Mutex<u64>,
}

/// Bytes held under a [`MemoryBudget`] until dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.budget.lock();
        *reserved = reserved.saturating_sub(self.bytes);
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes; `None` reserves without limit (the bytes are still counted).
    pub fn new(limit: Option<u64>) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            reserved: Mutex::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // A plain counter: a panic elsewhere cannot leave it half-written.
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limit, if one is set.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        *self.lock()
    }

    /// Reserves `bytes` for `what`, or says why not (naming the flag to change).
    pub fn reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation, String> {
        let mut reserved = self.lock();
        if let Some(limit) = self.limit
            && reserved.saturating_add(bytes) > limit
        {
            return Err(format!(
                "{what} needs {bytes} bytes, and the loaded models already hold {} of the {limit} bytes that \
                 --model-memory-limit allows; unload a model or raise the limit (and the pod's memory with it)",
                *reserved
            ));
        }
        *reserved += bytes;
        Ok(Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

/// The bytes of every file under `dir` (a version folder), or why they could not be read.
pub fn folder_bytes(dir: &Path) -> Result<u64, String> {
    let mut total = 0u64;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        total += if meta.is_dir() {
            folder_bytes(&path)?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_hold_until_dropped_and_the_refusal_names_the_flag() {
        let budget = MemoryBudget::new(Some(100));
        let a = budget.reserve(60, "model 'a' version 1").unwrap();
        let err = budget.reserve(50, "model 'b' version 1").unwrap_err();
        assert!(
            err.contains("needs 50 bytes") && err.contains("60 of the 100"),
            "{err}"
        );
        assert!(err.contains("--model-memory-limit"), "{err}");
        drop(a);
        assert_eq!(budget.reserved(), 0);
        let _b = budget.reserve(100, "model 'b' version 1").unwrap();
        let unlimited = MemoryBudget::new(None);
        let _big = unlimited.reserve(u64::MAX / 2, "x").unwrap();
        assert_eq!(unlimited.reserved(), u64::MAX / 2);
    }

    #[test]
    fn folder_bytes_counts_every_file_below() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.onnx"), [0u8; 10]).unwrap();
        std::fs::create_dir(dir.path().join("weights")).unwrap();
        std::fs::write(dir.path().join("weights/w.bin"), [0u8; 32]).unwrap();
        assert_eq!(folder_bytes(dir.path()).unwrap(), 42);
        assert!(folder_bytes(&dir.path().join("missing")).is_err());
    }
}

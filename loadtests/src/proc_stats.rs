//! What a process holds, read from `/proc/<pid>`: resident memory, open file descriptors and threads. The
//! drills compare them before and after a fault, and the soak fits a trend to them; a leak shows in one of
//! the three long before it shows in latency.

use std::path::PathBuf;

use serde::Serialize;

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcStats {
    /// Resident set size (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub fds: u64,
    /// `Threads` of `/proc/<pid>/status`.
    pub threads: u64,
}

impl ProcStats {
    /// Reads process `pid`; `None` when it is gone or `/proc` is not there (not Linux).
    pub fn read(pid: u32) -> Option<Self> {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        };
        let fds = std::fs::read_dir(dir.join("fd")).ok()?.count() as u64;
        Some(Self {
            rss_kib: field("VmRSS:")?,
            fds,
            threads: field("Threads:")?,
        })
    }

    /// Resident memory in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_threads_and_descriptors() {
        let s = ProcStats::read(std::process::id()).expect("this test runs on Linux");
        assert!(s.rss_kib > 0 && s.threads >= 1 && s.fds >= 3, "{s:?}");
        let before = s.fds;
        let files: Vec<_> = (0..8)
            .map(|_| tempfile::tempfile().expect("a temp file"))
            .collect();
        let after = ProcStats::read(std::process::id()).expect("still here");
        assert!(after.fds >= before + 8, "{before} → {}", after.fds);
        drop(files);
        assert_eq!(ProcStats::read(u32::MAX), None);
    }
}

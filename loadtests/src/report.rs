//! A run's figures as a table on stdout, and as JSON and CSV files for other tools.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::record::Summary;

/// A run's figures: all callers together and each caller.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What ran (the phase or the command).
    pub name: String,
    /// Where the load went and how.
    pub target: String,
    /// All callers together.
    pub total: Summary,
    /// Per caller.
    pub callers: BTreeMap<String, Summary>,
}

fn versions(s: &Summary) -> String {
    let total: u64 = s.versions.values().sum();
    if total == 0 {
        return "-".into();
    }
    s.versions
        .iter()
        .map(|(v, n)| format!("v{v} {:.1}%", 100.0 * *n as f64 / total as f64))
        .collect::<Vec<_>>()
        .join(" ")
}

fn errors(s: &Summary) -> String {
    if s.errors.is_empty() {
        return "0".into();
    }
    s.errors
        .iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Report {
    /// The table printed after a run. Callers are listed when there are few enough to read.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{} → {}", self.name, self.target);
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<22} versions",
            "caller", "requests", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "errors"
        );
        let mut row = |name: &str, s: &Summary| {
            let l = &s.latency_ms;
            let _ = writeln!(
                out,
                "{:<16} {:>8} {:>9.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}  {:<22} {}",
                name,
                s.requests,
                s.throughput_rps,
                l.p50,
                l.p90,
                l.p99,
                l.p999,
                l.max,
                errors(s),
                versions(s)
            );
        };
        if self.callers.len() <= 12 {
            for (name, s) in &self.callers {
                row(name, s);
            }
        }
        row("all", &self.total);
        out
    }

    /// Writes `<stem>.json` (everything) and `<stem>.csv` (the timeline of all callers) into `dir`.
    pub fn write(&self, dir: &Path, stem: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(format!("{stem}.json")), json)?;
        std::fs::write(dir.join(format!("{stem}.csv")), self.csv())
    }

    /// The timeline as CSV: one row per interval, one share column per model version.
    pub fn csv(&self) -> String {
        let versions: Vec<&String> = self.total.versions.keys().collect();
        let mut out = String::from("t_s,requests_per_s,ok,errors,p50_ms,p90_ms,p99_ms");
        for v in &versions {
            let _ = write!(out, ",share_v{v}");
        }
        out.push('\n');
        for p in &self.total.timeline {
            let answered: u64 = p.versions.values().sum();
            let _ = write!(
                out,
                "{:.3},{:.1},{},{},{:.3},{:.3},{:.3}",
                p.t_s, p.throughput_rps, p.ok, p.errors, p.p50_ms, p.p90_ms, p.p99_ms
            );
            for v in &versions {
                let n = p.versions.get(*v).copied().unwrap_or(0);
                let share = if answered == 0 {
                    0.0
                } else {
                    n as f64 / answered as f64
                };
                let _ = write!(out, ",{share:.4}");
            }
            out.push('\n');
        }
        out
    }
}

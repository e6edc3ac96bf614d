//! The host's CPU use and memory under Triton's names (`nv_cpu_utilization`, `nv_cpu_memory_total_bytes`,
//! `nv_cpu_memory_used_bytes`), read from `/proc/stat` and `/proc/meminfo`.

use std::fmt::Write;
use std::sync::Mutex;

use crate::process::{kib_field, read};

/// Busy and total jiffies of all CPUs at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

/// Host CPU utilisation between two scrapes: the fraction of CPU time (all cores) that was not idle since
/// the previous call (since boot on the first).
#[derive(Debug, Default)]
pub struct HostCpu {
    last: Mutex<Option<CpuTimes>>,
}

impl HostCpu {
    /// A sampler with no previous sample.
    pub fn new() -> Self {
        HostCpu::default()
    }

    /// Appends the three `nv_cpu_*` gauges; a family whose source cannot be read is left out.
    pub fn render(&self, out: &mut String) {
        if let Some(now) = read("/proc/stat").as_deref().and_then(cpu_times) {
            let before = self
                .last
                .lock()
                .map(|mut l| l.replace(now))
                .unwrap_or(None)
                .unwrap_or(CpuTimes { busy: 0, total: 0 });
            let _ = writeln!(
                out,
                "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n\
                 # TYPE nv_cpu_utilization gauge\nnv_cpu_utilization {}",
                utilization(before, now)
            );
        }
        let meminfo = read("/proc/meminfo");
        let total = meminfo.as_deref().and_then(|m| kib_field(m, "MemTotal:"));
        let available = meminfo.as_deref().and_then(|m| kib_field(m, "MemAvailable:"));
        if let (Some(total), Some(available)) = (total, available) {
            let _ = writeln!(
                out,
                "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes\n\
                 # TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes {}\n\
                 # HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes\n\
                 # TYPE nv_cpu_memory_used_bytes gauge\nnv_cpu_memory_used_bytes {}",
                total * 1024,
                total.saturating_sub(available) * 1024
            );
        }
    }
}

/// The `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq steal (guest time is already
/// inside user and nice). Idle and iowait are not busy.
fn cpu_times(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = f.iter().sum();
    let idle = f.get(3)? + f.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        busy: total - idle,
        total,
    })
}

fn utilization(before: CpuTimes, now: CpuTimes) -> f64 {
    let total = now.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    (now.busy.saturating_sub(before.busy) as f64 / total as f64).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilization_is_busy_time_over_all_time_between_samples() {
        let a = cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4").unwrap();
        assert_eq!(
            a,
            CpuTimes {
                busy: 200,
                total: 1000
            }
        );
        let b = cpu_times("cpu  400 0 100 1000 100 0 0 0 0 0\n").unwrap();
        assert_eq!(utilization(a, b), 0.5);
        assert_eq!(utilization(b, b), 0.0);
        assert_eq!(cpu_times("intr 1 2 3"), None);
    }

    #[test]
    fn host_memory_is_reported_in_bytes_with_used_below_total() {
        let mut out = String::new();
        HostCpu::new().render(&mut out);
        let value = |name: &str| -> f64 {
            let line = out.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap();
            line[name.len() + 1..].parse().unwrap()
        };
        let total = value("nv_cpu_memory_total_bytes");
        let used = value("nv_cpu_memory_used_bytes");
        assert!(
            total > 64e6 && used > 0.0 && used < total,
            "total {total}, used {used}"
        );
        assert!((0.0..=1.0).contains(&value("nv_cpu_utilization")));
    }
}

//! The standard `process_*` families (the names every Prometheus client library exports), read from
//! `/proc/self` at scrape time. On a system without `/proc` the families are left out rather than faked.

use std::fmt::Write;

/// Clock ticks per second of `/proc/*/stat` times: the kernel's `USER_HZ`, which is 100 on every
/// architecture Linux runs these binaries on (x86, arm, riscv); only alpha and ia64 differ.
const USER_HZ: f64 = 100.0;

/// Appends `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
/// `process_open_fds`, `process_max_fds`, `process_threads` and `process_start_time_seconds`.
pub fn render_process_metrics(out: &mut String) {
    if let Some(stat) = read("/proc/self/stat").as_deref().and_then(SelfStat::parse) {
        family(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, seconds.",
        );
        let _ = writeln!(
            out,
            "process_cpu_seconds_total {}",
            (stat.utime + stat.stime) as f64 / USER_HZ
        );
        family(out, "process_threads", "gauge", "Threads in the process.");
        let _ = writeln!(out, "process_threads {}", stat.threads);
        family(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size, bytes.",
        );
        let _ = writeln!(out, "process_virtual_memory_bytes {}", stat.vsize);
        if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
            family(
                out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch, seconds.",
            );
            let _ = writeln!(
                out,
                "process_start_time_seconds {}",
                boot + stat.starttime as f64 / USER_HZ
            );
        }
    }
    if let Some(rss) = read("/proc/self/status")
        .as_deref()
        .and_then(|s| kib_field(s, "VmRSS:"))
    {
        family(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, bytes.",
        );
        let _ = writeln!(out, "process_resident_memory_bytes {}", rss * 1024);
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        family(out, "process_open_fds", "gauge", "Open file descriptors.");
        let _ = writeln!(out, "process_open_fds {}", dir.count());
    }
    if let Some(max) = read("/proc/self/limits").as_deref().and_then(max_open_files) {
        family(
            out,
            "process_max_fds",
            "gauge",
            "Most file descriptors the process may open.",
        );
        let _ = writeln!(out, "process_max_fds {max}");
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The fields of `/proc/self/stat` used here.
#[derive(Debug, PartialEq)]
struct SelfStat {
    utime: u64,
    stime: u64,
    threads: u64,
    starttime: u64,
    vsize: u64,
}

impl SelfStat {
    /// Parses `/proc/self/stat`. The command name (field 2) is in parentheses and may hold spaces and
    /// parentheses itself, so fields are counted from the last `)`.
    fn parse(text: &str) -> Option<SelfStat> {
        let rest = &text[text.rfind(')')? + 1..];
        // `rest` starts at field 3 (state); field n is at index n - 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        Some(SelfStat {
            utime: num(14)?,
            stime: num(15)?,
            threads: num(20)?,
            starttime: num(22)?,
            vsize: num(23)?,
        })
    }
}

/// `btime` of `/proc/stat`: boot time, seconds since the Unix epoch.
fn boot_time(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `Name:   1234 kB` field of `/proc/self/status` or `/proc/meminfo`, in KiB.
pub(crate) fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = "4242 (infer (gate) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 130 0 0 20 0 7 0 \
                    5000 123456789 2000 18446744073709551615";
        assert_eq!(
            SelfStat::parse(line),
            Some(SelfStat {
                utime: 250,
                stime: 130,
                threads: 7,
                starttime: 5000,
                vsize: 123456789
            })
        );
        assert_eq!(SelfStat::parse("garbage"), None);
    }

    #[test]
    fn this_process_reports_every_family_with_plausible_values() {
        let mut out = String::new();
        render_process_metrics(&mut out);
        let value = |name: &str| -> f64 {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing in:\n{out}"));
            line[name.len() + 1..].parse().unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start {start}, now {now}"
        );
    }
}

//! The soak: the pod (gateway in front of two backends) under mixed traffic for a long time — REST over
//! HTTP/1.1 and h2c, gRPC, two models, a canary split whose weights are edited every minute — with the
//! processes' resident memory, open file descriptors and threads sampled as it runs and latency percentiles
//! taken per minute. It fails when a resource grows: the least-squares slope of its samples after the first
//! minute exceeds a limit per minute (see [`crate::trend`] and `docs/reliability.md`), or when requests fail.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::time::Instant;

use crate::client::{Client, Protocol};
use crate::load::{self, CallerSpec, LoadPlan, Pace, spread};
use crate::payload::{Payload, PayloadKind};
use crate::plot;
use crate::pod::{Pod, PodControl, PodSpec};
use crate::proc_stats::ProcStats;
use crate::record::Recorder;
use crate::trend::{self, Trend};

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Where `infergate-gateway` and `infergate-backend` are.
    pub bin_dir: PathBuf,
    /// The model repository (needs `simple` and `heavy_mlp`: `deploy/local/models`).
    pub models: PathBuf,
    /// The folder with `routes.yaml` and `routes-b.yaml`, the two canary splits edited in turn.
    pub routes_dir: PathBuf,
    /// Where the table, JSON and plots go.
    pub out_dir: PathBuf,
    /// How long.
    pub duration: Duration,
    /// How often resources are read.
    pub sample_every: Duration,
    /// How often the routes are edited.
    pub edit_every: Duration,
    /// Left out of the trend fit: pools, caches and allocator arenas fill during it.
    pub warmup: Duration,
    /// Growth limits per minute.
    pub limits: Limits,
    /// Largest failed share of requests.
    pub max_error_share: f64,
}

/// Largest growth per minute of each resource, per process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    /// Resident memory, MiB per minute.
    pub rss_mib: f64,
    /// Open file descriptors per minute.
    pub fds: f64,
    /// Threads per minute.
    pub threads: f64,
}

/// One reading of every process.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Minutes since the start.
    pub t_min: f64,
    /// Per process (`gateway`, `backend-0`, `backend-1`).
    pub processes: BTreeMap<String, ProcStats>,
}

/// One row of the per-minute table.
#[derive(Debug, Clone, Serialize)]
pub struct Minute {
    /// Minute number, from 1.
    pub minute: usize,
    /// Requests completed in it.
    pub requests: u64,
    /// Of which failed.
    pub errors: u64,
    /// Latency of its answers, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The last resource reading in the minute.
    pub processes: BTreeMap<String, ProcStats>,
}

/// What a soak found.
#[derive(Debug, Clone, Serialize)]
pub struct SoakResult {
    /// The per-minute table.
    pub minutes: Vec<Minute>,
    /// Every resource reading.
    pub samples: Vec<Sample>,
    /// Every resource's trend.
    pub trends: Vec<Trend>,
    /// Requests over the whole run.
    pub requests: u64,
    /// Failed requests by kind.
    pub errors: BTreeMap<String, u64>,
    /// The limit on the failed share.
    pub max_error_share: f64,
    /// Routes edits made.
    pub edits: u64,
}

impl SoakResult {
    /// No growth and few enough failures.
    pub fn passed(&self) -> bool {
        let failed: u64 = self.errors.values().sum();
        self.trends.iter().all(|t| t.pass)
            && self.requests > 0
            && failed as f64 <= self.max_error_share * self.requests as f64
    }

    /// The per-minute table, then the trends.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let names: Vec<&String> = self
            .minutes
            .first()
            .map(|m| m.processes.keys().collect())
            .unwrap_or_default();
        let _ = write!(
            out,
            "{:>6} {:>8} {:>6} {:>8} {:>8} {:>8}",
            "minute", "requests", "errors", "p50 ms", "p90 ms", "p99 ms"
        );
        for n in &names {
            let _ = write!(out, "  {:>27}", format!("{n} RSS MiB/fds/thr"));
        }
        out.push('\n');
        for m in &self.minutes {
            let _ = write!(
                out,
                "{:>6} {:>8} {:>6} {:>8.2} {:>8.2} {:>8.2}",
                m.minute, m.requests, m.errors, m.p50_ms, m.p90_ms, m.p99_ms
            );
            for n in &names {
                let cell = m.processes.get(*n).map_or("-".to_owned(), |s| {
                    format!("{:.1}/{}/{}", s.rss_mib(), s.fds, s.threads)
                });
                let _ = write!(out, "  {cell:>27}");
            }
            out.push('\n');
        }
        for t in &self.trends {
            let _ = writeln!(
                out,
                "  {}  {:<22} slope {} per minute over {} samples (limit {})",
                if t.pass { "ok  " } else { "FAIL" },
                t.what,
                t.per_minute.map_or("n/a".into(), |s| format!("{s:+.3}")),
                t.samples,
                t.limit_per_minute
            );
        }
        out
    }
}

/// One kind of traffic of the mix.
struct Stream {
    protocol: Protocol,
    model: &'static str,
    callers: Vec<CallerSpec>,
}

/// The mix: REST over HTTP/1.1 and gRPC on the canary-split model, REST over h2c on the heavier one.
fn streams() -> Vec<Stream> {
    // Each caller at its own point of its gap: independent callers, not in step.
    let open = |name: &str, rate: f64, index: usize| CallerSpec {
        name: name.to_owned(),
        pace: Pace::Open {
            rate,
            phase: spread(index),
        },
        models: Vec::new(),
    };
    vec![
        Stream {
            protocol: Protocol::Http1,
            model: "simple",
            callers: vec![open("rest-0", 40.0, 0), open("rest-1", 40.0, 1)],
        },
        Stream {
            protocol: Protocol::Grpc,
            model: "simple",
            callers: vec![open("grpc", 40.0, 2)],
        },
        Stream {
            protocol: Protocol::H2c,
            model: "heavy_mlp",
            callers: vec![open("h2c-heavy", 10.0, 3)],
        },
    ]
}

/// Runs the soak.
pub async fn run(opts: &SoakOptions) -> anyhow::Result<SoakResult> {
    let routes = opts.routes_dir.join("routes.yaml");
    let routes_b = opts.routes_dir.join("routes-b.yaml");
    for f in [&routes, &routes_b] {
        anyhow::ensure!(
            f.is_file(),
            "{}: missing (the soak's routes templates; --routes-dir)",
            f.display()
        );
    }
    let spec = PodSpec {
        models: Some(opts.models.clone()),
        backend_args: vec![
            "--model-control-mode=explicit".into(),
            "--load-model=simple".into(),
            "--load-model=heavy_mlp".into(),
        ],
        backends: 2,
        routes: Some(routes.clone()),
        gateway_workers: None,
        gateway_args: Vec::new(),
        proxies: Vec::new(),
    };
    let pod = Pod::start(&spec, &opts.bin_dir, &opts.out_dir)
        .await
        .context("soak: starting the pod")?;
    let result = drive(&pod, opts, &routes, &routes_b).await;
    pod.stop().await;
    result
}

async fn drive(pod: &Pod, opts: &SoakOptions, routes: &Path, routes_b: &Path) -> anyhow::Result<SoakResult> {
    let minute = Duration::from_secs(60);
    let start = Instant::now() + Duration::from_millis(50);
    let mut loads = Vec::new();
    for s in streams() {
        let client = Client::new(pod.gateway(), s.protocol, Duration::from_secs(10));
        let meta = client.metadata(s.model).await?;
        let payload = Payload::from_metadata(&meta, 1, PayloadKind::Json)?;
        let plan = LoadPlan {
            callers: s.callers,
            warmup: Duration::ZERO,
            duration: Some(opts.duration),
            requests: None,
            interval: minute,
            max_in_flight: 4096,
        };
        loads.push(tokio::spawn(async move {
            load::run(client, payload, &plan, start, false).await
        }));
    }
    let edits = {
        let writer = pod.routes_writer();
        let (a, b) = (routes.to_owned(), routes_b.to_owned());
        let (every, end) = (opts.edit_every, start + opts.duration);
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut next = start + every;
            while next < end {
                tokio::time::sleep_until(next).await;
                let file = if n.is_multiple_of(2) { &b } else { &a };
                if let Err(e) = writer.write(file) {
                    tracing::warn!(error = %e, "soak: routes edit failed");
                }
                n += 1;
                next += every;
            }
            n
        })
    };
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (control, samples, every, end) = (
            pod.control(),
            samples.clone(),
            opts.sample_every,
            start + opts.duration,
        );
        tokio::spawn(async move { sample_until(control, samples, start, every, end).await })
    };
    let mut total = Recorder::new(minute);
    for l in loads {
        let r = l.await.context("a load task failed")?;
        for rec in r.callers.values() {
            total.merge(rec);
        }
    }
    let edits = edits.await.unwrap_or(0);
    let _ = sampler.await;
    let samples: Vec<Sample> = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let summary = total.summary(opts.duration);
    let minutes: Vec<Minute> = summary
        .timeline
        .iter()
        .enumerate()
        .map(|(i, p)| Minute {
            minute: i + 1,
            requests: p.ok + p.errors,
            errors: p.errors,
            p50_ms: p.p50_ms,
            p90_ms: p.p90_ms,
            p99_ms: p.p99_ms,
            processes: samples
                .iter()
                .rev()
                .find(|s| s.t_min <= (i + 1) as f64 + 1e-6)
                .map(|s| s.processes.clone())
                .unwrap_or_default(),
        })
        .collect();
    let warmup_min = opts.warmup.as_secs_f64() / 60.0;
    let names: Vec<String> = samples
        .first()
        .map(|s| s.processes.keys().cloned().collect())
        .unwrap_or_default();
    let mut trends = Vec::new();
    for n in &names {
        let series = |f: &dyn Fn(&ProcStats) -> f64| -> Vec<(f64, f64)> {
            samples
                .iter()
                .filter_map(|s| s.processes.get(n).map(|p| (s.t_min, f(p))))
                .collect()
        };
        trends.push(trend::judge(
            &format!("{n} RSS MiB"),
            &series(&|p| p.rss_mib()),
            warmup_min,
            opts.limits.rss_mib,
        ));
        trends.push(trend::judge(
            &format!("{n} fds"),
            &series(&|p| p.fds as f64),
            warmup_min,
            opts.limits.fds,
        ));
        trends.push(trend::judge(
            &format!("{n} threads"),
            &series(&|p| p.threads as f64),
            warmup_min,
            opts.limits.threads,
        ));
    }
    let result = SoakResult {
        minutes,
        samples,
        trends,
        requests: summary.requests,
        errors: summary.errors,
        max_error_share: opts.max_error_share,
        edits,
    };
    write(&result, &opts.out_dir)?;
    Ok(result)
}

/// Reads every process's resources every `every` until `end`, printing a line at each whole minute.
async fn sample_until(
    control: PodControl,
    samples: Arc<Mutex<Vec<Sample>>>,
    start: Instant,
    every: Duration,
    end: Instant,
) {
    let mut next = start;
    let mut printed_minute = 0u64;
    while next <= end {
        tokio::time::sleep_until(next).await;
        let t_min = next.saturating_duration_since(start).as_secs_f64() / 60.0;
        let processes: BTreeMap<String, ProcStats> = control
            .pids()
            .await
            .into_iter()
            .filter_map(|(p, pid)| Some((p.to_string().replace(' ', "-"), ProcStats::read(pid)?)))
            .collect();
        if t_min.floor() as u64 >= printed_minute {
            let cells: Vec<String> = processes
                .iter()
                .map(|(n, s)| format!("{n} {:.1} MiB {} fds {} threads", s.rss_mib(), s.fds, s.threads))
                .collect();
            println!("  minute {t_min:>5.1}: {}", cells.join(" | "));
            printed_minute = t_min.floor() as u64 + 1;
        }
        if let Ok(mut s) = samples.lock() {
            s.push(Sample { t_min, processes });
        }
        next += every;
    }
}

fn write(result: &SoakResult, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("soak.json");
    std::fs::write(&json, serde_json::to_vec_pretty(result)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let table = dir.join("soak.txt");
    std::fs::write(&table, result.table()).with_context(|| format!("writing {}", table.display()))?;
    let t_max = result.samples.last().map_or(1.0, |s| s.t_min).max(1e-3);
    let names: Vec<String> = result
        .samples
        .first()
        .map(|s| s.processes.keys().cloned().collect())
        .unwrap_or_default();
    let per_process = |f: &dyn Fn(&ProcStats) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        names
            .iter()
            .map(|n| {
                let pts = result
                    .samples
                    .iter()
                    .filter_map(|s| s.processes.get(n).map(|p| (s.t_min, f(p))))
                    .collect();
                (n.clone(), pts)
            })
            .collect()
    };
    let draw =
        |file: &str, title: &str, unit: &str, series: Vec<(String, Vec<(f64, f64)>)>| -> anyhow::Result<()> {
            let series: Vec<(&str, Vec<(f64, f64)>)> =
                series.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
            plot::lines(&dir.join(file), title, unit, t_max, &series, &[], "minutes")?;
            Ok(())
        };
    draw(
        "soak-rss.svg",
        "soak: resident memory",
        "MiB",
        per_process(&|p| p.rss_mib()),
    )?;
    draw(
        "soak-fds.svg",
        "soak: open file descriptors",
        "fds",
        per_process(&|p| p.fds as f64),
    )?;
    draw(
        "soak-threads.svg",
        "soak: threads",
        "threads",
        per_process(&|p| p.threads as f64),
    )?;
    let at = |f: &dyn Fn(&Minute) -> f64| -> Vec<(f64, f64)> {
        result.minutes.iter().map(|m| (m.minute as f64, f(m))).collect()
    };
    draw(
        "soak-latency.svg",
        "soak: latency per minute",
        "ms",
        vec![
            ("p50".into(), at(&|m| m.p50_ms)),
            ("p90".into(), at(&|m| m.p90_ms)),
            ("p99".into(), at(&|m| m.p99_ms)),
        ],
    )?;
    Ok(())
}

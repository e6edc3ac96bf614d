//! Scenarios as data: `loadtests/cases/<name>/case.yaml` names the pod to start (model repository, routes
//! template), the phases of load to run against it (callers, protocol, bounds, routes edits during the load)
//! and the invariants each phase must keep. [`run`] starts the pod, runs the phases in order, checks the
//! invariants, and writes each phase's table, JSON, CSV and plots. In smoke mode the phases use their
//! `smoke` bounds (seconds each): invariants only, never timings.

pub mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::time::Instant;

pub use spec::{ActionSpec, At, CallerGroup, Case, Compare, Invariant, Phase, Side, SmokeBounds};

use crate::client::{Client, Protocol};
use crate::load::{self, LoadPlan, RunResult};
use crate::payload::Payload;
use crate::plot;
use crate::pod::{Pod, PodSpec};
use crate::record::{Recorder, Summary};
use crate::report::Report;

/// How a case runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where `infergate-gateway` and `infergate-backend` are.
    pub bin_dir: PathBuf,
    /// Where logs, tables, JSON, CSV and plots go.
    pub out_dir: PathBuf,
    /// Smoke bounds instead of full ones; no plots.
    pub smoke: bool,
    /// Progress bars (on a terminal).
    pub progress: bool,
}

/// One invariant's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The phase.
    pub phase: String,
    /// What was checked, in words.
    pub check: String,
    /// What was measured.
    pub measured: String,
    /// Whether it held.
    pub pass: bool,
}

/// A case's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The case's folder name.
    pub name: String,
    /// Every invariant's verdict.
    pub verdicts: Vec<Verdict>,
    /// Figures derived across phases and from actions (rollback time, overhead).
    pub figures: BTreeMap<String, String>,
    /// Each phase's report.
    pub phases: Vec<Report>,
}

impl CaseResult {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.pass)
    }
}

/// Reads `dir/case.yaml`.
pub fn load(dir: &Path) -> anyhow::Result<Case> {
    let file = dir.join("case.yaml");
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "{}: cannot read the case (is {} a case folder?)",
            file.display(),
            dir.display()
        )
    })?;
    let case: Case = serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    case.validate(dir)
        .map_err(|problems| anyhow::anyhow!("{}:\n  {}", file.display(), problems.join("\n  ")))?;
    Ok(case)
}

/// Runs the case in `dir`.
pub async fn run(dir: &Path, opts: &RunOptions) -> anyhow::Result<CaseResult> {
    let case = load(dir)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "case".into());
    let out = opts.out_dir.join(&name);
    let spec = PodSpec {
        models: case.pod.models.as_ref().map(|m| dir.join(m)),
        backend_args: case.pod.backend_args.clone(),
        routes: case.pod.routes.as_ref().map(|r| dir.join(r)),
        gateway_workers: case.pod.gateway_workers,
    };
    let pod = Pod::start(&spec, &opts.bin_dir, &out)
        .await
        .with_context(|| format!("case {name}: starting the pod"))?;
    let result = run_phases(&case, dir, &name, &pod, &out, opts).await;
    pod.stop().await;
    let result = result?;
    std::fs::write(
        out.join("case.json"),
        serde_json::to_vec_pretty(&result).context("encoding case.json")?,
    )
    .with_context(|| format!("writing {}", out.join("case.json").display()))?;
    Ok(result)
}

async fn run_phases(
    case: &Case,
    dir: &Path,
    name: &str,
    pod: &Pod,
    out: &Path,
    opts: &RunOptions,
) -> anyhow::Result<CaseResult> {
    let mut verdicts = Vec::new();
    let mut figures = BTreeMap::new();
    let mut reports = Vec::new();
    let mut runs: BTreeMap<String, (RunResult, Duration)> = BTreeMap::new();
    for phase in &case.phases {
        let bounds = phase.bounds(opts.smoke);
        let target = match (phase.target, phase.protocol) {
            (Side::Gateway, _) => pod.gateway(),
            (Side::Backend, Protocol::Grpc) => pod.backend_grpc(),
            (Side::Backend, _) => pod.backend_http(),
        };
        let client = Client::new(target, phase.protocol, phase.timeout.0);
        let payload = match &phase.replay {
            Some(folder) => Payload::replay(&phase.model, &dir.join(folder))?,
            None => {
                let meta = client.metadata(&phase.model).await?;
                Payload::from_metadata(&meta, phase.batch, phase.payload)?
            }
        };
        if let Some(routes) = &phase.routes {
            pod.write_routes(&dir.join(routes))?;
            // The gateway debounces file events for at most 1 s before it swaps the rules in.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let plan = LoadPlan {
            callers: phase.callers.iter().flat_map(CallerGroup::expand).collect(),
            warmup: bounds.warmup,
            duration: bounds.duration,
            requests: bounds.requests,
            interval: phase.interval.0,
            max_in_flight: 4096,
        };
        let start = Instant::now() + Duration::from_millis(20);
        let measure_start = start + plan.warmup;
        let actions = schedule(&phase.actions, measure_start, bounds.duration);
        let action_times: BTreeMap<String, Duration> = actions
            .iter()
            .filter_map(|(at, a)| {
                a.name
                    .clone()
                    .map(|n| (n, at.saturating_duration_since(measure_start)))
            })
            .collect();
        let action_task = {
            let actions: Vec<(Instant, PathBuf)> =
                actions.iter().map(|(at, a)| (*at, dir.join(a.routes))).collect();
            let files: Vec<PathBuf> = actions.iter().map(|(_, p)| p.clone()).collect();
            for f in &files {
                if !f.is_file() {
                    bail!(
                        "case {name} phase {}: routes file {} does not exist",
                        phase.name,
                        f.display()
                    );
                }
            }
            let routes_out = pod.routes_writer();
            tokio::spawn(async move {
                for (at, file) in actions {
                    tokio::time::sleep_until(at).await;
                    if let Err(e) = routes_out.write(&file) {
                        tracing::warn!(error = %e, "routes edit failed");
                    }
                }
            })
        };
        let result = load::run(client, payload, &plan, start, opts.progress).await;
        action_task.abort();
        let total = result.total(phase.interval.0);
        let report = Report {
            name: format!("{name}/{}", phase.name),
            target: format!("{:?} {} via {:?}", phase.protocol, target.addr, phase.target),
            total: total.summary(result.elapsed),
            callers: result
                .callers
                .iter()
                .map(|(k, r)| (k.clone(), r.summary(result.elapsed)))
                .collect(),
        };
        println!("{}", report.table());
        report.write(out, &phase.name)?;
        if !opts.smoke {
            let weights = phase.weights.clone().unwrap_or_default();
            match plot::draw(out, &phase.name, &report.name, &report.total, &weights) {
                Ok(files) => {
                    for f in files {
                        println!("  plot: {f}");
                    }
                }
                Err(e) => eprintln!("  {e}"),
            }
        }
        for inv in &phase.invariants {
            verdicts.push(check(
                inv,
                &phase.name,
                &result,
                phase.interval.0,
                &action_times,
                &mut figures,
            ));
        }
        for (action, at) in &action_times {
            figures.insert(
                format!("{}: '{action}' edit at", phase.name),
                format!("{:.2} s", at.as_secs_f64()),
            );
        }
        reports.push(report);
        runs.insert(phase.name.clone(), (result, phase.interval.0));
    }
    for cmp in &case.compare {
        let pick = |phase: &str| -> anyhow::Result<Summary> {
            let (r, interval) = runs
                .get(phase)
                .with_context(|| format!("compare '{}': no phase '{phase}'", cmp.name))?;
            Ok(select(r, cmp.callers.as_deref(), *interval).summary(r.elapsed))
        };
        let (base, other) = (pick(&cmp.base)?, pick(&cmp.other)?);
        let (b, o) = (base.latency_ms, other.latency_ms);
        figures.insert(
            cmp.name.clone(),
            format!(
                "p50 {:.3} → {:.3} ms (+{:.3}), p99 {:.3} → {:.3} ms (+{:.3}), throughput {:.0} → {:.0} req/s ({:.2}×)",
                b.p50,
                o.p50,
                o.p50 - b.p50,
                b.p99,
                o.p99,
                o.p99 - b.p99,
                base.throughput_rps,
                other.throughput_rps,
                other.throughput_rps / base.throughput_rps.max(1e-9)
            ),
        );
    }
    Ok(CaseResult {
        name: name.to_owned(),
        verdicts,
        figures,
        phases: reports,
    })
}

/// Each action's times: once at `at`, or every `every` until the end of the measured time.
fn schedule<'a>(
    actions: &'a [ActionSpec],
    measure_start: Instant,
    duration: Option<Duration>,
) -> Vec<(Instant, ActionView<'a>)> {
    let mut out = Vec::new();
    let span = duration.unwrap_or(Duration::from_secs(10));
    for a in actions {
        match (&a.at, a.every) {
            (Some(at), _) => out.push((
                measure_start + at.within(span),
                ActionView {
                    name: a.name.clone(),
                    routes: &a.routes[0],
                },
            )),
            (None, Some(every)) => {
                let mut t = every.0;
                let mut i = 0usize;
                while t < span {
                    out.push((
                        measure_start + t,
                        ActionView {
                            name: None,
                            routes: &a.routes[i % a.routes.len()],
                        },
                    ));
                    t += every.0;
                    i += 1;
                }
            }
            (None, None) => {}
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

struct ActionView<'a> {
    name: Option<String>,
    routes: &'a Path,
}

fn select(r: &RunResult, callers: Option<&str>, interval: Duration) -> Recorder {
    let mut all = Recorder::new(interval);
    for (name, rec) in &r.callers {
        if callers.is_none_or(|p| name.starts_with(p)) {
            all.merge(rec);
        }
    }
    all
}

fn check(
    inv: &Invariant,
    phase: &str,
    r: &RunResult,
    interval: Duration,
    actions: &BTreeMap<String, Duration>,
    figures: &mut BTreeMap<String, String>,
) -> Verdict {
    let who = |c: &Option<String>| {
        c.as_ref()
            .map_or("all callers".to_owned(), |p| format!("callers '{p}*'"))
    };
    let verdict = |check: String, measured: String, pass: bool| Verdict {
        phase: phase.to_owned(),
        check,
        measured,
        pass,
    };
    match inv {
        Invariant::Answered { callers, min } => {
            let s = select(r, callers.as_deref(), interval).summary(r.elapsed);
            verdict(
                format!("{} get at least {min} answers", who(callers)),
                format!("{} answered", s.ok),
                s.ok >= *min,
            )
        }
        Invariant::ErrorShare { callers, max } => {
            let s = select(r, callers.as_deref(), interval).summary(r.elapsed);
            verdict(
                format!("{}: failed share ≤ {max}", who(callers)),
                format!("{:.4} of {} ({:?})", s.error_share, s.requests, s.errors),
                s.requests > 0 && s.error_share <= *max,
            )
        }
        Invariant::ErrorKindShare {
            callers,
            error,
            min,
            max,
        } => {
            let s = select(r, callers.as_deref(), interval).summary(r.elapsed);
            let share = s.error_kind_share(error);
            verdict(
                format!(
                    "{}: share of {error} within [{}, {}]",
                    who(callers),
                    min.unwrap_or(0.0),
                    max.unwrap_or(1.0)
                ),
                format!("{share:.4} of {}", s.requests),
                s.requests > 0 && min.is_none_or(|m| share >= m) && max.is_none_or(|m| share <= m),
            )
        }
        Invariant::VersionShare {
            callers,
            version,
            expect,
            tolerance,
            before_action,
        } => {
            let rec = select(r, callers.as_deref(), interval);
            let s = rec.summary(r.elapsed);
            let cutoff = before_action.as_ref().and_then(|a| actions.get(a)).copied();
            let (n, total) = s
                .timeline
                .iter()
                .filter(|p| cutoff.is_none_or(|c| p.t_s <= c.as_secs_f64()))
                .fold((0u64, 0u64), |(n, t), p| {
                    (
                        n + p.versions.get(version).copied().unwrap_or(0),
                        t + p.versions.values().sum::<u64>(),
                    )
                });
            let share = if total == 0 { 0.0 } else { n as f64 / total as f64 };
            figures.insert(
                format!("{phase}: share of version {version}"),
                format!("{share:.4} of {total} answers"),
            );
            verdict(
                format!(
                    "share of answers from version {version}{} is {expect} ± {tolerance}",
                    before_action
                        .as_ref()
                        .map_or(String::new(), |a| format!(" before '{a}'"))
                ),
                format!("{share:.4} of {total}"),
                total > 0 && (share - expect).abs() <= *tolerance,
            )
        }
        Invariant::VersionGone {
            version,
            after_action,
            settle,
        } => {
            let Some(at) = actions.get(after_action) else {
                return verdict(
                    format!("version {version} gone after '{after_action}'"),
                    format!("no action named '{after_action}' ran in this phase (is its time past the end?)"),
                    false,
                );
            };
            let s = select(r, None, interval).summary(r.elapsed);
            let last = s.version_last_seen_s.get(version).copied();
            let cut = at.as_secs_f64() + settle.0.as_secs_f64();
            // Answers after the settle time: the check means something only if the load went on.
            let later: u64 = s
                .timeline
                .iter()
                .filter(|p| p.t_s - interval.as_secs_f64() >= cut)
                .map(|p| p.ok)
                .sum();
            if let Some(last) = last {
                figures.insert(
                    format!("{phase}: version {version} last answered after '{after_action}'"),
                    format!("{:.2} s", (last - at.as_secs_f64()).max(0.0)),
                );
            }
            verdict(
                format!(
                    "no answer from version {version} later than {:.1} s after '{after_action}'",
                    settle.0.as_secs_f64()
                ),
                format!(
                    "last answer from {version} at {}, edit at {:.2} s; {later} answers after the settle time",
                    last.map_or("never".into(), |l| format!("{l:.2} s")),
                    at.as_secs_f64()
                ),
                later > 0 && last.is_none_or(|l| l <= cut),
            )
        }
    }
}

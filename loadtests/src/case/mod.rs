//! Scenarios as data: `loadtests/cases/<name>/case.yaml` names the pod to start (model repository, routes
//! template), the phases of load to run against it (callers, protocol, bounds, routes edits during the load)
//! and the invariants each phase must keep. [`run`] starts the pod, runs the phases in order, checks the
//! invariants, and writes each phase's table, JSON, CSV and plots. In smoke mode the phases use their
//! `smoke` bounds (seconds each): invariants only, never timings. A case may put models of the engine's zoo
//! into its repository (`pod.zoo`) and start a peer server beside the pod (`pod.peer`) that phases load in
//! turn with the backend.

pub mod actions;
pub mod check;
pub mod spec;

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::time::Instant;

pub use spec::{
    ActionKind, ActionSpec, At, CallerGroup, Case, Compare, DeploymentFile, Invariant, PeerFile, PeerKind,
    Phase, Side, SmokeBounds,
};

use crate::agreement::{self, OutputDiff};
use crate::client::{Client, Protocol};
use crate::deployment::{Deployment, Lifecycle};
use crate::load::{self, LoadPlan, RunResult};
use crate::payload::Payload;
use crate::peer::Peer;
use crate::plot;
use crate::pod::{Pod, PodControl, PodSpec, Process, ProxySpec};
use crate::proc_stats::ProcStats;
use crate::prom;
use crate::record::Summary;
use crate::report::Report;
use crate::target::Target;
use crate::zoo;
use check::{Facts, ReplicaFacts, metric_key, parse_process, select};

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

/// A case's processes while they run: the pod (or the Deployment's pods) and the peer.
pub struct Running {
    /// The case's folder name.
    pub name: String,
    /// Where its logs and outputs go.
    pub out: PathBuf,
    pod: Arc<Pod>,
    /// Whether the pod has a gateway (`pod.routes`).
    gateway: bool,
    peer: Option<Peer>,
    deployment: Option<Arc<Deployment>>,
}

impl Running {
    /// The addresses to load, by what `target:` calls them: `backend_http`, `backend_grpc`, `gateway`,
    /// `service`, `peer_http`, `peer_grpc` (those the case has).
    pub fn addresses(&self) -> Vec<(&'static str, Target)> {
        let mut out = Vec::new();
        if let Some(d) = &self.deployment {
            out.push(("service", d.service()));
        } else {
            if !self.pod.ports.backends.is_empty() {
                out.push(("backend_http", self.pod.backend_http()));
                out.push(("backend_grpc", self.pod.backend_grpc()));
            }
            if self.gateway {
                out.push(("gateway", self.pod.gateway()));
            }
        }
        if let Some(p) = &self.peer {
            out.push(("peer_http", p.http()));
            out.push(("peer_grpc", p.grpc()));
        }
        out
    }

    /// Stops the peer, the pod and the Deployment, and waits for their processes.
    pub async fn stop(&self) {
        if let Some(p) = &self.peer {
            p.stop().await;
        }
        self.pod.stop().await;
        if let Some(d) = &self.deployment {
            d.stop().await;
        }
    }
}

/// Starts what the case in `dir` declares (its models from the zoo, the pod or the Deployment, the peer) and
/// waits until all of it is ready.
pub async fn start(dir: &Path, case: &Case, opts: &RunOptions) -> anyhow::Result<Running> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "case".into());
    let out = opts.out_dir.join(&name);
    let mut models = case.pod.models.as_ref().map(|m| dir.join(m));
    if let Some(committed) = &models
        && !case.pod.zoo.is_empty()
    {
        let with_zoo = out.join("models-with-zoo");
        zoo::repository(committed, &case.pod.zoo, &zoo::folder()?, &with_zoo)
            .with_context(|| format!("case {name}: pod.zoo"))?;
        models = Some(with_zoo);
    }
    let spec = PodSpec {
        models: models.clone(),
        backend_args: case.pod.backend_args.clone(),
        routes: case.pod.routes.as_ref().map(|r| dir.join(r)),
        gateway_workers: case.pod.gateway_workers,
        gateway_args: case.pod.gateway_args.clone(),
        backends: case.pod.backends,
        proxies: case
            .pod
            .proxies
            .iter()
            .map(|p| ProxySpec {
                name: p.name.clone(),
                slow: p.in_front_of.zip(p.delay.map(|d| d.0)),
            })
            .collect(),
    };
    let (pod, deployment) = match &case.pod.deployment {
        None => {
            let pod = Pod::start(&spec, &opts.bin_dir, &out)
                .await
                .with_context(|| format!("case {name}: starting the pod"))?;
            (Arc::new(pod), None)
        }
        Some(d) => {
            let (lifecycle, drain_delay) = lifecycle(d, opts.smoke);
            let mut template = spec;
            template
                .gateway_args
                .push(format!("--drain-delay={}ms", drain_delay.as_millis()));
            let deployment = Deployment::start(template, &opts.bin_dir, &out, lifecycle)
                .await
                .with_context(|| format!("case {name}: starting the deployment"))?;
            // The first pod stands for "the pod" where one is needed; the case's checks refuse what reads one pod.
            let first = deployment
                .current()
                .await
                .first()
                .map(|r| r.pod.clone())
                .context("the deployment started no pod")?;
            (first, Some(deployment))
        }
    };
    let mut running = Running {
        name,
        out,
        pod,
        gateway: case.pod.routes.is_some(),
        peer: None,
        deployment,
    };
    if let (Some(p), Some(repository)) = (&case.pod.peer, &models) {
        match Peer::start(p.kind, repository, &p.models, &running.out).await {
            Ok(peer) => running.peer = Some(peer),
            Err(e) => {
                running.stop().await;
                return Err(e).with_context(|| format!("case {}: starting the peer", running.name));
            }
        }
    }
    Ok(running)
}

/// Runs the case in `dir`.
pub async fn run(dir: &Path, opts: &RunOptions) -> anyhow::Result<CaseResult> {
    let case = load(dir)?;
    let running = start(dir, &case, opts).await?;
    let result = run_phases(&case, dir, &running, opts).await;
    running.stop().await;
    let result = result?;
    let file = running.out.join("case.json");
    std::fs::write(
        &file,
        serde_json::to_vec_pretty(&result).context("encoding case.json")?,
    )
    .with_context(|| format!("writing {}", file.display()))?;
    Ok(result)
}

/// A Deployment's pod lifecycle for a full or smoke run, and the gateway's drain delay.
fn lifecycle(d: &DeploymentFile, smoke: bool) -> (Lifecycle, Duration) {
    let short = d.smoke.as_ref().filter(|_| smoke);
    let drain_delay = short.and_then(|s| s.drain_delay).unwrap_or(d.drain_delay).0;
    let prestop_hold = short.and_then(|s| s.prestop_hold).unwrap_or(d.prestop_hold).0;
    let lifecycle = Lifecycle {
        replicas: d.replicas,
        endpoint_delay: d.endpoint_delay.0,
        prestop_hold,
        grace_period: d.grace_period.0,
        probe_period: Duration::from_millis(100),
        startup_limit: Duration::from_secs(120),
    };
    (lifecycle, drain_delay)
}

async fn run_phases(
    case: &Case,
    dir: &Path,
    running: &Running,
    opts: &RunOptions,
) -> anyhow::Result<CaseResult> {
    let (name, out, pod) = (running.name.as_str(), running.out.as_path(), running.pod.as_ref());
    let (peer, deployment) = (running.peer.as_ref(), running.deployment.as_ref());
    let mut verdicts = Vec::new();
    let mut figures = BTreeMap::new();
    let mut reports = Vec::new();
    let mut runs: BTreeMap<String, (RunResult, Duration)> = BTreeMap::new();
    for phase in &case.phases {
        let bounds = phase.bounds(opts.smoke);
        let target = match (phase.target, phase.protocol) {
            (Side::Service, _) => match deployment {
                Some(d) => d.service(),
                None => anyhow::bail!(
                    "phase '{}' targets the service, but the case has no pod.deployment",
                    phase.name
                ),
            },
            (Side::Gateway, _) => pod.gateway(),
            (Side::Peer, protocol) => match peer {
                Some(p) if protocol == Protocol::Grpc => p.grpc(),
                Some(p) => p.http(),
                None => anyhow::bail!(
                    "phase '{}' targets the peer, but the case has no pod.peer",
                    phase.name
                ),
            },
            (Side::Backend, Protocol::Grpc) => pod.backend_grpc(),
            (Side::Backend, _) => pod.backend_http(),
        };
        let client = Client::new(target, phase.protocol, phase.timeout.0);
        // The phase's models first (callers without a model of their own take them in turn), then each model
        // a caller group names.
        let rotation: Vec<&String> = std::iter::once(&phase.model).chain(&phase.more_models).collect();
        let mut models = rotation.clone();
        for group in &phase.callers {
            if let Some(m) = &group.model
                && !models.contains(&m)
            {
                models.push(m);
            }
        }
        let mut payloads = Vec::new();
        for model in models.iter().copied() {
            payloads.push(match &phase.replay {
                Some(folder) => Payload::replay(model, &dir.join(folder))?,
                None => {
                    let meta = client.metadata(model).await?;
                    Payload::from_metadata(&meta, phase.batch, phase.payload)?
                }
            });
        }
        if let Some(routes) = &phase.routes {
            pod.write_routes(&dir.join(routes))?;
            // The gateway debounces file events for at most 1 s before it swaps the rules in.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let plan = LoadPlan {
            callers: phase
                .callers
                .iter()
                .enumerate()
                .flat_map(|(index, group)| {
                    let own: Vec<usize> = match &group.model {
                        Some(m) => models.iter().position(|x| *x == m).into_iter().collect(),
                        None => (0..rotation.len()).collect(),
                    };
                    group.expand(index).into_iter().map(move |mut c| {
                        c.models = own.clone();
                        c
                    })
                })
                .collect(),
            warmup: bounds.warmup,
            duration: bounds.duration,
            requests: bounds.requests,
            interval: phase.interval.0,
            max_in_flight: 4096,
        };
        let metrics_before = read_metrics(&phase.invariants, pod).await;
        if let Some(d) = deployment {
            // What happened before this phase (the pods' start, an earlier phase) is not this phase's.
            d.take_events();
        }
        let start = Instant::now() + Duration::from_millis(20);
        let measure_start = start + plan.warmup;
        let in_flight = Arc::new(AtomicU64::new(0));
        let (stop_actions, stop_rx) = tokio::sync::watch::channel(false);
        let action_task = actions::spawn(
            actions::schedule(&phase.actions, dir, measure_start, bounds.duration),
            measure_start,
            actions::Hands {
                pod: pod.control(),
                routes: pod.routes_writer(),
                in_flight: in_flight.clone(),
                deployment: deployment.cloned(),
            },
            stop_rx,
        );
        let watched = watched_processes(&phase.invariants);
        let resources_task = {
            let (control, watched) = (pod.control(), watched.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(measure_start).await;
                read_resources(&control, &watched).await
            })
        };
        let resent = client.clone();
        let result = load::run_observed(client, payloads, &plan, start, opts.progress, in_flight).await;
        if resent.resent() > 0 {
            figures.insert(
                format!(
                    "{}: gRPC calls sent again (the server never saw them)",
                    phase.name
                ),
                resent.resent().to_string(),
            );
        }
        let _ = stop_actions.send(true);
        let action_log = action_task.await.unwrap_or_default();
        let replicas = match deployment {
            Some(d) => {
                for (i, (t, what)) in d.take_events().into_iter().enumerate() {
                    let t = t.saturating_duration_since(measure_start).as_secs_f64();
                    figures.insert(
                        format!("{}: deployment {i:02}", phase.name),
                        format!("{t:.2} s: {what}"),
                    );
                }
                replica_facts(d, start).await
            }
            None => Vec::new(),
        };
        let resources_before = resources_task.await.unwrap_or_default();
        let resources_after = read_resources(&pod.control(), &watched).await;
        let metrics_after = read_metrics(&phase.invariants, pod).await;
        let config_errors = if phase
            .invariants
            .iter()
            .any(|i| matches!(i, Invariant::ConfigRejection { .. }))
        {
            prom::get(pod.admin(), "/config/errors").await.ok()
        } else {
            None
        };
        let same_outputs = compare_outputs(&phase.invariants, pod, peer).await;
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
        for a in &action_log {
            let label = a.name.clone().unwrap_or_else(|| format!("{:?}", a.kind));
            if let Some(e) = &a.error {
                verdicts.push(Verdict {
                    phase: phase.name.clone(),
                    check: format!("action {label} runs"),
                    measured: e.clone(),
                    pass: false,
                });
            }
            if a.kind == ActionKind::RollingRestart {
                rollout_figures(
                    &mut figures,
                    &phase.name,
                    &label,
                    a,
                    &result.total(phase.interval.0),
                );
            }
            if let Some(n) = &a.name {
                figures.insert(
                    format!("{}: '{n}' at", phase.name),
                    format!(
                        "{:.2} s (done at {:.2} s, {} requests in flight)",
                        a.at.as_secs_f64(),
                        a.done.as_secs_f64(),
                        a.in_flight
                    ),
                );
            }
        }
        let facts = Facts {
            dir,
            phase: &phase.name,
            result: &result,
            interval: phase.interval.0,
            actions: &action_log,
            metrics_before,
            metrics_after,
            config_errors,
            exits: match deployment {
                Some(d) => d.exits().await,
                None => pod
                    .control()
                    .exits()
                    .await
                    .into_iter()
                    .map(|(p, c)| (p.to_string(), c))
                    .collect(),
            },
            replicas,
            resources_before,
            resources_after,
            earlier: &runs,
            smoke: opts.smoke,
            same_outputs,
        };
        for inv in &phase.invariants {
            verdicts.push(check::check(inv, &facts, &mut figures));
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

/// The pods behind the Service now: whether each was started after `phase_start`, and the requests its
/// gateway counted.
async fn replica_facts(d: &Deployment, phase_start: Instant) -> Vec<ReplicaFacts> {
    let mut out = Vec::new();
    for r in d.current().await {
        let requests = prom::get(r.pod.admin(), "/metrics")
            .await
            .ok()
            .map(|text| prom::sum(&text, "infergate_gateway_requests_total", &BTreeMap::new()));
        out.push(ReplicaFacts {
            name: r.name.clone(),
            started_in_phase: r.started >= phase_start,
            requests,
        });
    }
    out
}

/// What the clients saw before a rolling restart and while it ran: requests, failures and p99, by when
/// they completed.
fn rollout_figures(
    figures: &mut BTreeMap<String, String>,
    phase: &str,
    label: &str,
    a: &actions::ActionLog,
    all: &crate::record::Recorder,
) {
    let before = all.window(Duration::ZERO, a.at);
    let during = all.window(a.at, a.done);
    let line = |w: crate::record::Window| {
        format!(
            "{} requests, {} failed, p99 {:.2} ms",
            w.requests, w.failed, w.p99_ms
        )
    };
    figures.insert(
        format!("{phase}: before '{label}' (0 → {:.2} s)", a.at.as_secs_f64()),
        line(before),
    );
    figures.insert(
        format!(
            "{phase}: during '{label}' ({:.2} → {:.2} s)",
            a.at.as_secs_f64(),
            a.done.as_secs_f64()
        ),
        line(during),
    );
    let failed: Vec<String> = all
        .failures()
        .iter()
        .take(20)
        .map(|f| format!("{:.3} s ({})", f.sent.as_secs_f64(), f.kind))
        .collect();
    if !failed.is_empty() {
        figures.insert(format!("{phase}: failed requests sent at"), failed.join(", "));
    }
}

/// Where a process's metrics are: the gateway's admin port, or a backend's metrics port.
fn metrics_target(pod: &Pod, process: Process) -> Option<Target> {
    match process {
        Process::Gateway => Some(pod.admin()),
        Process::Backend(n) => pod.ports.backends.get(n).map(|b| Target::loopback(b.metrics)),
    }
}

/// The values of the metrics the invariants name, by [`metric_key`]; a process that cannot be read is left out.
async fn read_metrics(invariants: &[Invariant], pod: &Pod) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for inv in invariants {
        if let Invariant::Metric {
            process,
            metric,
            labels,
            ..
        } = inv
            && let Some(target) = parse_process(process).and_then(|p| metrics_target(pod, p))
            && let Ok(text) = prom::get(target, "/metrics").await
        {
            out.insert(
                metric_key(process, metric, labels),
                prom::sum(&text, metric, labels),
            );
        }
    }
    out
}

/// The backend's and the peer's answers to the same request, for each `same_outputs` invariant (by
/// [`check::same_outputs_key`]), after the phase's load.
async fn compare_outputs(
    invariants: &[Invariant],
    pod: &Pod,
    peer: Option<&Peer>,
) -> BTreeMap<String, Result<Vec<OutputDiff>, String>> {
    let mut out = BTreeMap::new();
    for inv in invariants {
        if let Invariant::SameOutputs { model, batch, .. } = inv {
            let diffs = match peer {
                Some(p) => agreement::compare(pod.backend_grpc(), p.grpc(), model, *batch).await,
                None => Err("the case has no pod.peer".into()),
            };
            out.insert(check::same_outputs_key(model, *batch), diffs);
        }
    }
    out
}

/// The processes whose resources the invariants watch.
fn watched_processes(invariants: &[Invariant]) -> Vec<String> {
    invariants
        .iter()
        .filter_map(|i| match i {
            Invariant::ResourcesFlat { process, .. } => Some(process.clone()),
            _ => None,
        })
        .collect()
}

async fn read_resources(control: &PodControl, names: &[String]) -> BTreeMap<String, ProcStats> {
    let pids = control.pids().await;
    names
        .iter()
        .filter_map(|n| {
            let process = parse_process(n)?;
            let pid = pids.iter().find(|(p, _)| *p == process)?.1;
            Some((n.clone(), ProcStats::read(pid)?))
        })
        .collect()
}

//! The invariants' verdicts: each judges what a phase measured (the clients' outcomes, the actions' log,
//! the processes' metrics and resources, the backend's and a peer's answers to one request) and says what it
//! checked and what it found.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::Verdict;
use super::actions::ActionLog;
use super::spec::Invariant;
use crate::agreement::OutputDiff;
use crate::load::RunResult;
use crate::pod::Process;
use crate::proc_stats::ProcStats;
use crate::record::Recorder;

/// What a phase measured, for the invariants.
pub struct Facts<'a> {
    /// The case folder.
    pub dir: &'a Path,
    /// The phase's name.
    pub phase: &'a str,
    /// The load's outcomes.
    pub result: &'a RunResult,
    /// Its timeline step.
    pub interval: Duration,
    /// The actions as they ran.
    pub actions: &'a [ActionLog],
    /// Metric values before the phase, by [`metric_key`].
    pub metrics_before: BTreeMap<String, f64>,
    /// Metric values after it.
    pub metrics_after: BTreeMap<String, f64>,
    /// The gateway's `/config/errors` after the phase.
    pub config_errors: Option<String>,
    /// How the processes ended, if the pod was terminated (`gateway`, `backend 1`, `pod-0 gateway`).
    pub exits: Vec<(String, Option<i32>)>,
    /// The pods behind the Service at the end of the phase, in a case with `pod.deployment`.
    pub replicas: Vec<ReplicaFacts>,
    /// Per process name (`gateway`, `backend-N`), at the measured start.
    pub resources_before: BTreeMap<String, ProcStats>,
    /// At the end of the phase.
    pub resources_after: BTreeMap<String, ProcStats>,
    /// The phases run before, with their timeline steps.
    pub earlier: &'a BTreeMap<String, (RunResult, Duration)>,
    /// A `--smoke` run: timings are reported, not judged.
    pub smoke: bool,
    /// The backend's and the peer's answers compared, by [`same_outputs_key`], or why they could not be.
    pub same_outputs: BTreeMap<String, Result<Vec<OutputDiff>, String>>,
}

/// One pod of a Deployment at the end of a phase.
#[derive(Debug, Clone)]
pub struct ReplicaFacts {
    /// `pod-N`.
    pub name: String,
    /// Whether it was started during the phase.
    pub started_in_phase: bool,
    /// Requests its gateway counted (`infergate_gateway_requests_total`), if it could be read.
    pub requests: Option<f64>,
}

impl Facts<'_> {
    fn action(&self, name: &str) -> Option<&ActionLog> {
        self.actions.iter().find(|a| a.name.as_deref() == Some(name))
    }
}

/// The key a metric invariant's values are kept under.
pub fn metric_key(process: &str, metric: &str, labels: &BTreeMap<String, String>) -> String {
    format!("{process} {metric}{}", label_words(labels))
}

fn label_words(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(","))
}

/// The key a `same_outputs` invariant's comparison is kept under.
pub fn same_outputs_key(model: &str, batch: usize) -> String {
    format!("{model} batch {batch}")
}

/// A process as invariants name it: `gateway` or `backend-N`.
pub fn parse_process(name: &str) -> Option<Process> {
    match name {
        "gateway" => Some(Process::Gateway),
        _ => name.strip_prefix("backend-")?.parse().ok().map(Process::Backend),
    }
}

/// The callers whose names start with `callers` (all when `None`), merged.
pub fn select(r: &RunResult, callers: Option<&str>, interval: Duration) -> Recorder {
    let mut all = Recorder::new(interval);
    for (name, rec) in &r.callers {
        if callers.is_none_or(|p| name.starts_with(p)) {
            all.merge(rec);
        }
    }
    all
}

/// Judges one invariant on what the phase measured.
pub fn check(inv: &Invariant, facts: &Facts<'_>, figures: &mut BTreeMap<String, String>) -> Verdict {
    let (phase, r, interval) = (facts.phase, facts.result, facts.interval);
    let actions: BTreeMap<String, Duration> = facts
        .actions
        .iter()
        .filter_map(|a| a.name.clone().map(|n| (n, a.at)))
        .collect();
    let actions = &actions;
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
    let missing = |action: &str| Verdict {
        phase: phase.to_owned(),
        check: format!("action '{action}'"),
        measured: format!("no action named '{action}' ran in this phase (is its time past the end?)"),
        pass: false,
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
        Invariant::NoErrorsAfter { after_action, settle } => {
            let Some(a) = facts.action(after_action) else {
                return missing(after_action);
            };
            let cut = a.at + settle.0;
            let all = select(r, None, interval);
            let late = all.failures().iter().filter(|f| f.sent >= cut).count();
            let answered_later: u64 = all
                .summary(r.elapsed)
                .timeline
                .iter()
                .filter(|p| p.t_s - interval.as_secs_f64() >= cut.as_secs_f64())
                .map(|p| p.ok)
                .sum();
            verdict(
                format!(
                    "no request sent later than {:.1} s after '{after_action}' fails",
                    settle.0.as_secs_f64()
                ),
                format!(
                    "{late} failed after {:.2} s; {answered_later} answered after it",
                    cut.as_secs_f64()
                ),
                late == 0 && answered_later > 0,
            )
        }
        Invariant::ErrorsWithinInFlight { action, extra } => {
            let Some(a) = facts.action(action) else {
                return missing(action);
            };
            let s = select(r, None, interval).summary(r.elapsed);
            let failed = s.requests - s.ok;
            figures.insert(
                format!("{phase}: requests in flight at '{action}'"),
                a.in_flight.to_string(),
            );
            figures.insert(
                format!("{phase}: failed requests"),
                format!("{failed} ({:?})", s.errors),
            );
            verdict(
                format!("failures ≤ requests in flight at '{action}' + {extra}"),
                format!("{failed} failed, {} in flight", a.in_flight),
                failed <= a.in_flight + extra,
            )
        }
        Invariant::InFlightComplete { action } => {
            let Some(a) = facts.action(action) else {
                return missing(action);
            };
            let all = select(r, None, interval);
            let early = all.failures().iter().filter(|f| f.sent < a.at).count();
            let answered_before: u64 = all.summary(r.elapsed).ok;
            verdict(
                format!("every request sent before '{action}' is answered"),
                format!(
                    "{early} of the requests sent before {:.2} s failed ({} in flight then)",
                    a.at.as_secs_f64(),
                    a.in_flight
                ),
                early == 0 && answered_before > 0,
            )
        }
        Invariant::FailuresAre {
            after_action,
            allowed,
        } => {
            let from = match after_action {
                Some(name) => match facts.action(name) {
                    Some(a) => a.at,
                    None => return missing(name),
                },
                None => Duration::ZERO,
            };
            let after = after_action
                .as_ref()
                .map_or(String::new(), |a| format!(" after '{a}'"));
            let all = select(r, None, interval);
            let mut other: BTreeMap<String, u64> = BTreeMap::new();
            let mut refused = 0u64;
            for f in all.failures().iter().filter(|f| f.sent >= from) {
                if allowed.iter().any(|k| *k == f.kind.to_string()) {
                    refused += 1;
                } else {
                    *other.entry(f.kind.to_string()).or_default() += 1;
                }
            }
            verdict(
                format!("requests{after} fail only as {allowed:?}"),
                format!("{refused} refused as allowed, others: {other:?}"),
                other.is_empty(),
            )
        }
        Invariant::VersionsOnly { versions } => {
            let s = select(r, None, interval).summary(r.elapsed);
            let stray: BTreeMap<&String, &u64> =
                s.versions.iter().filter(|(v, _)| !versions.contains(v)).collect();
            verdict(
                format!("every answer names exactly one version of {versions:?}"),
                format!("answers by version {:?}", s.versions),
                s.ok > 0 && stray.is_empty(),
            )
        }
        Invariant::Metric {
            process,
            metric,
            labels,
            min,
            max,
            delta,
            per_write_of,
        } => {
            let key = metric_key(process, metric, labels);
            let (Some(before), Some(after)) = (facts.metrics_before.get(&key), facts.metrics_after.get(&key))
            else {
                return verdict(
                    format!("{process} metric {metric}{labels:?}"),
                    "could not be read (see the process's log)".into(),
                    false,
                );
            };
            let value = if *delta { after - before } else { *after };
            let writes = per_write_of
                .as_ref()
                .map(|f| super::actions::writes_of(facts.actions, facts.dir, f));
            let scale = writes.map_or(1.0, |w| w as f64);
            let (lo, hi) = (min.map(|m| m * scale), max.map(|m| m * scale));
            let what = if *delta { "grew by" } else { "ends at" };
            figures.insert(
                format!("{phase}: {process} {metric}{} {what}", label_words(labels)),
                match writes {
                    Some(w) => format!(
                        "{value} ({w} writes of {})",
                        per_write_of
                            .as_ref()
                            .map_or(String::new(), |f| f.display().to_string())
                    ),
                    None => format!("{value}"),
                },
            );
            verdict(
                format!(
                    "{process} {metric}{} {what} [{}, {}]{}",
                    label_words(labels),
                    lo.map_or("-".into(), |v| format!("{v}")),
                    hi.map_or("-".into(), |v| format!("{v}")),
                    writes.map_or(String::new(), |w| format!(" ({w} writes)"))
                ),
                format!("{value}"),
                lo.is_none_or(|l| value >= l) && hi.is_none_or(|h| value <= h),
            )
        }
        Invariant::ConfigRejection { contains } => verdict(
            format!("the gateway's /config/errors names '{contains}'"),
            match &facts.config_errors {
                Some(text) => text.chars().take(300).collect(),
                None => "could not be read".into(),
            },
            facts
                .config_errors
                .as_ref()
                .is_some_and(|t| t.contains(contains.as_str())),
        ),
        Invariant::CleanExit => verdict(
            "every process exits 0 after SIGTERM".into(),
            if facts.exits.is_empty() {
                "no process was terminated in this phase".into()
            } else {
                facts
                    .exits
                    .iter()
                    .map(|(p, c)| format!("{p}: {}", c.map_or("killed".into(), |c| format!("exit {c}"))))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            !facts.exits.is_empty() && facts.exits.iter().all(|(_, c)| *c == Some(0)),
        ),
        Invariant::ReplicasAnswered { min_replicas } => {
            let answered = facts
                .replicas
                .iter()
                .filter(|r| r.requests.is_some_and(|n| n > 0.0))
                .count();
            let all_new = facts.replicas.iter().all(|r| r.started_in_phase);
            verdict(
                format!(
                    "every pod behind the Service at the end was started in this phase; at least {min_replicas} answered"
                ),
                facts
                    .replicas
                    .iter()
                    .map(|r| {
                        format!(
                            "{} ({}): {} requests",
                            r.name,
                            if r.started_in_phase { "new" } else { "old" },
                            r.requests.map_or("unreadable".into(), |n| n.to_string())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                !facts.replicas.is_empty() && all_new && answered >= *min_replicas,
            )
        }
        Invariant::ResourcesFlat {
            process,
            max_rss_growth_mib,
            max_fd_growth,
            max_thread_growth,
        } => {
            let (Some(b), Some(a)) = (
                facts.resources_before.get(process.as_str()),
                facts.resources_after.get(process.as_str()),
            ) else {
                return verdict(
                    format!("{process}: memory, descriptors and threads flat"),
                    "not measured (is the process running, on Linux?)".into(),
                    false,
                );
            };
            let rss = a.rss_mib() - b.rss_mib();
            figures.insert(
                format!("{phase}: {process} RSS, fds, threads"),
                format!(
                    "{:.1} → {:.1} MiB, {} → {} fds, {} → {} threads",
                    b.rss_mib(),
                    a.rss_mib(),
                    b.fds,
                    a.fds,
                    b.threads,
                    a.threads
                ),
            );
            verdict(
                format!(
                    "{process}: RSS grows ≤ {max_rss_growth_mib} MiB, fds ≤ {max_fd_growth}, threads ≤ {max_thread_growth}"
                ),
                format!(
                    "RSS {rss:+.1} MiB, fds {:+}, threads {:+}",
                    a.fds as i64 - b.fds as i64,
                    a.threads as i64 - b.threads as i64
                ),
                rss <= *max_rss_growth_mib
                    && a.fds <= b.fds + max_fd_growth
                    && a.threads <= b.threads + max_thread_growth,
            )
        }
        Invariant::P99Within {
            callers,
            baseline_phase,
            max_ratio,
        } => {
            let now = select(r, callers.as_deref(), interval)
                .summary(r.elapsed)
                .latency_ms
                .p99;
            let Some((base_run, base_interval)) = facts.earlier.get(baseline_phase) else {
                return missing(baseline_phase);
            };
            let base = select(base_run, callers.as_deref(), *base_interval)
                .summary(base_run.elapsed)
                .latency_ms
                .p99;
            let ratio = now / base.max(1e-9);
            figures.insert(
                format!("{phase}: {} p99 against '{baseline_phase}'", who(callers)),
                format!("{base:.3} → {now:.3} ms ({ratio:.3}×)"),
            );
            verdict(
                format!(
                    "{} p99 ≤ {max_ratio} × their p99 in '{baseline_phase}'",
                    who(callers)
                ),
                if facts.smoke {
                    format!("{ratio:.3}× (a timing: not judged in a smoke run)")
                } else {
                    format!("{ratio:.3}×")
                },
                facts.smoke || (base > 0.0 && ratio <= *max_ratio),
            )
        }
        Invariant::SameOutputs { model, batch, atol } => {
            let check = format!(
                "the backend and the peer answer a batch of {batch} of '{model}' alike (|diff| ≤ {atol})"
            );
            match facts.same_outputs.get(&same_outputs_key(model, *batch)) {
                Some(Ok(diffs)) => {
                    let measured = diffs
                        .iter()
                        .map(|d| match &d.peer_shape {
                            Some(p) if *p == d.shape => {
                                format!("{} {:?}: max |diff| {:.3e}", d.name, d.shape, d.max_abs_diff)
                            }
                            Some(p) => format!("{}: shape {:?}, the peer's {p:?}", d.name, d.shape),
                            None => format!("{}: missing from the peer's answer", d.name),
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    let pass = !diffs.is_empty() && diffs.iter().all(|d| d.max_abs_diff <= *atol);
                    verdict(check, measured, pass)
                }
                Some(Err(why)) => verdict(check, format!("not compared: {why}"), false),
                None => verdict(check, "not compared".into(), false),
            }
        }
    }
}

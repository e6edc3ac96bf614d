//! The `case.yaml` format: what a scenario starts, the phases of load it runs, and the invariants they keep.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::client::Protocol;
use crate::load::{CallerSpec, Pace, spread};
use crate::payload::PayloadKind;

/// A scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows, in a sentence.
    pub description: String,
    /// The processes to start.
    pub pod: PodFiles,
    /// The phases, run in order against the same pod.
    pub phases: Vec<Phase>,
    /// Figures compared across phases (printed and written; never asserted).
    #[serde(default)]
    pub compare: Vec<Compare>,
}

/// The pod's files, relative to the case folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodFiles {
    /// The backend's model repository; no backend when absent.
    #[serde(default)]
    pub models: Option<PathBuf>,
    /// Extra backend flags (for example `--model-control-mode=explicit`).
    #[serde(default)]
    pub backend_args: Vec<String>,
    /// The gateway's routes template; no gateway when absent.
    #[serde(default)]
    pub routes: Option<PathBuf>,
    /// Gateway data workers (default: one per core).
    #[serde(default)]
    pub gateway_workers: Option<u16>,
    /// Extra gateway flags.
    #[serde(default)]
    pub gateway_args: Vec<String>,
    /// Backend processes on the repository, each on its own ports (default 1): `{{backend_http_N}}`.
    #[serde(default = "one")]
    pub backends: usize,
    /// Sick upstreams beside the backends: `{{proxy_NAME}}`.
    #[serde(default)]
    pub proxies: Vec<ProxyFile>,
    /// Replicas of this pod behind a Service (`target: service`), for the rollout drill.
    #[serde(default)]
    pub deployment: Option<DeploymentFile>,
    /// Models of the engine's zoo (`scripts/ensure-zoo.sh`, `make zoo`) put into the repository: the zoo's
    /// `NAME.onnx` becomes `NAME/1/model.onnx` beside the case's `NAME/config.pbtxt`. Exports are too large to
    /// commit, so the case holds the configurations and the zoo the weights.
    #[serde(default)]
    pub zoo: Vec<String>,
    /// A peer server beside the pod, serving models of `models` (`target: peer`).
    #[serde(default)]
    pub peer: Option<PeerFile>,
}

/// A peer server the runner starts beside the pod and stops after it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerFile {
    /// Which server.
    pub kind: PeerKind,
    /// The models of `pod.models` it serves (each with its config.pbtxt and its version folders).
    pub models: Vec<String>,
}

/// The peers the runner can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerKind {
    /// A real Triton 2.51 (`../shared/tools/triton-peer`) whose Python backend runs each ONNX model with
    /// onnxruntime, batch by batch: what a CPU user of the Triton stack runs. Its repository is generated from
    /// the backend's: the same config.pbtxt with `backend: "python"` for the platform, and a model.py.
    TritonOnnxruntime,
}

/// The pod as a Kubernetes Deployment: replicas behind a Service, stopped as the kubelet stops them. The
/// defaults are `deploy/k8s/base/deployment.yaml`'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentFile {
    /// Pods (default 2).
    #[serde(default = "two")]
    pub replicas: usize,
    /// How long a deleted pod's endpoint still takes new connections (default 1 s).
    #[serde(default = "one_second")]
    pub endpoint_delay: Dur,
    /// The gateway's `--drain-delay` (default 5 s).
    #[serde(default = "five_seconds")]
    pub drain_delay: Dur,
    /// The backend's `preStop` sleep before its SIGTERM (default 35 s).
    #[serde(default = "thirty_five_seconds")]
    pub prestop_hold: Dur,
    /// `terminationGracePeriodSeconds` (default 70 s).
    #[serde(default = "seventy_seconds")]
    pub grace_period: Dur,
    /// Shorter waits for `--smoke` runs.
    #[serde(default)]
    pub smoke: Option<DeploymentSmoke>,
}

/// A Deployment's waits in smoke runs (each defaults to the full run's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSmoke {
    /// The gateway's `--drain-delay`.
    #[serde(default)]
    pub drain_delay: Option<Dur>,
    /// The backend's `preStop` sleep.
    #[serde(default)]
    pub prestop_hold: Option<Dur>,
}

/// A fault proxy: slow in front of a backend's REST port when `in_front_of` is set, else hung.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    /// Its name: `{{proxy_NAME}}` in routes templates.
    pub name: String,
    /// The backend (from 0) whose REST port it forwards to, each chunk of the answer held back by `delay`.
    #[serde(default)]
    pub in_front_of: Option<usize>,
    /// How long each chunk of the answer waits (with `in_front_of`).
    #[serde(default)]
    pub delay: Option<Dur>,
}

/// Which process a phase loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The gateway's data port.
    Gateway,
    /// The backend directly (its REST or gRPC port, by protocol).
    Backend,
    /// The Service in front of the Deployment's pods (`pod.deployment`).
    Service,
    /// The peer server (`pod.peer`): its REST (HTTP/1.1) or gRPC port, by protocol.
    Peer,
}

/// One phase of load.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Its name (file names of its outputs).
    pub name: String,
    /// Gateway, backend, service or peer.
    pub target: Side,
    /// Wire protocol.
    pub protocol: Protocol,
    /// The model the requests name.
    pub model: String,
    /// Further models: the requests name `model` and these in turn (a repository of many models).
    #[serde(default)]
    pub more_models: Vec<String>,
    /// REST body encoding (default JSON).
    #[serde(default)]
    pub payload: PayloadKind,
    /// Samples per request when the model's first dimension is variable (default 1).
    #[serde(default = "one")]
    pub batch: usize,
    /// Replay the request files of this folder instead of building requests from metadata.
    #[serde(default)]
    pub replay: Option<PathBuf>,
    /// Routes template written before this phase starts (waits for the gateway to load it).
    #[serde(default)]
    pub routes: Option<PathBuf>,
    /// The callers.
    pub callers: Vec<CallerGroup>,
    /// Warm-up, not recorded.
    #[serde(default)]
    pub warmup: Dur,
    /// Measured time.
    #[serde(default)]
    pub duration: Option<Dur>,
    /// Measured requests.
    #[serde(default)]
    pub requests: Option<u64>,
    /// Bounds for `--smoke` runs (seconds each, invariants only).
    #[serde(default)]
    pub smoke: Option<SmokeBounds>,
    /// Per-request timeout (default 10 s).
    #[serde(default = "ten_seconds")]
    pub timeout: Dur,
    /// Timeline step (default 250 ms).
    #[serde(default = "quarter_second")]
    pub interval: Dur,
    /// Configured share per version in percent, drawn beside the measured shares.
    #[serde(default)]
    pub weights: Option<BTreeMap<String, f64>>,
    /// Routes edits during the load.
    #[serde(default)]
    pub actions: Vec<ActionSpec>,
    /// What must hold.
    #[serde(default)]
    pub invariants: Vec<Invariant>,
}

/// Smoke bounds of a phase.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmokeBounds {
    /// Warm-up.
    #[serde(default)]
    pub warmup: Dur,
    /// Measured time.
    #[serde(default)]
    pub duration: Option<Dur>,
    /// Measured requests.
    #[serde(default)]
    pub requests: Option<u64>,
}

/// The bounds a phase runs with.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Warm-up.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Option<Duration>,
    /// Measured requests.
    pub requests: Option<u64>,
}

/// A group of callers with the same pace: `name` alone, or `name-0` .. `name-{count-1}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerGroup {
    /// `x-caller-id` (with `-i` appended when `count` > 1).
    pub name: String,
    /// How many callers.
    #[serde(default = "one_u32")]
    pub count: u32,
    /// Closed loop: requests in flight per caller.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Open loop: requests per second per caller.
    #[serde(default)]
    pub rate: Option<f64>,
    /// The model these callers ask for, instead of the phase's `model` and `more_models`.
    #[serde(default)]
    pub model: Option<String>,
}

/// Something done to the pod during the load, once (`at`) or repeatedly (`every`, routes edits only): a routes
/// edit, a backend killed or restarted, the whole pod sent SIGTERM, its model repository edited or taken
/// away, or its GPU lost. Exactly one of `routes`, `kill_backend`, `restart_backend`, `terminate_pod`,
/// `repository`, `repository_readable`, `gpu_lost` and `rolling_restart`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// Names the action, for invariants and figures (`after_action: rollback`).
    #[serde(default)]
    pub name: Option<String>,
    /// When, after the measured start: `5s` or a share of the duration, `40%`.
    #[serde(default)]
    pub at: Option<At>,
    /// Repeat every so often until the end.
    #[serde(default)]
    pub every: Option<Dur>,
    /// Routes templates written in turn.
    #[serde(default, deserialize_with = "one_or_many")]
    pub routes: Vec<PathBuf>,
    /// SIGKILL to this backend (from 0).
    #[serde(default)]
    pub kill_backend: Option<usize>,
    /// SIGTERM to this backend, wait for its exit, start it again on the same ports and wait until ready.
    #[serde(default)]
    pub restart_backend: Option<usize>,
    /// With `restart_backend`: the repository it comes back on (relative to the case folder).
    #[serde(default)]
    pub models: Option<PathBuf>,
    /// SIGTERM to every process of the pod at once, as Kubernetes stops a pod.
    #[serde(default)]
    pub terminate_pod: bool,
    /// Make the pod's model repository hold exactly this folder's files (relative to the case folder).
    #[serde(default)]
    pub repository: Option<PathBuf>,
    /// `false` takes the pod's repository folder away (it cannot be listed); `true` puts it back.
    #[serde(default)]
    pub repository_readable: Option<bool>,
    /// `true` pulls the backends' GPU (the engine destroys its wgpu device and makes no new one:
    /// `INFERGATE_FAULT_GPU_LOST`); `false` gives it back.
    #[serde(default)]
    pub gpu_lost: Option<bool>,
    /// Replace every pod of the Deployment, one at a time (`kubectl rollout restart`).
    #[serde(default)]
    pub rolling_restart: bool,
}

/// What an action does.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionKind {
    /// Write this routes template.
    Routes(PathBuf),
    /// SIGKILL a backend.
    KillBackend(usize),
    /// Restart a backend, on another repository when given.
    RestartBackend(usize, Option<PathBuf>),
    /// SIGTERM to the whole pod.
    TerminatePod,
    /// Make the repository hold this folder's files.
    Repository(PathBuf),
    /// Take the repository away (`false`) or put it back (`true`).
    RepositoryReadable(bool),
    /// Pull the GPU (`true`) or give it back (`false`).
    GpuLost(bool),
    /// Replace the Deployment's pods one at a time.
    RollingRestart,
}

impl ActionSpec {
    /// What the action does; the `i`-th time for repeated routes edits. `None` for an invalid spec (which
    /// [`Case::validate`] reports).
    pub fn kind(&self, i: usize) -> Option<ActionKind> {
        let mut kinds = Vec::new();
        if !self.routes.is_empty() {
            kinds.push(ActionKind::Routes(self.routes[i % self.routes.len()].clone()));
        }
        if let Some(n) = self.kill_backend {
            kinds.push(ActionKind::KillBackend(n));
        }
        if let Some(n) = self.restart_backend {
            kinds.push(ActionKind::RestartBackend(n, self.models.clone()));
        }
        if self.terminate_pod {
            kinds.push(ActionKind::TerminatePod);
        }
        if let Some(folder) = &self.repository {
            kinds.push(ActionKind::Repository(folder.clone()));
        }
        if let Some(readable) = self.repository_readable {
            kinds.push(ActionKind::RepositoryReadable(readable));
        }
        if let Some(lost) = self.gpu_lost {
            kinds.push(ActionKind::GpuLost(lost));
        }
        if self.rolling_restart {
            kinds.push(ActionKind::RollingRestart);
        }
        match kinds.len() {
            1 => kinds.pop(),
            _ => None,
        }
    }
}

/// A point in a phase: absolute, or a share of its duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum At {
    /// After this long.
    After(Duration),
    /// After this share (0..1) of the duration.
    Share(f64),
}

impl At {
    /// The offset within a measured time of `span`.
    pub fn within(self, span: Duration) -> Duration {
        match self {
            At::After(d) => d,
            At::Share(f) => span.mul_f64(f),
        }
    }
}

/// What a phase must keep. `callers` selects callers by name prefix (all when absent).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Invariant {
    /// At least `min` answers.
    Answered {
        /// Caller prefix.
        #[serde(default)]
        callers: Option<String>,
        /// Fewest answers.
        min: u64,
    },
    /// Failed share at most `max`.
    ErrorShare {
        /// Caller prefix.
        #[serde(default)]
        callers: Option<String>,
        /// Largest failed share.
        max: f64,
    },
    /// The share of one failure kind (`status_429`, `grpc_8`, `connect`, `timeout`, `io`) within bounds.
    ErrorKindShare {
        /// Caller prefix.
        #[serde(default)]
        callers: Option<String>,
        /// The kind.
        error: String,
        /// Smallest share.
        #[serde(default)]
        min: Option<f64>,
        /// Largest share.
        #[serde(default)]
        max: Option<f64>,
    },
    /// The share of answers from one model version is `expect` ± `tolerance` (before an action, if named).
    VersionShare {
        /// Caller prefix.
        #[serde(default)]
        callers: Option<String>,
        /// The version.
        version: String,
        /// Expected share (0..1).
        expect: f64,
        /// Allowed difference.
        tolerance: f64,
        /// Count only answers before this action.
        #[serde(default)]
        before_action: Option<String>,
    },
    /// No answer from a version later than `settle` after an action (and the load went on past it).
    VersionGone {
        /// The version.
        version: String,
        /// The action.
        after_action: String,
        /// Time allowed for the edit to take effect (file watch, debounce, requests in flight).
        settle: Dur,
    },
    /// No failed request was sent later than `settle` after an action (a kill: the endpoint is ejected by
    /// then), and the load went on past it.
    NoErrorsAfter {
        /// The action.
        after_action: String,
        /// Time allowed for the fault to be noticed (ejection, reload).
        settle: Dur,
    },
    /// Failed requests number at most the requests in flight when the action ran, plus `extra` (the
    /// requests that may still reach a dead endpoint before it is ejected: `consecutive_5xx`).
    ErrorsWithinInFlight {
        /// The action.
        action: String,
        /// Allowed beyond the requests in flight.
        #[serde(default)]
        extra: u64,
    },
    /// Every request sent before the action was answered (a SIGTERM: in-flight requests complete).
    InFlightComplete {
        /// The action.
        action: String,
    },
    /// Every failed request (sent after the action, when one is named) failed with one of `allowed`: refused
    /// cleanly (`connect`, `status_503`) or timed out by the gateway (`status_504`), never a reset or a hang.
    FailuresAre {
        /// Only requests sent after this action.
        #[serde(default)]
        after_action: Option<String>,
        /// The failure kinds allowed.
        allowed: Vec<String>,
    },
    /// Every answer names exactly one model version, one of `versions`.
    VersionsOnly {
        /// The versions allowed.
        versions: Vec<String>,
    },
    /// A Prometheus metric of a process (summed over the series whose labels include `labels`) grew by
    /// `min`..`max` over the phase (or ended within them, `delta: false`, for a process restarted in the
    /// phase). With `per_write_of`, the bounds are per write of that routes file during the phase.
    Metric {
        /// `gateway` (admin `/metrics`) or `backend-N` (its metrics port).
        process: String,
        /// The metric's name.
        metric: String,
        /// Labels the series must have.
        #[serde(default)]
        labels: BTreeMap<String, String>,
        /// Smallest value.
        #[serde(default)]
        min: Option<f64>,
        /// Largest value.
        #[serde(default)]
        max: Option<f64>,
        /// Count the growth over the phase (default) or the value at its end.
        #[serde(default = "yes")]
        delta: bool,
        /// Bounds per write of this routes file.
        #[serde(default)]
        per_write_of: Option<PathBuf>,
    },
    /// The gateway's `/config/errors` holds a rejection whose message contains `contains`.
    ConfigRejection {
        /// Words the rejection must contain.
        contains: String,
    },
    /// Every process of the pod exited 0 after `terminate_pod` (with a Deployment: every process of every
    /// pod deleted so far).
    CleanExit,
    /// At the end of the phase every pod behind the Service was started during it (a rollout replaced them
    /// all), and at least `min_replicas` of them answered requests (their gateway counts one or more).
    ReplicasAnswered {
        /// Fewest pods that answered.
        min_replicas: usize,
    },
    /// A process's resident memory, open file descriptors and threads at the end of the phase are within
    /// these bounds of their values at the measured start.
    ResourcesFlat {
        /// `gateway` or `backend-N`.
        process: String,
        /// Largest RSS growth, MiB.
        max_rss_growth_mib: f64,
        /// Largest growth in open file descriptors.
        max_fd_growth: u64,
        /// Largest growth in threads.
        max_thread_growth: u64,
    },
    /// The selected callers' p99 is at most `max_ratio` times their p99 in an earlier phase (a baseline).
    /// A timing: judged in full runs only; a `--smoke` run reports the figure and passes it.
    P99Within {
        /// Caller prefix.
        #[serde(default)]
        callers: Option<String>,
        /// The earlier phase.
        baseline_phase: String,
        /// Largest ratio (1.1: within 10 %).
        max_ratio: f64,
    },
    /// The backend and the peer answer the same request — `batch` samples of `model` with pseudo-random values
    /// in [0, 1), over gRPC — with the same outputs: the same names and shapes, every value within `atol` (two
    /// float executors sum in different orders).
    SameOutputs {
        /// The model.
        model: String,
        /// Samples in the request (default 3: a batch, yet not a preferred size).
        #[serde(default = "three")]
        batch: usize,
        /// Largest absolute difference allowed.
        atol: f64,
    },
}

/// A comparison of two phases (figures only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compare {
    /// Its name in the output.
    pub name: String,
    /// The reference phase.
    pub base: String,
    /// The phase compared with it.
    pub other: String,
    /// Caller prefix.
    #[serde(default)]
    pub callers: Option<String>,
}

/// A duration written `250ms`, `2s`, `1.5s` or `1m`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Dur(pub Duration);

fn one() -> usize {
    1
}
fn yes() -> bool {
    true
}
fn one_u32() -> u32 {
    1
}
fn ten_seconds() -> Dur {
    Dur(Duration::from_secs(10))
}
fn quarter_second() -> Dur {
    Dur(Duration::from_millis(250))
}
fn two() -> usize {
    2
}
fn three() -> usize {
    3
}
fn one_second() -> Dur {
    Dur(Duration::from_secs(1))
}
fn five_seconds() -> Dur {
    Dur(Duration::from_secs(5))
}
fn thirty_five_seconds() -> Dur {
    Dur(Duration::from_secs(35))
}
fn seventy_seconds() -> Dur {
    Dur(Duration::from_secs(70))
}

impl CallerGroup {
    /// The callers of the group, the `index`-th of its phase: open-loop callers of one group send in step (a
    /// drill's burst of callers sending together), groups at different points of the gap ([`spread`]).
    pub fn expand(&self, index: usize) -> Vec<CallerSpec> {
        let pace = match (self.concurrency, self.rate) {
            (_, Some(rate)) => Pace::Open {
                rate,
                phase: spread(index),
            },
            (Some(concurrency), None) => Pace::Closed { concurrency },
            (None, None) => Pace::Closed { concurrency: 1 },
        };
        (0..self.count.max(1))
            .map(|i| CallerSpec {
                name: if self.count > 1 {
                    format!("{}-{i}", self.name)
                } else {
                    self.name.clone()
                },
                pace,
                models: Vec::new(),
            })
            .collect()
    }
}

impl Phase {
    /// Full or smoke bounds.
    pub fn bounds(&self, smoke: bool) -> Bounds {
        match (&self.smoke, smoke) {
            (Some(s), true) => Bounds {
                warmup: s.warmup.0,
                duration: s.duration.map(|d| d.0),
                requests: s.requests,
            },
            _ => Bounds {
                warmup: self.warmup.0,
                duration: self.duration.map(|d| d.0),
                requests: self.requests,
            },
        }
    }
}

impl Case {
    /// Every problem with the case, each naming the phase and the fix.
    pub fn validate(&self, dir: &Path) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        for (what, path) in [("pod.models", &self.pod.models), ("pod.routes", &self.pod.routes)] {
            if let Some(p) = path
                && !dir.join(p).exists()
            {
                problems.push(format!(
                    "{what}: {} does not exist (paths are relative to the case folder)",
                    p.display()
                ));
            }
        }
        if self.phases.is_empty() {
            problems.push("phases: none; a case runs at least one phase".into());
        }
        self.validate_zoo_and_peer(dir, &mut problems);
        for proxy in &self.pod.proxies {
            if proxy.in_front_of.is_some() != proxy.delay.is_some() {
                problems.push(format!(
                    "pod.proxies '{}': a slow proxy sets both `in_front_of` and `delay`; a hung one neither",
                    proxy.name
                ));
            }
        }
        for p in &self.phases {
            let at = format!("phase '{}'", p.name);
            if p.target == Side::Gateway && self.pod.routes.is_none() {
                problems.push(format!("{at}: targets the gateway but pod.routes is not set"));
            }
            if p.target == Side::Backend && self.pod.models.is_none() {
                problems.push(format!("{at}: targets the backend but pod.models is not set"));
            }
            if p.target == Side::Peer && self.pod.peer.is_none() {
                problems.push(format!("{at}: targets the peer but pod.peer is not set"));
            }
            if p.target == Side::Peer && p.protocol == Protocol::H2c {
                problems.push(format!(
                    "{at}: the Triton peer's REST port speaks HTTP/1.1 only; use http1 or grpc"
                ));
            }
            match (p.target, &self.pod.deployment) {
                (Side::Service, None) => problems.push(format!(
                    "{at}: targets the service but pod.deployment is not set (the Service fronts its replicas)"
                )),
                (Side::Gateway | Side::Backend, Some(_)) => problems.push(format!(
                    "{at}: with pod.deployment there are several pods; target the service"
                )),
                _ => {}
            }
            if self.pod.deployment.is_some() && p.routes.is_some() {
                problems.push(format!(
                    "{at}: `routes` edits one pod's file; a Deployment's pods share pod.routes"
                ));
            }
            for inv in &p.invariants {
                let one_pod = matches!(
                    inv,
                    Invariant::Metric { .. }
                        | Invariant::ResourcesFlat { .. }
                        | Invariant::ConfigRejection { .. }
                );
                if one_pod && self.pod.deployment.is_some() {
                    problems.push(format!(
                        "{at}: {inv:?} reads one pod, and pod.deployment has several; leave it out"
                    ));
                }
                if matches!(inv, Invariant::ReplicasAnswered { .. }) && self.pod.deployment.is_none() {
                    problems.push(format!("{at}: replicas_answered needs pod.deployment"));
                }
            }
            for (mode, b) in [("full", p.bounds(false)), ("smoke", p.bounds(true))] {
                if b.duration.is_none() && b.requests.is_none() {
                    problems.push(format!(
                        "{at}: {mode} run has neither duration nor requests; set one"
                    ));
                }
            }
            if p.smoke.is_none() {
                problems.push(format!(
                    "{at}: no `smoke:` bounds; `make test` runs every case in seconds"
                ));
            }
            if p.callers.is_empty() {
                problems.push(format!("{at}: no callers"));
            }
            for c in &p.callers {
                if c.rate.is_some() && c.concurrency.is_some() {
                    problems.push(format!("{at}: caller '{}' sets both rate (open loop) and concurrency (closed loop); keep one", c.name));
                }
                if c.rate.is_some_and(|r| !r.is_finite() || r <= 0.0) {
                    problems.push(format!(
                        "{at}: caller '{}': rate must be a number above 0",
                        c.name
                    ));
                }
            }
            for a in &p.actions {
                if a.at.is_some() == a.every.is_some() {
                    problems.push(format!("{at}: an action sets exactly one of `at` and `every`"));
                }
                match a.kind(0) {
                    None => problems.push(format!(
                        "{at}: an action does exactly one of `routes`, `kill_backend`, `restart_backend`, `terminate_pod`, \
                         `repository`, `repository_readable`, `gpu_lost` and `rolling_restart`"
                    )),
                    Some(ActionKind::RollingRestart) => {
                        if self.pod.deployment.is_none() {
                            problems.push(format!("{at}: rolling_restart needs pod.deployment"));
                        }
                        if a.every.is_some() {
                            problems.push(format!("{at}: only routes edits repeat (`every`); give rolling_restart an `at`"));
                        }
                    }
                    Some(_) if self.pod.deployment.is_some() => problems.push(format!(
                        "{at}: with pod.deployment the only action is rolling_restart (the others act on one pod)"
                    )),
                    Some(ActionKind::Routes(_)) => {}
                    Some(kind) => {
                        if a.every.is_some() {
                            problems.push(format!("{at}: only routes edits repeat (`every`); give {kind:?} an `at`"));
                        }
                        if let ActionKind::KillBackend(n) | ActionKind::RestartBackend(n, _) = kind
                            && n >= self.pod.backends.max(1)
                        {
                            problems.push(format!(
                                "{at}: backend {n} does not exist: the pod has {} (pod.backends; they count from 0)",
                                self.pod.backends.max(1)
                            ));
                        }
                        if matches!(kind, ActionKind::Repository(_) | ActionKind::RepositoryReadable(_))
                            && self.pod.models.is_none()
                        {
                            problems.push(format!(
                                "{at}: a repository edit needs a repository: set pod.models"
                            ));
                        }
                    }
                }
                if a.models.is_some() && a.restart_backend.is_none() {
                    problems.push(format!("{at}: `models` goes with `restart_backend`"));
                }
                for r in a.routes.iter().chain(&a.models).chain(&a.repository) {
                    if !dir.join(r).exists() {
                        problems.push(format!(
                            "{at}: {} does not exist (paths are relative to the case folder)",
                            r.display()
                        ));
                    }
                }
            }
            for inv in &p.invariants {
                if let Invariant::VersionGone { after_action, .. }
                | Invariant::VersionShare {
                    before_action: Some(after_action),
                    ..
                }
                | Invariant::NoErrorsAfter { after_action, .. }
                | Invariant::ErrorsWithinInFlight {
                    action: after_action, ..
                }
                | Invariant::InFlightComplete { action: after_action }
                | Invariant::FailuresAre {
                    after_action: Some(after_action),
                    ..
                } = inv
                    && !p.actions.iter().any(|a| a.name.as_deref() == Some(after_action))
                {
                    problems.push(format!(
                        "{at}: an invariant names action '{after_action}', which the phase does not have"
                    ));
                }
            }
        }
        let names: Vec<&str> = self.phases.iter().map(|p| p.name.as_str()).collect();
        for (i, p) in self.phases.iter().enumerate() {
            for inv in &p.invariants {
                if let Invariant::P99Within { baseline_phase, .. } = inv
                    && !names[..i].contains(&baseline_phase.as_str())
                {
                    problems.push(format!(
                        "phase '{}': p99_within names '{baseline_phase}', which is not an earlier phase ({:?})",
                        p.name,
                        &names[..i]
                    ));
                }
            }
        }
        for c in &self.compare {
            for side in [&c.base, &c.other] {
                if !names.contains(&side.as_str()) {
                    problems.push(format!(
                        "compare '{}': no phase named '{side}' (phases: {names:?})",
                        c.name
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

impl Case {
    /// The problems with `pod.zoo`, `pod.peer` and the `same_outputs` invariants.
    fn validate_zoo_and_peer(&self, dir: &Path, problems: &mut Vec<String>) {
        let config = |model: &str| {
            self.pod
                .models
                .as_ref()
                .map(|m| dir.join(m).join(model).join("config.pbtxt"))
        };
        for (what, model) in self.pod.zoo.iter().map(|m| ("pod.zoo", m)).chain(
            self.pod
                .peer
                .iter()
                .flat_map(|p| p.models.iter().map(|m| ("pod.peer.models", m))),
        ) {
            match config(model) {
                None => problems.push(format!("{what}: '{model}' needs a repository: set pod.models")),
                Some(file) if !file.is_file() => problems.push(format!(
                    "{what}: '{model}' has no {} (each model of the repository needs its config.pbtxt)",
                    file.display()
                )),
                Some(_) => {}
            }
        }
        if let Some(peer) = &self.pod.peer {
            if peer.models.is_empty() {
                problems.push("pod.peer.models: none; name the models of pod.models the peer serves".into());
            }
            if self.pod.deployment.is_some() {
                problems.push(
                    "pod.peer: a peer stands beside one pod, not a Deployment; drop one of them".into(),
                );
            }
        }
        for p in &self.phases {
            for inv in &p.invariants {
                let Invariant::SameOutputs { model, batch, atol } = inv else {
                    continue;
                };
                let at = format!("phase '{}': same_outputs", p.name);
                match &self.pod.peer {
                    None => problems.push(format!("{at} compares the backend with the peer: set pod.peer")),
                    Some(peer) if !peer.models.contains(model) => problems.push(format!(
                        "{at}: the peer does not serve '{model}' (pod.peer.models: {:?})",
                        peer.models
                    )),
                    Some(_) => {}
                }
                if *batch == 0 {
                    problems.push(format!("{at}: batch must be 1 or more"));
                }
                if !(atol.is_finite() && *atol >= 0.0) {
                    problems.push(format!("{at}: atol must be a number, 0 or more"));
                }
            }
        }
    }
}

/// Parses `250ms`, `2s`, `1.5s`, `1m`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.trim().parse().ok()?;
    // Duration::from_secs_f64 panics on negative, NaN or huge values: a day is plenty for a load test.
    if !n.is_finite() || !(0.0..=86_400.0 * 60.0).contains(&n) {
        return None;
    }
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map(Dur).ok_or_else(|| {
            serde::de::Error::custom(format!("'{s}' is not a duration: write 250ms, 2s, 1.5s or 1m"))
        })
    }
}

impl<'de> Deserialize<'de> for At {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if let Some(p) = s.trim().strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(f) if (0.0..=100.0).contains(&f) => Ok(At::Share(f / 100.0)),
                _ => Err(serde::de::Error::custom(format!("'{s}': a share is 0% .. 100%"))),
            };
        }
        parse_duration(&s).map(At::After).ok_or_else(|| {
            serde::de::Error::custom(format!("'{s}' is neither a duration (2s) nor a share (40%)"))
        })
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(v) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_shares_parse_and_bad_ones_name_the_form() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5h"), None);
        let a: At = serde_saphyr::from_str("40%").unwrap();
        assert_eq!(a.within(Duration::from_secs(10)), Duration::from_secs(4));
        let e = serde_saphyr::from_str::<Dur>("ten").unwrap_err();
        assert!(e.to_string().contains("250ms"), "{e}");
    }

    #[test]
    fn callers_of_one_group_send_in_step_and_other_groups_between_them() {
        let groups: Vec<CallerGroup> =
            serde_saphyr::from_str("[{ name: quiet, count: 4, rate: 5 }, { name: noisy, rate: 200 }]")
                .unwrap();
        let phases = |index: usize| -> Vec<f64> {
            groups[index]
                .expand(index)
                .iter()
                .map(|c| match c.pace {
                    Pace::Open { phase, .. } => phase,
                    Pace::Closed { .. } => panic!("{} is open loop", c.name),
                })
                .collect()
        };
        let quiet = phases(0);
        assert_eq!(quiet.len(), 4);
        assert!(quiet.iter().all(|p| *p == quiet[0]), "{quiet:?}");
        // The quiet callers send every 200 ms, the noisy one every 5 ms: its sends fall between theirs, not
        // on them (in step, every quiet request would queue behind a noisy one).
        let apart_ms = (phases(1)[0] * 5.0 - quiet[0] * 200.0).rem_euclid(5.0);
        assert!((1.0..=4.0).contains(&apart_ms), "{apart_ms} ms apart");
        // However many groups, none lands near another: eight are at least 1/16 of the gap apart.
        let mut eight: Vec<f64> = (0..8).map(spread).collect();
        eight.sort_by(f64::total_cmp);
        assert!(eight.windows(2).all(|w| w[1] - w[0] >= 1.0 / 16.0), "{eight:?}");
    }

    #[test]
    fn a_case_with_problems_lists_them_all() {
        let text = r#"
description: x
pod: { models: nowhere }
phases:
  - name: p
    target: gateway
    protocol: http1
    model: m
    callers: [{ name: c, rate: 5, concurrency: 2 }]
    invariants:
      - { kind: version_gone, version: "2", after_action: rollback, settle: 1s }
"#;
        let case: Case = serde_saphyr::from_str(text).unwrap();
        let problems = case.validate(Path::new("/nonexistent")).unwrap_err();
        let all = problems.join("\n");
        for needle in [
            "pod.models",
            "pod.routes is not set",
            "neither duration",
            "smoke",
            "keep one",
            "'rollback'",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }
    }

    #[test]
    fn drill_actions_and_proxies_are_checked_before_anything_starts() {
        let text = r#"
description: x
pod: { backends: 2, proxies: [{ name: slow, in_front_of: 1 }] }
phases:
  - name: p
    target: backend
    protocol: http1
    model: m
    duration: 1s
    smoke: { duration: 1s }
    callers: [{ name: c }]
    actions:
      - { name: both, at: 10%, kill_backend: 0, terminate_pod: true }
      - { name: far, at: 20%, restart_backend: 2 }
      - { every: 1s, kill_backend: 1 }
      - { at: 30%, kill_backend: 1, models: elsewhere }
    invariants:
      - { kind: no_errors_after, after_action: nothing, settle: 1s }
      - { kind: p99_within, baseline_phase: p, max_ratio: 1.1 }
"#;
        let case: Case = serde_saphyr::from_str(text).unwrap();
        let all = case.validate(Path::new("/nonexistent")).unwrap_err().join("\n");
        for needle in [
            "exactly one of `routes`, `kill_backend`",
            "backend 2 does not exist: the pod has 2",
            "only routes edits repeat",
            "`models` goes with `restart_backend`",
            "'nothing'",
            "not an earlier phase",
            "sets both `in_front_of` and `delay`",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }
        let kill = &case.phases[0].actions[2];
        assert_eq!(kill.kind(0), Some(ActionKind::KillBackend(1)));
    }

    #[test]
    fn a_deployment_is_loaded_through_its_service_and_only_rolled() {
        let text = r#"
description: x
pod: { routes: r.yaml, deployment: { replicas: 2, smoke: { prestop_hold: 4s } } }
phases:
  - name: p
    target: gateway
    protocol: http1
    model: m
    duration: 1s
    smoke: { duration: 1s }
    callers: [{ name: c }]
    actions:
      - { at: 10%, kill_backend: 0 }
      - { at: 20%, rolling_restart: true }
    invariants:
      - { kind: metric, process: gateway, metric: m, min: 1 }
      - { kind: replicas_answered, min_replicas: 2 }
"#;
        let case: Case = serde_saphyr::from_str(text).unwrap();
        let d = case.pod.deployment.as_ref().unwrap();
        assert_eq!(
            d.prestop_hold.0,
            Duration::from_secs(35),
            "the manifest's preStop sleep by default"
        );
        let all = case.validate(Path::new("/nonexistent")).unwrap_err().join("\n");
        for needle in [
            "target the service",
            "the only action is rolling_restart",
            "reads one pod",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }
        let text = r#"
description: x
pod: {}
phases:
  - name: p
    target: service
    protocol: http1
    model: m
    duration: 1s
    smoke: { duration: 1s }
    callers: [{ name: c }]
    actions: [{ at: 20%, rolling_restart: true }]
    invariants: [{ kind: replicas_answered, min_replicas: 1 }]
"#;
        let case: Case = serde_saphyr::from_str(text).unwrap();
        let all = case.validate(Path::new("/nonexistent")).unwrap_err().join("\n");
        for needle in [
            "targets the service but pod.deployment is not set",
            "rolling_restart needs pod.deployment",
            "replicas_answered needs pod.deployment",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }
    }

    #[test]
    fn a_peer_and_zoo_models_are_checked_against_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("models/rec")).unwrap();
        std::fs::write(dir.path().join("models/rec/config.pbtxt"), "name: \"rec\"\n").unwrap();
        let phase = |target: &str, protocol: &str, invariant: &str| {
            format!(
                "  - {{ name: {target}, target: {target}, protocol: {protocol}, model: rec, duration: 1s,\n      \
                 smoke: {{ requests: 2 }}, callers: [{{ name: c }}], invariants: [{invariant}] }}\n"
            )
        };
        let same = "{ kind: same_outputs, model: rec, atol: 1e-3 }";
        let good = format!(
            "description: x\npod:\n  models: models\n  zoo: [rec]\n  peer: {{ kind: triton_onnxruntime, models: [rec] }}\nphases:\n{}{}",
            phase("backend", "grpc", same),
            phase("peer", "http1", "{ kind: error_share, max: 0 }")
        );
        let case: Case = serde_saphyr::from_str(&good).unwrap();
        case.validate(dir.path()).unwrap();
        let peer = case.pod.peer.as_ref().unwrap();
        assert_eq!(
            (peer.kind, peer.models.as_slice()),
            (PeerKind::TritonOnnxruntime, &["rec".to_owned()][..])
        );
        assert!(
            matches!(
                case.phases[0].invariants[0],
                Invariant::SameOutputs { batch: 3, .. }
            ),
            "a batch of 3 by default"
        );
        assert_eq!(case.phases[1].target, Side::Peer);

        let bad = format!(
            "description: x\npod:\n  models: models\n  zoo: [rec, det]\n  peer: {{ kind: triton_onnxruntime, models: [cls] }}\nphases:\n{}",
            phase(
                "peer",
                "h2c",
                "{ kind: same_outputs, model: rec, batch: 0, atol: -1 }"
            )
        );
        let case: Case = serde_saphyr::from_str(&bad).unwrap();
        let all = case.validate(dir.path()).unwrap_err().join("\n");
        for needle in [
            "pod.zoo: 'det' has no",
            "pod.peer.models: 'cls' has no",
            "speaks HTTP/1.1 only",
            "the peer does not serve 'rec'",
            "batch must be 1 or more",
            "atol must be a number",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }

        let lonely = format!(
            "description: x\npod: {{ zoo: [rec] }}\nphases:\n{}",
            phase("peer", "grpc", same)
        );
        let case: Case = serde_saphyr::from_str(&lonely).unwrap();
        let all = case.validate(dir.path()).unwrap_err().join("\n");
        for needle in [
            "pod.zoo: 'rec' needs a repository",
            "targets the peer but pod.peer is not set",
            "same_outputs compares the backend with the peer: set pod.peer",
        ] {
            assert!(all.contains(needle), "missing {needle}: {all}");
        }
        let unknown =
            "description: x\npod: { peer: { kind: tensorflow_serving, models: [rec] } }\nphases: []\n";
        assert!(
            serde_saphyr::from_str::<Case>(unknown).is_err(),
            "only the peers the runner can start"
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = "description: x\npod: {}\nphases: []\nextra: 1\n";
        assert!(serde_saphyr::from_str::<Case>(text).is_err());
    }
}

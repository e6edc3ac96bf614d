//! A Deployment for the rollout drill: replicas of the pod (each a gateway and its own backends, as in
//! `deploy/k8s/base/deployment.yaml`) behind a [`Service`], and the rolling restart Kubernetes does for
//! `kubectl rollout restart` with `maxSurge: 1, maxUnavailable: 0`. For each old pod in turn: a new pod starts
//! and joins the Service's endpoints once its readiness probes pass (the gateway's admin `/ready` and the
//! backend's `/v2/health/ready` on its metrics port, as the manifest's probes); then the old pod is deleted,
//! which starts two things Kubernetes does not order: its endpoint leaves the Service after a propagation
//! delay (new connections may still reach it until then), and the kubelet stops it (SIGTERM to the gateway at
//! once, to the backend after its `preStop` hold; [`PodControl::terminate_like_kubelet`]). The next new pod
//! starts without waiting for the old one to be gone, as the Deployment controller does not count
//! terminating pods.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::pod::{Pod, PodControl, PodError, PodSpec};
use crate::prom;
use crate::service::Service;
use crate::target::Target;

/// How the Deployment's pods come and go (the manifest's values, or shorter ones for smoke runs).
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle {
    /// Pods (`spec.replicas`).
    pub replicas: usize,
    /// How long a deleted pod's endpoint stays in the Service (the endpoints controller and kube-proxy).
    pub endpoint_delay: Duration,
    /// The backend's `preStop` sleep before its SIGTERM.
    pub prestop_hold: Duration,
    /// `terminationGracePeriodSeconds`: SIGKILL for what still runs this long after the deletion.
    pub grace_period: Duration,
    /// How often the readiness probes are tried on a new pod.
    pub probe_period: Duration,
    /// How long a new pod may take to become ready (the startup probe's patience).
    pub startup_limit: Duration,
}

/// One pod of the Deployment.
#[derive(Clone)]
pub struct Replica {
    /// `pod-N`, in the order started; its logs are in the folder of that name.
    pub name: String,
    /// Its processes.
    pub pod: Arc<Pod>,
    /// When it was started.
    pub started: Instant,
}

/// Pods behind a Service.
pub struct Deployment {
    template: PodSpec,
    bins: PathBuf,
    work: PathBuf,
    lifecycle: Lifecycle,
    service: Service,
    replicas: Mutex<Replicas>,
    /// What the rollouts did and when, for the case's figures.
    events: std::sync::Mutex<Vec<(Instant, String)>>,
}

#[derive(Default)]
struct Replicas {
    /// The pods the Deployment counts (not terminating).
    current: Vec<Replica>,
    /// Deleted pods, kept for their exit codes.
    retired: Vec<Replica>,
    /// Pods started so far (the next one's number).
    started: usize,
}

impl Replica {
    /// The gateway's data address: the pod's endpoint in the Service.
    pub fn endpoint(&self) -> SocketAddr {
        self.pod.gateway().addr
    }
}

impl Deployment {
    /// Starts a Service and `lifecycle.replicas` pods from `template` (each in its own folder under `work`),
    /// each added to the Service once ready.
    pub async fn start(
        template: PodSpec,
        bins: &Path,
        work: &Path,
        lifecycle: Lifecycle,
    ) -> Result<Arc<Deployment>, PodError> {
        let service = Service::start().await.map_err(|source| PodError::Io {
            path: "127.0.0.1:0".into(),
            source,
        })?;
        let d = Arc::new(Deployment {
            template,
            bins: bins.to_owned(),
            work: work.to_owned(),
            lifecycle,
            service,
            replicas: Mutex::new(Replicas::default()),
            events: std::sync::Mutex::new(Vec::new()),
        });
        for _ in 0..lifecycle.replicas.max(1) {
            let r = d.start_ready_replica().await?;
            d.replicas.lock().await.current.push(r);
        }
        Ok(d)
    }

    /// The Service's address: where the load goes.
    pub fn service(&self) -> Target {
        Target {
            addr: self.service.addr(),
        }
    }

    /// The pods the Deployment counts now, in the order started.
    pub async fn current(&self) -> Vec<Replica> {
        self.replicas.lock().await.current.clone()
    }

    /// How each process of each deleted pod ended (`pod-N gateway: Some(0)`); `None` when killed.
    pub async fn exits(&self) -> Vec<(String, Option<i32>)> {
        let retired = self.replicas.lock().await.retired.clone();
        let mut out = Vec::new();
        for r in retired {
            for (process, code) in r.pod.control().exits().await {
                out.push((format!("{} {process}", r.name), code));
            }
        }
        out
    }

    /// The events logged since the last call, oldest first.
    pub fn take_events(&self) -> Vec<(Instant, String)> {
        self.events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }

    /// Stops every process of every pod, current or deleted.
    pub async fn stop(&self) {
        let r = self.replicas.lock().await;
        for replica in r.current.iter().chain(&r.retired) {
            replica.pod.stop().await;
        }
    }

    /// Replaces every current pod, one at a time, as `kubectl rollout restart` does with `maxSurge: 1,
    /// maxUnavailable: 0`; returns once every replaced pod's processes have exited.
    pub async fn rolling_restart(self: &Arc<Self>) -> Result<(), PodError> {
        let old = self.current().await;
        let mut leaving = Vec::new();
        let mut failed = None;
        for gone in old {
            let new = match self.start_ready_replica().await {
                Ok(r) => r,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // The ReplicaSets are scaled: the new pod counts, the old one is deleted.
            {
                let mut r = self.replicas.lock().await;
                r.current.push(new);
                r.current.retain(|c| c.name != gone.name);
                r.retired.push(gone.clone());
            }
            let me = Arc::clone(self);
            leaving.push(tokio::spawn(async move { me.delete(gone).await }));
        }
        for task in leaving {
            let _ = task.await;
        }
        failed.map_or(Ok(()), Err)
    }

    /// Starts the next pod, waits until its readiness probes pass, and adds it to the Service.
    async fn start_ready_replica(&self) -> Result<Replica, PodError> {
        let name = {
            let mut r = self.replicas.lock().await;
            r.started += 1;
            format!("pod-{}", r.started - 1)
        };
        let started = Instant::now();
        let pod = Pod::start(&self.template, &self.bins, &self.work.join(&name)).await?;
        let replica = Replica {
            name,
            pod: Arc::new(pod),
            started,
        };
        self.wait_ready(&replica).await?;
        self.service.add(replica.endpoint());
        self.event(format!(
            "{} ready ({:.2} s after its start): added to the Service",
            replica.name,
            started.elapsed().as_secs_f64()
        ));
        Ok(replica)
    }

    /// Probes the pod as its manifest's readiness probes do until every one passes.
    async fn wait_ready(&self, r: &Replica) -> Result<(), PodError> {
        let deadline = Instant::now() + self.lifecycle.startup_limit;
        loop {
            let failing = probe(&r.pod).await;
            if failing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PodError::Spec(format!(
                    "{} did not become ready in {} s: {} (see its logs in {})",
                    r.name,
                    self.lifecycle.startup_limit.as_secs(),
                    failing.join("; "),
                    self.work.join(&r.name).display()
                )));
            }
            tokio::time::sleep(self.lifecycle.probe_period).await;
        }
    }

    /// Deletes a pod: its endpoint leaves the Service after the propagation delay, while the kubelet stops
    /// its processes.
    async fn delete(&self, r: Replica) {
        self.event(format!(
            "{} deleted: SIGTERM to its gateway; its endpoint leaves the Service in {:.1} s, its backend's preStop \
             hold ends in {:.1} s",
            r.name,
            self.lifecycle.endpoint_delay.as_secs_f64(),
            self.lifecycle.prestop_hold.as_secs_f64()
        ));
        let control: PodControl = r.pod.control();
        let endpoint_removed = async {
            tokio::time::sleep(self.lifecycle.endpoint_delay).await;
            self.service.remove(r.endpoint());
            self.event(format!("{} removed from the Service", r.name));
        };
        let stopped =
            control.terminate_like_kubelet(self.lifecycle.prestop_hold, self.lifecycle.grace_period);
        tokio::join!(endpoint_removed, stopped);
        let exits: Vec<String> = control
            .exits()
            .await
            .iter()
            .map(|(p, c)| format!("{p} {}", c.map_or("killed".into(), |c| format!("exit {c}"))))
            .collect();
        self.event(format!("{} gone: {}", r.name, exits.join(", ")));
    }

    fn event(&self, what: String) {
        tracing::info!(event = %what, "deployment");
        if let Ok(mut e) = self.events.lock() {
            e.push((Instant::now(), what));
        }
    }
}

/// The readiness probes of `deploy/k8s/base/deployment.yaml` that fail now, in words: the gateway's
/// `/ready` on its admin port and each backend's `/v2/health/ready` on its metrics port.
async fn probe(pod: &Pod) -> Vec<String> {
    let mut checks = vec![(pod.admin(), "/ready")];
    checks.extend(
        pod.ports
            .backends
            .iter()
            .map(|b| (Target::loopback(b.metrics), "/v2/health/ready")),
    );
    let mut failing = Vec::new();
    for (target, path) in checks {
        if let Err(e) = prom::get(target, path).await {
            failing.push(e);
        }
    }
    failing
}

//! infergate-load: an open- and closed-loop load generator for KServe V2 servers and the scenario runner
//! that starts the pod, drives it and checks each case's invariants.
//!
//! The tool's guide is `docs/loadtests.md`; a scenario is a folder under `loadtests/cases/`.

pub mod agreement;
pub mod case;
pub mod client;
pub mod deployment;
pub mod fault_proxy;
pub mod load;
pub mod payload;
pub mod peer;
pub mod plot;
pub mod pod;
pub mod proc_stats;
pub mod prom;
pub mod record;
pub mod report;
pub mod repository_edit;
pub mod service;
pub mod soak;
pub mod target;
pub mod tls;
pub mod trend;
pub mod zoo;

pub use client::{Client, Protocol};
pub use load::{CallerSpec, LoadPlan, Pace};
pub use payload::{Payload, PayloadKind};
pub use record::{ErrorKind, Outcome, Recorder, Summary};
pub use target::Target;
pub use tls::{TlsError, TlsOptions};

//! The infergate sidecar gateway: canary splits, per-caller quotas, retries, timeouts and HTTP/1.1-to-h2 bridging.
//!
//! Data path (this crate's `listener`, `pipeline`, `upstream`, …) and per-request policies (`route`, `split`,
//! `quota`, `retry`, …) are separate modules; `docs/gateway.md` is the operations guide.

pub mod admin;
mod answer_deadline;
pub mod bridge;
pub mod caller;
pub mod canary;
pub mod config_state;
mod connection;
pub mod error;
pub mod fault;
pub mod h1;
pub mod headers;
mod idle_body;
pub mod listener;
pub mod metrics;
pub mod mirror;
pub mod model_ref;
pub mod pipeline;
pub mod prefixed_io;
pub mod process;
pub mod proxy;
pub mod quota;
pub mod reload;
pub mod request_target;
pub mod retry;
pub mod route;
pub mod route_key;
pub mod server;
pub mod split;
pub mod stable_hash;
pub mod timeout;
pub mod tls;
pub mod try_timeout;
pub mod upstream;
mod upstream_protocol;
mod wake_gate;
mod worker;
mod write_deadline;

pub use proxy::{Body, BoxError};

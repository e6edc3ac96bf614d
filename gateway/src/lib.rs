//! The infergate sidecar gateway: canary splits, per-caller quotas, retries, timeouts and HTTP/1.1-to-h2 bridging.
//!
//! Data path (this crate's `listener`, `pipeline`, `upstream`, …) and per-request policies (`route`, `split`,
//! `quota`, `retry`, …) are separate modules; `docs/gateway.md` is the operations guide.

pub mod bridge;
pub mod error;
pub mod headers;
pub mod metrics;
pub mod proxy;
pub mod upstream;

pub use proxy::{Body, BoxError};

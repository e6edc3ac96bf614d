//! Typed routing rules and Triton model configs for infergate: parsing, validation with file:line:column errors, and hot reload.
//!
//! - [`parse_gateway_config`]: the gateway's routes YAML into [`GatewayConfig`] (restart-only [`Listeners`]
//!   and hot [`RoutingRules`]).
//! - [`parse_pbtxt`] / [`parse_model_yaml`]: Triton model configs into [`ModelConfig`], written back as
//!   Triton's JSON by [`ModelConfig::to_triton_json`].
//! - [`scan_repository`]: a Triton model repository's folders, configs and numeric versions.
//! - [`Live`]: the running value of a config file in one `ArcSwap`, and the one path that reloads it;
//!   [`ConfigWatcher`] re-reads it on file changes and SIGHUP, for any config type.
//! - [`check_gateway_file`] / [`check_model_repository`]: every problem, for `check` subcommands.
//! - Every parse function returns [`Diagnostics`]: all problems found, each `file:line:column: message`.

mod diagnostic;
mod file;
mod live;
pub mod model;
mod node;
mod pbtxt;
mod repository;
pub mod routes;
pub mod units;
mod watcher;
mod yaml;

use std::path::Path;

pub use diagnostic::{Diagnostic, Diagnostics, Pos, Severity};
pub use file::read_config_file;
pub use live::{
    Live, Loaded, Loader, Observer, Rejection, ReloadOutcome, ReloadStatus, Running, content_hash,
};
pub use model::{
    DataType, DynamicBatching, EnsembleScheduling, EnsembleStep, Format, InstanceGroup, InstanceKind,
    LoadedModelConfig, ModelConfig, ModelInput, ModelOutput, ModelTransactionPolicy, ModelWarmup, Parameter,
    QueuePolicy, Reshape, SequenceBatching, TimeoutAction, VersionPolicy, WarmupInput, load_model_config,
    load_model_yaml, load_pbtxt, parse_model_yaml, parse_pbtxt,
};
pub use node::SpanIndex;
pub use repository::{
    ModelEntry, RepositoryScan, check_gateway_file, check_model_repository, load_model_dir, scan_repository,
};
pub use routes::{
    AdminListener, Backoff, CallerIdentity, CallerOverride, Callers, CanaryAnalysis, ConnectionLimits,
    DataListener, Destination, Endpoint, FaultAbort, FaultDelay, FaultInjection, GatewayConfig, GrpcCode,
    HeaderMatch, Listeners, Mirror, OutlierDetection, Promotion, Quota, RetryBudget, RetryOn, RetryPolicy,
    Route, RouteMatch, RoutingRules, ServerTls, Unidentified, Upstream, UpstreamProtocol, UpstreamTls,
    load_gateway_config, parse_gateway_config,
};
pub use units::{ByteSize, Rate};
pub use watcher::{ConfigWatcher, WatchOptions, gateway_loader};

/// Config files larger than this are refused before parsing (1 MiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

pub(crate) fn too_large(file: &Path, size: u64) -> Diagnostic {
    Diagnostic::error(
        file,
        Pos::default(),
        format!("the file is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit for config files"),
    )
    .with_hint("a config this large is almost certainly not the intended file")
}

//! Command-line flags, named as `tritonserver` names them for the options the two share, so KServe
//! runtimes and scripts switch by changing only the binary name. `--flag=value` and `--flag value`
//! both work; booleans also accept a bare `--flag` (true).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use infergate_protocol::grpc::TRITONCLIENT_MAX_MESSAGE_BYTES;

use crate::core::CoreOptions;
use crate::memory_budget::MemoryBudget;
use crate::model_config::SpecDefaults;
use crate::repository::{ControlMode, RepositoryOptions};
use crate::version::{GpuFallback, LoadOptions};

/// `--model-memory-limit`: a byte size above zero.
fn parse_memory_limit(text: &str) -> Result<u64, String> {
    match infergate_config::units::parse_byte_size(text)? {
        infergate_config::ByteSize(0) => {
            Err("the limit must be above 0 (leave the flag out for no limit)".into())
        }
        infergate_config::ByteSize(n) => Ok(n),
    }
}

/// The infergate backend: a Triton-compatible inference server for ONNX models.
#[derive(Debug, Parser)]
#[command(
    name = "infergate-backend",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// `check <repo>` validates a repository without serving it.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Serving flags (when no subcommand is given).
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate model repositories (configs and ONNX models) and exit 0 when every model can load,
    /// 1 with every problem listed otherwise.
    Check(CheckArgs),
}

/// `check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Repository folders to check.
    #[arg(required = true)]
    pub repositories: Vec<PathBuf>,
    /// Treat a model without a config file as an error (as `--strict-model-config` does when serving).
    #[arg(long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub strict_model_config: bool,
    /// Also run each model once on zero inputs with the CPU executor.
    #[arg(long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub run: bool,
}

/// How much the server logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (Triton's `default`).
    Default,
    /// Human-readable lines with RFC 3339 time stamps (Triton's `ISO8601`).
    #[value(name = "ISO8601", alias = "iso8601")]
    Iso8601,
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines with time stamps (the gateway's spelling of `ISO8601`).
    Text,
}

/// `--model-control-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ControlModeArg {
    /// Load every model at start-up; no changes afterwards.
    None,
    /// Load every model, then follow changes to the repository (file watch).
    Poll,
    /// Load `--load-model` models; then the repository API loads and unloads.
    Explicit,
}

/// `--gpu-fallback` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GpuFallbackArg {
    /// A `KIND_GPU` instance group fails to load when there is no wgpu adapter.
    Fail,
    /// A `KIND_GPU` instance group runs on the CPU executor when there is no wgpu adapter.
    Cpu,
}

/// Flags of the server.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Model repository folder (repeat for several). Alias: --model-store.
    #[arg(long = "model-repository", visible_alias = "model-store", value_name = "PATH")]
    pub model_repository: Vec<PathBuf>,
    /// REST port (HTTP/1.1 and h2c).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// gRPC port.
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Prometheus metrics port (`/metrics`).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// Address the REST port binds to (all interfaces by default, as Triton).
    #[arg(long, default_value = "0.0.0.0")]
    pub http_address: IpAddr,
    /// Address the gRPC port binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub grpc_address: IpAddr,
    /// Address the metrics port binds to.
    #[arg(long, default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,
    /// Serve REST.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub allow_http: bool,
    /// Serve gRPC.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub allow_grpc: bool,
    /// Serve metrics.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub allow_metrics: bool,
    /// none: load everything once; poll: follow repository changes; explicit: load what is asked.
    #[arg(long, value_enum, default_value_t = ControlModeArg::None)]
    pub model_control_mode: ControlModeArg,
    /// Model to load at start-up in explicit mode (repeat; `*` = every model).
    #[arg(long, value_name = "NAME")]
    pub load_model: Vec<String>,
    /// Poll mode: seconds the repository must stay unchanged before changes are applied (changes are
    /// seen through a file watch, not by polling; default 0.5 s).
    #[arg(long, value_name = "SECS")]
    pub repository_poll_secs: Option<u64>,
    /// Refuse models without a config file instead of deriving the config from the ONNX model.
    #[arg(long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub strict_model_config: bool,
    /// Same as --strict-model-config=true (tritonserver's newer spelling).
    #[arg(long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_auto_complete_config: bool,
    /// Ready only when every model that should serve does.
    #[arg(long, default_value_t = true, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub strict_readiness: bool,
    /// Verbose logging level (0: info; 1: debug; 2 and more: trace).
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,
    /// Log line format (`default`, `ISO8601`, `text` or `json`); colours only on a terminal.
    #[arg(long, env = "INFERGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Default)]
    pub log_format: LogFormat,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish before the process exits.
    #[arg(long, default_value_t = 30)]
    pub exit_timeout_secs: u64,
    /// Largest REST request body in bytes (compressed and decompressed).
    #[arg(long, default_value_t = 64 << 20)]
    pub http_max_input_size: usize,
    /// Largest gRPC message received or sent, in bytes (compressed and decompressed). A larger request
    /// is refused with RESOURCE_EXHAUSTED before its body is read. Default: Triton's (2 GiB − 1).
    #[arg(long, default_value_t = TRITONCLIENT_MAX_MESSAGE_BYTES as u64, value_parser = clap::value_parser!(u64).range(1..=TRITONCLIENT_MAX_MESSAGE_BYTES as u64))]
    pub grpc_max_message_size: u64,
    /// Inference requests in the server at once; more are refused with UNAVAILABLE (0 = no limit).
    #[arg(long, default_value_t = 0)]
    pub max_concurrent_requests: usize,
    /// Cap on every model's queue per priority level (0 = as each config says). Full: UNAVAILABLE
    /// "Exceeds maximum queue size".
    #[arg(long, default_value_t = 0)]
    pub max_queue_size: usize,
    /// Refuse model versions without a MANIFEST.sha256.
    #[arg(long, default_value_t = false, action = ArgAction::Set, value_parser = BoolishValueParser::new(),
          num_args = 0..=1, default_missing_value = "true")]
    pub require_model_manifest: bool,
    /// What the loaded model versions' files may add up to (`4GiB`, `512MiB`, bytes): a version that would
    /// go over is refused before it is read, and the loaded ones keep serving. Unset: no limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_limit)]
    pub model_memory_limit: Option<u64>,
    /// What a KIND_GPU instance group does on a machine without any wgpu adapter.
    #[arg(long, value_enum, default_value_t = GpuFallbackArg::Fail)]
    pub gpu_fallback: GpuFallbackArg,
    /// CPU threads per CPU-executor instance (default: the engine's choice).
    #[arg(long)]
    pub cpu_threads: Option<usize>,
}

impl ServeArgs {
    /// The core's options.
    pub fn core_options(&self) -> CoreOptions {
        CoreOptions {
            repository: RepositoryOptions {
                roots: self.model_repository.clone(),
                mode: match self.model_control_mode {
                    ControlModeArg::None => ControlMode::None,
                    ControlModeArg::Poll => ControlMode::Poll,
                    ControlModeArg::Explicit => ControlMode::Explicit,
                },
                strict_model_config: self.strict_model_config || self.disable_auto_complete_config,
                load: LoadOptions {
                    gpu_fallback: match self.gpu_fallback {
                        GpuFallbackArg::Fail => GpuFallback::Fail,
                        GpuFallbackArg::Cpu => GpuFallback::Cpu,
                    },
                    require_manifest: self.require_model_manifest,
                    cpu_threads: self.cpu_threads,
                    memory: MemoryBudget::new(self.model_memory_limit),
                },
                defaults: SpecDefaults {
                    max_queue_size: self.max_queue_size,
                },
                startup_models: self.load_model.clone(),
            },
            max_concurrent_requests: self.max_concurrent_requests,
            strict_readiness: self.strict_readiness,
            poll_debounce: self.repository_poll_secs.map_or(Duration::from_millis(500), |s| {
                Duration::from_secs(s).max(Duration::from_millis(100))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("infergate-backend").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn tritonserver_flags_parse_in_both_spellings() {
        let c = parse(&[
            "--model-store=/models",
            "--model-repository",
            "/more",
            "--http-port=9000",
            "--grpc-port",
            "9001",
            "--allow-grpc=false",
            "--allow-http",
            "--model-control-mode=explicit",
            "--load-model=a",
            "--load-model",
            "b",
            "--repository-poll-secs=0",
            "--strict-model-config=true",
            "--log-verbose=1",
            "--exit-timeout-secs",
            "5",
        ]);
        let s = &c.serve;
        assert!(c.command.is_none());
        assert_eq!(
            s.model_repository,
            vec![PathBuf::from("/models"), PathBuf::from("/more")]
        );
        assert_eq!((s.http_port, s.grpc_port, s.metrics_port), (9000, 9001, 8002));
        assert!(s.allow_http && !s.allow_grpc && s.allow_metrics);
        assert_eq!(s.load_model, vec!["a", "b"]);
        assert_eq!(s.exit_timeout_secs, 5);
        let o = s.core_options();
        assert_eq!(o.repository.mode, ControlMode::Explicit);
        assert!(o.repository.strict_model_config);
        assert_eq!(o.poll_debounce, Duration::from_millis(100));
    }

    #[test]
    fn defaults_match_tritonserver() {
        let c = parse(&["--model-repository=/m"]);
        let s = &c.serve;
        assert_eq!((s.http_port, s.grpc_port, s.metrics_port), (8000, 8001, 8002));
        assert_eq!(s.http_address.to_string(), "0.0.0.0");
        assert!(s.allow_http && s.allow_grpc && s.strict_readiness && !s.strict_model_config);
        assert_eq!(s.exit_timeout_secs, 30);
        assert_eq!(s.core_options().repository.mode, ControlMode::None);
    }

    #[test]
    fn check_is_a_subcommand() {
        let c = parse(&["check", "/models", "--strict-model-config"]);
        match c.command {
            Some(Command::Check(a)) => {
                assert_eq!(a.repositories, vec![PathBuf::from("/models")]);
                assert!(a.strict_model_config);
            }
            other => panic!("{other:?}"),
        }
    }
}

//! `infergate-gateway`: the sidecar binary. `infergate-gateway --config FILE` runs it; `infergate-gateway
//! check FILE` validates a routes file (exit 0 when valid, 1 with every problem listed).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use infergate_config::{load_gateway_config, read_config_file};
use infergate_gateway::process;
use infergate_gateway::server::Overrides;

/// mimalloc rather than glibc's allocator: a request's few allocations (futures of 1–3 KB among them, past
/// glibc's per-thread cache) cost ≈ 900 instructions less per proxied request (callgrind; docs/benchmarks-history.md,
/// gateway, *the request handed over before its future is made*). Without transparent huge pages (`no_thp`), which doubled the idle RSS.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The infergate sidecar gateway.
#[derive(Debug, Parser)]
#[command(name = "infergate-gateway", version, about)]
struct Cli {
    /// The routes file (YAML): listeners, upstreams, callers, routes. Watched and reloaded when it changes.
    #[arg(long, env = "INFERGATE_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Data listener address, overriding `listeners.data.address`.
    #[arg(long, env = "INFERGATE_GATEWAY_DATA_ADDRESS")]
    data_address: Option<SocketAddr>,
    /// Admin listener address, overriding `listeners.admin.address`.
    #[arg(long, env = "INFERGATE_GATEWAY_ADMIN_ADDRESS")]
    admin_address: Option<SocketAddr>,
    /// Data workers (threads, each with its own listener socket and upstream connections), overriding
    /// `listeners.worker_threads`; default one per CPU core.
    #[arg(long, env = "INFERGATE_GATEWAY_WORKERS", value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
    /// On SIGTERM, how long `/ready` answers 503 while the listeners still accept and serve (e.g. `5s`), before
    /// the drain of `listeners.drain_timeout` starts: the time the cluster takes to stop sending new requests
    /// to a pod that is leaving. HTTP/1.1 answers meanwhile close their connection, so clients move on. 0
    /// (default) drains at once.
    #[arg(long, env = "INFERGATE_GATEWAY_DRAIN_DELAY", value_parser = infergate_config::units::parse_duration, default_value = "0s")]
    drain_delay: std::time::Duration,
    /// Log lines as `json` (one object per line, for log collectors) or `text`. Colours only on a terminal.
    #[arg(long, env = "INFERGATE_LOG_FORMAT", value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
    #[command(subcommand)]
    command: Option<Command>,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a routes file: exit 0 when valid, 1 with every problem listed.
    Check {
        /// The routes file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    match cli.command {
        Some(Command::Check { file }) => check(&file),
        None => match run(cli) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("infergate-gateway: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn init_tracing(format: LogFormatArg) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("INFERGATE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let format = match format {
        LogFormatArg::Json => infergate_telemetry::LogFormat::Json,
        LogFormatArg::Text => infergate_telemetry::LogFormat::Text,
    };
    infergate_telemetry::init_logging(filter, format);
}

fn check(file: &Path) -> ExitCode {
    let text = match read_config_file(file) {
        Ok(t) => t,
        Err(d) => {
            eprintln!("{d}");
            return ExitCode::FAILURE;
        }
    };
    let (config, warnings) = match load_gateway_config(&text, file) {
        Ok(pair) => pair,
        Err(diags) => {
            eprintln!("{diags}");
            eprintln!(
                "{}: {} problem(s); nothing was applied",
                file.display(),
                diags.errors().count()
            );
            return ExitCode::FAILURE;
        }
    };
    for w in warnings.iter() {
        eprintln!("{w}");
    }
    // Compile too (TLS files, routes), exactly as a running gateway would.
    match process::check_compiles(&text, file) {
        Ok(()) => {
            println!(
                "{}: OK ({} upstreams, {} routes)",
                file.display(),
                config.rules.upstreams.len(),
                config.rules.routes.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let path = cli
        .config
        .context("no config file given: pass --config FILE (or set INFERGATE_GATEWAY_CONFIG), or run 'infergate-gateway check FILE'")?;
    let text = read_config_file(&path).map_err(|d| anyhow::anyhow!("{d}"))?;
    let (_, warnings) = load_gateway_config(&text, &path).map_err(|d| anyhow::anyhow!("{d}"))?;
    for w in warnings.iter() {
        tracing::warn!("{w}");
    }
    let overrides = Overrides {
        data: cli.data_address,
        admin: cli.admin_address,
        workers: cli.workers.map(usize::from),
    };
    process::serve_until_signal(&text, &path, overrides, cli.drain_delay)
}

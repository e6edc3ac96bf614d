//! The infergate backend binary: serve a model repository (tritonserver-compatible flags), or `check` one.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use infergate_backend::check::check_repositories;
use infergate_backend::cli::{Cli, Command, LogFormat};
use infergate_backend::process;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than glibc's allocator: tensors of hundreds of kilobytes and more (a request's
/// input, outputs, the buffers of the rayon threads) came back from glibc as fresh pages on most runs
/// (its per-thread heaps are trimmed as they empty), a page fault per 4 KiB: a convolution with a
/// 3 MB output ran in 7.4 ms per request instead of 1.5, the 640×640 text detector about 10% slower.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(verbose: u32, format: LogFormat) {
    let level = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    // RUST_LOG, when set, wins (e.g. RUST_LOG=infergate_backend=debug,hyper=info).
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let format = match format {
        LogFormat::Json => infergate_telemetry::LogFormat::Json,
        LogFormat::Iso8601 | LogFormat::Text => infergate_telemetry::LogFormat::Text,
        LogFormat::Default => infergate_telemetry::LogFormat::TextNoTime,
    };
    infergate_telemetry::init_logging(filter, format);
}

fn main() -> ExitCode {
    let process_start = Instant::now();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check(args)) => {
            let r = check_repositories(&args.repositories, args.strict_model_config, args.run);
            for w in &r.warnings {
                // Each warning names its file and says "warning:" itself.
                eprintln!("{w}");
            }
            for p in &r.problems {
                eprintln!("error: {p}");
            }
            if r.ok() {
                println!("ok: {} models, {} versions checked", r.models, r.versions);
                ExitCode::SUCCESS
            } else {
                println!(
                    "{} problems in {} models ({} versions checked)",
                    r.problems.len(),
                    r.models,
                    r.versions
                );
                ExitCode::from(1)
            }
        }
        None => {
            init_logging(cli.serve.log_verbose, cli.serve.log_format);
            match process::serve_until_signal(cli.serve, process_start) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

//! The infergate backend binary: serve a model repository (tritonserver-compatible flags), or `check` one.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use infergate_backend::check::check_repositories;
use infergate_backend::cli::{Cli, Command, LogFormat, ServeArgs};
use infergate_backend::core::ServerCore;
use infergate_backend::grpc::{GrpcLimits, serve_grpc};
use infergate_backend::http::{HttpLimits, serve_http};
use infergate_backend::metrics_server::serve_metrics;
use infergate_protocol::InferenceService;
use tokio::net::TcpListener;
use tokio::sync::watch;
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
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            match runtime.block_on(serve(cli.serve, process_start)) {
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

async fn bind(what: &str, flag: &str, addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for {what} on {addr}: {e} (choose another port with {flag})"))
}

async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

async fn serve(args: ServeArgs, process_start: Instant) -> Result<(), String> {
    if args.model_repository.is_empty() {
        return Err("no model repository: pass --model-repository PATH (alias --model-store)".into());
    }
    for root in &args.model_repository {
        if !root.is_dir() {
            return Err(format!("--model-repository {}: not a folder", root.display()));
        }
    }
    let core = ServerCore::new(args.core_options());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut tasks = Vec::new();

    // Listeners first: a taken port fails the start at once, before models load.
    if args.allow_metrics {
        let addr = SocketAddr::new(args.metrics_address, args.metrics_port);
        let listener = bind("metrics", "--metrics-port", addr).await?;
        tracing::info!(%addr, "metrics on /metrics");
        tasks.push(tokio::spawn(serve_metrics(
            listener,
            core.clone(),
            stopped(stop_rx.clone()),
        )));
    }
    if args.allow_http {
        let addr = SocketAddr::new(args.http_address, args.http_port);
        let listener = bind("REST", "--http-port", addr).await?;
        let mut limits = HttpLimits {
            max_body_bytes: args.http_max_input_size,
            ..HttpLimits::default()
        };
        if args.max_concurrent_requests > 0 {
            limits.max_concurrent_requests = args.max_concurrent_requests;
        }
        tracing::info!(%addr, "REST (HTTP/1.1 and h2c)");
        tasks.push(tokio::spawn(serve_http(
            listener,
            core.clone(),
            limits,
            stopped(stop_rx.clone()),
        )));
    }
    if args.allow_grpc {
        let addr = SocketAddr::new(args.grpc_address, args.grpc_port);
        let listener = bind("gRPC", "--grpc-port", addr).await?;
        let mut limits = GrpcLimits {
            // The flag's range (1..=2 GiB − 1) fits a usize on every platform we build for.
            max_message_bytes: usize::try_from(args.grpc_max_message_size).unwrap_or(usize::MAX),
            ..GrpcLimits::default()
        };
        if args.max_concurrent_requests > 0 {
            limits.max_concurrent_requests = args.max_concurrent_requests;
        }
        tracing::info!(%addr, "gRPC (inference.GRPCInferenceService, grpc.health.v1)");
        let grpc = serve_grpc(listener, core.clone(), limits, stopped(stop_rx.clone()));
        tasks.push(tokio::spawn(async move {
            grpc.await.map_err(|e| std::io::Error::other(e.to_string()))
        }));
    }

    tokio::select! {
        r = core.start() => r?,
        sig = shutdown_signal() => {
            tracing::info!(signal = sig, "stopping during start-up");
            let _ = stop_tx.send(true);
            return Ok(());
        }
    }
    tracing::info!(
        ms = process_start.elapsed().as_millis() as u64,
        ready = core.ready(),
        "infergate backend started"
    );

    let sig = shutdown_signal().await;
    let exit_timeout = Duration::from_secs(args.exit_timeout_secs);
    tracing::info!(
        signal = sig,
        in_flight = core.in_flight(),
        timeout_secs = args.exit_timeout_secs,
        "shutting down"
    );
    let deadline = tokio::time::Instant::now() + exit_timeout;
    core.begin_shutdown();
    let _ = stop_tx.send(true);
    if core.drain(exit_timeout).await {
        tracing::info!("in-flight requests finished");
    } else {
        tracing::warn!(
            left = core.in_flight(),
            "exit timeout reached with requests still in flight"
        );
    }
    for t in tasks {
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            tracing::warn!("a front end did not close its connections before the exit timeout");
            break;
        }
    }
    tracing::info!("bye");
    Ok(())
}

//! The backend process's life: the front ends (metrics, REST, gRPC) bound first, the models loaded, then
//! serving until SIGTERM or SIGINT, then a drain bounded by `--exit-timeout-secs`. `main.rs` calls
//! [`serve_until_signal`], a plain function, rather than awaiting the server in an `async fn` of its own:
//! rustc compiled what such a function awaits (the REST and gRPC stacks, generic over their services) into
//! the binary a second time: ≈ 13 s more CPU on every build.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use infergate_protocol::InferenceService;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::core::ServerCore;
use crate::grpc::{GrpcLimits, serve_grpc};
use crate::http::{HttpLimits, serve_http};
use crate::metrics_server::serve_metrics;

/// Serves `args` on a multi-threaded runtime until SIGTERM or SIGINT, then drains. `process_start` is when
/// the process began, for the start-up time it logs.
pub fn serve_until_signal(args: ServeArgs, process_start: Instant) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(serve(args, process_start))
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

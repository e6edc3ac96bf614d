//! The gateway process's life: start a [`Gateway`] on a runtime of its own, watch the routes file, wait for
//! SIGTERM or SIGINT, then drain. `main.rs` calls this plain function rather than awaiting the server in an
//! `async` block of its own: rustc compiled what such a block awaits into the binary a second time (the whole
//! request path, generic over the listener's connection types): ≈ 15 s more CPU on every build.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use infergate_config::WatchOptions;

use crate::config_state;
use crate::server::{Gateway, Overrides};

/// Serves the routes file `path` (its content `text`) until SIGTERM or SIGINT; then `/ready` turns false,
/// the listeners keep serving for `drain_delay`, and the open connections drain.
pub fn serve_until_signal(
    text: &str,
    path: &Path,
    overrides: Overrides,
    drain_delay: Duration,
) -> anyhow::Result<()> {
    // The data plane runs on worker threads of its own (`--workers`, else `listeners.worker_threads`, default
    // one per core), each with a current-thread runtime, started by `Gateway::start`. This thread's runtime
    // keeps the admin API, reloads, DNS re-resolution, signals and metrics upkeep: little work, one thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let gateway = Gateway::start(text, path, overrides).await?;
        // Watches the file's folder (writes, renames, the ConfigMap `..data` swap) and SIGHUP.
        let watcher = gateway
            .watch(WatchOptions::default())
            .map_err(|d| anyhow::anyhow!("{d}"))?;
        wait_for_signal().await?;
        tracing::info!(
            ?drain_delay,
            "shutting down: not ready, then draining in-flight requests"
        );
        drop(watcher);
        let left = gateway.shutdown_after(drain_delay).await;
        tracing::info!(left_open = left, "stopped");
        Ok(())
    })
}

/// Compiles the routes file `path` (its content `text`) exactly as a starting gateway would (TLS files,
/// routes, upstreams), without binding anything: what `infergate-gateway check` runs after validation.
pub fn check_compiles(text: &str, path: &Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a runtime")?;
    // Upstreams are built inside a runtime (their pools hold its handles).
    rt.block_on(async { config_state::load(text, path, None, Some(1)) })
        .map(|_| ())
        .map_err(|d| anyhow::anyhow!("{d}"))
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

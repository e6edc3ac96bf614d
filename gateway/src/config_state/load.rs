//! The loader: a routes file's text → a compiled [`Rules`] value, or every problem with it. Pure: parse and
//! validate (`infergate-config`), keep the running listeners (they are restart-only), compile the routes and
//! upstreams, taking over the running version's long-lived state where settings did not change. Nothing it
//! builds is visible before [`infergate_config::Live`] swaps the value in, so a refused file — whichever check
//! refuses it — leaves the running rules, their state and the bucket store exactly as they were.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use infergate_config::{Diagnostic, Diagnostics, GatewayConfig, Loaded, Loader, Pos, load_gateway_config};

use super::Rules;
use super::upstream_settings::upstream_settings;
use crate::route::CompiledRoutes;
use crate::upstream::Upstream;

/// The loader [`infergate_config::Live`] runs; `workers` overrides the config's `listeners.worker_threads`.
pub fn loader(workers: Option<usize>) -> Loader<Rules> {
    Arc::new(move |text: &str, file: &Path, running: Option<&Rules>| load(text, file, running, workers))
}

/// Parses, validates and compiles `text` (read from `file`) into the next version after `running`, for as
/// many data workers as `workers` (or else the listeners as they run) say.
pub fn load(
    text: &str,
    file: &Path,
    running: Option<&Rules>,
    workers: Option<usize>,
) -> Result<Loaded<Rules>, Diagnostics> {
    let (parsed, warnings) = load_gateway_config(text, file)?;
    let mut warnings = warnings.0;
    let config = match running {
        Some(running) => {
            let (next, restart) = GatewayConfig::reloaded(&running.config, parsed, file);
            warnings.extend(restart);
            next
        }
        None => parsed,
    };
    // The listeners are the running ones on a reload, so the count never changes while the gateway runs.
    let workers = crate::worker::count(workers.or(config.listeners.worker_threads));
    let value = compile(config, running, workers)
        .map_err(|e| whole_file(file, format!("the rules cannot be compiled: {e}")))?;
    Ok(Loaded { value, warnings })
}

/// Compiles a validated config: every check that can fail runs before any upstream is made.
fn compile(config: GatewayConfig, running: Option<&Rules>, workers: usize) -> Result<Rules, String> {
    let rules = &config.rules;
    let mut settings = Vec::with_capacity(rules.upstreams.len());
    for u in &rules.upstreams {
        settings.push(upstream_settings(u, workers)?);
    }
    let routes = CompiledRoutes::compile(rules, running.map(|r| &r.routes)).map_err(|e| e.to_string())?;
    let names: Vec<&str> = rules.upstreams.iter().map(|u| u.name.as_str()).collect();
    for r in routes.routes() {
        for d in r.split.destinations() {
            if !names.contains(&&*d.upstream) {
                return Err(format!(
                    "route '{}' sends traffic to unknown upstream '{}'",
                    r.name, d.upstream
                ));
            }
        }
        if let Some(m) = &r.mirror
            && !names.contains(&&*m.upstream)
        {
            return Err(format!(
                "route '{}' mirrors to unknown upstream '{}'",
                r.name, m.upstream
            ));
        }
    }
    let upstreams: HashMap<Arc<str>, Arc<Upstream>> = settings
        .into_iter()
        .map(|s| {
            let reused = running
                .and_then(|r| r.upstreams.get(s.name.as_str()))
                .filter(|old| *old.settings() == s)
                .cloned();
            let name: Arc<str> = s.name.as_str().into();
            (name, reused.unwrap_or_else(|| Upstream::new(s)))
        })
        .collect();
    Ok(Rules {
        routes,
        upstreams,
        config,
    })
}

fn whole_file(file: &Path, message: String) -> Diagnostics {
    Diagnostics::single(Diagnostic::error(file, Pos::default(), message))
}

//! `infergate-load`: `bench` sends load to an address and reports; `run` runs scenarios from `loadtests/cases/`
//! and checks their invariants; `up` starts a scenario's servers for other clients.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use infergate_loadtests::case::{self, RunOptions, spec::parse_duration};
use infergate_loadtests::load::{self, CallerSpec, LoadPlan, Pace, spread};
use infergate_loadtests::report::Report;
use infergate_loadtests::soak::{self, Limits, SoakOptions};
use infergate_loadtests::{Client, Payload, PayloadKind, Protocol, Target, TlsOptions, plot, pod};

/// Load generator and scenario runner for infergate (and any KServe V2 server).
#[derive(Debug, Parser)]
#[command(name = "infergate-load", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send load to one address and report latency percentiles, errors by kind and the versions that answered.
    Bench(Box<BenchArgs>),
    /// Run scenarios (folders with a case.yaml, or folders of them) and check their invariants.
    Run(RunArgs),
    /// Mixed traffic through the pod for a long time; fails when memory, descriptors or threads grow.
    Soak(SoakArgs),
    /// Start a case's processes (its pod, its peer) without load, print their addresses (`backend_grpc
    /// 127.0.0.1:PORT`, … then `ready`), and keep them until SIGINT or SIGTERM: for other clients (perf_analyzer)
    /// against the servers a case compares.
    Up(UpArgs),
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// The case folder (with case.yaml).
    case: PathBuf,
    /// Folder with infergate-gateway and infergate-backend (else INFERGATE_BIN_DIR).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where the processes' logs go.
    #[arg(long, default_value = "target/loadtests-up")]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
struct SoakArgs {
    /// How long, in minutes.
    #[arg(long, env = "SOAK_MINUTES", default_value_t = 30.0)]
    minutes: f64,
    /// Folder with infergate-gateway and infergate-backend (else INFERGATE_BIN_DIR).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The model repository (with `simple` and `heavy_mlp`).
    #[arg(long, default_value = "deploy/local/models")]
    models: PathBuf,
    /// The folder with the two canary splits edited in turn (routes.yaml, routes-b.yaml).
    #[arg(long, default_value = "loadtests/soak")]
    routes_dir: PathBuf,
    /// Where the table (soak.txt), JSON and plots go.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
    /// How often resources are read.
    #[arg(long, default_value = "10s")]
    sample_every: String,
    /// How often the canary split is edited.
    #[arg(long, default_value = "1m")]
    edit_every: String,
    /// Left out of the trend fit (pools and caches fill).
    #[arg(long, default_value = "1m")]
    warmup: String,
    /// Largest resident-memory growth per process, MiB per minute.
    #[arg(long, default_value_t = 1.0)]
    max_rss_mib_per_min: f64,
    /// Largest growth in open file descriptors per process, per minute.
    #[arg(long, default_value_t = 0.5)]
    max_fds_per_min: f64,
    /// Largest growth in threads per process, per minute.
    #[arg(long, default_value_t = 0.5)]
    max_threads_per_min: f64,
    /// Largest share of failed requests.
    #[arg(long, default_value_t = 0.001)]
    max_error_share: f64,
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// IP:PORT (or localhost:PORT) to load; only this address is connected to.
    #[arg(long)]
    target: String,
    /// Wire protocol.
    #[arg(long, value_enum, default_value = "http1")]
    protocol: Protocol,
    /// With `--protocol h2`: PEM file of the CAs that sign the server's certificate.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// With `--protocol h2`: accept any server certificate (self-signed test servers).
    #[arg(long)]
    insecure: bool,
    /// With `--protocol h2`: the name the server's certificate must carry, also sent as SNI (default: the
    /// target's IP address).
    #[arg(long)]
    server_name: Option<String>,
    /// Model name.
    #[arg(long)]
    model: String,
    /// REST body encoding, built from the model's metadata.
    #[arg(long, value_enum, default_value = "json")]
    payload: PayloadKind,
    /// Replay the *.json / *.bin request bodies of this folder instead (REST only).
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Samples per request when the first dimension is variable.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// A caller: `NAME:concurrency=N` (closed loop) or `NAME:rate=R` (open loop, requests/s); repeatable.
    /// Without one: a caller `load-test` with --concurrency or --rate.
    #[arg(long = "caller")]
    callers: Vec<String>,
    /// Requests in flight for the default caller (closed loop).
    #[arg(long, default_value_t = 8)]
    concurrency: u32,
    /// Requests per second for the default caller (open loop, latency from the intended send time).
    #[arg(long)]
    rate: Option<f64>,
    /// Measured time (`30s`, `2m`); with --requests, whichever ends first.
    #[arg(long)]
    duration: Option<String>,
    /// Measured requests over all callers.
    #[arg(long)]
    requests: Option<u64>,
    /// Warm-up before measuring (not recorded).
    #[arg(long, default_value = "1s")]
    warmup: String,
    /// Per-request timeout.
    #[arg(long, default_value = "10s")]
    timeout: String,
    /// Timeline step for CSV and plots.
    #[arg(long, default_value = "1s")]
    interval: String,
    /// Write JSON, CSV and SVG plots into this folder.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Configured weights per version, drawn beside the measured shares: `1=90,2=10`.
    #[arg(long)]
    weights: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Case folders (with case.yaml), or folders holding case folders.
    #[arg(required = true)]
    cases: Vec<PathBuf>,
    /// Short bounds, invariants only (what `make test` runs).
    #[arg(long)]
    smoke: bool,
    /// Folder with infergate-gateway and infergate-backend (else INFERGATE_BIN_DIR).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where logs, tables, JSON, CSV and plots go.
    #[arg(long, default_value = "target/loadtests")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INFERGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("infergate-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Bench(args) => bench(*args).await,
            Command::Run(args) => run(args).await,
            Command::Soak(args) => soak(args).await,
            Command::Up(args) => up(args).await,
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("infergate-load: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    parse_duration(text)
        .with_context(|| format!("--{flag} '{text}': write a duration such as 250ms, 10s or 2m"))
}

/// The `index`-th `--caller`: open-loop callers each at their own point of the gap ([`spread`]).
fn parse_caller(text: &str, index: usize) -> anyhow::Result<CallerSpec> {
    let bad = || format!("--caller '{text}': write NAME:concurrency=N or NAME:rate=R");
    let (name, pace) = text.split_once(':').with_context(bad)?;
    let (key, value) = pace.split_once('=').with_context(bad)?;
    let pace = match key {
        "concurrency" => Pace::Closed {
            concurrency: value.parse().ok().filter(|n| *n > 0).with_context(bad)?,
        },
        "rate" => Pace::Open {
            rate: value
                .parse()
                .ok()
                .filter(|r: &f64| r.is_finite() && *r > 0.0)
                .with_context(bad)?,
            phase: spread(index),
        },
        _ => bail!(bad()),
    };
    if name.is_empty() {
        bail!(bad());
    }
    Ok(CallerSpec {
        name: name.to_owned(),
        pace,
        models: Vec::new(),
    })
}

async fn bench(args: BenchArgs) -> anyhow::Result<bool> {
    let target = Target::from_command_line(&args.target)?;
    let timeout = duration("timeout", &args.timeout)?;
    let interval = duration("interval", &args.interval)?;
    let mut callers = args
        .callers
        .iter()
        .enumerate()
        .map(|(i, c)| parse_caller(c, i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if callers.is_empty() {
        callers.push(CallerSpec {
            name: "load-test".into(),
            pace: match args.rate {
                Some(rate) if rate.is_finite() && rate > 0.0 => Pace::Open { rate, phase: 0.0 },
                Some(_) => bail!("--rate must be a number above 0"),
                None => Pace::Closed {
                    concurrency: args.concurrency.max(1),
                },
            },
            models: Vec::new(),
        });
    }
    let plan = LoadPlan {
        callers,
        warmup: duration("warmup", &args.warmup)?,
        duration: args
            .duration
            .as_deref()
            .map(|d| duration("duration", d))
            .transpose()?,
        requests: args.requests,
        interval,
        max_in_flight: 4096,
    };
    if plan.duration.is_none() && plan.requests.is_none() {
        bail!("give --duration or --requests (or both) to bound the run");
    }
    let tls = TlsOptions {
        ca: args.ca.clone(),
        insecure: args.insecure,
        server_name: args.server_name.clone(),
    };
    let client = match args.protocol {
        Protocol::H2 => Client::with_tls(target, timeout, &tls)?,
        _ if tls != TlsOptions::default() => {
            bail!("--ca, --insecure and --server-name apply to --protocol h2 (h2 over TLS) only")
        }
        other => Client::new(target, other, timeout),
    };
    let payload = match &args.replay {
        Some(dir) => Payload::replay(&args.model, dir)?,
        None => {
            let meta = client.metadata(&args.model).await?;
            Payload::from_metadata(&meta, args.batch, args.payload)?
        }
    };
    let start = tokio::time::Instant::now();
    let result = load::run(client, payload, &plan, start, !args.quiet).await;
    let report = Report {
        name: format!("{} {}", args.model, plan_words(&plan)),
        target: format!("{:?} {}", args.protocol, target.addr),
        total: result.total(interval).summary(result.elapsed),
        callers: result
            .callers
            .iter()
            .map(|(k, r)| (k.clone(), r.summary(result.elapsed)))
            .collect(),
    };
    print!("{}", report.table());
    if let Some(out) = &args.out {
        report
            .write(out, "bench")
            .with_context(|| format!("writing into {}", out.display()))?;
        let weights = parse_weights(args.weights.as_deref())?;
        for f in plot::draw(out, "bench", &report.name, &report.total, &weights)? {
            println!("plot: {f}");
        }
        println!("JSON and CSV: {}", out.join("bench.{json,csv}").display());
    }
    Ok(true)
}

fn plan_words(plan: &LoadPlan) -> String {
    let bound = match (plan.duration, plan.requests) {
        (Some(d), Some(n)) => format!("{:?} or {n} requests", d),
        (Some(d), None) => format!("{d:?}"),
        (None, Some(n)) => format!("{n} requests"),
        (None, None) => String::new(),
    };
    format!("{} caller(s), {bound}", plan.callers.len())
}

fn parse_weights(text: Option<&str>) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for part in text.unwrap_or_default().split(',').filter(|p| !p.is_empty()) {
        let (v, w) = part
            .split_once('=')
            .with_context(|| format!("--weights '{part}': write VERSION=WEIGHT, e.g. 1=90,2=10"))?;
        let w: f64 = w
            .parse()
            .with_context(|| format!("--weights '{part}': the weight is not a number"))?;
        out.insert(v.to_owned(), w);
    }
    let sum: f64 = out.values().sum();
    if sum > 0.0 {
        for w in out.values_mut() {
            *w *= 100.0 / sum;
        }
    }
    Ok(out)
}

/// The case folders under `path`: itself when it holds case.yaml, else its subfolders that do.
fn case_dirs(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.join("case.yaml").is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("{}: not a case folder nor a folder of cases", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.yaml").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        bail!("{}: no case.yaml in it or in its subfolders", path.display());
    }
    Ok(dirs)
}

async fn run(args: RunArgs) -> anyhow::Result<bool> {
    let bin_dir = pod::bin_dir(args.bin_dir.as_deref()).context(
        "where are infergate-gateway and infergate-backend? pass --bin-dir (e.g. target/debug) or set INFERGATE_BIN_DIR",
    )?;
    let mut dirs = Vec::new();
    for c in &args.cases {
        dirs.extend(case_dirs(c)?);
    }
    let opts = RunOptions {
        bin_dir,
        out_dir: args.out.clone(),
        smoke: args.smoke,
        progress: !args.quiet,
    };
    let mut all_passed = true;
    let mut summary = Vec::new();
    for dir in dirs {
        let started = std::time::Instant::now();
        println!(
            "==> case {}{}",
            dir.display(),
            if args.smoke { " (smoke)" } else { "" }
        );
        let result = case::run(&dir, &opts).await?;
        for (k, v) in &result.figures {
            println!("  figure  {k}: {v}");
        }
        for v in &result.verdicts {
            println!(
                "  {}  [{}] {} — {}",
                if v.pass { "ok  " } else { "FAIL" },
                v.phase,
                v.check,
                v.measured
            );
        }
        all_passed &= result.passed();
        summary.push((result.name.clone(), result.passed(), started.elapsed()));
    }
    println!("==> cases");
    for (name, pass, took) in &summary {
        println!(
            "  {}  {name} ({:.1} s)",
            if *pass { "ok  " } else { "FAIL" },
            took.as_secs_f64()
        );
    }
    println!("outputs in {}", args.out.display());
    Ok(all_passed)
}

async fn up(args: UpArgs) -> anyhow::Result<bool> {
    let bin_dir = pod::bin_dir(args.bin_dir.as_deref()).context(
        "where are infergate-gateway and infergate-backend? pass --bin-dir (e.g. target/debug) or set INFERGATE_BIN_DIR",
    )?;
    // Listening before anything starts: a signal while the servers come up still stops them.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let spec = case::load(&args.case)?;
    let opts = RunOptions {
        bin_dir,
        out_dir: args.out,
        smoke: false,
        progress: false,
    };
    let running = tokio::select! {
        r = case::start(&args.case, &spec, &opts) => r?,
        _ = tokio::signal::ctrl_c() => return Ok(false),
        _ = terminate.recv() => return Ok(false),
    };
    for (what, target) in running.addresses() {
        println!("{what} {}", target.addr);
    }
    println!("ready");
    eprintln!(
        "up: case {} runs (logs in {}); SIGINT or SIGTERM stops it",
        running.name,
        running.out.display()
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    running.stop().await;
    Ok(true)
}

async fn soak(args: SoakArgs) -> anyhow::Result<bool> {
    let bin_dir = pod::bin_dir(args.bin_dir.as_deref()).context(
        "where are infergate-gateway and infergate-backend? pass --bin-dir (e.g. target/debug) or set INFERGATE_BIN_DIR",
    )?;
    if !(args.minutes.is_finite() && args.minutes > 0.0) {
        bail!(
            "--minutes (SOAK_MINUTES) must be a number above 0, not {}",
            args.minutes
        );
    }
    let opts = SoakOptions {
        bin_dir,
        models: args.models,
        routes_dir: args.routes_dir,
        out_dir: args.out.clone(),
        duration: Duration::from_secs_f64(args.minutes * 60.0),
        sample_every: duration("sample-every", &args.sample_every)?,
        edit_every: duration("edit-every", &args.edit_every)?,
        warmup: duration("warmup", &args.warmup)?,
        limits: Limits {
            rss_mib: args.max_rss_mib_per_min,
            fds: args.max_fds_per_min,
            threads: args.max_threads_per_min,
        },
        max_error_share: args.max_error_share,
    };
    println!(
        "==> soak: {} minutes of mixed traffic; a line per minute, the table at the end",
        args.minutes
    );
    let result = soak::run(&opts).await?;
    print!("{}", result.table());
    let failed: u64 = result.errors.values().sum();
    println!(
        "  {}  {} requests, {failed} failed {:?} (limit {} of them), {} routes edits",
        if failed as f64 <= opts.max_error_share * result.requests as f64 {
            "ok  "
        } else {
            "FAIL"
        },
        result.requests,
        result.errors,
        opts.max_error_share,
        result.edits
    );
    println!(
        "table, JSON and plots (soak.txt, soak.json, soak-{{rss,fds,threads,latency}}.svg) in {}",
        args.out.display()
    );
    Ok(result.passed())
}

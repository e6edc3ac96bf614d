//! Where a model's time goes, node by node, on our CPU executor beside onnxruntime's profiler
//! (`SessionOptions.enable_profiling`, CPU provider, threads = the cores this process may run on, so
//! `taskset -c 0` compares one thread with one) for the same model and input shapes.
//!
//! `cargo run --release -p infergate-engine --example profile -- MODEL.onnx [--batch N]
//!  [--input NAME=D0,D1,..]... [--runs R] [--top K] [--no-ort]`
//!
//! Dynamic dims other than the batch take their value from `--input`. Prints the wall time per run of both,
//! the time per operator type, and the K slowest nodes of ours with onnxruntime's time for the node of the same
//! name (onnxruntime keeps a fused node's first name; so do we), or, for a node onnxruntime moved to its
//! blocked NCHWc layout and named after its output (`<output>_nchwc`), the node of ours with that output.
//! `RUST_LOG=infergate_engine=debug` also prints the plan's choices (a batch run whole, split or serial,
//! and the times that decided it). Needs the project venv's onnxruntime (`INFERGATE_PYTHON`, default
//! `~/.cache/infergate/venv/bin/python`) unless `--no-ort`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use infergate_engine::cpu::{CpuExecutor, NodeTiming, SETTLING_RUNS};
use infergate_engine::{DataType, Dim, Model, SessionOptions, Tensor};

/// The backend binary's allocator, so that the figures are the ones it serves at.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs before timing: a batch that can run split settles on its way over its first
/// [`SETTLING_RUNS`] (the CPU executor times each way on real runs), then one more.
const WARMUP_RUNS: usize = SETTLING_RUNS + 1;

/// onnxruntime's side: runs the model with profiling on and prints one JSON object:
/// `{"wall_ms": per-run wall time, "nodes": [[name, op, mean µs], ...]}` in execution order.
const ORT_PROFILE: &str = r#"
import json, os, sys, tempfile, time
import numpy as np
import onnxruntime as ort
path, spec, runs = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
feeds = {}
for name, dtype, shape in spec:
    if dtype == "int64":
        feeds[name] = np.ones(shape, np.int64) if "mask" in name else rng.integers(0, 100, shape).astype(np.int64)
    else:
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
def session(profile):
    o = ort.SessionOptions()
    o.intra_op_num_threads = len(os.sched_getaffinity(0))
    if profile:
        o.enable_profiling = True
        o.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
s = session(False)
for _ in range(3):
    s.run(None, feeds)
t = time.perf_counter()
for _ in range(runs):
    s.run(None, feeds)
wall = (time.perf_counter() - t) / runs
s = session(True)
for _ in range(3):
    s.run(None, feeds)
f = s.end_profiling()
s = session(True)
for _ in range(runs):
    s.run(None, feeds)
f = s.end_profiling()
events = json.load(open(f))
order, total, ops = [], {}, {}
for e in events:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        n = e["name"][: -len("_kernel_time")]
        if n not in total:
            order.append(n)
            total[n] = 0
        total[n] += e["dur"]
        ops[n] = e.get("args", {}).get("op_name", "?")
print(json.dumps({"wall_ms": wall * 1e3, "nodes": [[n, ops[n], total[n] / runs] for n in order]}))
"#;

struct Args {
    model: PathBuf,
    batch: usize,
    dims: HashMap<String, Vec<usize>>,
    runs: usize,
    top: usize,
    ort: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        model: PathBuf::new(),
        batch: 1,
        dims: HashMap::new(),
        runs: 10,
        top: 25,
        ort: true,
    };
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "--batch" => a.batch = value("a number")?.parse()?,
            "--runs" => a.runs = value("a number")?.parse::<usize>()?.max(1),
            "--top" => a.top = value("a number")?.parse()?,
            "--no-ort" => a.ort = false,
            "--input" => {
                let v = value("NAME=D0,D1,..")?;
                let (name, dims) = v
                    .split_once('=')
                    .with_context(|| format!("--input {v}: expected NAME=D0,D1,.."))?;
                let dims = dims
                    .split(',')
                    .map(|d| d.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("--input {v}: dims are numbers"))?;
                a.dims.insert(name.to_string(), dims);
            }
            s if s.starts_with("--") => bail!("unknown option {s}"),
            s => a.model = PathBuf::from(s),
        }
    }
    if a.model.as_os_str().is_empty() {
        bail!(
            "usage: profile MODEL.onnx [--batch N] [--input NAME=D0,D1,..]... [--runs R] [--top K] [--no-ort]"
        );
    }
    Ok(a)
}

/// One named input: its name, element type, shape and the tensor itself.
type NamedInput = (String, DataType, Vec<usize>, Tensor);

/// Deterministic inputs: the shapes the signature and `--input` give, ids in 0..100, masks all ones.
fn make_inputs(model: &Model, a: &Args) -> anyhow::Result<Vec<NamedInput>> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    let mut out = Vec::new();
    for s in &model.signature().inputs {
        let shape: Vec<usize> = match a.dims.get(&s.name) {
            Some(d) => d.clone(),
            None => s
                .dims
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Dim::Fixed(n) => Ok(*n),
                    Dim::Dynamic(_) if i == 0 => Ok(a.batch),
                    Dim::Dynamic(n) => bail!(
                        "input '{}' dim {i} ({n:?}) is dynamic: give its shape with --input {}=D0,D1,..",
                        s.name,
                        s.name
                    ),
                })
                .collect::<anyhow::Result<_>>()?,
        };
        let n: usize = shape.iter().product();
        let t = match s.dtype {
            DataType::I64 if s.name.contains("mask") => Tensor::from_vec(shape.clone(), vec![1i64; n])?,
            DataType::I64 => {
                Tensor::from_vec(shape.clone(), (0..n).map(|_| i64::from(next() % 100)).collect())?
            }
            DataType::F32 => Tensor::from_vec(
                shape.clone(),
                (0..n)
                    .map(|_| (next() as f32 / u32::MAX as f32) * 2.0 - 1.0)
                    .collect(),
            )?,
            other => bail!(
                "input '{}': {other} inputs are not generated by this tool",
                s.name
            ),
        };
        out.push((s.name.clone(), s.dtype, shape, t));
    }
    Ok(out)
}

fn python() -> PathBuf {
    std::env::var_os("INFERGATE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/infergate/venv/bin/python")
        })
}

struct OrtProfile {
    wall_ms: f64,
    nodes: Vec<(String, String, f64)>,
}

fn ort_profile(a: &Args, spec: &serde_json::Value) -> anyhow::Result<OrtProfile> {
    let out = Command::new(python())
        .arg("-c")
        .arg(ORT_PROFILE)
        .arg(&a.model)
        .arg(spec.to_string())
        .arg(a.runs.to_string())
        .output()
        .with_context(|| {
            format!(
                "start {} (set INFERGATE_PYTHON or run `make venv`)",
                python().display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "onnxruntime's profile failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let nodes = v["nodes"]
        .as_array()
        .context("no nodes in onnxruntime's profile")?
        .iter()
        .map(|n| {
            (
                n[0].as_str().unwrap_or("?").to_string(),
                n[1].as_str().unwrap_or("?").to_string(),
                n[2].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    Ok(OrtProfile {
        wall_ms: v["wall_ms"].as_f64().unwrap_or(0.0),
        nodes,
    })
}

fn main() -> anyhow::Result<()> {
    // RUST_LOG=infergate_engine=debug shows the plan's choices (batch split, fusions)
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let a = parse_args()?;
    let mut model = Arc::new(Model::load(&a.model).with_context(|| format!("load {}", a.model.display()))?);
    if let Some(first) = model.first_stage() {
        // a detector's NMS and what follows run between and after the plan: time its network
        println!(
            "the model runs in stages (values it computes decide shapes); profiling the stage before the \
             first cut ({} nodes), against the whole model on onnxruntime",
            first.graph().nodes.len()
        );
        model = Arc::clone(first);
    }
    let inputs = make_inputs(&model, &a)?;
    let tensors: Vec<Tensor> = inputs.iter().map(|i| i.3.clone()).collect();
    let opts = SessionOptions::default();
    let exec = CpuExecutor::new(model.clone(), opts.threads, opts.plan_cache_size)?;
    for _ in 0..WARMUP_RUNS {
        exec.run_blocking(tensors.clone())?;
    }
    // the mean, and the best run: on a shared machine the best is the figure least moved by others' load
    let mut best = Duration::MAX;
    let t = Instant::now();
    for _ in 0..a.runs {
        let run = Instant::now();
        exec.run_blocking(tensors.clone())?;
        best = best.min(run.elapsed());
    }
    let our_wall = t.elapsed().as_secs_f64() * 1e3 / a.runs as f64;
    let our_best = best.as_secs_f64() * 1e3;
    let mut ours: Vec<NodeTiming> = Vec::new();
    let mut split_into = None;
    for r in 0..a.runs {
        let p = exec.profile(tensors.clone())?;
        split_into = p.split_into;
        if r == 0 {
            ours = p.nodes;
        } else {
            for (o, n) in ours.iter_mut().zip(p.nodes) {
                o.time += n.time;
            }
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / a.runs as f64;
    let spec = serde_json::Value::Array(
        inputs
            .iter()
            .map(|(n, dt, shape, _)| {
                serde_json::json!([n, if *dt == DataType::I64 { "int64" } else { "float32" }, shape])
            })
            .collect(),
    );
    let ort = if a.ort {
        Some(ort_profile(&a, &spec)?)
    } else {
        None
    };

    let shapes: Vec<String> = inputs.iter().map(|(n, _, s, _)| format!("{n} {s:?}")).collect();
    println!(
        "model {}  inputs {}  runs {}",
        a.model.display(),
        shapes.join(", "),
        a.runs
    );
    let our_nodes: f64 = ours.iter().map(|o| us(o.time)).sum::<f64>() / 1e3;
    print!(
        "infergate cpu: {our_wall:.3} ms/run, best {our_best:.3} (nodes {our_nodes:.3} ms, {} nodes)",
        ours.len()
    );
    match split_into {
        Some(n) => println!("; runs as {n} one-sample runs: nodes timed on one sample"),
        None => println!(),
    }
    if let Some(o) = &ort {
        let sum: f64 = o.nodes.iter().map(|n| n.2).sum::<f64>() / 1e3;
        println!(
            "onnxruntime:   {:.3} ms/run (nodes {sum:.3} ms, {} nodes)  ratio {:.2}",
            o.wall_ms,
            o.nodes.len(),
            our_wall / o.wall_ms
        );
    }

    let mut by_op: BTreeMap<String, (f64, usize, f64, usize)> = BTreeMap::new();
    for o in &ours {
        let e = by_op.entry(o.op.to_string()).or_default();
        e.0 += us(o.time);
        e.1 += 1;
    }
    if let Some(o) = &ort {
        for n in &o.nodes {
            let e = by_op.entry(format!("ort:{}", n.1)).or_default();
            e.2 += n.2;
            e.3 += 1;
        }
    }
    let mut rows: Vec<_> = by_op.into_iter().collect();
    rows.sort_by(|x, y| (y.1.0 + y.1.2).total_cmp(&(x.1.0 + x.1.2)));
    println!("\ntime per operator (ours: IR ops after fusion; onnxruntime's: its kernels, prefixed ort:)");
    println!("{:32} {:>6} {:>12}", "op", "nodes", "ms/run");
    for (op, (t, n, ot, on)) in &rows {
        if *n > 0 {
            println!("{op:32} {n:>6} {:>12.3}", t / 1e3);
        } else {
            println!("{op:32} {on:>6} {:>12.3}", ot / 1e3);
        }
    }

    let ort_by_name: HashMap<&str, (&str, f64)> = ort
        .as_ref()
        .map(|o| {
            o.nodes
                .iter()
                .map(|n| (n.0.as_str(), (n.1.as_str(), n.2)))
                .collect()
        })
        .unwrap_or_default();
    let mut slow: Vec<&NodeTiming> = ours.iter().collect();
    slow.sort_by_key(|x| std::cmp::Reverse(x.time));
    println!("\nslowest nodes of ours, with onnxruntime's node of the same name or output");
    println!(
        "{:>10} {:>10} {:>6}  {:14} {:22} node",
        "ours µs", "ort µs", "ratio", "op", "output"
    );
    for n in slow.into_iter().take(a.top) {
        // onnxruntime names a node it moved to its blocked layout after its output
        let theirs = ort_by_name
            .get(n.name.as_str())
            .or_else(|| ort_by_name.get(format!("{}_nchwc", n.output_name).as_str()));
        let (o_op, o_us) = theirs
            .map(|(op, t)| (op.to_string(), format!("{t:.1}")))
            .unwrap_or_default();
        let ratio = theirs
            .map(|(_, t)| format!("{:.2}", us(n.time) / t.max(0.001)))
            .unwrap_or_default();
        let op = if o_op.is_empty() {
            n.op.to_string()
        } else {
            format!("{}/{o_op}", n.op)
        };
        println!(
            "{:>10.1} {o_us:>10} {ratio:>6}  {op:14} {:22} {}",
            us(n.time),
            format!("{:?}", n.output_shape),
            n.name
        );
    }
    Ok(())
}

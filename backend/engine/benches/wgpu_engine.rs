//! wgpu executor benchmark, next to onnxruntime (CPU) in the same run: single-op GFLOP/s (MatMul, Conv),
//! per-execution overhead on a 50-node model, and model latency/throughput per batch size.
//!
//! `INFERGATE_BENCH_MODELS=DIR cargo bench -p infergate-engine --bench wgpu_engine`, where DIR was written by
//! `python backend/engine/models/export_models.py DIR --size bench --manifest` (scripts/bench-engine.sh does
//! this). Options: `INFERGATE_BENCH_BATCHES=1,8,32`, `INFERGATE_BENCH_SECONDS=2`, `INFERGATE_BENCH_ONLY=a,b`,
//! `INFERGATE_BENCH_PEER=0` (skip onnxruntime). The adapter is chosen as in production: a real GPU first, then
//! lavapipe; `WGPU_ADAPTER_NAME` / `WGPU_BACKEND` pick another (e.g. the GPU of a device machine, where
//! `INFERGATE_BENCH_ONLY=op_matmul_4096x4096x4096` measures the 40%-of-peak target).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_engine::{AdapterChoice, ExecutorKind, Model, Session, SessionOptions, Tensor};

/// Times onnxruntime on the same files: reads a JSON job list, prints one latency (seconds) per job.
const ORT_SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import onnxruntime as ort
jobs = json.load(open(sys.argv[1]))
for job in jobs:
    sess = ort.InferenceSession(job["path"], providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {}
    for i in job["inputs"]:
        if i["dtype"] == "INT64":
            feeds[i["name"]] = rng.integers(0, i.get("high", 100), size=i["shape"]).astype(np.int64)
        else:
            feeds[i["name"]] = rng.standard_normal(i["shape"]).astype(np.float32)
    for _ in range(3):
        sess.run(None, feeds)
    n, start = 0, time.perf_counter()
    while True:
        sess.run(None, feeds)
        n += 1
        if time.perf_counter() - start >= job["seconds"] and n >= 5:
            break
    print(json.dumps({"name": job["label"], "latency": (time.perf_counter() - start) / n}), flush=True)
"#;

/// Writes a 50-node model (alternating Softmax and Transpose on [8, 8]: neither fuses into the other) for
/// the per-execution overhead figure.
const OVERHEAD_SCRIPT: &str = r#"
import sys
import onnx
from onnx import TensorProto, helper
nodes, prev = [], "x"
for i in range(50):
    out = f"t{i}"
    if i % 2 == 0:
        nodes.append(helper.make_node("Softmax", [prev], [out], axis=-1))
    else:
        nodes.append(helper.make_node("Transpose", [prev], [out], perm=[1, 0]))
    prev = out
nodes.append(helper.make_node("Identity", [prev], ["y"]))
g = helper.make_graph(nodes, "overhead_50", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), sys.argv[1])
"#;

fn python() -> PathBuf {
    std::env::var_os("INFERGATE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/infergate/venv/bin/python")
        })
}

/// Input shapes of a manifest entry at `batch` (a `-1` dim is the batch).
fn shapes(spec: &serde_json::Value, batch: usize) -> Vec<(String, String, Vec<usize>, u64)> {
    spec["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let shape = i["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let d = d.as_i64().unwrap();
                    if d < 0 { batch } else { d as usize }
                })
                .collect();
            (
                i["name"].as_str().unwrap().to_owned(),
                i["dtype"].as_str().unwrap_or("FP32").to_owned(),
                shape,
                i["high"].as_u64().unwrap_or(100),
            )
        })
        .collect()
}

fn tensors(shapes: &[(String, String, Vec<usize>, u64)]) -> Vec<(String, Tensor)> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    shapes
        .iter()
        .map(|(name, dtype, shape, high)| {
            let n: usize = shape.iter().product();
            let t = if dtype == "INT64" {
                Tensor::from_vec(
                    shape.clone(),
                    (0..n).map(|_| i64::from(next() % *high as u32)).collect(),
                )
            } else {
                Tensor::from_vec(
                    shape.clone(),
                    (0..n)
                        .map(|_| next() as f32 / u32::MAX as f32 * 2.0 - 1.0)
                        .collect(),
                )
            };
            (name.clone(), t.unwrap())
        })
        .collect()
}

/// Mean latency over at least `seconds`, or the engine's refusal (e.g. a tensor over the adapter's binding
/// limit at a large batch), which the table reports instead of a figure.
fn measure(session: &Session, inputs: &[(String, Tensor)], seconds: f64) -> Result<Duration, String> {
    for _ in 0..2 {
        session.run_blocking(inputs.to_vec()).map_err(|e| e.to_string())?;
    }
    let start = Instant::now();
    let mut n = 0u32;
    loop {
        session.run_blocking(inputs.to_vec()).map_err(|e| e.to_string())?;
        n += 1;
        if start.elapsed().as_secs_f64() >= seconds && n >= 3 {
            return Ok(start.elapsed() / n);
        }
    }
}

struct Job {
    label: String,
    path: PathBuf,
    inputs: Vec<(String, String, Vec<usize>, u64)>,
    flops: Option<f64>,
    batch: usize,
}

fn ort_latencies(jobs: &[Job], seconds: f64, dir: &Path) -> Vec<Option<f64>> {
    if std::env::var("INFERGATE_BENCH_PEER").as_deref() == Ok("0") {
        return vec![None; jobs.len()];
    }
    let list: Vec<serde_json::Value> = jobs
        .iter()
        .map(|j| {
            serde_json::json!({
                "label": j.label,
                "path": j.path,
                "seconds": seconds,
                "inputs": j.inputs.iter().map(|(n, d, s, h)| serde_json::json!({"name": n, "dtype": d, "shape": s, "high": h})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let spec = dir.join("wgpu_bench_ort_jobs.json");
    std::fs::write(&spec, serde_json::to_vec(&list).unwrap()).unwrap();
    let out = Command::new(python())
        .args(["-c", ORT_SCRIPT])
        .arg(&spec)
        .output()
        .unwrap_or_else(|e| panic!("start {} (run `make venv`): {e}", python().display()));
    assert!(
        out.status.success(),
        "onnxruntime timing failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let results: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    jobs.iter()
        .map(|j| {
            results
                .iter()
                .find(|r| r["name"] == j.label.as_str())
                .and_then(|r| r["latency"].as_f64())
        })
        .collect()
}

/// The adapter the executor picks (same order: GPUs before CPU adapters, native APIs before GL).
fn adapter_name() -> String {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    if let Ok(want) = std::env::var("WGPU_ADAPTER_NAME") {
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&want.to_lowercase()));
    }
    adapters.sort_by_key(|a| {
        let i = a.get_info();
        (
            i.device_type == wgpu::DeviceType::Cpu,
            i.backend == wgpu::Backend::Gl,
        )
    });
    adapters
        .first()
        .map(|a| {
            let i = a.get_info();
            format!("{} via {:?}", i.name, i.backend)
        })
        .unwrap_or_else(|| "no adapter".into())
}

fn main() {
    let Some(dir) = std::env::var_os("INFERGATE_BENCH_MODELS").map(PathBuf::from) else {
        eprintln!(
            "wgpu_engine: set INFERGATE_BENCH_MODELS to a folder written by \
             `python backend/engine/models/export_models.py DIR --size bench --manifest` \
             (scripts/bench-engine.sh does this); nothing to measure"
        );
        return;
    };
    let batches: Vec<usize> = std::env::var("INFERGATE_BENCH_BATCHES")
        .unwrap_or_else(|_| "1,8,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let seconds: f64 = std::env::var("INFERGATE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let only: Vec<String> = std::env::var("INFERGATE_BENCH_ONLY")
        .map(|s| s.split(',').map(String::from).collect())
        .unwrap_or_default();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json")).unwrap();

    let overhead = dir.join("overhead_50.onnx");
    let status = Command::new(python())
        .args(["-c", OVERHEAD_SCRIPT])
        .arg(&overhead)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "writing the overhead model failed (run `make venv`)"
    );

    let mut jobs = vec![Job {
        label: "overhead_50_nodes".into(),
        path: overhead,
        inputs: vec![("x".into(), "FP32".into(), vec![8, 8], 0)],
        flops: None,
        batch: 1,
    }];
    for (name, spec) in manifest.as_object().unwrap() {
        if !only.is_empty() && !only.contains(name) {
            continue;
        }
        let path = dir.join(format!("{name}.onnx"));
        match spec["flops"].as_f64() {
            Some(flops) => jobs.push(Job {
                label: name.clone(),
                path,
                inputs: shapes(spec, 1),
                flops: Some(flops),
                batch: 1,
            }),
            None => {
                for &b in &batches {
                    jobs.push(Job {
                        label: format!("{name} b{b}"),
                        path: path.clone(),
                        inputs: shapes(spec, b),
                        flops: None,
                        batch: b,
                    });
                }
            }
        }
    }

    let mut ours = Vec::with_capacity(jobs.len());
    let mut sessions: Vec<(PathBuf, Arc<Session>)> = Vec::new();
    for job in &jobs {
        let session = match sessions.iter().find(|(p, _)| *p == job.path) {
            Some((_, s)) => Arc::clone(s),
            None => {
                let model = Arc::new(Model::load(&job.path).unwrap());
                let s = Arc::new(
                    Session::new(
                        model,
                        SessionOptions {
                            executor: ExecutorKind::Wgpu(AdapterChoice::Auto),
                            ..Default::default()
                        },
                    )
                    .unwrap_or_else(|e| panic!("wgpu session: {e}")),
                );
                sessions.push((job.path.clone(), Arc::clone(&s)));
                s
            }
        };
        let lat = measure(&session, &tensors(&job.inputs), seconds).map(|d| d.as_secs_f64());
        match &lat {
            Ok(l) => eprintln!("wgpu {} {:.3} ms", job.label, l * 1e3),
            Err(e) => eprintln!("wgpu {} refused: {e}", job.label),
        }
        ours.push(lat);
    }
    let peer = ort_latencies(&jobs, seconds, &dir);
    println!(
        "## wgpu executor ({}) vs onnxruntime CPU, {seconds} s per figure",
        adapter_name()
    );
    println!();
    println!(
        "| workload | batch | wgpu latency ms | wgpu throughput/s | wgpu GFLOP/s | ort latency ms | ort throughput/s | ort GFLOP/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for ((job, lat), p) in jobs.iter().zip(&ours).zip(&peer) {
        let gf = |l: f64| {
            job.flops
                .map(|f| format!("{:.2}", f / l / 1e9))
                .unwrap_or_else(|| "-".into())
        };
        let (pl, pt, pg) = match p {
            Some(p) => (
                format!("{:.3}", p * 1e3),
                format!("{:.1}", job.batch as f64 / p),
                gf(*p),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let name = job.label.split(' ').next().unwrap_or("");
        match lat {
            Ok(lat) => println!(
                "| {name} | {} | {:.3} | {:.1} | {} | {pl} | {pt} | {pg} |",
                job.batch,
                lat * 1e3,
                job.batch as f64 / lat,
                gf(*lat),
            ),
            Err(e) => println!(
                "| {name} | {} | refused: {e} | - | - | {pl} | {pt} | {pg} |",
                job.batch
            ),
        }
    }
}

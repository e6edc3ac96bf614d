//! CPU executor benchmark: single-op GFLOP/s and model latency/throughput per batch size, on the
//! model files written by `models/export_models.py --manifest` (the same files onnxruntime runs in
//! `scripts/bench-engine.sh`), or on the zoo (`manifest.json`, and `detector.json`, `quantized.json` and
//! `dynamo.json` where present).
//! A model without a batch dim runs at batch 1 only; one with `bench_inputs` (the detector, whose
//! post-processing depends on the values) runs those files in turn, the images onnxruntime gets too.
//!
//! `INFERGATE_BENCH_MODELS=DIR cargo bench -p infergate-engine --bench engine_cpu`
//! (optional: `INFERGATE_BENCH_BATCHES=1,8,32`, `INFERGATE_BENCH_SECONDS=2`, `INFERGATE_BENCH_ONLY=a,b`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use infergate_engine::cpu::SETTLING_RUNS;
use infergate_engine::{DataType, ExecutorKind, Model, Session, SessionOptions, Tensor};

/// The backend binary's allocator, so that the figures are the ones it serves at.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs before timing: a batch that can run split settles on its way over its first
/// [`SETTLING_RUNS`] (the CPU executor times each way on real runs), then one more.
const WARMUP_RUNS: usize = SETTLING_RUNS + 1;

fn inputs_for(spec: &serde_json::Value, batch: usize, seed: u64) -> Vec<(String, Tensor)> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    spec["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let shape: Vec<usize> = i["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let d = d.as_i64().unwrap();
                    if d < 0 { batch } else { d as usize }
                })
                .collect();
            let n: usize = shape.iter().product();
            let name = i["name"].as_str().unwrap().to_string();
            let t = if i["dtype"] == "INT64" {
                let high = i["high"].as_u64().unwrap_or(100) as u32;
                Tensor::from_vec(shape, (0..n).map(|_| i64::from(next() % high)).collect()).unwrap()
            } else {
                Tensor::from_vec(
                    shape,
                    (0..n)
                        .map(|_| (next() as f32 / u32::MAX as f32) * 2.0 - 1.0)
                        .collect(),
                )
                .unwrap()
            };
            (name, t)
        })
        .collect()
}

/// The input sets of one measurement: generated, or for a model with `bench_inputs` (raw float32
/// files of its one input, relative to the zoo) one set per file.
fn input_sets(dir: &Path, spec: &serde_json::Value, batch: usize, seed: u64) -> Vec<Vec<(String, Tensor)>> {
    let Some(files) = spec["bench_inputs"].as_array() else {
        return vec![inputs_for(spec, batch, seed)];
    };
    let input = &spec["inputs"][0];
    let shape: Vec<usize> = input["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(dir.join(f.as_str().unwrap())).unwrap();
            let t = Tensor::new(DataType::F32, shape.clone(), bytes.into()).unwrap();
            vec![(input["name"].as_str().unwrap().to_string(), t)]
        })
        .collect()
}

/// Input sets of one batch size, cycled through run by run.
type Sets = Vec<Vec<(String, Tensor)>>;

/// Blocks each batch size's time is measured in, taking turns with the other sizes.
const BLOCKS: u32 = 2;

/// The mean time per run of each of `batches` (input sets of one batch size each), measured in
/// [`BLOCKS`] turns: each size in turn runs once untimed (its caches and buffers warm again after
/// the other sizes' runs), then timed for `seconds / BLOCKS` and at least 3 runs. Taking turns
/// lets the batch sizes of a model see the same load on a shared machine, so their per-sample
/// times compare (a batch measured a minute after its single runs read up to 10 % apart from load
/// alone); whole blocks rather than single runs keep each size's runs in the steady state that
/// onnxruntime's side is measured in.
fn measure(session: &Session, batches: &[Sets], seconds: f64) -> Vec<Duration> {
    for sets in batches {
        for k in 0..WARMUP_RUNS {
            session.run_blocking(sets[k % sets.len()].clone()).unwrap();
        }
    }
    let block = seconds / f64::from(BLOCKS);
    let mut spent = vec![Duration::ZERO; batches.len()];
    let mut runs = vec![0u32; batches.len()];
    for _ in 0..BLOCKS {
        for (i, sets) in batches.iter().enumerate() {
            session.run_blocking(sets[0].clone()).unwrap();
            let start = Instant::now();
            let mut n = 0u32;
            while n < 3 || start.elapsed().as_secs_f64() < block {
                let k = (runs[i] + n) as usize % sets.len();
                session.run_blocking(sets[k].clone()).unwrap();
                n += 1;
            }
            spent[i] += start.elapsed();
            runs[i] += n;
        }
    }
    spent.iter().zip(&runs).map(|(d, &n)| *d / n).collect()
}

fn main() {
    let Some(dir) = std::env::var_os("INFERGATE_BENCH_MODELS").map(PathBuf::from) else {
        eprintln!(
            "engine_cpu: set INFERGATE_BENCH_MODELS to a folder written by \
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
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json")).unwrap();
    for side in ["detector.json", "quantized.json", "dynamo.json"] {
        if let Ok(extra) = std::fs::read(dir.join(side)) {
            let extra: serde_json::Value = serde_json::from_slice(&extra).expect(side);
            for (name, spec) in extra.as_object().unwrap() {
                manifest[name] = spec.clone();
            }
        }
    }
    for (name, spec) in manifest.as_object().unwrap() {
        if !only.is_empty() && !only.contains(name) {
            continue;
        }
        let model = Arc::new(Model::load(dir.join(format!("{name}.onnx"))).unwrap());
        let session = Session::new(
            model,
            SessionOptions {
                executor: ExecutorKind::Cpu,
                ..Default::default()
            },
        )
        .unwrap();
        if let Some(flops) = spec["flops"].as_f64() {
            let lat = measure(&session, &[input_sets(&dir, spec, 1, 1)], seconds)[0].as_secs_f64();
            println!(
                "cpu  {name}  batch 1  latency_ms {:.3}  throughput {:.1}  gflops {:.2}",
                lat * 1e3,
                1.0 / lat,
                flops / lat / 1e9
            );
            continue;
        }
        let batched = spec["inputs"].as_array().unwrap().iter().any(|i| {
            i["shape"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d.as_i64() == Some(-1))
        });
        let sizes: Vec<usize> = batches.iter().copied().filter(|&b| batched || b == 1).collect();
        let sets: Vec<Sets> = sizes
            .iter()
            .map(|&b| input_sets(&dir, spec, b, b as u64))
            .collect();
        for (b, lat) in sizes.iter().zip(measure(&session, &sets, seconds)) {
            let lat = lat.as_secs_f64();
            println!(
                "cpu  {name}  batch {b}  latency_ms {:.3}  throughput {:.1}",
                lat * 1e3,
                *b as f64 / lat
            );
        }
    }
}

//! Resident memory and build time of the CPU executor's plans, one per batch size: loads a model
//! with a dynamic batch dim (f32 inputs), builds the plans for batches 1..=N and prints the RSS
//! after loading and after all plans, and each plan's build time.
//!
//! `cargo run --release -p infergate-engine --example plan_memory -- MODEL.onnx [N]` (default 32)

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use infergate_engine::cpu::CpuExecutor;
use infergate_engine::{DataType, Dim, Model, SessionOptions, Tensor};

/// Resident set size of this process in MiB (Linux `/proc/self/status`).
fn rss_mib() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .context("no VmRSS in /proc/self/status")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: plan_memory MODEL.onnx [N]")?;
    let max_batch: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(32);
    let rss_start = rss_mib()?;
    let t = Instant::now();
    let model = Arc::new(Model::load(&path)?);
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let rss_loaded = rss_mib()?;
    let exec = CpuExecutor::new(model.clone(), SessionOptions::default().threads, max_batch)?;
    let mut build_ms = Vec::with_capacity(max_batch);
    for batch in 1..=max_batch {
        let inputs: Vec<Tensor> = model
            .signature()
            .inputs
            .iter()
            .map(|i| {
                if i.dtype != DataType::F32 {
                    bail!("input '{}' is {}; this tool feeds f32 only", i.name, i.dtype);
                }
                let shape: Vec<usize> = i
                    .dims
                    .iter()
                    .enumerate()
                    .map(|(k, d)| match d {
                        Dim::Fixed(n) => *n,
                        Dim::Dynamic(_) if k == 0 => batch,
                        Dim::Dynamic(_) => 1,
                    })
                    .collect();
                let n: usize = shape.iter().product();
                Ok(Tensor {
                    dtype: DataType::F32,
                    shape,
                    data: vec![0u8; n * 4].into(),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let t = Instant::now();
        exec.plan_for(&inputs)?;
        build_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let rss_plans = rss_mib()?;
    let mut sorted = build_ms.clone();
    sorted.sort_by(f64::total_cmp);
    println!("model {path}: loaded in {load_ms:.0} ms");
    println!(
        "RSS MiB: start {rss_start:.0}, after load {rss_loaded:.0}, after {max_batch} plans {rss_plans:.0} (plans: +{:.0})",
        rss_plans - rss_loaded
    );
    println!(
        "plan build ms: batch 1 {:.1}, batch 2 {:.1}, median {:.1}, max {:.1}, total {:.0}",
        build_ms[0],
        build_ms.get(1).copied().unwrap_or(f64::NAN),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        build_ms.iter().sum::<f64>()
    );
    Ok(())
}

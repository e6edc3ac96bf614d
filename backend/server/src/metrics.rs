//! The Prometheus text served on the metrics port: Triton's `nv_*` names and labels, plus histograms
//! (request latency, queue latency, batch size), device memory per model and per device, readiness, the
//! host's CPU and memory, build info and process metrics.

use std::fmt::Write;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use infergate_telemetry::HostCpu;

use crate::repository::LoadFailureCount;
use crate::stats::{FailureReason, HistogramSnapshot};
use crate::version::LoadedVersion;

/// Escapes a label value (`\`, `"` and newlines).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(lv: &LoadedVersion) -> String {
    format!("model=\"{}\",version=\"{}\"", esc(&lv.name), lv.version)
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    for (le, n) in &h.buckets {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Renders every serving version's metrics.
pub fn render(versions: &[Arc<LoadedVersion>]) -> String {
    let mut out = String::with_capacity(4096 + versions.len() * 4096);

    type Counter = fn(&LoadedVersion) -> u64;
    let counters: [(&str, &str, Counter); 8] = [
        (
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            |lv| lv.stats.infer_statistics().success.count,
        ),
        (
            "nv_inference_count",
            "Number of inferences performed (each batch element counts)",
            |lv| lv.stats.inference_count(),
        ),
        (
            "nv_inference_exec_count",
            "Number of model executions performed (one per batch)",
            |lv| lv.stats.execution_count(),
        ),
        (
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds",
            |lv| lv.stats.infer_statistics().success.ns / 1000,
        ),
        (
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds",
            |lv| lv.stats.infer_statistics().queue.ns / 1000,
        ),
        (
            "nv_inference_compute_input_duration_us",
            "Cumulative compute input duration in microseconds",
            |lv| lv.stats.infer_statistics().compute_input.ns / 1000,
        ),
        (
            "nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration in microseconds",
            |lv| lv.stats.infer_statistics().compute_infer.ns / 1000,
        ),
        (
            "nv_inference_compute_output_duration_us",
            "Cumulative inference compute output duration in microseconds",
            |lv| lv.stats.infer_statistics().compute_output.ns / 1000,
        ),
    ];
    for (name, help, get) in counters {
        family(&mut out, name, "counter", help);
        for lv in versions {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(lv), get(lv));
        }
    }

    family(
        &mut out,
        "nv_inference_request_failure",
        "counter",
        "Number of failed inference requests, all batch sizes",
    );
    for lv in versions {
        for reason in FailureReason::ALL {
            let _ = writeln!(
                out,
                "nv_inference_request_failure{{{},reason=\"{}\"}} {}",
                labels(lv),
                reason.as_str(),
                lv.stats.failures(reason)
            );
        }
    }

    family(
        &mut out,
        "nv_inference_pending_request_count",
        "gauge",
        "Instantaneous number of pending requests awaiting execution",
    );
    for lv in versions {
        let _ = writeln!(
            out,
            "nv_inference_pending_request_count{{{}}} {}",
            labels(lv),
            lv.pending()
        );
    }
    family(
        &mut out,
        "nv_model_load_duration_secs",
        "gauge",
        "Model load time in seconds",
    );
    for lv in versions {
        let secs = lv.stats.load_duration().map_or(0.0, |d| d.as_secs_f64());
        let _ = writeln!(out, "nv_model_load_duration_secs{{{}}} {secs}", labels(lv));
    }

    family(
        &mut out,
        "infergate_inference_request_duration_seconds",
        "histogram",
        "End-to-end time of successful inference requests inside the server",
    );
    for lv in versions {
        histogram(
            &mut out,
            "infergate_inference_request_duration_seconds",
            &labels(lv),
            &lv.stats.request_latency.snapshot(),
        );
    }
    family(
        &mut out,
        "infergate_inference_queue_duration_seconds",
        "histogram",
        "Time executed requests spent queued",
    );
    for lv in versions {
        histogram(
            &mut out,
            "infergate_inference_queue_duration_seconds",
            &labels(lv),
            &lv.stats.queue_latency.snapshot(),
        );
    }
    family(
        &mut out,
        "infergate_inference_batch_size",
        "histogram",
        "Rows per model execution",
    );
    for lv in versions {
        histogram(
            &mut out,
            "infergate_inference_batch_size",
            &labels(lv),
            &lv.stats.batch_size.snapshot(),
        );
    }
    family(
        &mut out,
        "infergate_model_gpu_memory_bytes",
        "gauge",
        "Device (GPU) memory held by a model version's instances",
    );
    for lv in versions {
        let _ = writeln!(
            out,
            "infergate_model_gpu_memory_bytes{{{}}} {}",
            labels(lv),
            lv.device_memory_bytes()
        );
    }
    family(
        &mut out,
        "infergate_model_instances",
        "gauge",
        "Execution instances of a model version by executor",
    );
    for lv in versions {
        for kind in ["CPU", "GPU"] {
            let n = lv.instance_kinds().iter().filter(|k| **k == kind).count();
            let _ = writeln!(
                out,
                "infergate_model_instances{{{},kind=\"{kind}\"}} {n}",
                labels(lv)
            );
        }
    }
    let adaptive: Vec<_> = versions
        .iter()
        .filter_map(|lv| lv.adaptive().map(|a| (lv, a)))
        .collect();
    if !adaptive.is_empty() {
        family(
            &mut out,
            "infergate_adaptive_queue_delay_seconds",
            "gauge",
            "Queue delay chosen by the adaptive batcher",
        );
        for (lv, a) in &adaptive {
            let _ = writeln!(
                out,
                "infergate_adaptive_queue_delay_seconds{{{}}} {}",
                labels(lv),
                a.delay.as_secs_f64()
            );
        }
        family(
            &mut out,
            "infergate_adaptive_max_batch_size",
            "gauge",
            "Batch-size cap chosen by the adaptive batcher",
        );
        for (lv, a) in &adaptive {
            let _ = writeln!(
                out,
                "infergate_adaptive_max_batch_size{{{}}} {}",
                labels(lv),
                a.max_batch_rows
            );
        }
    }
    out
}

/// The host CPU sampler: utilisation is measured between one scrape and the next.
static HOST_CPU: LazyLock<HostCpu> = LazyLock::new(HostCpu::new);

/// Appends `infergate_backend_ready` (the server's readiness, as `/v2/health/ready` answers) and
/// `infergate_model_ready{model}` for every model that should serve (0 while it has no serving version that
/// can run: loading, failed to load, or on a lost GPU device).
pub fn render_readiness(out: &mut String, server_ready: bool, models: &[(String, bool)]) {
    family(
        out,
        "infergate_backend_ready",
        "gauge",
        "1 when the server is ready for inference (every model that should serve does)",
    );
    let _ = writeln!(out, "infergate_backend_ready {}", u8::from(server_ready));
    family(
        out,
        "infergate_model_ready",
        "gauge",
        "1 when a model that should serve has a serving version, 0 while it loads, after it failed, or while its GPU device is lost",
    );
    for (name, ready) in models {
        let _ = writeln!(
            out,
            "infergate_model_ready{{model=\"{}\"}} {}",
            esc(name),
            u8::from(*ready)
        );
    }
}

/// Appends `infergate_repository_readable{path}` (1 when the repository folder can be listed; while it
/// cannot, loaded models keep serving and nothing is unloaded) and `infergate_model_load_failures_total
/// {model,version,reason}` (failed loads by the step they failed at; `version=""` when the model failed as a
/// whole: its folder, config or auto-complete).
pub fn render_repository(out: &mut String, roots: &[(PathBuf, bool)], failures: &[LoadFailureCount]) {
    family(
        out,
        "infergate_repository_readable",
        "gauge",
        "1 when the model repository folder can be read, 0 while it cannot (loaded models keep serving)",
    );
    for (root, readable) in roots {
        let _ = writeln!(
            out,
            "infergate_repository_readable{{path=\"{}\"}} {}",
            esc(&root.display().to_string()),
            u8::from(*readable)
        );
    }
    family(
        out,
        "infergate_model_load_failures_total",
        "counter",
        "Failed model loads, by the step they failed at (the repository index holds the message)",
    );
    for f in failures {
        let _ = writeln!(
            out,
            "infergate_model_load_failures_total{{model=\"{}\",version=\"{}\",reason=\"{}\"}} {}",
            esc(&f.model),
            f.version.map(|v| v.to_string()).unwrap_or_default(),
            f.kind.as_str(),
            f.count
        );
    }
}

/// Appends `infergate_model_memory_reserved_bytes` (what the loaded versions' files add up to, as
/// `--model-memory-limit` counts it) and `infergate_model_memory_limit_bytes` (when the limit is set).
pub fn render_memory_budget(out: &mut String, reserved: u64, limit: Option<u64>) {
    family(
        out,
        "infergate_model_memory_reserved_bytes",
        "gauge",
        "Bytes of model files the loaded versions hold, as --model-memory-limit counts them",
    );
    let _ = writeln!(out, "infergate_model_memory_reserved_bytes {reserved}");
    if let Some(limit) = limit {
        family(
            out,
            "infergate_model_memory_limit_bytes",
            "gauge",
            "The --model-memory-limit: loads that would go over it are refused",
        );
        let _ = writeln!(out, "infergate_model_memory_limit_bytes {limit}");
    }
}

/// Appends `infergate_gpu_memory_allocated_bytes{device}`: what the engine's plans hold on each device the
/// process has opened, from the engine's own account of the buffers it created (not the driver's view of the
/// whole device, which wgpu does not give). A device is listed, at zero, from the moment a model opens it.
pub fn render_device_memory(out: &mut String) {
    family(
        out,
        "infergate_gpu_memory_allocated_bytes",
        "gauge",
        "Device (GPU) memory the engine's buffers hold on each device, by adapter name",
    );
    for d in infergate_engine::device_memory() {
        let _ = writeln!(
            out,
            "infergate_gpu_memory_allocated_bytes{{device=\"{}\"}} {}",
            esc(&d.device),
            d.allocated_bytes
        );
    }
}

/// Appends the host's CPU and memory (Triton's `nv_cpu_*`), build info and the process metrics.
pub fn render_host(out: &mut String) {
    render_device_memory(out);
    HOST_CPU.render(out);
    infergate_telemetry::render_build_info(out, "backend", env!("CARGO_PKG_VERSION"));
    infergate_telemetry::render_process_metrics(out);
}

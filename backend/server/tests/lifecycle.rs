//! Model repository and lifecycle, through ServerCore with real ONNX models on the CPU executor.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use infergate_backend::core::ServerCore;
use infergate_backend::memory_budget::MemoryBudget;
use infergate_backend::repository::ControlMode;
use infergate_protocol::{ErrorCode, InferenceService, LoadParameters};
use support::*;

#[tokio::test]
async fn a_broken_model_is_reported_with_its_reason_while_the_others_serve() {
    let repo = Repo::new();
    repo.simple("good", &[(1, 1)], Some(&simple_config("")));
    repo.simple("broken", &[(1, 1)], Some(&simple_config("")));
    repo.write("broken/1/model.onnx", b"this is not an ONNX file");
    repo.write("badcfg/1/model.onnx", example_file("simple/1/model.onnx"));
    repo.write(
        "badcfg/config.pbtxt",
        "name: \"badcfg\"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_TPU } ]\n",
    );
    repo.simple(
        "wrongsig",
        &[(1, 1)],
        Some(&simple_config("").replace("dims: [ 4 ] } ]\noutput", "dims: [ 5 ] } ]\noutput")),
    );

    let core = core(repo.path(), ControlMode::None).await;
    let r = core
        .infer(request("good", None, &[[1.0, 2.0, 3.0, 4.0]]))
        .await
        .unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0, 3.0, 4.0, 5.0]);

    let (state, reason) = index_state(&core, "broken", "1").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("broken/1/model.onnx"), "{reason}");
    let entry = core
        .repository_index(false)
        .into_iter()
        .find(|e| e.name == "badcfg")
        .unwrap();
    assert_eq!(entry.state.map(|s| s.as_str()), Some("UNAVAILABLE"));
    assert!(
        entry.reason.contains("config.pbtxt") && entry.reason.contains("KIND_TPU"),
        "{}",
        entry.reason
    );
    let (_, reason) = index_state(&core, "wrongsig", "1").unwrap();
    assert!(
        reason.contains("input 'x'") && reason.contains("[5]") && reason.contains("[4]"),
        "{reason}"
    );

    let err = core
        .infer(request("broken", None, &[[0.0; 4]]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        !core.ready(),
        "strict readiness: a model that should serve does not"
    );
    let ready_only = core.repository_index(true);
    assert_eq!(
        ready_only.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        vec!["good"]
    );

    let mut lenient = options(repo.path(), ControlMode::None);
    lenient.strict_readiness = false;
    let lenient = ServerCore::new(lenient);
    lenient.start().await.unwrap();
    assert!(lenient.ready());
}

#[tokio::test]
async fn the_version_switch_is_atomic_under_load_and_the_old_version_drains() {
    let repo = Repo::new();
    repo.simple(
        "m",
        &[(1, 1)],
        Some(&simple_config(
            "dynamic_batching { max_queue_delay_microseconds: 200 }",
        )),
    );
    let core = core(repo.path(), ControlMode::Explicit).await;
    // Explicit mode loads nothing unless asked.
    assert!(!core.model_ready("m", None));
    core.load_model("m", LoadParameters::default()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..6 {
        let core = core.clone();
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let x = [c as f32, 1.0, 2.0, 3.0];
            while !stop.load(Ordering::Relaxed) {
                let r = core
                    .infer(request("m", None, &[x]))
                    .await
                    .expect("every request succeeds during the switch");
                let y = output_f32(&r, "y");
                // The whole response comes from one version: v1 adds 1, v2 doubles.
                match r.model_version.as_str() {
                    "1" => assert_eq!(y, x.map(|v| v + 1.0).to_vec()),
                    "2" => assert_eq!(y, x.map(|v| v * 2.0).to_vec()),
                    v => panic!("unexpected version {v}"),
                }
                seen.push(r.model_version);
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    repo.write("m/2/model.onnx", example_file("simple/2/model.onnx"));
    core.load_model("m", LoadParameters::default()).await.unwrap();
    // Every request that starts after the load returned is served by version 2.
    let after = core
        .infer(request("m", None, &[[1.0, 1.0, 1.0, 1.0]]))
        .await
        .unwrap();
    assert_eq!(after.model_version, "2");
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let seen = c.await.unwrap();
        assert!(
            seen.first().is_some_and(|v| v == "1") && seen.last().is_some_and(|v| v == "2"),
            "{seen:?}"
        );
        // No alternation: once a client saw version 2 it never sees version 1 again.
        let first_v2 = seen.iter().position(|v| v == "2").unwrap();
        assert!(
            seen[first_v2..].iter().all(|v| v == "2"),
            "a client went back to version 1: {seen:?}"
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || index_state(&core, "m", "1")
            .is_some_and(|(s, r)| s == "UNAVAILABLE" && r == "unloaded"))
        .await
    );
    assert_eq!(core.repository().serving_versions("m"), vec![2]);
}

#[tokio::test]
async fn a_failed_reload_keeps_the_serving_version() {
    let repo = Repo::new();
    repo.simple("m", &[(1, 1)], Some(&simple_config("")));
    let core = core(repo.path(), ControlMode::Explicit).await;
    core.load_model("m", LoadParameters::default()).await.unwrap();
    repo.write("m/2/model.onnx", b"garbage");
    let err = core.load_model("m", LoadParameters::default()).await.unwrap_err();
    assert!(
        err.message.contains("failed to load 'm'") && err.message.contains("version 2"),
        "{}",
        err.message
    );
    let r = core.infer(request("m", None, &[[1.0; 4]])).await.unwrap();
    assert_eq!(r.model_version, "1", "version 1 keeps serving");
    let (state, reason) = index_state(&core, "m", "2").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("m/2/model.onnx"), "{reason}");
}

#[tokio::test]
async fn poll_mode_follows_the_repository_through_a_file_watch() {
    let repo = Repo::new();
    repo.simple("m", &[(1, 1)], Some(&simple_config("")));
    let core = core(repo.path(), ControlMode::Poll).await;
    assert_eq!(core.repository().serving_versions("m"), vec![1]);
    // Load and unload through the API is refused in poll mode.
    let err = core.load_model("m", LoadParameters::default()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(
        err.message.contains("--model-control-mode=explicit"),
        "{}",
        err.message
    );

    // A new version appears: it replaces version 1 (latest 1).
    repo.write("m/2/model.onnx", example_file("simple/2/model.onnx"));
    assert!(
        eventually(Duration::from_secs(10), || core
            .repository()
            .serving_versions("m")
            == vec![2])
        .await
    );
    let r = core.infer(request("m", None, &[[3.0; 4]])).await.unwrap();
    assert_eq!(output_f32(&r, "y"), vec![6.0; 4]);

    // A broken newer version: reported, version 2 keeps serving.
    repo.write("m/3/model.onnx", b"broken");
    assert!(
        eventually(Duration::from_secs(10), || index_state(&core, "m", "3")
            .is_some_and(|(s, _)| s == "UNAVAILABLE"))
        .await
    );
    assert_eq!(core.repository().serving_versions("m"), vec![2]);

    // A new model folder is loaded; a removed one is unloaded.
    repo.simple("n", &[(1, 1)], Some(&simple_config("")));
    assert!(eventually(Duration::from_secs(10), || core.model_ready("n", None)).await);
    std::fs::remove_dir_all(repo.path().join("n")).unwrap();
    assert!(eventually(Duration::from_secs(10), || !core.model_ready("n", None)).await);
}

#[tokio::test]
async fn an_unreadable_repository_unloads_nothing_and_says_so() {
    let repo = Repo::new();
    repo.simple("m", &[(1, 1)], Some(&simple_config("")));
    let core = core(repo.path(), ControlMode::Poll).await;
    let readable = |v: u8| {
        format!(
            "infergate_repository_readable{{path=\"{}\"}} {v}",
            repo.path().display()
        )
    };
    assert!(core.render_metrics().contains(&readable(1)));

    // The volume goes away: the listing fails, and that must not read as "every model was removed".
    let aside = repo.path().with_extension("away");
    std::fs::rename(repo.path(), &aside).unwrap();
    core.repository().reconcile().await;
    assert_eq!(core.repository().serving_versions("m"), vec![1]);
    let r = core.infer(request("m", None, &[[1.0; 4]])).await.unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0; 4]);
    assert!(core.render_metrics().contains(&readable(0)));
    let (state, reason) = index_state(&core, "m", "1").unwrap();
    assert_eq!(state, "READY");
    assert!(reason.contains("the model repository cannot be read"), "{reason}");

    // It comes back: the note goes, and a bad new version is counted by the step it failed at.
    std::fs::rename(&aside, repo.path()).unwrap();
    core.repository().reconcile().await;
    assert!(core.render_metrics().contains(&readable(1)));
    assert_eq!(index_state(&core, "m", "1").unwrap().1, "");
    repo.write("m/2/model.onnx", b"truncated");
    core.repository().reconcile().await;
    let (state, reason) = index_state(&core, "m", "2").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("m/2/model.onnx"), "{reason}");
    assert!(
        core.render_metrics().contains(
            // The file watch may reconcile too: one load or two, never none.
            "infergate_model_load_failures_total{model=\"m\",version=\"2\",reason=\"invalid_model\"} "
        ),
        "{}",
        core.render_metrics()
    );
    assert_eq!(core.repository().serving_versions("m"), vec![1]);
}

#[tokio::test]
async fn a_version_over_the_memory_limit_is_refused_before_it_is_read() {
    let repo = Repo::new();
    repo.simple("small", &[(1, 1)], Some(&simple_config("")));
    let model_bytes = example_file("simple/1/model.onnx").len() as u64;
    repo.simple("big", &[(1, 1)], Some(&simple_config("")));
    repo.write("big/1/weights.bin", vec![0u8; 4096]);
    let mut opts = options(repo.path(), ControlMode::Explicit);
    opts.repository.startup_models = vec!["*".into()];
    // Room for the small model twice (its reload holds both copies at the switch), not for the big one.
    opts.repository.load.memory = MemoryBudget::new(Some(2 * model_bytes + 100));
    let core = ServerCore::new(opts);
    core.start().await.unwrap();

    assert!(core.model_ready("small", None));
    let (state, reason) = index_state(&core, "big", "1").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(
        reason.contains("model 'big' version 1 needs") && reason.contains("--model-memory-limit"),
        "{reason}"
    );
    let metrics = core.render_metrics();
    assert!(metrics.contains(
        "infergate_model_load_failures_total{model=\"big\",version=\"1\",reason=\"memory_limit\"} 1"
    ));
    assert!(
        metrics.contains(&format!("infergate_model_memory_reserved_bytes {model_bytes}")),
        "{metrics}"
    );

    // A reload of the small model fits beside its running copy; unloading it gives its bytes back.
    repo.write("small/1/model.onnx", example_file("simple/2/model.onnx"));
    core.load_model("small", LoadParameters::default()).await.unwrap();
    let r = core.infer(request("small", None, &[[3.0; 4]])).await.unwrap();
    assert_eq!(output_f32(&r, "y"), vec![6.0; 4]);
    core.unload_model("small", false).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || core
            .render_metrics()
            .contains("infergate_model_memory_reserved_bytes 0"))
        .await
    );
}

#[tokio::test]
async fn a_manifest_mismatch_refuses_the_version() {
    let repo = Repo::new();
    repo.simple("m", &[(1, 1)], Some(&simple_config("")));
    let digest = infergate_backend::manifest::sha256_file(&repo.path().join("m/1/model.onnx")).unwrap();
    repo.write("m/1/MANIFEST.sha256", format!("{digest}  model.onnx\n"));
    repo.simple("tampered", &[(1, 1)], Some(&simple_config("")));
    repo.write("tampered/1/MANIFEST.sha256", format!("{digest}  model.onnx\n"));
    // Same size, other content: only the digest can tell.
    repo.write("tampered/1/model.onnx", example_file("simple/2/model.onnx"));

    let core = core(repo.path(), ControlMode::None).await;
    assert!(core.model_ready("m", None), "a matching manifest loads");
    let (state, reason) = index_state(&core, "tampered", "1").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("sha256 mismatch for 'model.onnx'"), "{reason}");
    assert!(core.render_metrics().contains(
        "infergate_model_load_failures_total{model=\"tampered\",version=\"1\",reason=\"integrity\"} 1"
    ));
}

#[tokio::test]
async fn warmup_runs_before_ready_and_a_failing_warmup_fails_the_load() {
    let repo = Repo::new();
    let warm = |dims: &str| {
        simple_config(&format!(
            "model_warmup [ {{ name: \"zeros\", batch_size: 2, count: 3, inputs {{ key: \"x\" value: {{ data_type: TYPE_FP32, dims: [ {dims} ], zero_data: true }} }} }} ]"
        ))
    };
    repo.simple("warm", &[(1, 1)], Some(&warm("4")));
    repo.simple("badwarm", &[(1, 1)], Some(&warm("3")));
    let core = core(repo.path(), ControlMode::None).await;
    assert!(core.model_ready("warm", None));
    // Warmup runs outside the statistics.
    let stats = core.model_statistics(Some("warm"), None).unwrap();
    assert_eq!(stats[0].execution_count, 0);
    let (state, reason) = index_state(&core, "badwarm", "1").unwrap();
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("warmup sample 'zeros'"), "{reason}");
}

#[tokio::test]
async fn explicit_load_with_config_and_files_then_unload() {
    let repo = Repo::new();
    let core = core(repo.path(), ControlMode::Explicit).await;
    let config = r#"{"name":"uploaded","platform":"onnxruntime_onnx","max_batch_size":4,
        "input":[{"name":"x","data_type":"TYPE_FP32","dims":[4]}],
        "output":[{"name":"y","data_type":"TYPE_FP32","dims":[4]}],
        "instance_group":[{"count":2,"kind":"KIND_CPU"}]}"#;
    let params = LoadParameters {
        config: Some(config.to_string()),
        files: [("1/model.onnx".to_string(), example_file("simple/2/model.onnx"))].into(),
    };
    core.load_model("uploaded", params).await.unwrap();
    let r = core
        .infer(request("uploaded", Some(1), &[[1.0, 2.0, 3.0, 4.0]]))
        .await
        .unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0, 4.0, 6.0, 8.0]);
    assert!(
        core.render_metrics()
            .contains("infergate_model_instances{model=\"uploaded\",version=\"1\",kind=\"CPU\"} 2")
    );
    let cfg = core.model_config("uploaded", None).unwrap();
    assert_eq!(cfg["max_batch_size"], 4);

    core.unload_model("uploaded", false).await.unwrap();
    assert!(!core.model_ready("uploaded", None));
    assert_eq!(
        index_state(&core, "uploaded", "1").unwrap(),
        ("UNAVAILABLE".into(), "unloaded".into())
    );
    let err = core
        .infer(request("uploaded", None, &[[0.0; 4]]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);

    let bad = LoadParameters {
        config: None,
        files: [("../escape.onnx".to_string(), vec![1])].into(),
    };
    let err = core.load_model("evil", bad).await.unwrap_err();
    assert!(err.message.contains("paths must be relative"), "{}", err.message);
    let err = core
        .load_model("missing", LoadParameters::default())
        .await
        .unwrap_err();
    assert!(
        err.message.contains("no model folder 'missing'"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_model_without_config_is_auto_completed_from_its_onnx_signature() {
    let repo = Repo::new();
    repo.simple("auto", &[(1, 1)], None);
    let core = core(repo.path(), ControlMode::None).await;
    let meta = core.model_metadata("auto", None).unwrap();
    assert_eq!(meta.inputs[0].name, "x");
    assert_eq!(meta.inputs[0].shape, vec![-1, 4]);
    let cfg = core.model_config("auto", None).unwrap();
    assert_eq!(
        cfg["max_batch_size"], 4,
        "Triton's default-max-batch-size for batchable models"
    );
    assert!(cfg["dynamic_batching"].is_object());
    let r = core
        .infer(request("auto", None, &[[1.0; 4], [2.0; 4]]))
        .await
        .unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]);

    let reason = refusal_under_strict_model_config(repo.path(), "auto").await;
    assert!(reason.contains("--strict-model-config"), "{reason}");
}

/// Why `model` is not served when the repository is read with --strict-model-config.
#[allow(clippy::unwrap_used)]
async fn refusal_under_strict_model_config(repo: &std::path::Path, model: &str) -> String {
    let mut strict = options(repo, ControlMode::None);
    strict.repository.strict_model_config = true;
    let strict = ServerCore::new(strict);
    strict.start().await.unwrap();
    strict
        .repository_index(false)
        .into_iter()
        .find(|e| e.name == model)
        .unwrap()
        .reason
}

/// A config that sets only what the user cares about (here the instance kind and batch size) gets its
/// inputs and outputs from the model file, as Triton's auto-complete does; --strict-model-config refuses it.
#[tokio::test]
async fn a_config_without_inputs_and_outputs_is_completed_from_the_onnx_signature() {
    let repo = Repo::new();
    let partial = "name: \"partial\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 4\ninstance_group [ { kind: KIND_CPU } ]\n";
    repo.simple("partial", &[(1, 1)], Some(partial));
    let core = core(repo.path(), ControlMode::None).await;
    let meta = core.model_metadata("partial", None).unwrap();
    assert_eq!(meta.inputs[0].name, "x");
    assert_eq!(meta.inputs[0].shape, vec![-1, 4]);
    let r = core
        .infer(request("partial", None, &[[1.0; 4], [2.0; 4]]))
        .await
        .unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]);

    let reason = refusal_under_strict_model_config(repo.path(), "partial").await;
    assert!(
        reason.contains("declares no inputs or no outputs") && reason.contains("--strict-model-config"),
        "{reason}"
    );
}

#[tokio::test]
async fn version_policies_choose_the_served_versions() {
    let repo = Repo::new();
    let versions = [(1, 1), (2, 2), (3, 1)];
    repo.simple("latest", &versions, Some(&simple_config("")));
    repo.simple(
        "all",
        &versions,
        Some(&simple_config("version_policy: { all: {} }")),
    );
    repo.simple(
        "specific",
        &versions,
        Some(&simple_config(
            "version_policy: { specific: { versions: [ 1, 3 ] } }",
        )),
    );
    repo.simple(
        "latest2",
        &versions,
        Some(&simple_config("version_policy: { latest: { num_versions: 2 } }")),
    );
    let core = core(repo.path(), ControlMode::None).await;
    let r = core.repository();
    assert_eq!(r.serving_versions("latest"), vec![3]);
    assert_eq!(r.serving_versions("all"), vec![1, 2, 3]);
    assert_eq!(r.serving_versions("specific"), vec![1, 3]);
    assert_eq!(r.serving_versions("latest2"), vec![2, 3]);
    // Unversioned requests go to the highest version; a version outside the policy is not ready.
    let resp = core.infer(request("all", None, &[[1.0; 4]])).await.unwrap();
    assert_eq!(resp.model_version, "3");
    let err = core
        .infer(request("specific", Some(2), &[[1.0; 4]]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert_eq!(
        core.model_metadata("all", None).unwrap().versions,
        vec!["1", "2", "3"]
    );
}

#[tokio::test]
async fn a_kind_gpu_group_runs_on_wgpu() {
    // Tiny shapes: lavapipe (Mesa's software Vulkan) is the adapter in CI.
    let repo = Repo::new();
    repo.simple(
        "g",
        &[(1, 2)],
        Some(&simple_config("dynamic_batching { }").replace("KIND_CPU", "KIND_GPU")),
    );
    let core = core(repo.path(), ControlMode::None).await;
    if let Some((state, reason)) = index_state(&core, "g", "1").filter(|(s, _)| s != "READY") {
        panic!(
            "KIND_GPU model did not load ({state}): {reason}\n(install Mesa's Vulkan driver: apt-get install mesa-vulkan-drivers, or run `make test`)"
        );
    }
    let r = core
        .infer(request("g", None, &[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]))
        .await
        .unwrap();
    assert_eq!(
        output_f32(&r, "y"),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]
    );
    let m = core.render_metrics();
    assert!(
        m.contains("infergate_model_instances{model=\"g\",version=\"1\",kind=\"GPU\"} 1"),
        "{m}"
    );
    // GPU memory is the engine's account of its plans; it is exported per version.
    assert!(
        m.contains("infergate_model_gpu_memory_bytes{model=\"g\",version=\"1\"} "),
        "{m}"
    );
}

#[tokio::test]
async fn the_concurrency_limit_refuses_with_a_clear_error() {
    let repo = Repo::new();
    repo.simple(
        "m",
        &[(1, 1)],
        Some(&simple_config(
            "dynamic_batching { max_queue_delay_microseconds: 30000000 }",
        )),
    );
    let mut opts = options(repo.path(), ControlMode::Explicit);
    opts.max_concurrent_requests = 1;
    let core = ServerCore::new(opts);
    core.start().await.unwrap();
    core.load_model("m", LoadParameters::default()).await.unwrap();
    let held = {
        let core = core.clone();
        tokio::spawn(async move { core.infer(request("m", None, &[[1.0; 4]])).await })
    };
    assert!(eventually(Duration::from_secs(5), || core.in_flight() == 1).await);
    let err = core.infer(request("m", None, &[[1.0; 4]])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.contains("--max-concurrent-requests"),
        "{}",
        err.message
    );
    core.unload_model("m", false).await.unwrap();
    assert!(held.await.unwrap().is_ok());
    assert_eq!(core.in_flight(), 0);
}

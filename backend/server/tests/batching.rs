//! The dynamic batcher and queue policy in the server, with real models on the CPU executor.

mod support;

use std::time::{Duration, Instant};

use infergate_backend::repository::ControlMode;
use infergate_protocol::{ErrorCode, InferenceService, LoadParameters};
use support::*;

#[tokio::test]
async fn concurrent_requests_are_joined_into_one_execution_and_split_back() {
    let repo = Repo::new();
    repo.simple(
        "m",
        &[(1, 2)],
        Some(&simple_config(
            "dynamic_batching { max_queue_delay_microseconds: 2000000 }",
        )),
    );
    let core = core(repo.path(), ControlMode::None).await;
    let mut calls = Vec::new();
    // 1 + 2 + 2 + 3 = 8 rows = max_batch_size: the batch leaves as soon as the last request arrives.
    for (i, rows) in [1usize, 2, 2, 3].into_iter().enumerate() {
        let core = core.clone();
        calls.push(tokio::spawn(async move {
            let x: Vec<[f32; 4]> = (0..rows).map(|r| [i as f32, r as f32, 10.0, -1.0]).collect();
            let t = Instant::now();
            let resp = core.infer(request("m", None, &x)).await.unwrap();
            let want: Vec<f32> = x.iter().flatten().map(|v| v * 2.0).collect();
            assert_eq!(
                output_f32(&resp, "y"),
                want,
                "request {i} got another request's rows"
            );
            assert_eq!(resp.output("y").unwrap().shape, vec![rows as i64, 4]);
            t.elapsed()
        }));
    }
    for c in calls {
        let took = c.await.unwrap();
        assert!(
            took < Duration::from_secs(2),
            "a full batch must not wait for the queue delay"
        );
    }
    let s = &core.model_statistics(Some("m"), Some(1)).unwrap()[0];
    assert_eq!(s.execution_count, 1);
    assert_eq!(s.inference_count, 8);
    assert_eq!(s.inference_stats.success.count, 4);
    assert_eq!(s.batch_stats.len(), 1);
    assert_eq!(s.batch_stats[0].batch_size, 8);
    let m = core.render_metrics();
    assert!(
        m.contains("infergate_inference_batch_size_bucket{model=\"m\",version=\"1\",le=\"8\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn a_full_queue_refuses_and_unloading_drains_what_is_queued() {
    let repo = Repo::new();
    let cfg = "dynamic_batching { max_queue_delay_microseconds: 30000000 default_queue_policy { max_queue_size: 1 } }";
    repo.simple("m", &[(1, 1)], Some(&simple_config(cfg)));
    let core = core(repo.path(), ControlMode::Explicit).await;
    core.load_model("m", LoadParameters::default()).await.unwrap();
    // The first request waits for a batch to fill (30 s delay): it occupies the one queue slot.
    let first = {
        let core = core.clone();
        tokio::spawn(async move { core.infer(request("m", None, &[[1.0; 4]])).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || core.render_metrics().contains(
            "nv_inference_pending_request_count{model=\"m\",version=\"1\"} 1"
        ))
        .await
    );
    let err = core.infer(request("m", None, &[[2.0; 4]])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(
        err.message.starts_with("Exceeds maximum queue size"),
        "{}",
        err.message
    );
    assert!(
        core.render_metrics()
            .contains("nv_inference_request_failure{model=\"m\",version=\"1\",reason=\"REJECTED\"} 1")
    );

    // Unloading stops new work; the queued request is executed at once rather than dropped.
    let t = Instant::now();
    core.unload_model("m", false).await.unwrap();
    let r = first.await.unwrap().unwrap();
    assert_eq!(output_f32(&r, "y"), vec![2.0; 4]);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the drain must not wait out the 30 s delay"
    );
}

#[tokio::test]
async fn queue_timeouts_reject_and_a_request_may_only_lower_its_timeout() {
    let repo = Repo::new();
    let cfg = "dynamic_batching { max_queue_delay_microseconds: 30000000 \
               default_queue_policy { default_timeout_microseconds: 50000 allow_timeout_override: true } }";
    repo.simple("m", &[(1, 1)], Some(&simple_config(cfg)));
    let core = core(repo.path(), ControlMode::None).await;

    let t = Instant::now();
    let err = core.infer(request("m", None, &[[1.0; 4]])).await.unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::Unavailable, "Request timeout expired")
    );
    assert!(t.elapsed() < Duration::from_secs(5));

    // Asking for a longer timeout than the default does not extend it.
    let mut long = request("m", None, &[[1.0; 4]]);
    long.timeout = Some(Duration::from_secs(20));
    let t = Instant::now();
    let err = core.infer(long).await.unwrap_err();
    assert_eq!(err.message, "Request timeout expired");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the 20 s request timeout must be capped at the 50 ms default"
    );
    let s = &core.model_statistics(Some("m"), None).unwrap()[0];
    assert_eq!(s.inference_stats.fail.count, 2);
    assert_eq!(s.execution_count, 0);
}

#[tokio::test]
async fn bad_requests_name_the_problem_and_count_as_failures() {
    let repo = Repo::new();
    repo.simple("m", &[(1, 1)], Some(&simple_config("dynamic_batching { }")));
    let core = core(repo.path(), ControlMode::None).await;
    let mut wrong_dims = request("m", None, &[[1.0; 4]]);
    wrong_dims.inputs[0].shape = vec![2, 2];
    let err = core.infer(wrong_dims).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    assert_eq!(
        err.message,
        "model 'm' input 'x': expected shape [-1,4], got [2,2]"
    );

    let mut no_batch = request("m", None, &[[1.0; 4]]);
    no_batch.inputs[0].shape = vec![4];
    let err = core.infer(no_batch).await.unwrap_err();
    assert!(
        err.message.contains("is the batch dimension missing?"),
        "{}",
        err.message
    );

    let rows = vec![[0.0f32; 4]; 9];
    let err = core.infer(request("m", None, &rows)).await.unwrap_err();
    assert!(
        err.message.contains("batch size 9 is outside 1..=8"),
        "{}",
        err.message
    );

    let mut extra = request("m", None, &[[1.0; 4]]);
    extra.inputs[0].name = "z".into();
    let err = core.infer(extra).await.unwrap_err();
    assert_eq!(
        err.message,
        "unexpected inference input 'z' for model 'm' (its inputs are: x)"
    );

    let mut unknown_out = request("m", None, &[[1.0; 4]]);
    unknown_out.outputs = vec![infergate_protocol::RequestedOutput {
        name: "q".into(),
        ..Default::default()
    }];
    let err = core.infer(unknown_out).await.unwrap_err();
    assert!(
        err.message.contains("unexpected inference output 'q'"),
        "{}",
        err.message
    );

    let err = core.infer(request("nope", None, &[[1.0; 4]])).await.unwrap_err();
    assert!(err.message.contains("'nope'"), "{}", err.message);
    assert!(
        core.render_metrics()
            .contains("nv_inference_request_failure{model=\"m\",version=\"1\",reason=\"OTHER\"} 5")
    );
    // The server still serves.
    assert!(core.infer(request("m", None, &[[1.0; 4]])).await.is_ok());
}

#[tokio::test]
async fn metrics_use_tritons_names_and_labels_plus_histograms() {
    let repo = Repo::new();
    let cfg = "dynamic_batching { max_queue_delay_microseconds: 100 }\n\
               parameters { key: \"infergate.adaptive_p99_us\" value: { string_value: \"20000\" } }";
    repo.simple("m", &[(1, 1)], Some(&simple_config(cfg)));
    let core = core(repo.path(), ControlMode::None).await;
    for _ in 0..3 {
        core.infer(request("m", None, &[[1.0; 4]])).await.unwrap();
    }
    let m = core.render_metrics();
    let l = "{model=\"m\",version=\"1\"}";
    for counter in [
        "nv_inference_request_success",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ] {
        assert!(
            m.contains(&format!("# TYPE {counter} counter")),
            "{counter} missing:\n{m}"
        );
        assert!(
            m.contains(&format!("{counter}{l} ")),
            "{counter} has no model/version series"
        );
    }
    assert!(m.contains(&format!("nv_inference_request_success{l} 3")));
    for reason in ["REJECTED", "CANCELED", "BACKEND", "OTHER"] {
        assert!(m.contains(&format!(
            "nv_inference_request_failure{{model=\"m\",version=\"1\",reason=\"{reason}\"}} 0"
        )));
    }
    for gauge in [
        "nv_inference_pending_request_count",
        "nv_model_load_duration_secs",
        "infergate_model_gpu_memory_bytes",
    ] {
        assert!(
            m.contains(&format!("# TYPE {gauge} gauge")) && m.contains(&format!("{gauge}{l} ")),
            "{gauge}"
        );
    }
    for hist in [
        "infergate_inference_request_duration_seconds",
        "infergate_inference_queue_duration_seconds",
        "infergate_inference_batch_size",
    ] {
        assert!(m.contains(&format!("# TYPE {hist} histogram")), "{hist}");
        assert!(
            m.contains(&format!(
                "{hist}_bucket{{model=\"m\",version=\"1\",le=\"+Inf\"}} 3"
            )),
            "{hist}:\n{m}"
        );
        assert!(m.contains(&format!("{hist}_count{l} 3")));
    }
    assert!(m.contains("# TYPE infergate_adaptive_queue_delay_seconds gauge"));
    assert!(m.contains(&format!("infergate_adaptive_max_batch_size{l} 8")));
}

//! Live reload against real file-system changes: every way a file gets replaced, invalid files, SIGHUP,
//! and readers hammering the value while it is swapped.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use infergate_config::{ConfigWatcher, GatewayConfig, ReloadOutcome, WatchOptions};
use tokio::sync::broadcast;

/// Generous: the file system and a loaded CI machine can be slow; we never assert tight timings.
const WAIT: Duration = Duration::from_secs(10);

fn routes(weight: u32) -> String {
    format!(
        "upstreams:\n  - name: backend\n    endpoints: [\"127.0.0.1:8000\"]\n\
         routes:\n  - name: simple\n    match: {{ model: simple }}\n    destinations:\n\
         \x20     - {{ upstream: backend, model_version: \"1\", weight: {weight} }}\n\
         \x20     - {{ upstream: backend, model_version: \"2\", weight: {} }}\n",
        100 - weight
    )
}

fn weight(c: &GatewayConfig) -> u32 {
    c.rules.routes[0].destinations[0].weight
}

fn quiet() -> WatchOptions {
    WatchOptions {
        poll_interval: None,
        sighup: false,
        ..WatchOptions::default()
    }
}

/// Waits for an `Applied` outcome (skipping transient rejections, e.g. while a file is briefly missing).
async fn applied(rx: &mut broadcast::Receiver<ReloadOutcome>, what: &str, started: Instant) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(ReloadOutcome::Applied { .. })) => break,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => panic!("{what}: outcome channel failed: {e}"),
            Err(_) => panic!("{what}: no reload within {WAIT:?}"),
        }
    }
    eprintln!("reload reaction time, {what}: {:?}", started.elapsed());
}

async fn rejected(rx: &mut broadcast::Receiver<ReloadOutcome>, what: &str) -> infergate_config::Rejection {
    match tokio::time::timeout(WAIT, rx.recv()).await {
        Ok(Ok(ReloadOutcome::Rejected(r))) => r,
        other => panic!("{what}: expected a rejection, got {other:?}"),
    }
}

async fn start(
    dir: &Path,
    name: &str,
    content: &str,
    options: WatchOptions,
) -> (ConfigWatcher<GatewayConfig>, PathBuf) {
    let file = dir.join(name);
    std::fs::write(&file, content).unwrap();
    let w = ConfigWatcher::gateway(&file, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (w, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_write() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    assert_eq!(weight(&w.current()), 90);
    let t = Instant::now();
    std::fs::write(&file, routes(50)).unwrap();
    applied(&mut rx, "in-place write", t).await;
    assert_eq!(weight(&w.current()), 50);
    assert_eq!(w.status().reloads, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_temp_then_rename() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    let tmp = dir.path().join(".routes.yaml.swp");
    std::fs::write(&tmp, routes(10)).unwrap();
    let t = Instant::now();
    std::fs::rename(&tmp, &file).unwrap();
    applied(&mut rx, "rename over", t).await;
    assert_eq!(weight(&w.current()), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_then_recreate() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    let t = Instant::now();
    std::fs::remove_file(&file).unwrap();
    // While the file is gone the running config keeps serving.
    assert_eq!(weight(&w.current()), 90);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(weight(&w.current()), 90);
    std::fs::write(&file, routes(30)).unwrap();
    applied(&mut rx, "delete then recreate", t).await;
    assert_eq!(weight(&w.current()), 30);
}

/// A faithful Kubernetes ConfigMap volume: the kubelet writes a timestamped folder, points `..data_tmp`
/// at it, renames `..data_tmp` over `..data`, then removes the old folder. `routes.yaml` is a symlink
/// to `..data/routes.yaml` and never changes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_data_symlink_swap() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path();
    let old = "..2026_11_29_15_00_00.1234";
    std::fs::create_dir(mount.join(old)).unwrap();
    std::fs::write(mount.join(old).join("routes.yaml"), routes(90)).unwrap();
    symlink(old, mount.join("..data")).unwrap();
    symlink("..data/routes.yaml", mount.join("routes.yaml")).unwrap();
    let file = mount.join("routes.yaml");
    let w = ConfigWatcher::gateway(&file, quiet()).await.unwrap();
    let mut rx = w.subscribe();
    assert_eq!(weight(&w.current()), 90);

    for (i, new_weight) in [(1, 75u32), (2, 60)] {
        let prev = std::fs::read_link(mount.join("..data")).unwrap();
        let new = format!("..2026_11_29_15_0{i}_00.{}", 5678 + i);
        std::fs::create_dir(mount.join(&new)).unwrap();
        std::fs::write(mount.join(&new).join("routes.yaml"), routes(new_weight)).unwrap();
        symlink(&new, mount.join("..data_tmp")).unwrap();
        let t = Instant::now();
        std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
        std::fs::remove_dir_all(mount.join(prev)).unwrap();
        applied(&mut rx, &format!("ConfigMap ..data swap #{i}"), t).await;
        assert_eq!(weight(&w.current()), new_weight);
        assert!(std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink());
    }
    assert_eq!(w.status().reloads, 2);
}

/// A log written next to the config (every few milliseconds, as a load generator's per-request log is) must
/// not hold a reload back: before the watcher looked at the events' file names, the debounce waited for the
/// folder to fall quiet and never got there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_neighbour_file_does_not_hold_a_reload_back() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, log) = (stop.clone(), dir.path().join("requests.log"));
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::create(log).unwrap();
            while !stop.load(Ordering::Relaxed) {
                writeln!(f, "a request").unwrap();
                f.flush().unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    std::fs::write(&file, routes(40)).unwrap();
    applied(&mut rx, "write while a neighbour file is busy", t).await;
    assert_eq!(weight(&w.current()), 40);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(w.status().reloads, 1, "the neighbour's writes are not reloads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_file_keeps_the_running_config_and_records_why() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    let bad = routes(40).replace(
        "upstream: backend, model_version: \"2\"",
        "upstream: backend-v2, model_version: \"2\"",
    );
    std::fs::write(&file, &bad).unwrap();
    let r = rejected(&mut rx, "unknown upstream").await;
    assert!(
        r.error.contains(
            "routes.yaml:9:21: route 'simple' sends traffic to unknown upstream 'backend-v2' (known: backend)"
        ),
        "{}",
        r.error
    );
    use sha2::Digest;
    assert_eq!(
        r.content_hash.as_deref(),
        Some(hex::encode(sha2::Sha256::digest(bad.as_bytes())).as_str())
    );
    assert_eq!(weight(&w.current()), 90, "the running config stays");
    let status = w.status();
    assert_eq!((status.reloads, status.rejections), (0, 1));
    assert_eq!(status.last_rejection.as_ref(), Some(&r));
    assert_ne!(status.content_hash, r.content_hash.clone().unwrap());

    // The same broken content again is not a new rejection.
    assert_eq!(w.reload_now().await, ReloadOutcome::Unchanged);
    assert_eq!(w.status().rejections, 1);

    // Malformed YAML and binary garbage are refused too.
    std::fs::write(&file, "routes: [ {name: x\n").unwrap();
    let r = rejected(&mut rx, "malformed YAML").await;
    assert!(r.error.contains("invalid YAML"), "{}", r.error);
    std::fs::write(&file, b"\x7fELF\x02\x01\x01\x00\x00\x00garbage").unwrap();
    let r = rejected(&mut rx, "binary garbage").await;
    assert!(r.error.contains("contains NUL bytes"), "{}", r.error);
    assert_eq!(weight(&w.current()), 90);

    // A valid file is applied again.
    let t = Instant::now();
    std::fs::write(&file, routes(20)).unwrap();
    applied(&mut rx, "valid after invalid", t).await;
    assert_eq!(weight(&w.current()), 20);
    assert_eq!(w.status().rejections, 3);
    assert!(
        w.status().last_rejection.is_some(),
        "the last rejection stays visible"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_content_is_not_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    std::fs::write(&file, routes(90)).unwrap();
    assert_eq!(w.reload_now().await, ReloadOutcome::Unchanged);
    let status = w.status();
    assert_eq!((status.reloads, status.rejections), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangling_symlink_and_huge_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(
        dir.path(),
        "routes.yaml",
        &routes(90),
        WatchOptions {
            watch_filesystem: false,
            ..quiet()
        },
    )
    .await;
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(dir.path().join("..data/routes.yaml"), &file).unwrap();
    let ReloadOutcome::Rejected(r) = w.reload_now().await else {
        panic!("a dangling symlink must be refused")
    };
    assert!(r.error.contains("dangling symbolic link"), "{}", r.error);
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, format!("{}# {}\n", routes(5), "x".repeat(2 << 20))).unwrap();
    let ReloadOutcome::Rejected(r) = w.reload_now().await else {
        panic!("a huge file must be refused")
    };
    assert!(r.error.contains("over the 1048576-byte limit"), "{}", r.error);
    assert_eq!(weight(&w.current()), 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_changes_need_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), quiet()).await;
    let mut rx = w.subscribe();
    std::fs::write(
        &file,
        format!(
            "listeners: {{ data: {{ address: 0.0.0.0:9999 }} }}\n{}",
            routes(70)
        ),
    )
    .unwrap();
    let outcome = tokio::time::timeout(WAIT, rx.recv()).await.unwrap().unwrap();
    let ReloadOutcome::Applied { warnings, .. } = outcome else {
        panic!("expected the routes to apply: {outcome:?}")
    };
    assert!(
        warnings.iter().any(|w| w.message.contains("needs restart")),
        "{warnings:?}"
    );
    let c = w.current();
    assert_eq!(weight(&c), 70, "hot values are applied");
    assert_eq!(
        c.listeners.data.address.to_string(),
        "0.0.0.0:8080",
        "restart-only values are kept"
    );
    assert!(
        w.status()
            .warnings
            .iter()
            .any(|w| w.message.contains("needs restart"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let options = WatchOptions {
        watch_filesystem: false,
        poll_interval: None,
        sighup: true,
        ..WatchOptions::default()
    };
    let (w, file) = start(dir.path(), "routes.yaml", &routes(90), options).await;
    let mut rx = w.subscribe();
    std::fs::write(&file, routes(15)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        weight(&w.current()),
        90,
        "without file watching nothing changes before SIGHUP"
    );
    let t = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    applied(&mut rx, "SIGHUP", t).await;
    assert_eq!(weight(&w.current()), 15);
}

/// Readers take snapshots nonstop while the config is swapped hundreds of times (with invalid files
/// in between); every snapshot must be a complete, valid config of one generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_only_ever_see_complete_valid_values() {
    fn generation(i: u32) -> String {
        format!(
            "upstreams:\n  - name: up-{i}\n    endpoints: [\"10.0.{}.{}:8000\"]\nroutes:\n  - name: route-{i}\n    \
             destinations: [{{ upstream: up-{i}, weight: {} }}]\n    timeout: {}ms\n",
            i / 250,
            i % 250,
            i + 1,
            i + 1
        )
    }
    let dir = tempfile::tempdir().unwrap();
    let options = WatchOptions {
        watch_filesystem: false,
        poll_interval: None,
        sighup: false,
        ..WatchOptions::default()
    };
    let (w, file) = start(dir.path(), "routes.yaml", &generation(0), options).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let reader = w.reader();
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.push(std::thread::spawn(move || {
            let mut last = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let c = reader.current();
                let route = &c.rules.routes[0];
                let i: u32 = route
                    .name
                    .trim_start_matches("route-")
                    .parse()
                    .expect("route name");
                assert_eq!(
                    c.rules.upstreams[0].name,
                    format!("up-{i}"),
                    "upstreams and routes from one generation"
                );
                assert_eq!(route.destinations[0].upstream, format!("up-{i}"));
                assert_eq!(route.destinations[0].weight, i + 1);
                assert_eq!(route.timeout, Duration::from_millis(u64::from(i) + 1));
                assert!(i >= last, "generations never go backwards ({last} then {i})");
                last = i;
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut applied_count = 0;
    for i in 1..=300u32 {
        let text = if i % 10 == 0 {
            "routes: [ {name: broken\n".to_string()
        } else {
            generation(i)
        };
        std::fs::write(&file, text).unwrap();
        if let ReloadOutcome::Applied { .. } = w.reload_now().await {
            applied_count += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw an incomplete or invalid config");
    }
    assert_eq!(applied_count, 270);
    assert_eq!(w.status().reloads, 270);
    assert_eq!(w.status().rejections, 30);
    assert_eq!(w.current().rules.routes[0].name, "route-299");
    eprintln!(
        "concurrency: {} snapshots read during 300 swaps",
        reads.load(Ordering::Relaxed)
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
}

//! The model repository and each model's lifecycle: which versions are loading, serving, draining or
//! failed, and the atomic switch between them.
//!
//! - Every model has a *serving set* (`Arc<BTreeMap<version, Arc<LoadedVersion>>>`). A request takes a
//!   snapshot of the version it needs and keeps it to the end, so it is served entirely by one fully
//!   loaded version; unversioned requests go to the highest version of the set at the moment they
//!   arrive.
//! - A (re)load builds the new versions completely (manifest, parse, instances, warmup) while the old
//!   set keeps serving, then replaces the set in one write. Versions that leave the set *drain*: they
//!   finish the requests they hold and free their sessions when the last one ends (reported as
//!   `UNLOADING` meanwhile).
//! - If any version of a reload fails, the model keeps the set it was serving (a broken new version
//!   never takes down a working one); the failure is reported in the index with its reason. On a first
//!   load, the versions that loaded serve and the others are reported.
//! - Loads and unloads of one model are serialised; different models load concurrently.

pub mod device_recovery;
pub mod scan;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};

use infergate_config::ModelConfig;
use infergate_protocol::{LoadParameters, ModelState, RepositoryIndexEntry, ServeError};

use crate::confine;
use crate::load_failure::{LoadFailure, LoadFailureKind, LoadFailures};
use crate::model_config::{self, SpecDefaults};
use crate::version::{self, LoadOptions, LoadedVersion, VersionSource};

/// How the repository changes after start-up (`--model-control-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlMode {
    /// Load everything at start-up; no changes afterwards.
    #[default]
    None,
    /// Load everything at start-up, then follow changes to the repository folders (file watch).
    Poll,
    /// Load only what `--load-model` names; then load and unload through the repository API.
    Explicit,
}

/// Repository settings.
#[derive(Debug, Clone, Default)]
pub struct RepositoryOptions {
    /// Repository folders (`--model-repository`, repeatable).
    pub roots: Vec<PathBuf>,
    /// Control mode.
    pub mode: ControlMode,
    /// Refuse models without a config file (no auto-complete).
    pub strict_model_config: bool,
    /// Settings of every version load.
    pub load: LoadOptions,
    /// Server-wide caps applied to every config.
    pub defaults: SpecDefaults,
    /// Models to load at start-up in explicit mode (`*` = all).
    pub startup_models: Vec<String>,
}

type Serving = BTreeMap<u64, Arc<LoadedVersion>>;

impl ModelEntry {
    /// Whether a serving version can run now (one on a lost GPU device cannot until it is rebuilt).
    fn can_run(&self) -> bool {
        self.serving.values().any(|lv| lv.device_lost().is_none())
    }
}

#[derive(Default)]
struct ModelEntry {
    serving: Arc<Serving>,
    status: BTreeMap<u64, (ModelState, String)>,
    model_reason: Option<String>,
    draining: Vec<(u64, Weak<LoadedVersion>)>,
    wanted: bool,
    from_request: bool,
    config_hash: u64,
    version_prints: BTreeMap<u64, u64>,
    model_print: Option<u64>,
}

/// The repository: every model's state. Shared as `Arc<Repository>`.
pub struct Repository {
    opts: RepositoryOptions,
    models: RwLock<BTreeMap<String, ModelEntry>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Repository folders that could not be listed at the last look, with the reason.
    unreadable: Mutex<BTreeMap<PathBuf, String>>,
    /// Failed loads, counted per model, version and kind.
    load_failures: Mutex<BTreeMap<FailureKey, u64>>,
}

/// A model, a version of it (`None`: the model as a whole) and the step a load failed at.
type FailureKey = (String, Option<u64>, LoadFailureKind);

/// One series of `infergate_model_load_failures_total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailureCount {
    /// The model.
    pub model: String,
    /// The version; `None` when the model failed as a whole (its folder, config or auto-complete).
    pub version: Option<u64>,
    /// The step it failed at.
    pub kind: LoadFailureKind,
    /// How many loads failed so.
    pub count: u64,
}

fn lock_err<T>(r: std::sync::LockResult<T>) -> T {
    // Entries are replaced whole under the lock; a panic elsewhere leaves consistent data.
    r.unwrap_or_else(|e| e.into_inner())
}

fn hash_of(v: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl Repository {
    /// A repository over these folders; nothing is loaded yet (see [`Repository::load_startup`]).
    pub fn new(opts: RepositoryOptions) -> Self {
        Repository {
            opts,
            models: RwLock::new(BTreeMap::new()),
            locks: Mutex::new(HashMap::new()),
            unreadable: Mutex::new(BTreeMap::new()),
            load_failures: Mutex::new(BTreeMap::new()),
        }
    }

    /// Looks at the repository folders and remembers which could not be read.
    fn scan(&self) -> scan::Folders {
        let folders = scan::model_folders(&self.opts.roots);
        self.note_unreadable(&folders.unreadable);
        folders
    }

    /// Remembers which repository folders cannot be read now, logging each one that stops or starts being
    /// readable.
    fn note_unreadable(&self, now: &BTreeMap<PathBuf, String>) {
        let mut unreadable = lock_err(self.unreadable.lock());
        for (root, reason) in now {
            if !unreadable.contains_key(root) {
                tracing::error!(
                    root = %root.display(), %reason,
                    "the model repository cannot be read; loaded models keep serving until it can"
                );
            }
        }
        for root in unreadable.keys() {
            if !now.contains_key(root) {
                tracing::info!(root = %root.display(), "the model repository can be read again");
            }
        }
        unreadable.clone_from(now);
    }

    /// Every repository folder with whether it can be listed now. Opens each folder only (a scrape need not
    /// look at every model folder in it).
    pub fn root_readability(&self) -> Vec<(PathBuf, bool)> {
        let now: BTreeMap<PathBuf, String> = self
            .opts
            .roots
            .iter()
            .filter_map(|root| {
                std::fs::read_dir(root)
                    .err()
                    .map(|e| (root.clone(), e.to_string()))
            })
            .collect();
        self.note_unreadable(&now);
        self.opts
            .roots
            .iter()
            .map(|r| (r.clone(), !now.contains_key(r)))
            .collect()
    }

    /// Failed loads so far, per model, version and kind.
    pub fn load_failure_counts(&self) -> Vec<LoadFailureCount> {
        lock_err(self.load_failures.lock())
            .iter()
            .map(|((model, version, kind), count)| LoadFailureCount {
                model: model.clone(),
                version: *version,
                kind: *kind,
                count: *count,
            })
            .collect()
    }

    /// The settings.
    pub fn options(&self) -> &RepositoryOptions {
        &self.opts
    }

    /// Loads what the control mode says to load at start-up. Failures are recorded per model (see
    /// [`Repository::index`]); the rest serve.
    pub async fn load_startup(&self) {
        let scan::Folders { found, clashes, .. } = self.scan();
        let names: Vec<String> = match self.opts.mode {
            ControlMode::None | ControlMode::Poll => found.keys().cloned().collect(),
            ControlMode::Explicit if self.opts.startup_models.iter().any(|m| m == "*") => {
                found.keys().cloned().collect()
            }
            ControlMode::Explicit => self.opts.startup_models.clone(),
        };
        for (name, reason) in &clashes {
            let mut models = lock_err(self.models.write());
            let e = models.entry(name.clone()).or_default();
            e.wanted = true;
            e.model_reason = Some(reason.clone());
        }
        let loads = names
            .iter()
            .filter(|n| !clashes.contains_key(*n))
            .map(|n| async move { (n, self.load(n, LoadParameters::default()).await) });
        for (name, result) in futures::future::join_all(loads).await {
            if let Err(e) = result {
                tracing::error!(model = %name, error = %e.message, "model failed to load");
            }
        }
    }

    /// Follows the repository folders (poll mode): loads new and changed models, unloads removed ones.
    /// While a repository folder cannot be read, nothing is unloaded: its models' absence from the listing
    /// says nothing about them (a volume that failed to mount is not an operator removing every model).
    pub async fn reconcile(&self) {
        let scan::Folders {
            found, unreadable, ..
        } = self.scan();
        for (name, dir) in &found {
            let print = scan::model_fingerprint(dir);
            let known = lock_err(self.models.read()).get(name).and_then(|e| e.model_print);
            if known == Some(print) {
                continue;
            }
            tracing::info!(model = %name, "repository change detected, (re)loading");
            if let Err(e) = self.load(name, LoadParameters::default()).await {
                tracing::error!(model = %name, error = %e.message, "reload failed; the previous versions keep serving");
            }
        }
        if !unreadable.is_empty() {
            return;
        }
        let gone: Vec<String> = lock_err(self.models.read())
            .iter()
            .filter(|(n, e)| e.wanted && !e.from_request && !found.contains_key(*n))
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            tracing::info!(model = %name, "model folder removed, unloading");
            if let Err(e) = self.unload(&name).await {
                tracing::error!(model = %name, error = %e.message, "unload failed");
            }
        }
    }

    fn model_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock_err(self.locks.lock())
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Loads or reloads a model (repository API and start-up). Completes when the model serves or
    /// failed; the error says why.
    pub async fn load(&self, name: &str, params: LoadParameters) -> Result<(), ServeError> {
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
            return Err(ServeError::invalid_argument(format!(
                "'{name}' is not a model name (a name is a folder of the repository: no '/', '\\' or leading '.')"
            )));
        }
        let lock = self.model_lock(name);
        let _serialised = lock.lock().await;
        let result = self.load_locked(name, params).await;
        let Err(failures) = result else {
            return Ok(());
        };
        {
            let mut counts = lock_err(self.load_failures.lock());
            for (version, failure) in &failures.0 {
                *counts
                    .entry((name.to_string(), *version, failure.kind))
                    .or_default() += 1;
            }
        }
        let reason = failures.to_string();
        lock_err(self.models.write())
            .entry(name.to_string())
            .or_default()
            .model_reason = Some(reason.clone());
        Err(ServeError::invalid_argument(format!(
            "failed to load '{name}': {reason}"
        )))
    }

    async fn load_locked(&self, name: &str, params: LoadParameters) -> Result<(), LoadFailures> {
        let config_err = LoadFailure::of(LoadFailureKind::Config);
        let from_request = params.config.is_some() || !params.files.is_empty();
        {
            let mut models = lock_err(self.models.write());
            let e = models.entry(name.to_string()).or_default();
            e.wanted = true;
        }
        let (model_dir, files) = if params.files.is_empty() {
            let folders = self.scan();
            if let Some(reason) = folders.clashes.get(name) {
                return Err(config_err(reason.clone()).into());
            }
            let Some(dir) = folders.found.get(name).cloned() else {
                if let Some((root, reason)) = folders.unreadable.iter().next() {
                    return Err(LoadFailure::of(LoadFailureKind::Unreadable)(format!(
                        "the model repository {} cannot be read ({reason}); fix the volume or its \
                         permissions, then load '{name}' again",
                        root.display()
                    ))
                    .into());
                }
                let roots: Vec<String> = self.opts.roots.iter().map(|r| r.display().to_string()).collect();
                return Err(config_err(format!(
                    "there is no model folder '{name}' in the model repository ({})",
                    roots.join(", ")
                ))
                .into());
            };
            (dir, None)
        } else {
            let (dir, keep) = write_request_files(name, &params.files).map_err(config_err)?;
            (dir, Some(keep))
        };
        let model_print = scan::model_fingerprint(&model_dir);
        if !from_request {
            let mut models = lock_err(self.models.write());
            if let Some(e) = models.get_mut(name) {
                e.model_print = Some(model_print);
            }
        }

        // The config: the request's override, the folder's file, or auto-complete.
        let file_config: Option<ModelConfig> = match &params.config {
            Some(text) => Some(model_config::parse_override(text, name).map_err(config_err)?),
            None => match model_config::read_config_file(&model_dir, name).map_err(config_err)? {
                Some(f) => {
                    for w in &f.warnings {
                        tracing::warn!(model = %name, "{w}");
                    }
                    Some(f.config)
                }
                None => None,
            },
        };
        if file_config.is_none() && self.opts.strict_model_config {
            return Err(config_err(format!(
                "{} has no config.pbtxt (or config.yaml) and --strict-model-config is set; write one, or drop \
                 the flag to derive it from the ONNX model",
                model_dir.display()
            ))
            .into());
        }
        if self.opts.strict_model_config && model_config::needs_autocomplete(file_config.as_ref()) {
            return Err(config_err(format!(
                "{}: the config declares no inputs or no outputs and --strict-model-config is set; declare them, \
                 or drop the flag to take them from the ONNX model",
                model_dir.display()
            ))
            .into());
        }
        let available = scan::versions(&model_dir);
        let policy_source = file_config.clone().unwrap_or_default();
        let mut selected = policy_source.select_versions(&available);
        selected.sort_unstable();
        if selected.is_empty() {
            return Err(config_err(if available.is_empty() {
                format!(
                    "{} has no numeric version folder (e.g. {0}/1/model.onnx)",
                    model_dir.display()
                )
            } else {
                format!(
                    "no version folder matches the version_policy (folders: {})",
                    available
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .into());
        }

        let mut parsed = BTreeMap::new();
        let config = if model_config::needs_autocomplete(file_config.as_ref()) {
            let mut first: Option<(u64, infergate_engine::Signature)> = None;
            for &v in &selected {
                let vdir = model_dir.join(v.to_string());
                let filename = file_config
                    .as_ref()
                    .map_or("model.onnx", |c| c.model_filename())
                    .to_string();
                let of_version = |f: LoadFailure| LoadFailures(vec![(Some(v), f)]);
                version::check_manifest(&vdir, self.opts.load.require_manifest)
                    .await
                    .map_err(of_version)?;
                let path = confine::resolve_inside(&model_dir, &vdir.join(&filename))
                    .map_err(|e| of_version(LoadFailure::of(LoadFailureKind::Integrity)(e)))?;
                let memory =
                    version::reserve_memory(&vdir, &self.opts.load, &format!("model '{name}' version {v}"))
                        .map_err(of_version)?;
                let model = Arc::new(version::parse_model(&path).await.map_err(of_version)?);
                match &first {
                    Some((fv, sig)) if sig != model.signature() => {
                        return Err(config_err(format!(
                            "config auto-complete is ambiguous: versions {fv} and {v} have different signatures; \
                             write a config.pbtxt with the inputs and outputs"
                        ))
                        .into());
                    }
                    Some(_) => {}
                    None => first = Some((v, model.signature().clone())),
                }
                parsed.insert(v, (model, memory));
            }
            let sig = first.map(|(_, s)| s).unwrap_or_default();
            let c = model_config::autocomplete(file_config, name, &sig).map_err(config_err)?;
            tracing::info!(model = %name, max_batch_size = c.max_batch_size, "config auto-completed from the ONNX model");
            c
        } else {
            file_config.unwrap_or_default()
        };
        let spec = Arc::new(model_config::to_spec(&config, &self.opts.defaults).map_err(config_err)?);
        let json = Arc::new(config.to_triton_json());
        let config_hash = hash_of(&json.to_string());

        let (old, old_hash, old_prints) = {
            let mut models = lock_err(self.models.write());
            let e = models.entry(name.to_string()).or_default();
            (e.serving.clone(), e.config_hash, e.version_prints.clone())
        };
        let mut plan = Vec::new();
        for &v in &selected {
            let print = scan::tree_fingerprint(&model_dir.join(v.to_string()));
            // A version on a lost GPU device is never reused: reloading is how it gets a new one.
            let reuse = (!from_request && old_hash == config_hash && old_prints.get(&v) == Some(&print))
                .then(|| old.get(&v).cloned())
                .flatten()
                .filter(|lv| lv.device_lost().is_none());
            plan.push((v, print, reuse));
        }
        {
            let mut models = lock_err(self.models.write());
            let e = models.entry(name.to_string()).or_default();
            for (v, _, reuse) in &plan {
                if reuse.is_none() {
                    e.status.insert(*v, (ModelState::Loading, String::new()));
                }
            }
        }
        let files: Option<Arc<dyn Send + Sync>> = files.map(|f| f as Arc<dyn Send + Sync>);
        let mut loaded: Serving = BTreeMap::new();
        let mut prints = BTreeMap::new();
        let mut failures: Vec<(u64, LoadFailure)> = Vec::new();
        for (v, print, reuse) in plan {
            if let Some(existing) = reuse {
                loaded.insert(v, existing);
                prints.insert(v, print);
                continue;
            }
            let source = VersionSource {
                model_dir: model_dir.clone(),
                version: v,
                files: files.clone(),
                parsed: parsed.remove(&v),
            };
            match LoadedVersion::load(spec.clone(), json.clone(), source, &self.opts.load).await {
                Ok(lv) => {
                    loaded.insert(v, Arc::new(lv));
                    prints.insert(v, print);
                }
                Err(failure) => {
                    tracing::error!(
                        model = %name, version = v, kind = failure.kind.as_str(), reason = %failure,
                        "version failed to load"
                    );
                    failures.push((v, failure));
                }
            }
        }

        // The switch: one write replaces the serving set.
        let mut models = lock_err(self.models.write());
        let e = models.entry(name.to_string()).or_default();
        let keep_old = !failures.is_empty() && !e.serving.is_empty();
        let new_set: Arc<Serving> = if keep_old {
            e.serving.clone()
        } else {
            Arc::new(loaded)
        };
        if !keep_old {
            let old_versions: Vec<u64> = e.serving.keys().copied().collect();
            e.status.retain(|v, _| {
                new_set.contains_key(v) || old_versions.contains(v) || failures.iter().any(|(f, _)| f == v)
            });
            for (v, lv) in e.serving.iter() {
                if !new_set.get(v).is_some_and(|n| Arc::ptr_eq(n, lv)) {
                    lv.retire();
                    e.draining.push((*v, Arc::downgrade(lv)));
                    if !new_set.contains_key(v) {
                        e.status.insert(*v, (ModelState::Unavailable, "unloaded".into()));
                    }
                }
            }
            e.config_hash = config_hash;
            e.version_prints = prints;
            e.from_request = from_request;
        }
        for v in new_set.keys() {
            e.status.insert(*v, (ModelState::Ready, String::new()));
        }
        for (v, failure) in &failures {
            if !new_set.contains_key(v) {
                e.status
                    .insert(*v, (ModelState::Unavailable, failure.message.clone()));
            }
        }
        // Versions that were loading but ended neither serving nor failed (a kept-old reload).
        for (state, _) in e.status.values_mut() {
            if *state == ModelState::Loading {
                *state = ModelState::Unavailable;
            }
        }
        e.serving = new_set;
        if failures.is_empty() {
            e.model_reason = None;
            drop(models);
            tracing::info!(model = %name, versions = ?selected, "model serving");
            Ok(())
        } else {
            Err(LoadFailures(
                failures.into_iter().map(|(v, f)| (Some(v), f)).collect(),
            ))
        }
    }

    /// Unloads every version of a model; in-flight requests finish on the versions they hold.
    pub async fn unload(&self, name: &str) -> Result<(), ServeError> {
        let lock = self.model_lock(name);
        let _serialised = lock.lock().await;
        let mut models = lock_err(self.models.write());
        let Some(e) = models.get_mut(name) else {
            return if self.scan().found.contains_key(name) {
                Ok(())
            } else {
                Err(ServeError::unknown_model(name))
            };
        };
        e.wanted = false;
        e.from_request = false;
        e.model_reason = None;
        e.model_print = None;
        e.version_prints.clear();
        e.config_hash = 0;
        let old = std::mem::take(&mut e.serving);
        for (v, lv) in old.iter() {
            lv.retire();
            e.draining.push((*v, Arc::downgrade(lv)));
        }
        for (_, (state, reason)) in e.status.iter_mut() {
            *state = ModelState::Unavailable;
            *reason = "unloaded".into();
        }
        tracing::info!(model = %name, "model unloaded; in-flight requests drain");
        Ok(())
    }

    /// The version a request should run on: the one asked for, or the highest serving one.
    pub fn get(&self, name: &str, version: Option<u64>) -> Result<Arc<LoadedVersion>, ServeError> {
        let models = lock_err(self.models.read());
        let Some(e) = models.get(name) else {
            return Err(ServeError::unknown_model(name));
        };
        let found = match version {
            Some(v) => e.serving.get(&v),
            None => e.serving.values().next_back(),
        };
        found
            .cloned()
            .ok_or_else(|| ServeError::version_not_ready(name, version))
    }

    /// Serving versions of a model, ascending.
    pub fn serving_versions(&self, name: &str) -> Vec<u64> {
        lock_err(self.models.read())
            .get(name)
            .map(|e| e.serving.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Every serving version of every model.
    pub fn all_serving(&self) -> Vec<Arc<LoadedVersion>> {
        lock_err(self.models.read())
            .values()
            .flat_map(|e| e.serving.values().cloned())
            .collect()
    }

    /// Whether the model is known to the repository (loaded now or before, or present as a folder).
    pub fn knows(&self, name: &str) -> bool {
        lock_err(self.models.read()).contains_key(name)
    }

    /// True when every model that should serve has at least one serving version that can run (not on a
    /// lost GPU device).
    pub fn all_wanted_serving(&self) -> bool {
        lock_err(self.models.read())
            .values()
            .all(|e| !e.wanted || e.can_run())
    }

    /// Every model that should serve, by name, with whether it has a serving version that can run now.
    pub fn wanted_readiness(&self) -> Vec<(String, bool)> {
        lock_err(self.models.read())
            .iter()
            .filter(|(_, e)| e.wanted)
            .map(|(name, e)| (name.clone(), e.can_run()))
            .collect()
    }

    /// The repository index: every model folder and every model ever loaded, with per-version states.
    pub fn index(&self, ready_only: bool) -> Vec<RepositoryIndexEntry> {
        let scan::Folders {
            found, unreadable, ..
        } = self.scan();
        // A serving version says so when its repository cannot be read: it keeps serving what it loaded, and
        // a change to its files cannot be seen until the folder is back.
        let unreadable_note: Option<String> = (!unreadable.is_empty()).then(|| {
            let roots: Vec<String> = unreadable
                .iter()
                .map(|(root, reason)| format!("{} ({reason})", root.display()))
                .collect();
            format!(
                "serving what was loaded; the model repository cannot be read: {}",
                roots.join(", ")
            )
        });
        let mut models = lock_err(self.models.write());
        let mut out = Vec::new();
        let mut names: Vec<String> = found.into_keys().collect();
        names.extend(models.keys().cloned());
        names.sort();
        names.dedup();
        for name in names {
            let Some(e) = models.get_mut(&name) else {
                if !ready_only {
                    out.push(RepositoryIndexEntry {
                        name,
                        version: None,
                        state: None,
                        reason: String::new(),
                    });
                }
                continue;
            };
            e.draining.retain(|(_, w)| w.strong_count() > 0);
            let draining: Vec<u64> = e.draining.iter().map(|(v, _)| *v).collect();
            let mut listed = false;
            for (v, (state, reason)) in &e.status {
                let mut state = *state;
                let mut reason = reason.clone();
                if state == ModelState::Unavailable && draining.contains(v) {
                    state = ModelState::Unloading;
                }
                if state == ModelState::Ready
                    && let Some(why) = e.serving.get(v).and_then(|lv| lv.device_lost())
                {
                    state = ModelState::Unavailable;
                    reason = format!("{why}; rebuilt once the device is back");
                }
                if state == ModelState::Ready
                    && let Some(r) = &e.model_reason
                {
                    reason = format!("serving; the last reload failed: {r}");
                }
                if state == ModelState::Ready
                    && let Some(note) = &unreadable_note
                {
                    reason = if reason.is_empty() {
                        note.clone()
                    } else {
                        format!("{reason}; {note}")
                    };
                }
                if ready_only && state != ModelState::Ready {
                    continue;
                }
                listed = true;
                out.push(RepositoryIndexEntry {
                    name: name.clone(),
                    version: Some(v.to_string()),
                    state: Some(state),
                    reason,
                });
            }
            if !listed && !ready_only {
                match &e.model_reason {
                    Some(r) if e.serving.is_empty() => out.push(RepositoryIndexEntry {
                        name: name.clone(),
                        version: None,
                        state: Some(ModelState::Unavailable),
                        reason: r.clone(),
                    }),
                    _ => out.push(RepositoryIndexEntry {
                        name: name.clone(),
                        version: None,
                        state: None,
                        reason: String::new(),
                    }),
                }
            }
        }
        out
    }
}

/// Writes the files of a load request into a temporary model folder; the handle deletes it when the
/// last version using it is gone.
fn write_request_files(
    name: &str,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<(PathBuf, Arc<tempfile::TempDir>), String> {
    let tmp = tempfile::Builder::new()
        .prefix("infergate-model-")
        .tempdir()
        .map_err(|e| format!("cannot create a folder for the request's files: {e}"))?;
    let dir = tmp.path().join(name);
    for (rel, bytes) in files {
        let path = Path::new(rel);
        if rel.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!(
                "file '{rel}': paths must be relative to the model folder, e.g. 'file:1/model.onnx' (no '..' or '/')"
            ));
        }
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("file '{rel}': {e}"))?;
        }
        std::fs::write(&target, bytes).map_err(|e| format!("file '{rel}': {e}"))?;
    }
    Ok((dir, Arc::new(tmp)))
}

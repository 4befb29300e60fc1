//! Training checkpoints: `ckpt-{step}.safetensors` files in a model directory holding the
//! parameters, the optimizer's state (kiln-optim's layout: slots as `optim/{param}/{slot}`,
//! its kind, step count and hyperparameters as `optim/...` metadata), and the run's global
//! step, seed, learning-rate scale and input cursor as `kiln_train/...` metadata.
//!
//! **A checkpoint is written whole or not at all**: the bytes go to a hidden temporary file,
//! which is flushed to disk and then renamed over the final name, and the directory is
//! flushed; listing ignores anything not named `ckpt-{digits}.safetensors`, so a crash at
//! any point leaves the newest listed checkpoint complete.
//! Setting `KILN_TRAIN_FAULT=before_rename:{step}` aborts the process between the flush and
//! the rename of that step's checkpoint, for crash tests.
//!
//! Depends on kiln-io (the safetensors bytes), kiln-optim (`Optimizer`, `OptimizerState`),
//! `crate::dataset` (`Cursor`) and `crate::error`.

use crate::{Cursor, Error, Result};
use kiln::Array;
use kiln_optim::{Optimizer, OptimizerState, Parameter, OPTIMIZER_PREFIX};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

const META: &str = "kiln_train/";
const FORMAT: &str = "1";

/// The path of step `step`'s checkpoint in `dir`.
///
/// ```
/// let p = kiln_train::checkpoint_path("runs/a", 120);
/// assert!(p.ends_with("ckpt-120.safetensors"));
/// ```
pub fn checkpoint_path(dir: impl AsRef<Path>, step: u64) -> PathBuf {
    dir.as_ref().join(format!("ckpt-{step}.safetensors"))
}

/// The step of a checkpoint file name, if it is one.
fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ckpt-")?.strip_suffix(".safetensors")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The checkpoints in `dir`, oldest step first (an absent directory has none).
///
/// ```
/// let dir = std::env::temp_dir().join(format!("kiln-list-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("ckpt-20.safetensors"), b"").unwrap();
/// std::fs::write(dir.join("ckpt-3.safetensors"), b"").unwrap();
/// std::fs::write(dir.join(".ckpt-40.safetensors.tmp"), b"").unwrap();
/// let steps: Vec<u64> = kiln_train::list_checkpoints(&dir)?.into_iter().map(|c| c.0).collect();
/// assert_eq!(steps, vec![3, 20]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn list_checkpoints(dir: impl AsRef<Path>) -> Result<Vec<(u64, PathBuf)>> {
    let dir = dir.as_ref();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list_checkpoints", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list_checkpoints", dir, e))?;
        if let Some(step) = entry.file_name().to_str().and_then(step_of) {
            out.push((step, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The newest checkpoint in `dir`, if any.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("kiln-latest-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// assert_eq!(kiln_train::latest_checkpoint(&dir)?, None); // no directory: no checkpoint
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("ckpt-9.safetensors"), b"").unwrap();
/// std::fs::write(dir.join("ckpt-10.safetensors"), b"").unwrap();
/// assert_eq!(kiln_train::latest_checkpoint(&dir)?, Some(dir.join("ckpt-10.safetensors")));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn latest_checkpoint(dir: impl AsRef<Path>) -> Result<Option<PathBuf>> {
    Ok(list_checkpoints(dir)?.pop().map(|(_, p)| p))
}

/// A checkpoint read back.
///
/// ```
/// use kiln_train::{demo, Estimator, RunConfig, Until};
/// let dir = std::env::temp_dir().join(format!("kiln-ckpt-doc-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let config = RunConfig::new().model_dir(&dir).seed(5).progress(false);
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), config)?;
/// est.train(&input, Until::Steps(2), &mut [])?;
/// let ckpt = kiln_train::read_checkpoint(est.save_checkpoint()?)?;
/// assert_eq!((ckpt.global_step, ckpt.seed, ckpt.lr_scale), (2, 5, 1.0));
/// let mut names: Vec<&str> = ckpt.parameters.iter().map(|(n, _)| n.as_str()).collect();
/// names.sort();
/// assert_eq!(names, ["dense_0/b", "dense_0/w"]);
/// assert!(ckpt.optimizer.is_some() && ckpt.input.is_some());
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Debug)]
pub struct Checkpoint {
    /// The file.
    pub path: PathBuf,
    /// The number of updates before it.
    pub global_step: u64,
    /// The run's seed.
    pub seed: u64,
    /// The learning-rate scale set by hooks (1 unless a plateau reduced it).
    pub lr_scale: f64,
    /// Where the training input was.
    pub input: Option<Cursor>,
    /// The parameters by name.
    pub parameters: Vec<(String, Array)>,
    /// The optimizer's state, if one had been created.
    pub optimizer: Option<OptimizerState>,
}

/// What a checkpoint records besides parameters and optimizer.
pub(crate) struct RunState<'a> {
    pub(crate) global_step: u64,
    pub(crate) seed: u64,
    pub(crate) lr_scale: f64,
    pub(crate) input: Option<&'a Cursor>,
}

/// Writes step `run.global_step`'s checkpoint into `dir` atomically (see the module docs)
/// and returns its path.
pub(crate) fn write_checkpoint(
    dir: &Path,
    run: &RunState<'_>,
    params: &[std::sync::Arc<Parameter>],
    optimizer: Option<&dyn Optimizer>,
) -> Result<PathBuf> {
    const OP: &str = "save checkpoint";
    let path = checkpoint_path(dir, run.global_step);
    let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
    let state = optimizer.map(|o| o.state());
    let mut names: Vec<String> = params.iter().map(|p| p.name().to_string()).collect();
    let mut arrays: Vec<&Array> = values.iter().collect();
    let mut meta: Vec<(String, String)> = vec![
        (format!("{META}format"), FORMAT.to_string()),
        (format!("{META}global_step"), run.global_step.to_string()),
        (format!("{META}seed"), run.seed.to_string()),
        (format!("{META}lr_scale"), format!("{:?}", run.lr_scale)),
    ];
    if let Some(c) = run.input {
        meta.push((format!("{META}input"), c.to_string()));
    }
    if let Some(state) = &state {
        for (n, a) in state.tensors() {
            names.push(format!("{OPTIMIZER_PREFIX}{n}"));
            arrays.push(a);
        }
        meta.extend(
            state
                .metadata()
                .into_iter()
                .map(|(k, v)| (format!("{OPTIMIZER_PREFIX}{k}"), v)),
        );
    }
    let tensors: Vec<(&str, &Array)> = names.iter().map(String::as_str).zip(arrays).collect();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let bytes = kiln_io::safetensors_to_bytes(&tensors, &meta)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(OP, dir, e))?;
    let tmp = dir.join(format!(".ckpt-{}.safetensors.tmp", run.global_step));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(OP, &tmp, e));
    }
    if fault_at("before_rename", run.global_step) {
        eprintln!(
            "kiln-train: KILN_TRAIN_FAULT: aborting before renaming {}",
            tmp.display()
        );
        std::process::abort();
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(OP, &path, e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        // makes the rename durable where the platform allows syncing a directory
        let _ = d.sync_all();
    }
    Ok(path)
}

/// Whether `KILN_TRAIN_FAULT` asks for a crash at `point` of `step`.
fn fault_at(point: &str, step: u64) -> bool {
    std::env::var("KILN_TRAIN_FAULT").is_ok_and(|v| {
        v.split_once(':')
            .is_some_and(|(p, s)| p == point && s.parse() == Ok(step))
    })
}

/// Deletes the oldest checkpoints in `dir` beyond the newest `keep_max`; returns the
/// deleted paths. `keep_max == 0` keeps all.
pub(crate) fn prune(dir: &Path, keep_max: usize) -> Result<Vec<PathBuf>> {
    if keep_max == 0 {
        return Ok(Vec::new());
    }
    let all = list_checkpoints(dir)?;
    let mut deleted = Vec::new();
    let excess = all.len().saturating_sub(keep_max);
    for (_, p) in all.into_iter().take(excess) {
        std::fs::remove_file(&p).map_err(|e| Error::io("prune checkpoints", &p, e))?;
        deleted.push(p);
    }
    Ok(deleted)
}

/// Removes temporary files a crash left in `dir`.
pub(crate) fn remove_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".ckpt-") && name.ends_with(".safetensors.tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Reads a checkpoint written by kiln-train.
///
/// ```no_run
/// let ckpt = kiln_train::read_checkpoint("runs/a/ckpt-100.safetensors")?;
/// println!("step {} with {} parameters", ckpt.global_step, ckpt.parameters.len());
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn read_checkpoint(path: impl AsRef<Path>) -> Result<Checkpoint> {
    const OP: &str = "read_checkpoint";
    let path = path.as_ref();
    let file = kiln_io::read_safetensors(path)?;
    let meta = file.metadata();
    let get = |key: &str| {
        meta.get(&format!("{META}{key}")).ok_or_else(|| {
            Error::checkpoint(
                OP,
                path,
                format!(
                    "it has no {META}{key} metadata entry: it was not written by kiln-train \
                     (load plain parameters with kiln_optim::load_safetensors, or warm-start \
                     from it)"
                ),
            )
        })
    };
    let format = get("format")?;
    if format != FORMAT {
        return Err(Error::checkpoint(
            OP,
            path,
            format!("its layout is version {format}; this kiln-train reads version {FORMAT}"),
        ));
    }
    let number = |key: &str| -> Result<u64> {
        let v = get(key)?;
        v.parse().map_err(|_| {
            Error::checkpoint(OP, path, format!("its {key} {v:?} is not a whole number"))
        })
    };
    let global_step = number("global_step")?;
    let seed = number("seed")?;
    let lr_scale: f64 = {
        let v = get("lr_scale")?;
        v.parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x > 0.0)
            .ok_or_else(|| {
                Error::checkpoint(
                    OP,
                    path,
                    format!("its lr_scale {v:?} is not a positive number"),
                )
            })?
    };
    let input = match meta.get(&format!("{META}input")) {
        None => None,
        Some(v) => Some(v.parse().map_err(|e: Error| {
            Error::checkpoint(OP, path, format!("its input cursor is damaged: {e}"))
        })?),
    };
    let opt_meta: BTreeMap<String, String> = meta
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(OPTIMIZER_PREFIX)?.to_string(), v.clone())))
        .collect();
    let mut parameters = Vec::new();
    let mut slots = Vec::new();
    for (n, a) in file.tensors() {
        match n.strip_prefix(OPTIMIZER_PREFIX) {
            Some(slot) => slots.push((slot.to_string(), a.clone())),
            None => parameters.push((n.clone(), a.clone())),
        }
    }
    let optimizer = if opt_meta.is_empty() {
        None
    } else {
        Some(OptimizerState::from_parts(&opt_meta, slots)?)
    };
    Ok(Checkpoint {
        path: path.to_path_buf(),
        global_step,
        seed,
        lr_scale,
        input,
        parameters,
        optimizer,
    })
}

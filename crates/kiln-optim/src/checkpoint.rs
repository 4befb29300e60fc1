//! Saving and loading parameters, and optimizer state with them, in the safetensors format
//! (readable by PyTorch, JAX and the Hugging Face tooling), through kiln-io.
//!
//! [`save_safetensors`] and [`load_safetensors`] keep parameters only, as tensors named by
//! the parameters' names. [`save_checkpoint`] and [`load_checkpoint`] also keep an
//! optimizer's state ([`crate::OptimizerState`]), so training resumes exactly where it
//! stopped: its slots as tensors `optim/{parameter}/{slot}`, its kind, step count and
//! hyperparameters as metadata entries `optim/kind`, `optim/steps`, `optim/lr`, ...
//!
//! Loading assigns nothing, and restores nothing, unless everything fits; saving checks names
//! and evaluates every value before it writes, into a temporary file flushed and renamed over
//! the target (kiln-io's `write_safetensors`), so a failed save leaves no file behind and an
//! existing checkpoint intact.
//!
//! Depends on the crate root, `crate::state` and kiln-io (`read_safetensors`,
//! `write_safetensors`).

use crate::state::{split, OPTIMIZER_PREFIX};
use crate::{describe, io_error, Error, Optimizer, OptimizerState, Parameter, Result};
use kiln::Array;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Writes the parameters' current values to `path` (tensor names are parameter names).
///
/// Nothing is written unless every value evaluates and every name is fit for a safetensors
/// key: distinct, not empty and not `__metadata__` (the format's reserved key).
/// The file is written next to `path` under a temporary name, flushed to disk and renamed
/// over it, so a failure never leaves a partial file, and an existing checkpoint stays
/// intact until the new one is complete.
///
/// ```
/// use kiln_optim::{load_safetensors, save_safetensors, Parameter};
/// let dir = std::env::temp_dir().join(format!("kiln-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("w.safetensors");
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.5f32, -2.0], &[2])?);
/// save_safetensors(&path, &[&w])?;
/// let fresh = Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// load_safetensors(&path, &[&fresh])?;
/// assert_eq!(fresh.value().to_vec::<f32>()?, vec![1.5, -2.0]);
/// let twin = Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// assert!(save_safetensors(&path, &[&w, &twin]).is_err()); // two tensors named "w"
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<Path>, params: &[&Parameter]) -> Result<()> {
    const OP: &str = "save_safetensors";
    let path = path.as_ref();
    let shown = path.display().to_string();
    names_a_file(OP, path)?;
    check_names(OP, &shown, params)?;
    let values = evaluated(OP, &shown, params)?;
    let tensors: Vec<(&str, &Array)> = params.iter().map(|p| p.name()).zip(&values).collect();
    kiln_io::write_safetensors(path, &tensors, &[]).map_err(|e| io_error(OP, e))
}

/// Writes the parameters' current values and `optimizer`'s state ([`Optimizer::state`]) to
/// `path`, for [`load_checkpoint`] to resume from.
///
/// The file is standard safetensors: each parameter is the tensor of its name, each slot of
/// the optimizer the tensor `optim/{parameter}/{slot}` (see [`crate::OPTIMIZER_PREFIX`]),
/// and the optimizer's kind, step count and hyperparameters are the metadata entries
/// `optim/kind`, `optim/steps`, `optim/lr`, ... (see [`OptimizerState::metadata`]).
///
/// Nothing is written unless the names are fit for it (as for [`save_safetensors`], and no
/// parameter named with the prefix `optim/`), every value evaluates, and every slot of the
/// optimizer belongs to one of `params`, of its dtype and shape (state for a parameter left
/// out could not be restored). The write is atomic, as for [`save_safetensors`].
///
/// ```
/// use kiln_optim::{load_checkpoint, save_checkpoint, Adam, Optimizer, Parameter};
/// let path = std::env::temp_dir().join(format!("kiln-doc-ckpt-{}.safetensors", std::process::id()));
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32, -1.0], &[2])?);
/// let mut adam = Adam::new(0.1);
/// adam.step(&[&w], &[kiln::Array::from_vec(vec![0.5f32, 2.0], &[2])?], &[])?;
/// save_checkpoint(&path, &[&w], &adam)?;
/// let file = kiln_io::read_safetensors(&path)?;
/// assert_eq!(file.metadata()["optim/steps"], "1");
/// assert!(file.get("optim/w/exp_avg_sq").is_some());
/// // a fresh model and optimizer resume where the first stopped
/// let fresh = Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// let mut resumed = Adam::new(0.1);
/// load_checkpoint(&path, &[&fresh], &mut resumed)?;
/// assert_eq!(resumed.steps(), 1);
/// assert_eq!(fresh.value().to_vec::<f32>()?, w.value().to_vec::<f32>()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn save_checkpoint(
    path: impl AsRef<Path>,
    params: &[&Parameter],
    optimizer: &dyn Optimizer,
) -> Result<()> {
    const OP: &str = "save_checkpoint";
    let path = path.as_ref();
    let shown = path.display().to_string();
    names_a_file(OP, path)?;
    check_names(OP, &shown, params)?;
    if let Some((i, p)) = params
        .iter()
        .enumerate()
        .find(|(_, p)| p.name().starts_with(OPTIMIZER_PREFIX))
    {
        return Err(Error::Invalid {
            op: OP,
            message: format!(
                "parameter #{i} ({}) is named {:?}, but a checkpoint keeps the optimizer's \
                 state under {OPTIMIZER_PREFIX:?}: rename it; nothing was written to {shown}",
                describe(p.dtype(), p.shape()),
                p.name()
            ),
        });
    }
    let state = optimizer.state();
    let what = format!("the optimizer's state (not written to {shown})");
    state_fits(
        (OP, &what, "nothing was written"),
        params,
        &state,
        "the optimizer trained another parameter of this name",
    )?;
    let values = evaluated(OP, &shown, params)?;
    let state_names: Vec<String> = state
        .tensors()
        .iter()
        .map(|(n, _)| format!("{OPTIMIZER_PREFIX}{n}"))
        .collect();
    let mut tensors: Vec<(&str, &Array)> = params.iter().map(|p| p.name()).zip(&values).collect();
    tensors.extend(
        state_names
            .iter()
            .map(String::as_str)
            .zip(state.tensors().iter().map(|(_, a)| a)),
    );
    let meta: Vec<(String, String)> = state
        .metadata()
        .into_iter()
        .map(|(k, v)| (format!("{OPTIMIZER_PREFIX}{k}"), v))
        .collect();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    kiln_io::write_safetensors(path, &tensors, &meta).map_err(|e| io_error(OP, e))
}

/// Checks that `path` ends in a file name (kiln-io writes a temporary file beside it).
fn names_a_file(op: &'static str, path: &Path) -> Result<()> {
    if path.file_name().is_some() {
        return Ok(());
    }
    Err(Error::Invalid {
        op,
        message: format!(
            "{:?} names no file: pass a path that ends in a file name, such as \
             model.safetensors; nothing was written",
            path.display().to_string()
        ),
    })
}

/// The parameters' values, evaluated; an error names the first that fails.
fn evaluated(op: &'static str, shown: &str, params: &[&Parameter]) -> Result<Vec<Array>> {
    let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
    let refs: Vec<&Array> = values.iter().collect();
    if let Err(source) = kiln::eval(&refs) {
        let labelled: Vec<(String, &Array)> = params
            .iter()
            .zip(&values)
            .map(|(p, v)| (format!("the value of parameter {:?}", p.name()), v))
            .collect();
        return Err(Error::Eval {
            op,
            what: crate::failing(&labelled)
                .unwrap_or_else(|| format!("the values of {} parameters", params.len())),
            unchanged: format!("nothing was written to {shown}"),
            source: Box::new(source),
        });
    }
    Ok(values)
}

/// Checks that every name can be a safetensors key: distinct (the format holds one tensor
/// per name), not empty, not `__metadata__`.
fn check_names(op: &'static str, shown: &str, params: &[&Parameter]) -> Result<()> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let name = p.name();
        let unusable = match name {
            "" => Some("an empty name identifies no tensor"),
            "__metadata__" => Some("safetensors reserves it for the file's metadata"),
            _ => None,
        };
        if let Some(why) = unusable {
            return Err(Error::Invalid {
                op,
                message: format!(
                    "parameter #{i} ({}) is named {name:?}, which cannot be a tensor name \
                     ({why}): rename it; nothing was written to {shown}",
                    describe(p.dtype(), p.shape())
                ),
            });
        }
        if let Some(first) = seen.insert(name, i) {
            return Err(Error::Duplicate {
                op,
                name: name.to_string(),
                first,
                second: i,
                context: format!(
                    " ({shown} would hold only one of them, so nothing was written to it)"
                ),
            });
        }
    }
    Ok(())
}

/// Checks that every slot of `state` belongs to one of `params` and has its dtype and shape.
/// `(op, what, unchanged)`: the operation, the state as errors name it, and what was left
/// alone.
fn state_fits(
    (op, what, unchanged): (&'static str, &str, &str),
    params: &[&Parameter],
    state: &OptimizerState,
    hint: &str,
) -> Result<()> {
    let by_name: HashMap<&str, &Parameter> = params.iter().map(|p| (p.name(), *p)).collect();
    for (key, a) in state.tensors() {
        let param = split(key).map_or(key.as_str(), |(p, _)| p);
        let Some(p) = by_name.get(param) else {
            return Err(Error::State {
                op,
                what: what.to_string(),
                message: format!(
                    "it holds {key:?}, state of the parameter {param:?}, which is not among \
                     the {} parameters given: pass every parameter the optimizer trains; \
                     {unchanged}",
                    params.len()
                ),
            });
        };
        if a.dtype() != p.dtype() || a.shape() != p.shape() {
            return Err(Error::Mismatch {
                op,
                name: p.name().to_string(),
                expected: describe(p.dtype(), p.shape()),
                found: format!(
                    "{} (its optimizer state {key:?})",
                    describe(a.dtype(), a.shape())
                ),
                hint: format!("{hint}; {unchanged}"),
            });
        }
    }
    Ok(())
}

/// Reads every tensor of a safetensors file, in the file's order (for loaders that infer a
/// model's sizes from its tensors before creating its parameters).
///
/// The file is read through kiln-io's memory map: tensors of kiln's dtypes are not copied.
/// Narrower types are widened exactly (`f16`, `bf16` → float32; `i8`, `i16`, `u8`, `u16` →
/// int32; `u32` → int64; `u64` → int64 when every value fits); other dtypes are an error
/// naming the tensor.
///
/// ```
/// use kiln_optim::{read_safetensors, save_safetensors, Parameter};
/// let path = std::env::temp_dir().join(format!("kiln-doc-read-{}.safetensors", std::process::id()));
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?);
/// save_safetensors(&path, &[&w])?;
/// let all = read_safetensors(&path)?;
/// assert_eq!(all[0].0, "w");
/// assert_eq!(all[0].1.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, Array)>> {
    const OP: &str = "read_safetensors";
    kiln_io::read_safetensors(path)
        .map(kiln_io::SafeTensors::into_tensors)
        .map_err(|e| io_error(OP, e))
}

/// Reads `path` and assigns every parameter the tensor of its name. Nothing is assigned
/// unless every parameter is found with the right dtype and shape (a tensor stored in a
/// narrower type is read widened, as by [`read_safetensors`]). Other tensors in the file are
/// ignored.
///
/// ```
/// let p = kiln_optim::Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// let e = kiln_optim::load_safetensors("/nonexistent.safetensors", &[&p]).unwrap_err();
/// assert!(e.to_string().contains("/nonexistent.safetensors"));
/// ```
pub fn load_safetensors(path: impl AsRef<Path>, params: &[&Parameter]) -> Result<()> {
    const OP: &str = "load_safetensors";
    let path = path.as_ref();
    let shown = path.display().to_string();
    let file = kiln_io::read_safetensors(path).map_err(|e| io_error(OP, e))?;
    let loaded = parameter_values(OP, &shown, &file, params)?;
    // the commit: every dtype and shape was checked above, so nothing below can fail
    for (p, v) in params.iter().zip(loaded) {
        p.replace(v);
    }
    Ok(())
}

/// Reads `path`, written by [`save_checkpoint`], and assigns every parameter its value and
/// restores `optimizer`'s state ([`Optimizer::load_state`]: the step count, every slot, and
/// the learning rate), so the next step is the one the saved run would have taken.
///
/// Nothing is assigned or restored unless everything fits: every parameter is found with its
/// dtype and shape; the file holds optimizer state of the same kind and hyperparameters (but
/// the learning rate) as `optimizer`; every slot is complete and belongs to one of `params`,
/// of its dtype and shape. Otherwise the error names the mismatch (the parameter, the
/// tensor, the hyperparameter and both values), and parameters and optimizer are as before.
///
/// ```
/// use kiln_optim::{load_checkpoint, save_checkpoint, Adam, Optimizer, Parameter, Sgd};
/// let path = std::env::temp_dir().join(format!("kiln-doc-load-{}.safetensors", std::process::id()));
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f64], &[1])?);
/// let mut sgd = Sgd::new(0.1).momentum(0.9);
/// sgd.step(&[&w], &[kiln::Array::from_vec(vec![1.0f64], &[1])?], &[])?;
/// save_checkpoint(&path, &[&w], &sgd)?;
/// // the wrong optimizer: an error naming both kinds, and nothing changes
/// let fresh = Parameter::new("w", kiln::Array::zeros(&[1], kiln::DType::F64));
/// let mut adam = Adam::new(0.1);
/// let e = load_checkpoint(&path, &[&fresh], &mut adam).unwrap_err().to_string();
/// assert!(e.contains("\"Sgd\"") && e.contains("\"Adam\""), "{e}");
/// assert_eq!((fresh.value().item::<f64>()?, adam.steps()), (0.0, 0));
/// // the right one
/// let mut resumed = Sgd::new(0.1).momentum(0.9);
/// load_checkpoint(&path, &[&fresh], &mut resumed)?;
/// assert_eq!((fresh.value().item::<f64>()?, resumed.steps()), (0.9, 1));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn load_checkpoint(
    path: impl AsRef<Path>,
    params: &[&Parameter],
    optimizer: &mut dyn Optimizer,
) -> Result<()> {
    const OP: &str = "load_checkpoint";
    let path = path.as_ref();
    let shown = path.display().to_string();
    let what = format!("the optimizer state in {shown}");
    let file = kiln_io::read_safetensors(path).map_err(|e| io_error(OP, e))?;
    let loaded = parameter_values(OP, &shown, &file, params)?;
    let meta: BTreeMap<String, String> = file
        .metadata()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(OPTIMIZER_PREFIX)?.to_string(), v.clone())))
        .collect();
    if meta.is_empty() {
        return Err(Error::State {
            op: OP,
            what: shown,
            message: format!(
                "it holds no optimizer state (no metadata entries {OPTIMIZER_PREFIX}...): \
                 it was written by save_safetensors, not save_checkpoint; load its \
                 parameters with load_safetensors; nothing was changed"
            ),
        });
    }
    let tensors: Vec<(String, Array)> = file
        .tensors()
        .iter()
        .filter_map(|(n, a)| Some((n.strip_prefix(OPTIMIZER_PREFIX)?.to_string(), a.clone())))
        .collect();
    // the errors of `from_parts` and `load_state`, naming this operation and the file
    let in_file = |suffix: &'static str| {
        let what = what.clone();
        move |e: Error| match e {
            Error::State { message, .. } => Error::State {
                op: OP,
                what,
                message: format!("{message}{suffix}"),
            },
            other => other,
        }
    };
    let state =
        OptimizerState::from_parts(&meta, tensors).map_err(in_file("; nothing was changed"))?;
    state_fits(
        (OP, &what, "nothing was changed"),
        params,
        &state,
        &format!("{shown} was saved for another model"),
    )?;
    optimizer.load_state(&state).map_err(in_file(""))?;
    // the commit: every dtype and shape was checked above, so nothing below can fail
    for (p, v) in params.iter().zip(loaded) {
        p.replace(v);
    }
    Ok(())
}

/// The value of each parameter in `file`, checked for its dtype and shape.
fn parameter_values(
    op: &'static str,
    shown: &str,
    file: &kiln_io::SafeTensors,
    params: &[&Parameter],
) -> Result<Vec<Array>> {
    let mut loaded = Vec::with_capacity(params.len());
    for p in params {
        let Some(t) = file.get(p.name()) else {
            let mut available: Vec<String> = file
                .names()
                .filter(|n| !n.starts_with(OPTIMIZER_PREFIX))
                .map(str::to_string)
                .collect();
            available.sort();
            return Err(Error::Missing {
                op,
                path: shown.to_string(),
                name: p.name().to_string(),
                available,
            });
        };
        if t.dtype() != p.dtype() || t.shape() != p.shape() {
            return Err(Error::Mismatch {
                op,
                name: p.name().to_string(),
                expected: describe(p.dtype(), p.shape()),
                found: describe(t.dtype(), t.shape()),
                hint: format!("the checkpoint {shown} was saved for a different model"),
            });
        }
        loaded.push(t.clone());
    }
    Ok(loaded)
}

//! # kiln-optim
//!
//! Training state for models written with `kiln::Array`: named [`Parameter`]s whose values
//! live across steps, the [`Sgd`] (with momentum / Nesterov) and [`Adam`] (and AdamW)
//! optimizers, global-norm gradient clipping, and safetensors checkpoints: of parameters
//! ([`save_safetensors`], [`load_safetensors`]) or of parameters and an optimizer's state
//! ([`save_checkpoint`], [`load_checkpoint`]; the state itself is an [`OptimizerState`]), from
//! which training resumes bit for bit where it stopped.
//!
//! Written only against kiln's public API. An optimizer step builds the update expressions
//! lazily and evaluates them in **one** pass together with whatever else the caller asks for
//! (typically the loss), so forward, backward and update share one compiled plan; the learning
//! rate and every step-dependent factor are run-time scalars, so a schedule never recompiles.
//!
//! Everything that changes state is all or nothing: a step, [`load_safetensors`],
//! [`load_checkpoint`], [`Optimizer::load_state`], [`save_safetensors`] or
//! [`save_checkpoint`] that returns an error has changed no parameter, no optimizer state
//! (step count, momentum buffers, moments) and no file.
//!
//! ```
//! use kiln::{Array, DType};
//! use kiln_optim::{Optimizer, Parameter, Sgd};
//! let w = Parameter::new("w", Array::from_vec(vec![1.0f32, -2.0], &[2])?);
//! let mut opt = Sgd::new(0.1);
//! for _ in 0..50 {
//!     let loss = (&w.value() * &w.value()).sum(None, false); // minimise |w|²
//!     let g = kiln::grad(&loss, &[&w.value()])?;
//!     opt.step(&[&w], &g, &[&loss])?;
//! }
//! assert!(w.value().to_vec::<f32>()?.iter().all(|x| x.abs() < 1e-4));
//! # Ok::<(), kiln_optim::Error>(())
//! ```
//!
//! Depends on kiln's public API and kiln-io (safetensors files).

mod checkpoint;
mod optim;
mod state;

pub use checkpoint::{
    load_checkpoint, load_safetensors, read_safetensors, save_checkpoint, save_safetensors,
};
pub use optim::{clip_by_global_norm, Adam, Optimizer, Sgd};
pub use state::{OptimizerState, OPTIMIZER_PREFIX};

use kiln::{Array, DType};
use std::sync::Mutex;

/// Errors of training utilities.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An array operation failed.
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// Reading or writing a file failed.
    #[error("{op}: {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A checkpoint is not valid safetensors.
    #[error("{op}: {path} is not a valid safetensors file: {message}")]
    Format {
        /// The operation.
        op: &'static str,
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A checkpoint lacks a parameter.
    #[error("{op}: {path} has no tensor named {name:?}: it holds {available:?}")]
    Missing {
        /// The operation (`load_safetensors`, `load_checkpoint`).
        op: &'static str,
        /// The file.
        path: String,
        /// The parameter.
        name: String,
        /// The tensors it does hold.
        available: Vec<String>,
    },
    /// A tensor or value does not fit its parameter.
    #[error("{op}: parameter {name:?} is {expected} but the value is {found}: {hint}")]
    Mismatch {
        /// The operation.
        op: &'static str,
        /// The parameter.
        name: String,
        /// The parameter's dtype and shape.
        expected: String,
        /// The value's dtype and shape.
        found: String,
        /// What to do about it.
        hint: String,
    },
    /// Optimizer inputs that do not line up.
    #[error("{op}: {message}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A parameter of a dtype no optimizer can train (only f32 and f64 can be).
    #[error(
        "{op}: parameter {name:?} is {dtype}; only float32 and float64 parameters can be \
         trained: leave it out of the step, or create it as f32 or f64"
    )]
    Untrainable {
        /// The operation.
        op: &'static str,
        /// The parameter.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// Two parameters share a name (optimizer state and checkpoints are keyed by name).
    #[error(
        "{op}: parameters #{first} and #{second} are both named {name:?}{context}: \
         give every parameter a distinct name"
    )]
    Duplicate {
        /// The operation.
        op: &'static str,
        /// The shared name.
        name: String,
        /// The position of the first parameter of that name.
        first: usize,
        /// The position of the second.
        second: usize,
        /// Why that matters here, and what was left alone.
        context: String,
    },
    /// A hyperparameter outside its range (checked when a step starts, since the setters
    /// cannot fail).
    #[error("{op}: the {name} is {value}, but it must be {expected}: {hint}")]
    Hyperparameter {
        /// The operation.
        op: &'static str,
        /// The hyperparameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// The range it must lie in.
        expected: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// Optimizer state that does not fit the optimizer it is loaded into (another kind of
    /// optimizer, other hyperparameters, a missing or unknown slot) or the parameters it is
    /// saved or loaded with; nothing was changed.
    #[error("{op}: {what}: {message}")]
    State {
        /// The operation (`Adam::load_state`, `load_checkpoint`, ...).
        op: &'static str,
        /// The state at fault (`the optimizer state`, `the optimizer state in model.safetensors`).
        what: String,
        /// What does not fit, and what to do about it.
        message: String,
    },
    /// kiln-io could not read or write a file, for a reason the variants above do not
    /// describe (a tensor kiln cannot hold, a header it cannot build, ...).
    #[error("{op}: {source}")]
    File {
        /// The operation the caller called.
        op: &'static str,
        /// kiln-io's error (boxed: the variant stays small).
        source: Box<kiln_io::Error>,
    },
    /// An array failed to evaluate, so nothing was changed.
    #[error("{op}: {what} failed to evaluate, so {unchanged}; fix it and retry: {source}")]
    Eval {
        /// The operation.
        op: &'static str,
        /// The array that failed (an extra output, a parameter's value, a gradient, ...).
        what: String,
        /// What was left as it was.
        unchanged: String,
        /// kiln's error (boxed: the variant stays small).
        source: Box<kiln::Error>,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any kiln-io error, as [`Error::File`] (for callers that mix kiln-io and kiln-optim calls
/// under one `?`).
///
/// ```
/// fn first_tensor(path: &str) -> kiln_optim::Result<kiln::Array> {
///     let file = kiln_io::read_safetensors(path)?; // a kiln_io::Error becomes Error::File
///     Ok(file.tensors()[0].1.clone())
/// }
/// let e = first_tensor("/nonexistent.safetensors").unwrap_err();
/// assert!(matches!(e, kiln_optim::Error::File { .. }), "{e:?}");
/// assert!(e.to_string().contains("/nonexistent.safetensors"), "{e}");
/// ```
impl From<kiln_io::Error> for Error {
    fn from(e: kiln_io::Error) -> Error {
        Error::File {
            op: "kiln_io",
            source: Box::new(e),
        }
    }
}

/// A kiln-io error of the operation `op`, in this crate's terms: I/O and format errors
/// become [`Error::Io`] and [`Error::Format`] (so they name the function the caller called),
/// evaluation errors [`Error::Kiln`], and the rest [`Error::File`].
fn io_error(op: &'static str, e: kiln_io::Error) -> Error {
    match e {
        kiln_io::Error::Io { path, source, .. } => Error::Io { op, path, source },
        kiln_io::Error::Format {
            path,
            item,
            message,
            ..
        } => Error::Format {
            op,
            path,
            message: match item {
                Some(t) => format!("tensor {t:?}: {message}"),
                None => message,
            },
        },
        kiln_io::Error::Kiln(e) => Error::Kiln(e),
        other => Error::File {
            op,
            source: Box::new(other),
        },
    }
}

fn describe(dtype: DType, shape: &[usize]) -> String {
    format!("{dtype} {shape:?}")
}

/// The label of the first of `arrays` that fails to evaluate, if any does.
/// For error messages only: it evaluates the group at once, then each array alone.
fn failing(arrays: &[(String, &Array)]) -> Option<String> {
    let all: Vec<&Array> = arrays.iter().map(|(_, a)| *a).collect();
    if all.is_empty() || kiln::eval(&all).is_ok() {
        return None;
    }
    arrays
        .iter()
        .find(|(_, a)| a.eval().is_err())
        .map(|(what, _)| what.clone())
}

/// A named trainable value. Its dtype and shape are fixed at creation; optimizers and
/// checkpoints replace its value.
///
/// ```
/// let p = kiln_optim::Parameter::new("bias", kiln::Array::zeros(&[3], kiln::DType::F32));
/// assert_eq!(p.name(), "bias");
/// assert!(p.assign(kiln::Array::zeros(&[4], kiln::DType::F32)).is_err());
/// ```
#[derive(Debug)]
pub struct Parameter {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    value: Mutex<Array>,
}

impl Parameter {
    /// A parameter with an initial value.
    ///
    /// ```
    /// let p = kiln_optim::Parameter::new("w", kiln::Array::ones(&[2, 2], kiln::DType::F64));
    /// assert_eq!(p.shape(), &[2, 2]);
    /// ```
    pub fn new(name: impl Into<String>, value: Array) -> Parameter {
        Parameter {
            name: name.into(),
            dtype: value.dtype(),
            shape: value.shape().to_vec(),
            value: Mutex::new(value),
        }
    }

    /// The name (the key in checkpoints).
    ///
    /// ```
    /// assert_eq!(kiln_optim::Parameter::new("w", kiln::Array::scalar(1.0f32)).name(), "w");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The dtype.
    ///
    /// ```
    /// let p = kiln_optim::Parameter::new("w", kiln::Array::scalar(1.0f32));
    /// assert_eq!(p.dtype(), kiln::DType::F32);
    /// ```
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    ///
    /// ```
    /// let p = kiln_optim::Parameter::new("w", kiln::Array::zeros(&[5], kiln::DType::F32));
    /// assert_eq!(p.shape(), &[5]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The current value (a cheap handle; build the step's expressions from it).
    ///
    /// ```
    /// let p = kiln_optim::Parameter::new("w", kiln::Array::ones(&[2], kiln::DType::F32));
    /// assert_eq!(p.value().to_vec::<f32>()?, vec![1.0, 1.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn value(&self) -> Array {
        self.value.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value; it must have the parameter's dtype and shape.
    ///
    /// ```
    /// let p = kiln_optim::Parameter::new("w", kiln::Array::ones(&[2], kiln::DType::F32));
    /// p.assign(kiln::Array::zeros(&[2], kiln::DType::F32))?;
    /// assert_eq!(p.value().to_vec::<f32>()?, vec![0.0, 0.0]);
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn assign(&self, value: Array) -> Result<()> {
        if value.dtype() != self.dtype || value.shape() != &self.shape[..] {
            return Err(Error::Mismatch {
                op: "assign",
                name: self.name.clone(),
                expected: describe(self.dtype, &self.shape),
                found: describe(value.dtype(), value.shape()),
                hint: "a parameter keeps its dtype and shape; cast or reshape the value".into(),
            });
        }
        self.replace(value);
        Ok(())
    }

    /// The value, locked: an optimizer step holds it while it evaluates the update (the
    /// parameter's own handle is the one it donates) and stores the new value through it.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Array> {
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a value already checked to have the parameter's dtype and shape: the commit of
    /// an optimizer step, which must not fail part-way.
    pub(crate) fn replace(&self, value: Array) {
        debug_assert!(value.dtype() == self.dtype && value.shape() == &self.shape[..]);
        *self.value.lock().unwrap_or_else(|e| e.into_inner()) = value;
    }
}

//! The crate's one error type, [`Error`]: every failure names the operation the user called,
//! what was wrong and what to do about it.
//!
//! Depends on kiln, kiln-optim and kiln-io (their errors are wrapped) and `crate::spec`
//! (the [`Mode`](crate::Mode) a spec was checked for).

use crate::Mode;
use std::path::PathBuf;

/// Errors of training, evaluating, predicting, checkpoints and input pipelines.
///
/// ```
/// let e = kiln_train::Error::invalid("Dataset::batch", "a batch of 0 examples: pass at least 1");
/// assert_eq!(e.to_string(), "Dataset::batch: a batch of 0 examples: pass at least 1");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A kiln operation failed (building or evaluating the model's graph).
    #[error(transparent)]
    Kiln(Box<kiln::Error>),
    /// An optimizer step, or restoring an optimizer's state, failed.
    #[error(transparent)]
    Optim(Box<kiln_optim::Error>),
    /// Reading or writing a safetensors file failed.
    #[error(transparent)]
    File(Box<kiln_io::Error>),
    /// The operating system refused a file operation.
    #[error("{op}: {}: {source}", path.display())]
    Io {
        /// The operation the user called.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A model function returned a spec that lacks what its mode needs.
    #[error("{op}: the model function's {mode:?} spec has no `{missing}`: {hint}")]
    Spec {
        /// The operation the user called (`Estimator::train`, ...).
        op: &'static str,
        /// The mode the spec was built for.
        mode: Mode,
        /// The missing or malformed field (`loss`, `optimizer`, `predictions`).
        missing: &'static str,
        /// What to do.
        hint: String,
    },
    /// An argument is out of its domain.
    #[error("{op}: {message}")]
    Invalid {
        /// The operation the user called.
        op: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A checkpoint cannot be used: not written by kiln-train, damaged, or for another model.
    #[error("{op}: checkpoint {}: {message}", path.display())]
    Checkpoint {
        /// The operation the user called.
        op: &'static str,
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An input pipeline stage failed (a `map` function panicked, a generator broke off).
    #[error("{op}: {message}")]
    Pipeline {
        /// The stage (`Dataset::map`, ...).
        op: &'static str,
        /// What happened.
        message: String,
    },
    /// Training produced a non-finite loss or parameter (reported by the NaN guard).
    #[error(
        "training went non-finite at step {step}: the loss is {loss}{}; lower the learning \
         rate, clip gradients, or check the input for NaN",
        parameter.as_ref().map(|p| format!(", and parameter {p:?} holds NaN or infinity")).unwrap_or_default()
    )]
    NonFinite {
        /// The global step whose update went non-finite.
        step: u64,
        /// The step's loss.
        loss: f64,
        /// The first parameter (in creation order) holding a non-finite value, if any.
        parameter: Option<String>,
    },
    /// A replica's thread panicked.
    #[error("replica {replica} panicked: {message}")]
    Replica {
        /// The replica.
        replica: usize,
        /// The panic's message.
        message: String,
    },
    /// A collective operation across processes failed or timed out.
    #[error("{op}: {message}")]
    Collective {
        /// The collective.
        op: &'static str,
        /// What happened.
        message: String,
    },
    /// An error of the user's own model function or hook.
    #[error(transparent)]
    Model(Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// An [`Error::Invalid`].
    ///
    /// ```
    /// let e = kiln_train::Error::invalid("op", "why");
    /// assert!(matches!(e, kiln_train::Error::Invalid { op: "op", .. }));
    /// ```
    pub fn invalid(op: &'static str, message: impl Into<String>) -> Error {
        Error::Invalid {
            op,
            message: message.into(),
        }
    }

    /// Wraps an error of the user's own code (a model function, a hook) as [`Error::Model`].
    ///
    /// ```
    /// let e = kiln_train::Error::model(std::io::Error::other("no such vocabulary"));
    /// assert_eq!(e.to_string(), "no such vocabulary");
    /// ```
    pub fn model(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Model(Box::new(e))
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn checkpoint(
        op: &'static str,
        path: impl Into<PathBuf>,
        message: impl Into<String>,
    ) -> Error {
        Error::Checkpoint {
            op,
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<kiln::Error> for Error {
    fn from(e: kiln::Error) -> Error {
        Error::Kiln(Box::new(e))
    }
}

impl From<kiln_optim::Error> for Error {
    fn from(e: kiln_optim::Error) -> Error {
        Error::Optim(Box::new(e))
    }
}

impl From<kiln_io::Error> for Error {
    fn from(e: kiln_io::Error) -> Error {
        Error::File(Box::new(e))
    }
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// fn positive(x: f64) -> kiln_train::Result<f64> {
///     if x > 0.0 {
///         Ok(x)
///     } else {
///         Err(kiln_train::Error::invalid("positive", format!("{x}: pass a number > 0")))
///     }
/// }
/// assert_eq!(positive(2.0)?, 2.0);
/// assert!(positive(-1.0).is_err());
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

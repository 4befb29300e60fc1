//! DRAGNN's network side on kiln (sections (g) of the reference): parameters
//! ([`ParamStore`]), the embedding of fixed and linked features ([`embed_fixed`],
//! [`gather_links`], [`embed_links`]) and the network units ([`NetworkUnit`]).
//!
//! These are graph builders: every function returns lazy kiln arrays, so a training step
//! or an inference step becomes one graph that kiln compiles once and caches by structure.
//! The component-level models that use them live in [`crate::model`].
//!
//! Depends on kiln's and kiln-optim's public APIs, [`crate::spec`], [`crate::component`]
//! and [`crate::translator`].

mod embed;
mod params;
mod units;

pub(crate) use embed::floats;
pub use embed::{embed_fixed, embed_links, gather_links, gather_links_host, FixedBatch, LinkBatch};
pub use params::{Init, ParamStore};
pub use units::{
    layer_norm, DropoutSeeds, FeedForward, LayerNormLstm, Layers, Lstm, LstmState, NetworkUnit,
    Nonlinearity, HIDDEN_BIAS, LAYER_NORM_EPS, WEIGHT_STD,
};

/// Errors of building and running networks.
///
/// ```
/// use kiln_dragnn::network::NetworkError;
/// let e = NetworkError::MissingParameter { name: "w".into(), known: "a, b".into() };
/// assert!(e.to_string().contains("no parameter"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// A network unit that cannot be built from its spec.
    #[error("component '{component}': network unit '{unit}': {message}")]
    BadUnit {
        /// The component.
        component: String,
        /// The unit's registered name.
        unit: String,
        /// What is wrong, and the fix.
        message: String,
    },
    /// Teachers or a distillation weight that `Trainer::set_teachers` cannot use.
    #[error("Trainer::set_teachers: {message}")]
    Distillation {
        /// What is wrong, and the fix.
        message: String,
    },
    /// A parameter asked for with another shape than it has.
    #[error("parameter '{name}' has shape {found:?}, but {expected:?} was asked for (a model file from another spec?)")]
    ParameterShape {
        /// The parameter.
        name: String,
        /// The shape asked for.
        expected: Vec<usize>,
        /// The shape it has.
        found: Vec<usize>,
    },
    /// A parameter the store does not hold.
    #[error("no parameter '{name}' in the model (it holds: {known})")]
    MissingParameter {
        /// The parameter.
        name: String,
        /// Some of the names it holds.
        known: String,
    },
    /// A fixed feature whose output row lies outside the batch.
    #[error("fixed feature index {index} (from row {first_row}) lies outside a batch of {rows} rows of {size} slots")]
    FeatureIndex {
        /// The feature's index.
        index: i64,
        /// The first row of the step.
        first_row: usize,
        /// The batch's rows.
        rows: usize,
        /// Slots per row.
        size: usize,
    },
    /// A linked feature pointing past its source's activations.
    #[error("linked feature reads row {row} of a source with {table_rows} rows of activations")]
    LinkRow {
        /// The row.
        row: usize,
        /// The source's rows.
        table_rows: usize,
    },
    /// A model file that cannot be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// A kiln operation failed.
    #[error(transparent)]
    Kiln(Box<kiln::Error>),
    /// Saving, loading or an optimizer step failed.
    #[error(transparent)]
    Optim(Box<kiln_optim::Error>),
}

impl From<kiln::Error> for NetworkError {
    fn from(e: kiln::Error) -> NetworkError {
        NetworkError::Kiln(Box::new(e))
    }
}

impl From<kiln_optim::Error> for NetworkError {
    fn from(e: kiln_optim::Error) -> NetworkError {
        NetworkError::Optim(Box::new(e))
    }
}

/// `reshape` with `usize` dimensions (sizes here come from arrays that exist, so they fit
/// in `isize`).
pub(crate) trait ReshapeTo {
    fn reshape_to(&self, dims: &[usize]) -> kiln::Result<kiln::Array>;
}

impl ReshapeTo for kiln::Array {
    fn reshape_to(&self, dims: &[usize]) -> kiln::Result<kiln::Array> {
        let d: Vec<isize> = dims.iter().map(|&x| x as isize).collect();
        self.try_reshape(&d)
    }
}

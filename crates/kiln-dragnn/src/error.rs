//! [`Error`], the crate's one error type: each module's own error, wrapped.
//!
//! Depends on the error types of [`crate::spec`], [`crate::beam`], [`crate::document`],
//! [`crate::transition`], [`crate::translator`], [`crate::input`], [`crate::features`],
//! [`crate::component`], [`crate::session`], [`crate::network`] and [`crate::scorer`], and on `kiln::Error`.

/// Errors of kiln-dragnn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A spec that cannot be read or does not validate.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// A beam operation that cannot be done (a wrong score-matrix size, NaN scores, no
    /// allowed action, too many states).
    #[error(transparent)]
    Beam(#[from] crate::beam::BeamError),
    /// A document that cannot be read.
    #[error(transparent)]
    Document(#[from] crate::document::DocumentError),
    /// A transition system or term map that cannot be built or used.
    #[error(transparent)]
    Transition(#[from] crate::transition::TransitionError),
    /// A translator that cannot be built or used.
    #[error(transparent)]
    Translator(#[from] crate::translator::TranslatorError),
    /// An input batch that cannot be converted or used.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    /// A feature channel that cannot be built.
    #[error(transparent)]
    Feature(#[from] crate::features::FeatureError),
    /// A component operation that cannot be done.
    #[error(transparent)]
    Component(#[from] crate::component::ComponentError),
    /// A compute-session operation that cannot be done.
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    /// A network that cannot be built or run.
    #[error(transparent)]
    Network(Box<crate::network::NetworkError>),
    /// Predictions that cannot be scored against their gold sentences.
    #[error(transparent)]
    Score(Box<crate::scorer::ScoreError>),
    /// A kiln operation failed.
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
}

impl From<crate::network::NetworkError> for Error {
    fn from(e: crate::network::NetworkError) -> Error {
        Error::Network(Box::new(e))
    }
}

impl From<crate::scorer::ScoreError> for Error {
    fn from(e: crate::scorer::ScoreError) -> Error {
        Error::Score(Box::new(e))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! # kiln-beam
//!
//! An AmuNMT-style beam-search decoder written only against kiln's public API, the way an
//! outside user would: [`Scorer`]s (models) produce log-probabilities with kiln arrays; the
//! [`BeamSearch`] keeps [`Hypothesis`] chains, per-sentence [`History`] of finished
//! hypotheses, n-best lists, ensembles (weighted sums of scorers), and length normalisation
//! (`(cost − wp·len) / len^α`, or the GNMT length and coverage penalties of Wu et al. 2016 §7).
//!
//! Real models: [`G2p`] (g2p-en's GRU encoder-decoder, from its numpy `.npz`, read by
//! [`kiln_io::read_npz`]) and [`Cn2En`] (the cn2en Chinese→English GRU seq2seq, from its
//! PyTorch `.pth` checkpoint, read by [`kiln_io::read_pth`], and its pickled vocabularies,
//! read by [`kiln_io::pickle::loads`]). The readers live in kiln-io and are general: use
//! them directly to read other checkpoints.
//!
//! **One kiln computation per step for the whole batch.** The rows of every sentence's beam
//! live in one `[sentences × beam, …]` state; dead rows are kept with cost −∞, so every step has
//! the same shapes and the graph cache compiles the step once per batch shape, however the
//! beams shrink. Top-k over `beam × vocabulary` per sentence is a single `top_k` on
//! `[sentences, beam·vocab]`.
//!
//! ```
//! use kiln_beam::{BeamSearch, SearchConfig, TableScorer};
//! // a toy model: a fixed next-word table (vocabulary of 5, EOS = 1)
//! let scorer = TableScorer::random(5, 7);
//! let mut search = BeamSearch::new(vec![Box::new(scorer)], SearchConfig { beam: 3, eos: 1, ..Default::default() });
//! let out = search.decode(&[vec![2, 3], vec![4]])?;
//! assert_eq!(out.len(), 2);
//! assert!(out[0].best().is_some());
//! # Ok::<(), kiln_beam::Error>(())
//! ```
//!
//! Depends on kiln's, kiln-optim's and kiln-io's public APIs.

mod attention;
mod cmudict;
mod cn2en;
mod g2p;
mod history;
mod scorer;
mod search;

pub use attention::{AttentionConfig, AttentionModel, AttentionScorer};
pub use cmudict::{
    edit_distance, error_rates, parse_cmudict, phoneme_vocab, read_cmudict, Entry, ErrorRates,
    Split,
};
pub use cn2en::Cn2En;
pub use g2p::G2p;
pub use history::{
    alignment_string, AlignmentKind, Beam, Finished, Histories, History, Hypothesis,
};
pub use scorer::{Scorer, Step, TableScorer};
pub use search::{decode_parallel, nbest_lines, BeamSearch, Gnmt, MiniBatch, SearchConfig};

/// Errors of decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A kiln operation failed.
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// A configuration or model that does not fit.
    #[error("{op}: {message}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Reading or writing a safetensors checkpoint failed (boxed: it is large, and rare).
    #[error(transparent)]
    Checkpoint(Box<kiln_optim::Error>),
    /// Reading a model's files (its `.npz` or `.pth` checkpoint, its pickled vocabularies)
    /// failed; the [`kiln_io::Error`] names the file and the tensor or member (boxed: it is
    /// large, and rare).
    #[error(transparent)]
    Io(Box<kiln_io::Error>),
}

impl From<kiln_optim::Error> for Error {
    fn from(e: kiln_optim::Error) -> Error {
        Error::Checkpoint(Box::new(e))
    }
}

impl From<kiln_io::Error> for Error {
    fn from(e: kiln_io::Error) -> Error {
        Error::Io(Box::new(e))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

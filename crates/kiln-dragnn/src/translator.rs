//! Index translators: how a linked feature's value (a token index, a number of steps back)
//! in one component becomes a `(batch, beam, step)` index into another component's
//! activations (DRAGNN's `IndexTranslator`).
//!
//! A translator holds a *path*: the components from the linking one back to the source,
//! following predecessor links (components form a chain in spec order, so the path from
//! component `i` back to `j` is `i, i-1, …, j`; a recurrent link's path is the component
//! itself). Translating walks the beam index back through every component but the last
//! ([`TranslationSource::source_beam_index`]), asks the last one for the step that the
//! feature value names ([`Method`]), and then for the beam slot of the walked item's
//! ancestor at that step ([`TranslationSource::beam_index_at_step`]). The batch index passes
//! through. A step of -1 means "out of range": the network reads the extra embedding row.
//!
//! Depends on nothing else in the crate (components implement [`TranslationSource`]).

use std::fmt;
use std::str::FromStr;

/// Errors of building or using a translator, with the reference's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranslatorError {
    /// A translator name that is not one of [`Method`]'s.
    #[error("Unable to find step lookup function {0}")]
    UnknownMethod(String),
    /// A link to a component that does not exist.
    #[error("Unable to find source component {source_component} (linked from {component})")]
    UnknownSource {
        /// The linking component.
        component: String,
        /// The source named by the link.
        source_component: String,
    },
    /// A link whose source is not reached by walking predecessors (a later component that
    /// is not the component itself).
    #[error(
        "No link to source {source_component} from {component}: links go to earlier components or to the component itself"
    )]
    NoLink {
        /// The linking component.
        component: String,
        /// The source named by the link.
        source_component: String,
    },
    /// A predecessor chain longer than the number of components.
    #[error(
        "Too many jumps from {component}. Is there a loop in the MasterSpec component definition?"
    )]
    Loop {
        /// The linking component.
        component: String,
    },
    /// A component that cannot compute steps for this method.
    #[error("{component}: Method not supported: step lookup {method}")]
    Unsupported {
        /// The component asked.
        component: String,
        /// The method asked for.
        method: Method,
    },
    /// A path naming a component index the caller did not supply.
    #[error("translator path names component {index}, but only {count} were given")]
    MissingComponent {
        /// The index on the path.
        index: usize,
        /// How many components were given.
        count: usize,
    },
}

/// How a feature value becomes a step of the source component.
///
/// ```
/// use kiln_dragnn::translator::Method;
/// assert_eq!("shift-reduce-step".parse::<Method>().unwrap(), Method::ShiftReduceStep);
/// assert_eq!(Method::History.to_string(), "history");
/// assert!("sideways".parse::<Method>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// The value is the step (token `i` ↔ step `i` of a left-to-right component).
    Identity,
    /// `steps_taken - 1 - v`: `v` steps back from the latest (-1 past the first step).
    History,
    /// `n_tokens - 1 - v`: token `i` ↔ the step of a right-to-left component.
    ReverseToken,
    /// Like `ReverseToken`, over the characters of the sentence.
    ReverseChar,
    /// The last step that shifted token `v` or made it the head of an arc.
    ShiftReduceStep,
    /// The step that attached token `v` to its head.
    ReduceStep,
    /// `shift-reduce-step` of `reduce-step` of `v`, composed as the reference composes it.
    ParentShiftReduceStep,
}

impl Method {
    /// Every method, in the reference's order.
    pub const ALL: [Method; 7] = [
        Method::Identity,
        Method::History,
        Method::ReverseToken,
        Method::ReverseChar,
        Method::ShiftReduceStep,
        Method::ReduceStep,
        Method::ParentShiftReduceStep,
    ];

    /// The name a spec uses (`source_translator`).
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::translator::Method::ReverseToken.name(), "reverse-token");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Method::Identity => "identity",
            Method::History => "history",
            Method::ReverseToken => "reverse-token",
            Method::ReverseChar => "reverse-char",
            Method::ShiftReduceStep => "shift-reduce-step",
            Method::ReduceStep => "reduce-step",
            Method::ParentShiftReduceStep => "parent-shift-reduce-step",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = TranslatorError;
    fn from_str(s: &str) -> Result<Method, TranslatorError> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| TranslatorError::UnknownMethod(s.to_string()))
    }
}

/// What a translator asks of the components on its path (every component implements it).
pub trait TranslationSource {
    /// The component's name (for errors).
    fn name(&self) -> &str;
    /// The slot, in the predecessor's final beam, that seeded slot `current_index` of batch
    /// item `batch` (`GetSourceBeamIndex`).
    fn source_beam_index(&self, current_index: i32, batch: usize) -> i32;
    /// The slot, at `step`, of the ancestor of slot `current_index` (`GetBeamIndexAtStep`);
    /// -1 when there is none.
    fn beam_index_at_step(&self, step: i32, current_index: i32, batch: usize) -> i32;
    /// Steps taken by batch item `batch`'s beam (`StepsTaken`).
    fn steps_taken(&self, batch: usize) -> i32;
    /// The step that a component-specific `method` gives for feature value `value` of slot
    /// `beam` of batch item `batch` (-1 when out of range). Called only for the methods other
    /// than [`Method::Identity`] and [`Method::History`]; a component that cannot answer
    /// returns [`TranslatorError::Unsupported`].
    fn lookup_step(
        &self,
        method: Method,
        batch: usize,
        beam: i32,
        value: i32,
    ) -> Result<i32, TranslatorError>;
}

/// A translated link feature: where in the source component's activations to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkIndex {
    /// The batch item (unchanged by translation).
    pub batch_index: usize,
    /// The beam slot in the source component (-1 when there is none).
    pub beam_index: i32,
    /// The step of the source component (-1: out of range, the extra embedding row).
    pub step_index: i32,
}

/// A translator of one linked-feature channel: a path of components and a [`Method`].
///
/// ```
/// use kiln_dragnn::translator::{IndexTranslator, Method};
/// let names = ["features", "tagger", "parser"];
/// // The parser (index 2) links to "features" (index 0): the path walks back through the tagger.
/// let t = IndexTranslator::new(&names, 2, "features", "identity").unwrap();
/// assert_eq!(t.path(), &[2, 1, 0]);
/// assert_eq!(t.method(), Method::Identity);
/// // A recurrent link is the component itself.
/// assert_eq!(IndexTranslator::new(&names, 2, "parser", "shift-reduce-step").unwrap().path(), &[2]);
/// // Links go to earlier components only.
/// assert!(IndexTranslator::new(&names, 0, "parser", "identity").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexTranslator {
    path: Vec<usize>,
    method: Method,
}

impl IndexTranslator {
    /// The translator of a link from component `linking` (an index into `names`, the
    /// components in spec order) to the component named `source`, with the translator
    /// named `method`. Predecessors are the previous component in spec order.
    pub fn new(
        names: &[&str],
        linking: usize,
        source: &str,
        method: &str,
    ) -> Result<IndexTranslator, TranslatorError> {
        IndexTranslator::with_predecessors(names, linking, source, method, |i| i.checked_sub(1))
    }

    /// [`IndexTranslator::new`] with the predecessor of each component given by
    /// `predecessor` (the reference's sessions chain components in spec order; tests and
    /// other session layouts may differ). A chain longer than the number of components is
    /// a loop.
    pub fn with_predecessors(
        names: &[&str],
        linking: usize,
        source: &str,
        method: &str,
        predecessor: impl Fn(usize) -> Option<usize>,
    ) -> Result<IndexTranslator, TranslatorError> {
        let method: Method = method.parse()?;
        let component = names.get(linking).copied().unwrap_or("?").to_string();
        if !names.contains(&source) {
            return Err(TranslatorError::UnknownSource {
                component,
                source_component: source.to_string(),
            });
        }
        let mut path = vec![linking];
        let mut at = linking;
        while names.get(at).copied() != Some(source) {
            at = predecessor(at).ok_or_else(|| TranslatorError::NoLink {
                component: component.clone(),
                source_component: source.to_string(),
            })?;
            path.push(at);
            if path.len() > names.len() {
                return Err(TranslatorError::Loop { component });
            }
        }
        Ok(IndexTranslator { path, method })
    }

    /// The components from the linking one back to the source (indices in spec order).
    pub fn path(&self) -> &[usize] {
        &self.path
    }

    /// The method (the spec's `source_translator`).
    pub fn method(&self) -> Method {
        self.method
    }

    /// Translates feature value `value` of slot `beam` of batch item `batch`; `components`
    /// are all the session's components, in spec order.
    ///
    /// ```
    /// use kiln_dragnn::translator::*;
    /// struct Steps(i32);
    /// impl TranslationSource for Steps {
    ///     fn name(&self) -> &str { "c" }
    ///     fn source_beam_index(&self, i: i32, _: usize) -> i32 { i }
    ///     fn beam_index_at_step(&self, _: i32, i: i32, _: usize) -> i32 { i }
    ///     fn steps_taken(&self, _: usize) -> i32 { self.0 }
    ///     fn lookup_step(&self, m: Method, _: usize, _: i32, _: i32) -> Result<i32, TranslatorError> {
    ///         Err(TranslatorError::Unsupported { component: "c".into(), method: m })
    ///     }
    /// }
    /// let c = Steps(8);
    /// let t = IndexTranslator::new(&["c"], 0, "c", "history").unwrap();
    /// let got = t.translate(&[&c], 0, 0, 2).unwrap();
    /// assert_eq!(got.step_index, 5); // 8 steps taken, 2 back from the latest
    /// assert_eq!(t.translate(&[&c], 0, 0, 8).unwrap().step_index, -1);
    /// ```
    pub fn translate(
        &self,
        components: &[&dyn TranslationSource],
        batch: usize,
        beam: i32,
        value: i32,
    ) -> Result<LinkIndex, TranslatorError> {
        let get = |index: usize| {
            components
                .get(index)
                .copied()
                .ok_or(TranslatorError::MissingComponent {
                    index,
                    count: components.len(),
                })
        };
        let (last, walked) = self
            .path
            .split_last()
            .expect("a path holds the linking component");
        let mut beam = beam;
        for &i in walked {
            beam = get(i)?.source_beam_index(beam, batch);
        }
        let source = get(*last)?;
        let step = match self.method {
            Method::Identity => value,
            Method::History => {
                let taken = source.steps_taken(batch);
                if value > taken - 1 || value < 0 {
                    -1
                } else {
                    taken - 1 - value
                }
            }
            m => source.lookup_step(m, batch, beam, value)?,
        };
        Ok(LinkIndex {
            batch_index: batch,
            beam_index: source.beam_index_at_step(step, beam, batch),
            step_index: step,
        })
    }
}

//! The parser state and the transition systems: [`ParserState`] (a sentence being
//! processed: input pointer, stack, arcs, tags, and the translator metadata of DRAGNN's
//! SyntaxNet component), the [`TransitionSystem`] trait, its four registered
//! implementations ([`ShiftOnly`] `shift-only`, [`Tagger`] `tagger`, [`ArcStandard`]
//! `arc-standard`, [`Once`] `once`), name-based construction with [`create`], and the
//! adapter that lets any transition system drive a [`crate::beam::Beam`] of parser states
//! (every `TransitionSystem`, `dyn TransitionSystem` included, implements
//! [`BeamFunctions<ParserState>`]), and arc-standard's tree checks ([`is_projective`],
//! [`projectivize`], which lifts a training tree so the static oracle can follow it).
//!
//! # Conventions (SyntaxNet's)
//! - Tokens are the sentence's words, indexed from 0; `-1` is the artificial root, `-2`
//!   "no token" (an input or stack position past the end).
//! - Heads and labels start at `-1` (attached to the root / no label); tags at `-1`.
//! - Actions are `usize` ids; each system documents its encoding.
//! - Performing an action ([`TransitionSystem::perform`]) first records the translator
//!   metadata as the SyntaxNet component's `Advance` does, with the system's
//!   [`TransitionSystem::parent_index`] and [`TransitionSystem::child_index`]: a
//!   shift-like action (parent `-1`) sets `step_for_token[next] = step` when `next` is a
//!   token; an arc (parent `>= 0`) sets `step_for_token[parent] = step`,
//!   `parent_for_token[child] = parent` and `parent_step_for_token[child] = step`. `step` is
//!   the state's [`ParserState::num_steps`] before the action, which equals its beam's step
//!   count for these systems (every state of a beam takes an action at every step until all
//!   are final, since shift-only and the tagger take `n` actions and arc-standard `2n`).
//!   Unlike upstream's `vector::insert`, the setters assign into vectors pre-sized to the
//!   sentence and filled with `-1`; getters out of range return `-1`.
//!
//! Depends on [`crate::document`], [`crate::term_map`] and [`crate::beam`]'s traits.

pub mod arc_standard;
mod once;
mod shift_only;
mod tagger;

pub use arc_standard::{is_projective, projectivize, ArcStandard};
pub use once::Once;
pub use shift_only::ShiftOnly;
pub use tagger::Tagger;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::beam::{BeamFunctions, TransitionState};
use crate::document::{DocumentError, Sentence};
use crate::term_map::{TermMap, TermMapError, TermMaps};

/// Errors of transition systems and term maps.
///
/// ```
/// use kiln_dragnn::transition::{create, TransitionError, NO_PARAMS};
/// let err = create("arc-eager", NO_PARAMS).unwrap_err();
/// assert!(matches!(err, TransitionError::UnknownSystem { .. }));
/// assert_eq!(
///     err.to_string(),
///     "unknown transition system `arc-eager` (registered: shift-only, tagger, arc-standard, once)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// A registered name that no transition system has.
    #[error("unknown transition system `{name}` (registered: {})", REGISTERED.join(", "))]
    UnknownSystem {
        /// The name asked for.
        name: String,
    },
    /// A parameter the transition system does not take.
    #[error("transition system `{system}` has no parameter `{parameter}` (it takes: {known})")]
    UnknownParameter {
        /// The system's name.
        system: &'static str,
        /// The parameter.
        parameter: String,
        /// The parameters it takes, comma-separated.
        known: String,
    },
    /// A parameter value that cannot be used.
    #[error("transition system `{system}`: parameter `{parameter}` = `{value}`: {reason}")]
    BadParameter {
        /// The system's name.
        system: &'static str,
        /// The parameter.
        parameter: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// An action that the state does not allow (or a final state).
    #[error("transition system `{system}`: action {action} is not allowed in state {state}")]
    NotAllowed {
        /// The system's name.
        system: &'static str,
        /// The action.
        action: usize,
        /// The state, described.
        state: String,
    },
    /// The oracle did not reach a final state within its step limit.
    #[error("transition system `{system}`: the oracle did not reach a final state in {steps} steps ({state})")]
    OracleStuck {
        /// The system's name.
        system: &'static str,
        /// The steps taken.
        steps: usize,
        /// The state, described.
        state: String,
    },
    /// A term map that cannot be built, read or written.
    #[error(transparent)]
    TermMap(#[from] TermMapError),
    /// A prediction that cannot be written into its document.
    #[error(transparent)]
    Document(#[from] DocumentError),
}

/// The registered names [`create`] knows, in the order the error message lists them.
///
/// ```
/// use kiln_dragnn::transition::{create, REGISTERED, NO_PARAMS};
/// for name in REGISTERED {
///     assert_eq!(create(name, NO_PARAMS).unwrap().name(), name);
/// }
/// ```
pub const REGISTERED: [&str; 4] = ["shift-only", "tagger", "arc-standard", "once"];

/// The gold annotations of a sentence, as ids of the term maps, shared by the states of it;
/// and the ids of its words and lemmas in the word and lemma maps (-1: not in the map),
/// looked up once here instead of each time a feature reads a token (SyntaxNet keeps them in
/// a sentence's workspaces for the same reason).
#[derive(Debug)]
struct Gold {
    heads: Vec<i32>,
    labels: Vec<i32>,
    tags: Vec<i32>,
    num_labels: usize,
    num_tags: usize,
    words: Vec<i32>,
    word_map: TermMap,
    lemmas: Vec<i32>,
    lemma_map: TermMap,
}

/// The state of one sentence under a transition system.
///
/// Holds the sentence (shared), the input pointer `next`, the stack, the arcs (heads and
/// labels) and predicted tags built so far, the last action, the beam bookkeeping of
/// DRAGNN's transition states (score, beam index, parent beam index, gold), the
/// translator metadata (`step_for_token`, `parent_for_token`, `parent_step_for_token`)
/// and the number of actions taken. The gold heads, label ids and tag ids come from the
/// sentence and the [`TermMaps`] given to [`ParserState::new`].
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::transition::ParserState;
/// let doc = read_conllu("1\tEv\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n\
///                        2\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let mut s = ParserState::new(Arc::new(doc[0].clone()), &maps);
/// assert_eq!((s.num_tokens(), s.next(), s.stack_size()), (2, 0, 0));
/// assert_eq!((s.gold_head(0), s.gold_head(1)), (1, -1));
/// assert_eq!(s.gold_label(1), maps.labels.lookup("root").unwrap() as i32);
/// s.push(0);
/// s.advance(1);
/// assert_eq!((s.stack(0), s.stack(1), s.input(0), s.input(1)), (0, -2, 1, -2));
/// ```
#[derive(Clone, Debug)]
pub struct ParserState {
    sentence: Arc<Sentence>,
    gold: Arc<Gold>,
    next: i32,
    stack: Vec<i32>,
    heads: Vec<i32>,
    labels: Vec<i32>,
    tags: Vec<i32>,
    last_action: i32,
    num_steps: usize,
    score: f32,
    beam_index: i32,
    parent_beam_index: i32,
    is_gold: bool,
    step_for_token: Vec<i32>,
    parent_for_token: Vec<i32>,
    parent_step_for_token: Vec<i32>,
}

/// Reads `v[i]`, or -1 when `i` is out of range.
fn get_or_minus_one(v: &[i32], i: i32) -> i32 {
    usize::try_from(i)
        .ok()
        .and_then(|i| v.get(i))
        .copied()
        .unwrap_or(-1)
}

/// Writes `v[i] = value` when `i` is in range.
fn set_if_in_range(v: &mut [i32], i: i32, value: i32) {
    if let Some(slot) = usize::try_from(i).ok().and_then(|i| v.get_mut(i)) {
        *slot = value;
    }
}

impl ParserState {
    /// A fresh state of `sentence` (next 0, empty stack, no arcs, no tags, score 0, beam
    /// index -1, parent beam index -1, not gold), with the gold annotations looked up in
    /// `maps`: heads from HEAD (`_` as -1), label ids of DEPREL and tag ids of the maps' tag
    /// column (-1 when not in the map). A transition system's
    /// [`TransitionSystem::initial_state`] also applies its start (a root on the stack, a
    /// right-to-left start).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!((s.gold_head(0), s.gold_label(0), s.gold_tag(0)), (-1, -1, -1));
    /// assert_eq!((s.head(0), s.label(0), s.tag(0), s.last_action()), (-1, -1, -1, -1));
    /// ```
    pub fn new(sentence: Arc<Sentence>, maps: &TermMaps) -> ParserState {
        let n = sentence.len();
        let id = |v: Option<usize>| v.map_or(-1, |v| v as i32);
        let gold = Gold {
            heads: sentence.heads(),
            labels: (0..n)
                .map(|i| id(maps.labels.lookup(sentence.deprel(i))))
                .collect(),
            tags: (0..n)
                .map(|i| id(maps.tags.lookup(maps.tag(&sentence, i))))
                .collect(),
            num_labels: maps.labels.len(),
            num_tags: maps.tags.len(),
            words: (0..n)
                .map(|i| id(maps.words.lookup(sentence.form(i))))
                .collect(),
            word_map: maps.words.clone(),
            lemmas: (0..n)
                .map(|i| id(maps.lemmas.lookup(sentence.lemma(i))))
                .collect(),
            lemma_map: maps.lemmas.clone(),
        };
        ParserState {
            sentence,
            gold: Arc::new(gold),
            next: 0,
            stack: Vec::with_capacity(n + 1),
            heads: vec![-1; n],
            labels: vec![-1; n],
            tags: vec![-1; n],
            last_action: -1,
            num_steps: 0,
            score: 0.0,
            beam_index: -1,
            parent_beam_index: -1,
            is_gold: false,
            step_for_token: vec![-1; n],
            parent_for_token: vec![-1; n],
            parent_step_for_token: vec![-1; n],
        }
    }

    /// DRAGNN's `Init(parent)`: takes the score of the predecessor component's state and
    /// remembers its beam index as this state's parent beam index.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{beam::TransitionState, document::read_conllu, term_map::TermMaps};
    /// use kiln_dragnn::transition::ParserState;
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut parent = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// parent.set_beam_index(3);
    /// parent.set_score(2.5);
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.init_from_parent(&parent);
    /// assert_eq!((s.parent_beam_index(), s.score()), (3, 2.5));
    /// ```
    pub fn init_from_parent(&mut self, parent: &impl TransitionState) {
        self.score = parent.score();
        self.parent_beam_index = parent.beam_index();
    }

    /// The sentence.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.sentence().form(0), "x");
    /// ```
    pub fn sentence(&self) -> &Arc<Sentence> {
        &self.sentence
    }

    /// The number of tokens (words) of the sentence.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// assert_eq!(ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default()).num_tokens(), 1);
    /// ```
    pub fn num_tokens(&self) -> usize {
        self.heads.len()
    }

    /// The input pointer: the next token to process (`num_tokens()` at the end of a
    /// left-to-right pass, -1 at the end of a right-to-left one).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.advance(1);
    /// assert_eq!(s.next(), 1);
    /// ```
    pub fn next(&self) -> i32 {
        self.next
    }

    /// Moves the input pointer to `next`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.advance(-1);
    /// assert_eq!(s.next(), -1);
    /// ```
    pub fn advance(&mut self, next: i32) {
        self.next = next;
    }

    /// Whether the input pointer is at or past the last token (left to right).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert!(!s.end_of_input());
    /// s.advance(1);
    /// assert!(s.end_of_input());
    /// ```
    pub fn end_of_input(&self) -> bool {
        self.next >= self.num_tokens() as i32
    }

    /// The token `offset` positions from the input pointer: its index, -1 for the root
    /// position just before the first token, -2 outside the sentence (SyntaxNet's
    /// `Input(offset)`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!((s.input(0), s.input(-1), s.input(-2), s.input(1)), (0, -1, -2, -2));
    /// ```
    pub fn input(&self, offset: i32) -> i32 {
        let index = self.next as i64 + offset as i64;
        if index >= -1 && index < self.num_tokens() as i64 {
            index as i32
        } else {
            -2
        }
    }

    /// The token at stack position `position` (0 the top), or -2 past the bottom (the
    /// root, where pushed, is -1).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.push(-1);
    /// s.push(0);
    /// assert_eq!((s.stack(0), s.stack(1), s.stack(2), s.stack(-1)), (0, -1, -2, -2));
    /// ```
    pub fn stack(&self, position: i32) -> i32 {
        usize::try_from(position)
            .ok()
            .and_then(|p| self.stack.len().checked_sub(p + 1))
            .map_or(-2, |i| self.stack[i])
    }

    /// The number of entries on the stack (the root included where pushed).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.push(-1);
    /// assert_eq!(s.stack_size(), 1);
    /// ```
    pub fn stack_size(&self) -> usize {
        self.stack.len()
    }

    /// The stack, bottom first.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.push(-1);
    /// s.push(0);
    /// assert_eq!(s.stack_slice(), [-1, 0]);
    /// ```
    pub fn stack_slice(&self) -> &[i32] {
        &self.stack
    }

    /// Pushes a token (or -1, the root) onto the stack.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.push(0);
    /// assert_eq!(s.stack(0), 0);
    /// ```
    pub fn push(&mut self, token: i32) {
        self.stack.push(token);
    }

    /// Pops the top of the stack.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.push(0);
    /// assert_eq!((s.pop(), s.pop()), (Some(0), None));
    /// ```
    pub fn pop(&mut self) -> Option<i32> {
        self.stack.pop()
    }

    /// Token `token`'s head so far (-1: the root or not attached; -1 out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!((s.head(0), s.head(5)), (-1, -1));
    /// ```
    pub fn head(&self, token: i32) -> i32 {
        get_or_minus_one(&self.heads, token)
    }

    /// Token `token`'s label id so far (-1: none; -1 out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, -1, 4);
    /// assert_eq!((s.head(0), s.label(0)), (-1, 4));
    /// ```
    pub fn label(&self, token: i32) -> i32 {
        get_or_minus_one(&self.labels, token)
    }

    /// Every token's head so far.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.heads(), [-1]);
    /// ```
    pub fn heads(&self) -> &[i32] {
        &self.heads
    }

    /// Every token's label id so far.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.labels(), [-1]);
    /// ```
    pub fn labels(&self) -> &[i32] {
        &self.labels
    }

    /// Attaches `child` to `head` (-1: the root) with label id `label`; out-of-range
    /// children are ignored.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t2\tdep\t_\t_\n2\ty\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, 1, 2);
    /// assert_eq!(s.heads(), [1, -1]);
    /// assert_eq!(s.labels(), [2, -1]);
    /// ```
    pub fn add_arc(&mut self, child: i32, head: i32, label: i32) {
        set_if_in_range(&mut self.heads, child, head);
        set_if_in_range(&mut self.labels, child, label);
    }

    /// Token `token`'s predicted tag id (-1: none; -1 out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_tag(0, 3);
    /// assert_eq!((s.tag(0), s.tag(1)), (3, -1));
    /// ```
    pub fn tag(&self, token: i32) -> i32 {
        get_or_minus_one(&self.tags, token)
    }

    /// Every token's predicted tag id.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.tags(), [-1]);
    /// ```
    pub fn tags(&self) -> &[i32] {
        &self.tags
    }

    /// Sets token `token`'s predicted tag id (ignored out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_tag(0, 1);
    /// assert_eq!(s.tags(), [1]);
    /// ```
    pub fn set_tag(&mut self, token: i32, tag: i32) {
        set_if_in_range(&mut self.tags, token, tag);
    }

    /// Token `token`'s gold head (-1: the root, HEAD `_`, or out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t2\tdep\t_\t_\n2\ty\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!((s.gold_head(0), s.gold_head(1), s.gold_head(-1)), (1, -1, -1));
    /// ```
    pub fn gold_head(&self, token: i32) -> i32 {
        get_or_minus_one(&self.gold.heads, token)
    }

    /// Token `token`'s gold label id in the label map (-1: not in the map, or out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &maps);
    /// assert_eq!(s.gold_label(0), 0);
    /// ```
    pub fn gold_label(&self, token: i32) -> i32 {
        get_or_minus_one(&self.gold.labels, token)
    }

    /// Token `token`'s gold tag id in the tag map (-1: not in the map, or out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &maps);
    /// assert_eq!((s.gold_tag(0), s.gold_tag(1)), (0, -1));
    /// ```
    pub fn gold_tag(&self, token: i32) -> i32 {
        get_or_minus_one(&self.gold.tags, token)
    }

    /// The number of labels of the label map the state was built with.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// assert_eq!(ParserState::new(Arc::new(doc[0].clone()), &maps).num_labels(), 1);
    /// ```
    pub fn num_labels(&self) -> usize {
        self.gold.num_labels
    }

    /// The number of tags of the tag map the state was built with.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// assert_eq!(ParserState::new(Arc::new(doc[0].clone()), &maps).num_tags(), 1);
    /// ```
    pub fn num_tags(&self) -> usize {
        self.gold.num_tags
    }

    /// The id of token `token`'s word form in `map`, looked up once when the state was
    /// built if `map` is (a clone of) the word map it was built with, and now otherwise:
    /// `None` when the form is not in the map.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMap, TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tev\tev\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &maps);
    /// assert_eq!(s.word_id(&maps.words, 0), Some(0));
    /// assert_eq!(s.word_id(&TermMap::default(), 0), None); // another map: looked up there
    /// ```
    pub fn word_id(&self, map: &TermMap, token: usize) -> Option<usize> {
        match self.gold.words.get(token) {
            Some(&id) if map.is_shared_with(&self.gold.word_map) => usize::try_from(id).ok(),
            _ => map.lookup(self.sentence.form(token)),
        }
    }

    /// The id of token `token`'s lemma in `map`, as [`ParserState::word_id`] for the lemma
    /// map.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}, transition::ParserState};
    /// let doc = read_conllu("1\tevler\tev\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &maps);
    /// assert_eq!(s.lemma_id(&maps.lemmas, 0), maps.lemmas.lookup("ev"));
    /// ```
    pub fn lemma_id(&self, map: &TermMap, token: usize) -> Option<usize> {
        match self.gold.lemmas.get(token) {
            Some(&id) if map.is_shared_with(&self.gold.lemma_map) => usize::try_from(id).ok(),
            _ => map.lookup(self.sentence.lemma(token)),
        }
    }

    /// The last action performed, or -1 before the first.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.last_action(), -1);
    /// ```
    pub fn last_action(&self) -> i32 {
        self.last_action
    }

    /// The number of actions performed on this state (and its ancestors it was cloned from).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::{create, ParserState, TransitionSystem, NO_PARAMS}};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let sys = create("shift-only", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &TermMaps::default());
    /// sys.perform(&mut s, 0).unwrap();
    /// assert_eq!((s.num_steps(), s.last_action()), (1, 0));
    /// ```
    pub fn num_steps(&self) -> usize {
        self.num_steps
    }

    /// The last step that shifted `token` or made it the head of an arc (the
    /// `shift-reduce-step` translator); -1 if none or out of range.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_step_for_token(0, 12);
    /// s.set_step_for_token(5, 34); // out of range: ignored
    /// assert_eq!((s.step_for_token(0), s.step_for_token(5), s.step_for_token(-1)), (12, -1, -1));
    /// ```
    pub fn step_for_token(&self, token: i32) -> i32 {
        get_or_minus_one(&self.step_for_token, token)
    }

    /// Sets [`ParserState::step_for_token`] (assignment; ignored out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_step_for_token(0, 1);
    /// s.set_step_for_token(0, 2);
    /// assert_eq!(s.step_for_token(0), 2);
    /// ```
    pub fn set_step_for_token(&mut self, token: i32, step: i32) {
        set_if_in_range(&mut self.step_for_token, token, step);
    }

    /// The head `token` was attached to by an arc action (-1 if none or out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.parent_for_token(0), -1);
    /// ```
    pub fn parent_for_token(&self, token: i32) -> i32 {
        get_or_minus_one(&self.parent_for_token, token)
    }

    /// Sets [`ParserState::parent_for_token`] (assignment; ignored out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_parent_for_token(0, 7);
    /// assert_eq!(s.parent_for_token(0), 7);
    /// ```
    pub fn set_parent_for_token(&mut self, token: i32, parent: i32) {
        set_if_in_range(&mut self.parent_for_token, token, parent);
    }

    /// The step that attached `token` to its head (the `reduce-step` translator); -1 if
    /// none or out of range.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.parent_step_for_token(0), -1);
    /// ```
    pub fn parent_step_for_token(&self, token: i32) -> i32 {
        get_or_minus_one(&self.parent_step_for_token, token)
    }

    /// Sets [`ParserState::parent_step_for_token`] (assignment; ignored out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.set_parent_step_for_token(0, 9);
    /// assert_eq!(s.parent_step_for_token(0), 9);
    /// ```
    pub fn set_parent_step_for_token(&mut self, token: i32, step: i32) {
        set_if_in_range(&mut self.parent_step_for_token, token, step);
    }

    /// A short description for messages: stack, input pointer, steps.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.describe(), "stack [], next 0 of 1 tokens, 0 steps");
    /// ```
    pub fn describe(&self) -> String {
        format!(
            "stack {:?}, next {} of {} tokens, {} steps",
            self.stack,
            self.next,
            self.num_tokens(),
            self.num_steps
        )
    }
}

/// The partial tree as SyntaxNet's feature locators read it (`ParserState::Parent`,
/// `LeftmostChild`, `RightmostChild`, `LeftSibling`, `RightSibling`). A *location* is a
/// token (`0..num_tokens`) or the root (-1); every method gives -2 ("no token") for any other
/// input. Heads start at -1, so an unattached token reads as a child of the root, as in
/// SyntaxNet. Huge level counts are cheap: the walks stop as soon as the answer is fixed.
impl ParserState {
    /// Whether `index` is a token or the root (-1).
    fn is_location(&self, index: i32) -> bool {
        index >= -1 && (index as i64) < self.num_tokens() as i64
    }

    /// The head of `token` applied `levels` times (the root's head is the root; 0 levels is
    /// `token` itself); -2 when `token` is not a location.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n3\tc\t_\tX\t_\t_\t_\t_\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, 1, 0);
    /// s.add_arc(1, 2, 0);
    /// assert_eq!((s.ancestor(0, 0), s.ancestor(0, 1), s.ancestor(0, 2)), (0, 1, 2));
    /// assert_eq!((s.ancestor(0, 3), s.ancestor(0, u32::MAX), s.ancestor(-1, 1)), (-1, -1, -1));
    /// assert_eq!(s.ancestor(7, 1), -2);
    /// ```
    pub fn ancestor(&self, token: i32, levels: u32) -> i32 {
        if !self.is_location(token) {
            return -2;
        }
        let n = self.num_tokens() as u64;
        let mut index = token;
        let mut left = u64::from(levels);
        let mut walked = 0u64;
        while left > 0 && index != -1 {
            index = self.head(index);
            left -= 1;
            walked += 1;
            if walked > n && left > 0 && index != -1 {
                // More steps than tokens without reaching the root: a cycle (arcs set by
                // hand). Skip whole turns of it.
                let mut cycle = 1u64;
                let mut j = self.head(index);
                while j != index && cycle <= n {
                    j = self.head(j);
                    cycle += 1;
                }
                if j == index {
                    left %= cycle;
                }
                walked = 0;
            }
        }
        index
    }

    /// The leftmost child of `token`, taken `levels` times (the leftmost child of the
    /// leftmost child, ...; 0 levels is `token` itself); -2 when there is none or `token` is
    /// not a location. The root has no leftmost child (only tokens after it can be its
    /// children, and SyntaxNet scans the tokens before the head).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n3\tc\t_\tX\t_\t_\t_\t_\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, 2, 0);
    /// s.add_arc(1, 2, 0);
    /// assert_eq!((s.leftmost_child(2, 1), s.leftmost_child(2, 2), s.leftmost_child(2, 0)), (0, -2, 2));
    /// assert_eq!((s.leftmost_child(-1, 1), s.leftmost_child(2, u32::MAX)), (-2, -2));
    /// ```
    pub fn leftmost_child(&self, token: i32, levels: u32) -> i32 {
        if !self.is_location(token) {
            return -2;
        }
        let mut index = token;
        for _ in 0..levels {
            match (0..index.max(0)).find(|&i| self.heads[i as usize] == index) {
                Some(i) => index = i,
                None => return -2,
            }
        }
        index
    }

    /// The rightmost child of `token`, taken `levels` times; -2 when there is none or `token`
    /// is not a location. The root's rightmost child is the last token whose head is -1
    /// (attached to the root or not yet attached).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n3\tc\t_\tX\t_\t_\t_\t_\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(s.rightmost_child(-1, 1), 2); // every token's head is -1 so far
    /// s.add_arc(1, 0, 0);
    /// s.add_arc(2, 1, 0);
    /// assert_eq!((s.rightmost_child(0, 1), s.rightmost_child(0, 2), s.rightmost_child(0, 3)), (1, 2, -2));
    /// assert_eq!(s.rightmost_child(-1, 1), 0);
    /// ```
    pub fn rightmost_child(&self, token: i32, levels: u32) -> i32 {
        if !self.is_location(token) {
            return -2;
        }
        let n = self.num_tokens() as i32;
        let mut index = token;
        for _ in 0..levels {
            match (index + 1..n)
                .rev()
                .find(|&i| self.heads[i as usize] == index)
            {
                Some(i) => index = i,
                None => return -2,
            }
        }
        index
    }

    /// The `n`-th token to the left of `token` with the same head (0: `token` itself); -2
    /// when there is none, or `token` is the root (for `n > 0`) or not a location.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n3\tc\t_\tX\t_\t_\t_\t_\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, 1, 0);
    /// s.add_arc(2, 1, 0);
    /// assert_eq!((s.left_sibling(2, 1), s.left_sibling(2, 2), s.left_sibling(2, 0)), (0, -2, 2));
    /// assert_eq!((s.left_sibling(1, 1), s.left_sibling(-1, 1)), (-2, -2));
    /// ```
    pub fn left_sibling(&self, token: i32, n: u32) -> i32 {
        if !self.is_location(token) || (token == -1 && n > 0) {
            return -2;
        }
        let head = self.head(token);
        let mut left = n;
        let mut i = token;
        while left > 0 {
            i -= 1;
            if i < 0 {
                return -2;
            }
            if self.heads[i as usize] == head {
                left -= 1;
            }
        }
        i
    }

    /// The `n`-th token to the right of `token` with the same head (0: `token` itself); -2
    /// when there is none, or `token` is the root (for `n > 0`) or not a location.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t_\t_\t_\t_\n2\tb\t_\tX\t_\t_\t_\t_\t_\t_\n3\tc\t_\tX\t_\t_\t_\t_\t_\t_").unwrap();
    /// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// s.add_arc(0, 1, 0);
    /// s.add_arc(2, 1, 0);
    /// assert_eq!((s.right_sibling(0, 1), s.right_sibling(0, 2), s.right_sibling(0, u32::MAX)), (2, -2, -2));
    /// assert_eq!(s.right_sibling(1, 1), -2); // token 1's head is -1; no later token's is
    /// ```
    pub fn right_sibling(&self, token: i32, n: u32) -> i32 {
        if !self.is_location(token) || (token == -1 && n > 0) {
            return -2;
        }
        let head = self.head(token);
        let count = self.num_tokens() as i32;
        let mut left = n;
        let mut i = token;
        while left > 0 {
            i += 1;
            if i >= count {
                return -2;
            }
            if self.heads[i as usize] == head {
                left -= 1;
            }
        }
        i
    }
}

impl TransitionState for ParserState {
    fn parent_beam_index(&self) -> i32 {
        self.parent_beam_index
    }
    fn beam_index(&self) -> i32 {
        self.beam_index
    }
    fn set_beam_index(&mut self, index: i32) {
        self.beam_index = index;
    }
    fn score(&self) -> f32 {
        self.score
    }
    fn set_score(&mut self, score: f32) {
        self.score = score;
    }
    fn is_gold(&self) -> bool {
        self.is_gold
    }
    fn set_gold(&mut self, gold: bool) {
        self.is_gold = gold;
    }
}

/// A transition system: the actions a [`ParserState`] can take, which are allowed, when a
/// state is final, what an action does, and the oracle's gold actions. Build one by name
/// with [`create`].
///
/// Implementors write [`TransitionSystem::apply`] (the action itself); callers use
/// [`TransitionSystem::perform`] (checked) or [`TransitionSystem::perform_unchecked`],
/// which also record the translator metadata and count the step.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
/// let doc = read_conllu("1\tEv\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n\
///                        2\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let sys = create("arc-standard", NO_PARAMS).unwrap();
/// assert_eq!(sys.num_actions(&maps), 5);
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &maps);
/// let actions = sys.run_oracle(&mut s).unwrap();
/// assert_eq!(s.heads(), [1, -1]);
/// assert_eq!(actions.len(), 4); // SHIFT SHIFT LEFT_ARC(nsubj) RIGHT_ARC(root)
/// ```
pub trait TransitionSystem: fmt::Debug + Send + Sync {
    /// The registered name.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// assert_eq!(sys.name(), "arc-standard");
    /// ```
    fn name(&self) -> &'static str;

    /// The number of actions, given the term maps (the width of a score matrix row).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// assert_eq!(sys.num_actions(&maps), 1 + 2 * 2); // labels dep, root
    /// ```
    fn num_actions(&self, maps: &TermMaps) -> usize;

    /// Sets a fresh state's start (called by [`TransitionSystem::initial_state`]); the
    /// default does nothing.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = kiln_dragnn::transition::ParserState::new(sentence, &maps);
    /// sys.initialize(&mut s);
    /// assert_eq!(s.stack_slice(), [-1]);
    /// ```
    fn initialize(&self, state: &mut ParserState) {
        let _ = state;
    }

    /// Whether `action` may be taken from `state` (false for every action of a final
    /// state and for actions out of range).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let s = sys.initial_state(sentence, &maps);
    /// assert!(sys.is_allowed(&s, 0) && !sys.is_allowed(&s, 2) && !sys.is_allowed(&s, 99));
    /// ```
    fn is_allowed(&self, state: &ParserState, action: usize) -> bool;

    /// Whether `state` takes no more actions.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// assert!(!sys.is_final(&s));
    /// sys.run_oracle(&mut s).unwrap();
    /// assert!(sys.is_final(&s));
    /// ```
    fn is_final(&self, state: &ParserState) -> bool;

    /// The action itself, without metadata or step counting; `action` is allowed.
    /// Implementations never panic, even for an action that is not allowed.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// sys.apply(&mut s, 0);
    /// assert_eq!((s.stack_slice(), s.num_steps()), (&[-1, 0][..], 0));
    /// ```
    fn apply(&self, state: &mut ParserState, action: usize);

    /// The oracle's gold actions from `state`, best first; on a non-final state the first
    /// is always allowed (falling back to an allowed action where the gold annotation
    /// cannot be followed, e.g. a non-projective tree).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let s = sys.initial_state(sentence, &maps);
    /// assert_eq!(sys.oracle(&s), [0]); // SHIFT
    /// ```
    fn oracle(&self, state: &ParserState) -> Vec<usize>;

    /// The token that gains a child by `action` from `state`: -1 for a shift-like action.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// sys.perform(&mut s, 0).unwrap();
    /// sys.perform(&mut s, 0).unwrap();
    /// assert_eq!((sys.parent_index(&s, 0), sys.parent_index(&s, 1), sys.parent_index(&s, 2)), (-1, 1, 0));
    /// ```
    fn parent_index(&self, state: &ParserState, action: usize) -> i32 {
        let _ = (state, action);
        -1
    }

    /// The token that gets a head by `action` from `state`: -1 for none.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// sys.perform(&mut s, 0).unwrap();
    /// sys.perform(&mut s, 0).unwrap();
    /// assert_eq!((sys.child_index(&s, 0), sys.child_index(&s, 1), sys.child_index(&s, 2)), (-1, 0, 1));
    /// ```
    fn child_index(&self, state: &ParserState, action: usize) -> i32 {
        let _ = (state, action);
        -1
    }

    /// Whether [`TransitionSystem::perform`] records translator metadata (default true).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// assert!(sys.supports_action_metadata());
    /// assert!(!create("once", NO_PARAMS).unwrap().supports_action_metadata());
    /// ```
    fn supports_action_metadata(&self) -> bool {
        true
    }

    /// Whether `state` has only one sensible action (SyntaxNet's `IsDeterministicState`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let s = sys.initial_state(sentence, &maps);
    /// assert!(sys.is_deterministic(&s)); // only SHIFT from [-1]
    /// ```
    fn is_deterministic(&self, state: &ParserState) -> bool;

    /// The `parser_skip_deterministic` parameter (accepted by every system; the caller
    /// decides what to do with it).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// assert!(!sys.skip_deterministic());
    /// let skip = create("arc-standard", [("parser_skip_deterministic", "true")]).unwrap();
    /// assert!(skip.skip_deterministic());
    /// ```
    fn skip_deterministic(&self) -> bool {
        false
    }

    /// A readable name of `action`, e.g. `LEFT_ARC(nsubj)`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// assert_eq!(sys.action_name(0, &maps), "SHIFT");
    /// assert_eq!(sys.action_name(1, &maps), "LEFT_ARC(dep)");
    /// ```
    fn action_name(&self, action: usize, maps: &TermMaps) -> String {
        let _ = maps;
        format!("ACTION({action})")
    }

    /// Writes the state's predictions into `sentence` (the SyntaxNet component's
    /// `FinalizeData`): tags for the tagger, heads and labels for arc-standard, nothing for
    /// the others.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence.clone(), &maps);
    /// sys.run_oracle(&mut s).unwrap();
    /// let mut out = (*sentence).clone();
    /// out.set_head(0, None).unwrap();
    /// sys.finalize(&s, &maps, &mut out).unwrap();
    /// assert_eq!(out, *sentence);
    /// ```
    fn finalize(
        &self,
        state: &ParserState,
        maps: &TermMaps,
        sentence: &mut Sentence,
    ) -> Result<(), TransitionError> {
        let _ = (state, maps, sentence);
        Ok(())
    }

    /// A fresh state of `sentence` with this system's start applied.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let s = sys.initial_state(sentence, &maps);
    /// assert_eq!((s.stack_slice(), s.next()), (&[-1][..], 0));
    /// ```
    fn initial_state(&self, sentence: Arc<Sentence>, maps: &TermMaps) -> ParserState {
        let mut state = ParserState::new(sentence, maps);
        self.initialize(&mut state);
        state
    }

    /// Takes `action`, which must be allowed: records the translator metadata (see the
    /// module doc), applies the action, sets the last action and counts the step.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// sys.perform(&mut s, 0).unwrap();
    /// assert_eq!((s.num_steps(), s.step_for_token(0)), (1, 0));
    /// assert!(sys.perform(&mut s, 1).is_err()); // LEFT_ARC onto the root
    /// ```
    fn perform(&self, state: &mut ParserState, action: usize) -> Result<(), TransitionError> {
        if self.is_final(state) || !self.is_allowed(state, action) {
            return Err(TransitionError::NotAllowed {
                system: self.name(),
                action,
                state: state.describe(),
            });
        }
        self.perform_unchecked(state, action);
        Ok(())
    }

    /// [`TransitionSystem::perform`] without the check (what a beam calls: it performs only
    /// allowed actions and oracle actions).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// sys.perform_unchecked(&mut s, 0);
    /// assert_eq!((s.stack_slice(), s.last_action()), (&[-1, 0][..], 0));
    /// ```
    fn perform_unchecked(&self, state: &mut ParserState, action: usize) {
        if self.supports_action_metadata() {
            let step = state.num_steps as i32;
            let parent = self.parent_index(state, action);
            if parent == -1 {
                let next = state.next;
                if next >= 0 && (next as usize) < state.num_tokens() {
                    state.set_step_for_token(next, step);
                }
            } else if parent >= 0 {
                let child = self.child_index(state, action);
                state.set_step_for_token(parent, step);
                state.set_parent_for_token(child, parent);
                state.set_parent_step_for_token(child, step);
            }
        }
        self.apply(state, action);
        state.last_action = action as i32;
        state.num_steps += 1;
    }

    /// Follows the oracle from `state` until it is final, returning the actions taken;
    /// fails if that takes more than `4 * num_tokens + 8` steps.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// # use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
    /// # let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
    /// # let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// # let sentence = Arc::new(doc[0].clone());
    /// # let sys = create("arc-standard", NO_PARAMS).unwrap();
    /// let mut s = sys.initial_state(sentence, &maps);
    /// assert_eq!(sys.run_oracle(&mut s).unwrap(), [0, 0, 1, 4]); // SHIFT SHIFT LEFT_ARC(dep) RIGHT_ARC(root)
    /// assert_eq!(s.heads(), [1, -1]);
    /// ```
    fn run_oracle(&self, state: &mut ParserState) -> Result<Vec<usize>, TransitionError> {
        let limit = 4 * state.num_tokens() + 8;
        let mut actions = Vec::new();
        while !self.is_final(state) {
            if actions.len() >= limit {
                return Err(TransitionError::OracleStuck {
                    system: self.name(),
                    steps: actions.len(),
                    state: state.describe(),
                });
            }
            let action = self.oracle(state).first().copied().unwrap_or(0);
            self.perform(state, action)?;
            actions.push(action);
        }
        Ok(actions)
    }
}

/// Every transition system drives a [`crate::beam::Beam`] of parser states: pass
/// `&*system` (a `&dyn TransitionSystem`) or a concrete system where the beam wants
/// [`BeamFunctions`]. `perform` is [`TransitionSystem::perform_unchecked`].
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::beam::{Beam, BeamFunctions};
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps};
/// use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_").unwrap();
/// let sys = create("shift-only", NO_PARAMS).unwrap();
/// let mut beam = Beam::new(1);
/// beam.init(vec![sys.initial_state(Arc::new(doc[0].clone()), &TermMaps::default())]).unwrap();
/// while !beam.is_terminal(&*sys) {
///     beam.advance_from_oracle(&*sys).unwrap();
/// }
/// assert_eq!(beam.num_steps(), 2);
/// assert_eq!(beam.beam()[0].stack_slice(), [0, 1]);
/// ```
impl<S: TransitionSystem + ?Sized> BeamFunctions<ParserState> for S {
    fn is_allowed(&self, state: &ParserState, action: usize) -> bool {
        TransitionSystem::is_allowed(self, state, action)
    }
    fn is_final(&self, state: &ParserState) -> bool {
        TransitionSystem::is_final(self, state)
    }
    fn perform(&self, state: &mut ParserState, action: usize) {
        self.perform_unchecked(state, action)
    }
    fn oracle(&self, state: &ParserState) -> Vec<usize> {
        TransitionSystem::oracle(self, state)
    }
}

/// The parameters of a transition system being built: taken one by one, the rest reported.
struct Params {
    system: &'static str,
    known: &'static [&'static str],
    values: BTreeMap<String, String>,
}

impl Params {
    fn new<K: AsRef<str>, V: AsRef<str>>(
        system: &'static str,
        known: &'static [&'static str],
        params: impl IntoIterator<Item = (K, V)>,
    ) -> Params {
        Params {
            system,
            known,
            values: params
                .into_iter()
                .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
                .collect(),
        }
    }

    /// Takes a boolean parameter (`true`/`false`, any case, or `1`/`0`).
    fn take_bool(&mut self, name: &str) -> Result<Option<bool>, TransitionError> {
        let Some(value) = self.values.remove(name) else {
            return Ok(None);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(TransitionError::BadParameter {
                system: self.system,
                parameter: name.to_string(),
                value,
                reason: "expected `true` or `false`".into(),
            }),
        }
    }

    /// Fails on any parameter not taken.
    fn finish(self) -> Result<(), TransitionError> {
        match self.values.into_keys().next() {
            None => Ok(()),
            Some(parameter) => Err(TransitionError::UnknownParameter {
                system: self.system,
                parameter,
                known: self.known.join(", "),
            }),
        }
    }
}

/// No parameters, for [`create`]: `create("arc-standard", NO_PARAMS)`.
///
/// ```
/// use kiln_dragnn::transition::{create, NO_PARAMS};
/// assert_eq!(create("once", NO_PARAMS).unwrap().name(), "once");
/// ```
pub const NO_PARAMS: [(&str, &str); 0] = [];

/// The parameter every transition system takes.
const SKIP_DETERMINISTIC: &str = "parser_skip_deterministic";

/// Builds the transition system registered as `name` (see [`REGISTERED`]) with the
/// spec's `parameters` (a `BTreeMap<String, String>`, a `HashMap`, or pairs of strings).
/// Every system takes `parser_skip_deterministic`; `shift-only` takes `left_to_right`
/// (and the deprecated `left-to-right`), `tagger` takes `join_category_to_pos`. Unknown
/// names and parameters, and values that do not parse, are errors.
///
/// ```
/// use kiln_dragnn::transition::{create, TransitionError};
/// let sys = create("shift-only", [("left_to_right", "false")]).unwrap();
/// assert_eq!(sys.name(), "shift-only");
/// let err = create("tagger", [("left_to_right", "false")]).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "transition system `tagger` has no parameter `left_to_right` \
///      (it takes: join_category_to_pos, parser_skip_deterministic)"
/// );
/// assert!(matches!(
///     create("shift-only", [("left_to_right", "maybe")]),
///     Err(TransitionError::BadParameter { .. })
/// ));
/// ```
pub fn create<K: AsRef<str>, V: AsRef<str>>(
    name: &str,
    parameters: impl IntoIterator<Item = (K, V)>,
) -> Result<Box<dyn TransitionSystem>, TransitionError> {
    let system: Box<dyn TransitionSystem> = match name {
        "shift-only" => {
            let mut p = Params::new(
                "shift-only",
                &["left_to_right", "left-to-right", SKIP_DETERMINISTIC],
                parameters,
            );
            let new = p.take_bool("left_to_right")?;
            let old = p.take_bool("left-to-right")?;
            let left_to_right = match (new, old) {
                (Some(a), Some(b)) if a != b => {
                    return Err(TransitionError::BadParameter {
                        system: "shift-only",
                        parameter: "left-to-right".into(),
                        value: b.to_string(),
                        reason: format!(
                            "contradicts `left_to_right` = `{a}` (`left-to-right` is deprecated)"
                        ),
                    })
                }
                (a, b) => a.or(b).unwrap_or(true),
            };
            let skip = p.take_bool(SKIP_DETERMINISTIC)?.unwrap_or(false);
            p.finish()?;
            Box::new(ShiftOnly::new(left_to_right).with_skip_deterministic(skip))
        }
        "tagger" => {
            let mut p = Params::new(
                "tagger",
                &["join_category_to_pos", SKIP_DETERMINISTIC],
                parameters,
            );
            let join = p.take_bool("join_category_to_pos")?.unwrap_or(false);
            let skip = p.take_bool(SKIP_DETERMINISTIC)?.unwrap_or(false);
            p.finish()?;
            Box::new(
                Tagger::new()
                    .with_join_category_to_pos(join)
                    .with_skip_deterministic(skip),
            )
        }
        "arc-standard" => {
            let mut p = Params::new("arc-standard", &[SKIP_DETERMINISTIC], parameters);
            let skip = p.take_bool(SKIP_DETERMINISTIC)?.unwrap_or(false);
            p.finish()?;
            Box::new(ArcStandard::new().with_skip_deterministic(skip))
        }
        "once" => {
            let mut p = Params::new("once", &[SKIP_DETERMINISTIC], parameters);
            let skip = p.take_bool(SKIP_DETERMINISTIC)?.unwrap_or(false);
            p.finish()?;
            Box::new(Once::new().with_skip_deterministic(skip))
        }
        _ => {
            return Err(TransitionError::UnknownSystem {
                name: name.to_string(),
            })
        }
    };
    Ok(system)
}

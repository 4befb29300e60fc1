//! The `tagger` transition system: one action per tag of the tag map; action `t` gives
//! the next token tag `t`, pushes it and moves on. [`TransitionSystem::finalize`] writes
//! the predicted tags into the document's tag column (UPOS by default, see
//! [`crate::term_map::TagColumn`]).
//!
//! Depends on the parent module ([`super::ParserState`], [`super::TransitionSystem`]),
//! [`crate::term_map`] and [`crate::document`].

use super::{ParserState, TransitionError, TransitionSystem};
use crate::document::Sentence;
use crate::term_map::TermMaps;

/// The `tagger` transition system. Action `t` (a tag id, `0..tags.len()`) tags the next
/// token; actions are allowed until the input is consumed. The oracle gives the gold tag
/// of the next token (tag 0, the most frequent, when the gold tag is not in the map). No
/// state is deterministic.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::transition::{Tagger, TransitionSystem};
/// let mut doc = read_conllu("1\ta\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\
///                            2\tb\t_\tVERB\t_\t_\t1\tdep\t_\t_\n\
///                            3\tc\t_\tNOUN\t_\t_\t1\tdep\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let sys = Tagger::new();
/// assert_eq!(sys.num_actions(&maps), 2); // NOUN = 0, VERB = 1
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &maps);
/// assert_eq!(sys.run_oracle(&mut s).unwrap(), [0, 1, 0]);
/// assert_eq!(s.tags(), [0, 1, 0]);
/// s.set_tag(2, 1);
/// sys.finalize(&s, &maps, &mut doc[0]).unwrap();
/// assert_eq!(doc[0].upos(2), "VERB");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tagger {
    join_category_to_pos: bool,
    skip_deterministic: bool,
}

impl Tagger {
    /// The tagger.
    ///
    /// ```
    /// use kiln_dragnn::transition::{Tagger, TransitionSystem};
    /// assert_eq!(Tagger::new().name(), "tagger");
    /// ```
    pub fn new() -> Tagger {
        Tagger::default()
    }

    /// Sets the `join_category_to_pos` parameter (kept for specs that set it; the tag map
    /// already holds whole tags, so it changes nothing here).
    ///
    /// ```
    /// use kiln_dragnn::transition::Tagger;
    /// assert!(Tagger::new().with_join_category_to_pos(true).join_category_to_pos());
    /// ```
    pub fn with_join_category_to_pos(mut self, join: bool) -> Tagger {
        self.join_category_to_pos = join;
        self
    }

    /// The `join_category_to_pos` parameter.
    ///
    /// ```
    /// use kiln_dragnn::transition::Tagger;
    /// assert!(!Tagger::new().join_category_to_pos());
    /// ```
    pub fn join_category_to_pos(&self) -> bool {
        self.join_category_to_pos
    }

    /// Sets the `parser_skip_deterministic` parameter.
    ///
    /// ```
    /// use kiln_dragnn::transition::{Tagger, TransitionSystem};
    /// assert!(Tagger::new().with_skip_deterministic(true).skip_deterministic());
    /// ```
    pub fn with_skip_deterministic(mut self, skip: bool) -> Tagger {
        self.skip_deterministic = skip;
        self
    }
}

impl TransitionSystem for Tagger {
    fn name(&self) -> &'static str {
        "tagger"
    }

    fn num_actions(&self, maps: &TermMaps) -> usize {
        maps.tags.len()
    }

    fn is_allowed(&self, state: &ParserState, action: usize) -> bool {
        action < state.num_tags() && !state.end_of_input()
    }

    fn is_final(&self, state: &ParserState) -> bool {
        state.end_of_input()
    }

    fn apply(&self, state: &mut ParserState, action: usize) {
        if state.end_of_input() {
            return;
        }
        let next = state.next();
        state.set_tag(next, i32::try_from(action).unwrap_or(-1));
        state.push(next);
        state.advance(next + 1);
    }

    fn oracle(&self, state: &ParserState) -> Vec<usize> {
        vec![usize::try_from(state.gold_tag(state.next())).unwrap_or(0)]
    }

    fn is_deterministic(&self, _state: &ParserState) -> bool {
        false
    }

    fn skip_deterministic(&self) -> bool {
        self.skip_deterministic
    }

    fn action_name(&self, action: usize, maps: &TermMaps) -> String {
        format!("SHIFT({})", maps.tags.term(action).unwrap_or("?"))
    }

    /// Writes each tagged token's tag into the maps' tag column.
    fn finalize(
        &self,
        state: &ParserState,
        maps: &TermMaps,
        sentence: &mut Sentence,
    ) -> Result<(), TransitionError> {
        let column = maps.tag_column.column();
        for (i, &tag) in state.tags().iter().enumerate() {
            if let Some(term) = usize::try_from(tag).ok().and_then(|t| maps.tags.term(t)) {
                sentence.set_field(i, column, term)?;
            }
        }
        Ok(())
    }
}

//! The `once` transition system: exactly one action (0) per state, then final; for
//! components that take a single step.
//!
//! Depends on the parent module ([`super::ParserState`], [`super::TransitionSystem`]) and
//! [`crate::term_map`].

use super::{ParserState, TransitionSystem};
use crate::term_map::TermMaps;

/// The `once` transition system: one action, allowed only before the state's first step;
/// the state is final after it. The oracle says 0. Deterministic; records no translator
/// metadata.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps};
/// use kiln_dragnn::transition::{Once, TransitionSystem};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_").unwrap();
/// let sys = Once::new();
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &TermMaps::default());
/// assert!(!sys.is_final(&s) && sys.is_allowed(&s, 0) && !sys.is_allowed(&s, 1));
/// assert_eq!(sys.run_oracle(&mut s).unwrap(), [0]);
/// assert!(sys.is_final(&s) && !sys.is_allowed(&s, 0));
/// assert_eq!(s.step_for_token(0), -1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Once {
    skip_deterministic: bool,
}

impl Once {
    /// The `once` system.
    ///
    /// ```
    /// use kiln_dragnn::transition::{Once, TransitionSystem};
    /// assert_eq!(Once::new().name(), "once");
    /// ```
    pub fn new() -> Once {
        Once::default()
    }

    /// Sets the `parser_skip_deterministic` parameter.
    ///
    /// ```
    /// use kiln_dragnn::transition::{Once, TransitionSystem};
    /// assert!(Once::new().with_skip_deterministic(true).skip_deterministic());
    /// ```
    pub fn with_skip_deterministic(mut self, skip: bool) -> Once {
        self.skip_deterministic = skip;
        self
    }
}

impl TransitionSystem for Once {
    fn name(&self) -> &'static str {
        "once"
    }

    fn num_actions(&self, _maps: &TermMaps) -> usize {
        1
    }

    fn is_allowed(&self, state: &ParserState, action: usize) -> bool {
        action == 0 && !self.is_final(state)
    }

    fn is_final(&self, state: &ParserState) -> bool {
        state.num_steps() > 0
    }

    fn apply(&self, _state: &mut ParserState, _action: usize) {}

    fn oracle(&self, _state: &ParserState) -> Vec<usize> {
        vec![0]
    }

    fn supports_action_metadata(&self) -> bool {
        false
    }

    fn is_deterministic(&self, _state: &ParserState) -> bool {
        true
    }

    fn skip_deterministic(&self) -> bool {
        self.skip_deterministic
    }
}

//! The `shift-only` transition system: one action, SHIFT, that pushes the next token and
//! moves the input pointer one token on, left to right or (with `left_to_right = false`)
//! right to left starting at the last token. DRAGNN uses it for LSTM encoders over the
//! sentence ("lookahead").
//!
//! Depends on the parent module ([`super::ParserState`], [`super::TransitionSystem`]) and
//! [`crate::term_map`].

use super::{ParserState, TransitionSystem};
use crate::term_map::TermMaps;

/// The `shift-only` transition system. Action 0 is SHIFT; it is allowed until the input
/// is consumed, and the oracle always says SHIFT. Every state is deterministic.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps};
/// use kiln_dragnn::transition::{ShiftOnly, TransitionSystem};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_").unwrap();
/// let sys = ShiftOnly::new(false);
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &TermMaps::default());
/// assert_eq!(s.next(), 1);
/// sys.run_oracle(&mut s).unwrap();
/// assert_eq!((s.next(), s.stack_slice()), (-1, &[1, 0][..]));
/// assert_eq!((s.step_for_token(1), s.step_for_token(0)), (0, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShiftOnly {
    left_to_right: bool,
    skip_deterministic: bool,
}

impl ShiftOnly {
    /// A shift-only system in the given direction.
    ///
    /// ```
    /// use kiln_dragnn::transition::ShiftOnly;
    /// assert!(ShiftOnly::new(true).left_to_right());
    /// ```
    pub fn new(left_to_right: bool) -> ShiftOnly {
        ShiftOnly {
            left_to_right,
            skip_deterministic: false,
        }
    }

    /// Sets the `parser_skip_deterministic` parameter.
    ///
    /// ```
    /// use kiln_dragnn::transition::{ShiftOnly, TransitionSystem};
    /// assert!(ShiftOnly::new(true).with_skip_deterministic(true).skip_deterministic());
    /// ```
    pub fn with_skip_deterministic(mut self, skip: bool) -> ShiftOnly {
        self.skip_deterministic = skip;
        self
    }

    /// Whether the system runs left to right.
    ///
    /// ```
    /// use kiln_dragnn::transition::ShiftOnly;
    /// assert!(!ShiftOnly::new(false).left_to_right());
    /// ```
    pub fn left_to_right(&self) -> bool {
        self.left_to_right
    }
}

impl TransitionSystem for ShiftOnly {
    fn name(&self) -> &'static str {
        "shift-only"
    }

    fn num_actions(&self, _maps: &TermMaps) -> usize {
        1
    }

    fn initialize(&self, state: &mut ParserState) {
        if !self.left_to_right {
            state.advance(state.num_tokens() as i32 - 1);
        }
    }

    fn is_allowed(&self, state: &ParserState, action: usize) -> bool {
        action == 0 && !self.is_final(state)
    }

    fn is_final(&self, state: &ParserState) -> bool {
        if self.left_to_right {
            state.end_of_input()
        } else {
            state.next() < 0
        }
    }

    fn apply(&self, state: &mut ParserState, _action: usize) {
        if self.is_final(state) {
            return;
        }
        let next = state.next();
        state.push(next);
        state.advance(if self.left_to_right {
            next + 1
        } else {
            next - 1
        });
    }

    fn oracle(&self, _state: &ParserState) -> Vec<usize> {
        vec![0]
    }

    fn is_deterministic(&self, _state: &ParserState) -> bool {
        true
    }

    fn skip_deterministic(&self) -> bool {
        self.skip_deterministic
    }

    fn action_name(&self, _action: usize, _maps: &TermMaps) -> String {
        "SHIFT".into()
    }
}

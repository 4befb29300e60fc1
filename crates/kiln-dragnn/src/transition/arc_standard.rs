//! The `arc-standard` transition system (Nivre 2004) with SyntaxNet's action encoding
//! and static oracle: projective trees, the artificial root `-1` at the bottom of the
//! stack.
//!
//! Depends on the parent module ([`super::ParserState`], [`super::TransitionSystem`]),
//! [`crate::term_map`] and [`crate::document`].

use super::{ParserState, TransitionError, TransitionSystem};
use crate::document::Sentence;
use crate::term_map::TermMaps;

/// The `arc-standard` transition system. With `L` labels there are `1 + 2L` actions:
/// `0` SHIFT, `1 + 2l` LEFT_ARC(l) (`s1 ← s0`: s0 becomes s1's head, s1 is popped),
/// `2 + 2l` RIGHT_ARC(l) (`s1 → s0`: s1 becomes s0's head, s0 is popped).
///
/// - Allowed: SHIFT while input remains; LEFT_ARC when the stack holds more than two
///   entries (never attaching the root); RIGHT_ARC when it holds more than one.
/// - Final: input consumed and fewer than two entries on the stack.
/// - Oracle: RIGHT_ARC(gold label of s0) if s0's gold head is s1 and s0 has no gold child
///   left in the input; else LEFT_ARC(gold label of s1) if s1's gold head is s0; else
///   SHIFT. Exact for projective trees. Where the gold tree cannot be followed
///   (non-projective trees: SHIFT with the input consumed) it falls back to RIGHT_ARC, so
///   the oracle always reaches a final state; a gold label not in the label map counts as
///   label 0.
/// - Metadata: LEFT_ARC's parent is s0 and child s1; RIGHT_ARC's parent is s1 and child
///   s0 (a RIGHT_ARC onto the root has parent -1, which the metadata treats like a
///   shift, as upstream does).
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::transition::{ArcStandard, TransitionSystem};
/// // a ← b → c, b the root; labels by frequency: dep = 0, root = 1
/// let mut doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n\
///                            2\tb\t_\tX\t_\t_\t0\troot\t_\t_\n\
///                            3\tc\t_\tX\t_\t_\t2\tdep\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let sys = ArcStandard::new();
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &maps);
/// assert_eq!(s.stack_slice(), [-1]);
/// let actions = sys.run_oracle(&mut s).unwrap();
/// assert_eq!(actions, [0, 0, ArcStandard::left_arc(0), 0, ArcStandard::right_arc(0),
///                      ArcStandard::right_arc(1)]);
/// assert_eq!((s.heads(), s.labels()), (&[1, -1, 1][..], &[0, 1, 0][..]));
/// doc[0].set_head(0, None).unwrap();
/// sys.finalize(&s, &maps, &mut doc[0]).unwrap();
/// assert_eq!(doc[0].head(0), Some(1));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArcStandard {
    skip_deterministic: bool,
}

/// The kind of an arc-standard action.
///
/// ```
/// use kiln_dragnn::transition::{ArcStandard, arc_standard::ActionKind};
/// assert_eq!(ArcStandard::kind(0), ActionKind::Shift);
/// assert_eq!(ArcStandard::kind(3), ActionKind::LeftArc(1));
/// assert_eq!(ArcStandard::kind(4), ActionKind::RightArc(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// Push the next token.
    Shift,
    /// Make s0 the head of s1 with this label; pop s1.
    LeftArc(usize),
    /// Make s1 the head of s0 with this label; pop s0.
    RightArc(usize),
}

impl ArcStandard {
    /// The arc-standard system.
    ///
    /// ```
    /// use kiln_dragnn::transition::{ArcStandard, TransitionSystem};
    /// assert_eq!(ArcStandard::new().name(), "arc-standard");
    /// ```
    pub fn new() -> ArcStandard {
        ArcStandard::default()
    }

    /// Sets the `parser_skip_deterministic` parameter.
    ///
    /// ```
    /// use kiln_dragnn::transition::{ArcStandard, TransitionSystem};
    /// assert!(ArcStandard::new().with_skip_deterministic(true).skip_deterministic());
    /// ```
    pub fn with_skip_deterministic(mut self, skip: bool) -> ArcStandard {
        self.skip_deterministic = skip;
        self
    }

    /// The SHIFT action, 0.
    ///
    /// ```
    /// use kiln_dragnn::transition::{ArcStandard, arc_standard::ActionKind};
    /// assert_eq!(ArcStandard::kind(ArcStandard::SHIFT), ActionKind::Shift);
    /// ```
    pub const SHIFT: usize = 0;

    /// LEFT_ARC with label `label`: `1 + 2 * label`.
    ///
    /// ```
    /// use kiln_dragnn::transition::ArcStandard;
    /// assert_eq!(ArcStandard::left_arc(2), 5);
    /// ```
    pub fn left_arc(label: usize) -> usize {
        1 + 2 * label
    }

    /// RIGHT_ARC with label `label`: `2 + 2 * label`.
    ///
    /// ```
    /// use kiln_dragnn::transition::ArcStandard;
    /// assert_eq!(ArcStandard::right_arc(2), 6);
    /// ```
    pub fn right_arc(label: usize) -> usize {
        2 + 2 * label
    }

    /// Decodes an action.
    ///
    /// ```
    /// use kiln_dragnn::transition::{ArcStandard, arc_standard::ActionKind};
    /// assert_eq!(ArcStandard::kind(ArcStandard::right_arc(7)), ActionKind::RightArc(7));
    /// ```
    pub fn kind(action: usize) -> ActionKind {
        match action {
            0 => ActionKind::Shift,
            a if a % 2 == 1 => ActionKind::LeftArc((a - 1) / 2),
            a => ActionKind::RightArc((a - 2) / 2),
        }
    }

    /// Whether `head` has no gold child at or after the input pointer (SyntaxNet's
    /// `DoneChildrenRightOf`, which skips ahead over projective subtrees).
    fn done_children_right_of(state: &ParserState, head: i32) -> bool {
        let n = state.num_tokens() as i32;
        let mut index = state.next();
        while index < n {
            let actual_head = state.gold_head(index);
            if actual_head == head {
                return false;
            }
            index = if actual_head > index {
                actual_head
            } else {
                index + 1
            };
        }
        true
    }

    fn gold_label_or_zero(state: &ParserState, token: i32) -> usize {
        usize::try_from(state.gold_label(token)).unwrap_or(0)
    }
}

impl TransitionSystem for ArcStandard {
    fn name(&self) -> &'static str {
        "arc-standard"
    }

    fn num_actions(&self, maps: &TermMaps) -> usize {
        1 + 2 * maps.labels.len()
    }

    fn initialize(&self, state: &mut ParserState) {
        state.push(-1);
    }

    fn is_allowed(&self, state: &ParserState, action: usize) -> bool {
        if action > 2 * state.num_labels() {
            return false; // past RIGHT_ARC(num_labels - 1)
        }
        match Self::kind(action) {
            ActionKind::Shift => !state.end_of_input(),
            ActionKind::LeftArc(_) => state.stack_size() > 2,
            ActionKind::RightArc(_) => state.stack_size() > 1,
        }
    }

    fn is_final(&self, state: &ParserState) -> bool {
        state.end_of_input() && state.stack_size() < 2
    }

    fn apply(&self, state: &mut ParserState, action: usize) {
        match Self::kind(action) {
            ActionKind::Shift => {
                if !state.end_of_input() {
                    let next = state.next();
                    state.push(next);
                    state.advance(next + 1);
                }
            }
            ActionKind::LeftArc(label) => {
                if state.stack_size() > 2 {
                    let s0 = state.pop().expect("stack size checked");
                    let s1 = state.pop().expect("stack size checked");
                    state.add_arc(s1, s0, label as i32);
                    state.push(s0);
                }
            }
            ActionKind::RightArc(label) => {
                if state.stack_size() > 1 {
                    let s0 = state.pop().expect("stack size checked");
                    let s1 = state.pop().expect("stack size checked");
                    state.add_arc(s0, s1, label as i32);
                    state.push(s1);
                }
            }
        }
    }

    fn oracle(&self, state: &ParserState) -> Vec<usize> {
        if state.stack_size() < 2 {
            return vec![Self::SHIFT];
        }
        let s0 = state.stack(0);
        let s1 = state.stack(1);
        if state.gold_head(s0) == s1 && Self::done_children_right_of(state, s0) {
            return vec![Self::right_arc(Self::gold_label_or_zero(state, s0))];
        }
        if s1 >= 0 && state.gold_head(s1) == s0 {
            return vec![Self::left_arc(Self::gold_label_or_zero(state, s1))];
        }
        if state.end_of_input() {
            // the gold tree cannot be followed (non-projective): reduce to reach a final state
            return vec![Self::right_arc(Self::gold_label_or_zero(state, s0))];
        }
        vec![Self::SHIFT]
    }

    fn parent_index(&self, state: &ParserState, action: usize) -> i32 {
        match Self::kind(action) {
            ActionKind::Shift => -1,
            ActionKind::LeftArc(_) => state.stack(0),
            ActionKind::RightArc(_) => state.stack(1),
        }
    }

    fn child_index(&self, state: &ParserState, action: usize) -> i32 {
        match Self::kind(action) {
            ActionKind::Shift => -1,
            ActionKind::LeftArc(_) => state.stack(1),
            ActionKind::RightArc(_) => state.stack(0),
        }
    }

    fn is_deterministic(&self, state: &ParserState) -> bool {
        state.stack_size() < 2 && !state.end_of_input()
    }

    fn skip_deterministic(&self) -> bool {
        self.skip_deterministic
    }

    fn action_name(&self, action: usize, maps: &TermMaps) -> String {
        let label = |l: usize| maps.labels.term(l).unwrap_or("?").to_string();
        match Self::kind(action) {
            ActionKind::Shift => "SHIFT".into(),
            ActionKind::LeftArc(l) => format!("LEFT_ARC({})", label(l)),
            ActionKind::RightArc(l) => format!("RIGHT_ARC({})", label(l)),
        }
    }

    /// Writes every token's head and label (a label not in the map as `_`).
    fn finalize(
        &self,
        state: &ParserState,
        maps: &TermMaps,
        sentence: &mut Sentence,
    ) -> Result<(), TransitionError> {
        for i in 0..state.num_tokens().min(sentence.len()) {
            sentence.set_head(i, Some(state.heads()[i]))?;
            let label = usize::try_from(state.labels()[i])
                .ok()
                .and_then(|l| maps.labels.term(l))
                .unwrap_or("_");
            sentence.set_deprel(i, label)?;
        }
        Ok(())
    }
}

/// Whether the tree `heads` (SyntaxNet's convention: a token index from 0, -1 for the
/// root) is projective with the root before the first token, i.e. whether arc-standard's
/// oracle can reproduce it: for every arc, each token strictly between the head and the
/// dependent descends from the head (the root dominates every token). False for head
/// structures that are not trees (a cycle or a head out of range).
///
/// ```
/// use kiln_dragnn::transition::is_projective;
/// assert!(is_projective(&[1, -1, 1]));      // a ← b → c
/// assert!(!is_projective(&[-1, 0, 0, 1]));  // a → c and b → d cross
/// assert!(!is_projective(&[2, -1, 1]));     // c → a spans b, which hangs from the root
/// assert!(!is_projective(&[1, 0]));         // a cycle
/// ```
pub fn is_projective(heads: &[i32]) -> bool {
    let n = heads.len();
    if heads.iter().any(|&h| h < -1 || h >= n as i32) {
        return false;
    }
    Walk::of(heads).is_some_and(|tree| tree.first_crossed(heads).is_none())
}

/// Makes the tree `heads` (as [`is_projective`] reads it) projective by lifting, as the
/// reference's training readers do (`projectivize_training_set`, SyntaxNet's document
/// filter): while some arc is non-projective, the one whose dependent lies deepest in the
/// tree (the leftmost of those) is moved up to its head's head.
/// Every lifted word keeps its label and hangs from one of its original ancestors, so
/// arc-standard's static oracle can follow the result exactly.
/// Returns the number of lifts, or `None` (and leaves `heads` alone) when `heads` is not a
/// tree (a cycle or a head out of range).
///
/// ```
/// use kiln_dragnn::transition::{is_projective, projectivize};
/// let mut heads = [-1, 0, 0, 1]; // a → c and b → d cross: d moves up to a
/// assert_eq!(projectivize(&mut heads), Some(1));
/// assert_eq!(heads, [-1, 0, 0, 0]);
/// assert!(is_projective(&heads));
/// let mut projective = [1, -1, 1];
/// assert_eq!(projectivize(&mut projective), Some(0));
/// assert_eq!(projectivize(&mut [1, 0]), None); // a cycle
/// ```
pub fn projectivize(heads: &mut [i32]) -> Option<usize> {
    let n = heads.len();
    if heads.iter().any(|&h| h < -1 || h >= n as i32) {
        return None;
    }
    let mut tree = Walk::of(heads)?;
    let mut lifts = 0;
    loop {
        let Some(d) = tree.first_crossed(heads) else {
            return Some(lifts);
        };
        heads[d] = heads[heads[d] as usize];
        lifts += 1;
        tree = Walk::of(heads).expect("lifting keeps a tree a tree");
    }
}

/// A depth-first walk of a tree of heads: each word's depth (1 under the root) and the
/// interval of walk positions its subtree covers.
struct Walk {
    depth: Vec<usize>,
    enter: Vec<usize>,
    leave: Vec<usize>,
}

impl Walk {
    /// The walk of `heads` (every head in `-1..len`), `None` when some word does not reach
    /// the root (a cycle).
    fn of(heads: &[i32]) -> Option<Walk> {
        let n = heads.len();
        let mut children = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for (d, &h) in heads.iter().enumerate() {
            match usize::try_from(h) {
                Ok(h) => children[h].push(d),
                Err(_) => roots.push(d),
            }
        }
        let mut walk = Walk {
            depth: vec![0; n],
            enter: vec![usize::MAX; n],
            leave: vec![0; n],
        };
        let mut clock = 0;
        // (word, next child to visit), iteratively: a deep tree must not overflow the stack
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for &r in &roots {
            walk.depth[r] = 1;
            walk.enter[r] = clock;
            clock += 1;
            stack.push((r, 0));
            while let Some(top) = stack.last_mut() {
                let (w, next) = *top;
                if let Some(&c) = children[w].get(next) {
                    top.1 += 1;
                    walk.depth[c] = walk.depth[w] + 1;
                    walk.enter[c] = clock;
                    clock += 1;
                    stack.push((c, 0));
                } else {
                    walk.leave[w] = clock;
                    stack.pop();
                }
            }
        }
        (clock == n).then_some(walk)
    }

    /// The deepest word (the leftmost of those) whose arc from its head is non-projective:
    /// some word strictly between the two is not below the head (the root's arcs never
    /// are); `None` when the tree is projective. Each check is O(1) on the walk's intervals.
    fn first_crossed(&self, heads: &[i32]) -> Option<usize> {
        let mut deepest: Option<usize> = None;
        for (d, &h) in heads.iter().enumerate() {
            if h < 0 || deepest.is_some_and(|best| self.depth[best] >= self.depth[d]) {
                continue;
            }
            let h = h as usize;
            let (lo, hi) = if h < d { (h, d) } else { (d, h) };
            if (lo + 1..hi).any(|k| !self.below(h, k)) {
                deepest = Some(d);
            }
        }
        deepest
    }

    /// Whether word `k` is `h` or below it.
    fn below(&self, h: usize, k: usize) -> bool {
        self.enter[h] <= self.enter[k] && self.enter[k] < self.leave[h]
    }
}

//! The beam of transition states: [`Beam`], which advances up to `max_size` states of a
//! transition system from a score matrix or along the oracle, with the reference's ordering,
//! tie-breaking, shrinking, gold tracking, history rows and previous-index walk; the traits it
//! needs of states ([`TransitionState`]) and of transition systems ([`BeamFunctions`]); and
//! two small helpers for tests and examples, [`SimpleState`] and [`FnBeamFunctions`].
//!
//! The behaviour is that of DRAGNN's `Beam<T>` (`dragnn/core/beam.h`) as
//! `../shared/dragnn-reference.md` section (b) describes it, with [`BeamError`]s where the
//! original CHECK-failed or returned `false`.
//!
//! Depends on nothing else in the crate; only on `std` and `thiserror`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What a beam needs of a transition state. Implemented by
/// [`crate::transition::ParserState`].
///
/// ```
/// use kiln_dragnn::beam::{SimpleState, TransitionState};
///
/// let mut s = SimpleState::with_score(1.5);
/// s.set_beam_index(3);
/// s.set_gold(true);
/// assert_eq!((s.beam_index(), s.score(), s.is_gold()), (3, 1.5, true));
/// assert_eq!(s.parent_beam_index(), -1);
/// ```
pub trait TransitionState: Clone {
    /// The slot, in the predecessor component's final beam, of the state this one was
    /// initialised from (-1 when it has no parent).
    fn parent_beam_index(&self) -> i32;
    /// The state's slot in its beam.
    fn beam_index(&self) -> i32;
    /// Sets the state's slot in its beam.
    fn set_beam_index(&mut self, index: i32);
    /// The state's score (the sum of the scores of the actions taken).
    fn score(&self) -> f32;
    /// Sets the state's score.
    fn set_score(&mut self, score: f32);
    /// Whether the state is on the gold (oracle) path.
    fn is_gold(&self) -> bool;
    /// Sets whether the state is on the gold path.
    fn set_gold(&mut self, gold: bool);
}

/// What a beam needs of a transition system, for states of type `T`: passed to each call
/// that advances a beam (the reference stores these as four callbacks).
///
/// [`FnBeamFunctions`] builds one from four closures.
///
/// ```
/// use kiln_dragnn::beam::{BeamFunctions, SimpleState};
///
/// /// Two actions; a state is final after three of them; the oracle always says 1.
/// struct Toy;
/// impl BeamFunctions<SimpleState> for Toy {
///     fn is_allowed(&self, _: &SimpleState, action: usize) -> bool {
///         action < 2
///     }
///     fn is_final(&self, s: &SimpleState) -> bool {
///         s.actions.len() == 3
///     }
///     fn perform(&self, s: &mut SimpleState, action: usize) {
///         s.actions.push(action)
///     }
///     fn oracle(&self, _: &SimpleState) -> Vec<usize> {
///         vec![1]
///     }
/// }
/// let mut s = SimpleState::default();
/// let gold = Toy.oracle(&s)[0];
/// Toy.perform(&mut s, gold);
/// assert_eq!(s.actions, [1]);
/// assert!(!Toy.is_final(&s) && !Toy.is_allowed(&s, 2));
/// ```
pub trait BeamFunctions<T> {
    /// Whether `action` may be taken from `state`.
    fn is_allowed(&self, state: &T, action: usize) -> bool;
    /// Whether `state` is final (takes no more actions).
    fn is_final(&self, state: &T) -> bool;
    /// Takes `action` from `state`.
    fn perform(&self, state: &mut T, action: usize);
    /// The oracle's (gold) actions from `state`, best first.
    fn oracle(&self, state: &T) -> Vec<usize>;
}

/// Errors of beam operations. Each carries the meaning of the reference's CHECK-failure
/// or `false` return, and its message starts with the reference's text where it had one.
///
/// ```
/// use kiln_dragnn::beam::{Beam, BeamError, SimpleState};
///
/// let mut beam = Beam::new(1);
/// let err = beam.init(vec![SimpleState::default(); 2]).unwrap_err();
/// assert!(matches!(err, BeamError::TooManyStates { states: 2, max_size: 1 }));
/// assert_eq!(
///     err.to_string(),
///     "Attempted to initialize a beam with more states (2) than the max size 1"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BeamError {
    /// [`Beam::init`] was given more states than the beam's max size.
    #[error(
        "Attempted to initialize a beam with more states ({states}) than the max size {max_size}"
    )]
    TooManyStates {
        /// How many states were given.
        states: usize,
        /// The beam's max size.
        max_size: usize,
    },
    /// The score matrix given to [`Beam::advance_from_prediction`] does not hold
    /// `max_size × num_actions` scores.
    #[error(
        "Transition matrix size does not match max beam size * number of state transitions! \
         ({len} scores for max beam size {max_size} and {num_actions} actions)"
    )]
    MatrixSize {
        /// The number of scores given.
        len: usize,
        /// The beam's max size.
        max_size: usize,
        /// The number of actions given.
        num_actions: usize,
    },
    /// A NaN score: in the row of a beam of max size 1 (any action, allowed or not), or,
    /// with a larger beam, the resulting score (state score + action score) of an allowed
    /// action (a NaN in the matrix, or `+inf` plus `-inf`).
    #[error("Found a NaN score (beam slot {slot}, action {action}); unable to continue")]
    NanScore {
        /// The beam slot whose row holds the NaN.
        slot: usize,
        /// The action whose score is NaN.
        action: usize,
    },
    /// A beam of max size 1 found no action to take: none is allowed, or every allowed
    /// action scores `-inf`.
    #[error(
        "No action was chosen! Unable to continue: no allowed action with a score above -inf \
         among {num_actions} actions"
    )]
    NoAllowedAction {
        /// The number of actions.
        num_actions: usize,
    },
    /// A beam of max size 1 was advanced from a prediction while it holds no state.
    #[error("Cannot advance an empty beam of max size 1 from a prediction")]
    EmptyBeam,
    /// The oracle returned no action for a state that is not final.
    #[error("The oracle returned no action for the non-final state in beam slot {slot}")]
    EmptyOracle {
        /// The beam slot of the state.
        slot: usize,
    },
}

/// A beam of up to [`max_size`](Beam::max_size) transition states of type `T`, advanced
/// one step at a time from a score matrix ([`advance_from_prediction`](Beam::advance_from_prediction))
/// or along the oracle ([`advance_from_oracle`](Beam::advance_from_oracle)), with the
/// history of which slot each state came from.
///
/// The history has one row per step plus row 0, each `max_size` long: row 0 holds each
/// initial state's [`parent_beam_index`](TransitionState::parent_beam_index), row `k` the
/// slot, before step `k`, of the state each slot holds after it; empty slots hold -1. A beam
/// of max size 1 keeps no rows beyond row 0 ([`history`](Beam::history) synthesises them).
///
/// ```
/// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
///
/// let fns = FnBeamFunctions::new(
///     |_: &SimpleState, _| true,                    // every action allowed
///     |s: &SimpleState| s.actions.len() == 2,       // final after two actions
///     |s: &mut SimpleState, a| s.actions.push(a),   // record the action
///     |_: &SimpleState| vec![0],                    // the oracle always says 0
/// );
/// let mut beam = Beam::new(2);
/// beam.init(vec![SimpleState::with_score(1.0)])?;
/// beam.advance_from_prediction(&fns, &[5.0, 7.0, 0.0, 0.0], 2)?;
/// // Both successors of the one state, best first.
/// let actions: Vec<_> = beam.beam().iter().map(|s| s.actions.clone()).collect();
/// assert_eq!(actions, [vec![1], vec![0]]);
/// assert_eq!(beam.beam()[0].score, 8.0);
/// assert_eq!(beam.history(), [vec![-1, -1], vec![0, 0]]);
/// beam.advance_from_oracle(&fns)?;
/// assert!(beam.is_terminal(&fns));
/// # Ok::<(), kiln_dragnn::beam::BeamError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Beam<T> {
    max_size: usize,
    states: Vec<T>,
    /// Row 0 (parents) and, when `max_size > 1`, one row per step; empty before `init`.
    history: Vec<Vec<i32>>,
    num_steps: usize,
    track_gold: bool,
}

/// A candidate successor while advancing a beam of max size > 1. Ordered so that the
/// *greater* candidate is the *worse* one: the lower score, and among equal scores the one
/// inserted later — the one the reference evicts first.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f32,
    /// Insertion order (slot-major, then action): the index into the score matrix.
    seq: usize,
    slot: usize,
    action: usize,
}

impl Candidate {
    /// Best first: descending score, then ascending insertion order. Scores are never NaN
    /// here, and `-0.0` equals `0.0`, as the reference's `std::greater<float>` keys have it.
    fn best_first(&self, other: &Self) -> Ordering {
        other
            .score
            .partial_cmp(&self.score)
            .unwrap_or(Ordering::Equal)
            .then(self.seq.cmp(&other.seq))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.best_first(other)
    }
}

/// `-1` for "no slot", as the reference's history rows and index walk use it.
fn slot_i32(slot: usize) -> i32 {
    i32::try_from(slot).unwrap_or(i32::MAX)
}

impl<T: TransitionState> Beam<T> {
    /// An empty beam that can hold up to `max_size` states, with gold tracking off.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let beam = Beam::<SimpleState>::new(8);
    /// assert_eq!((beam.max_size(), beam.size(), beam.num_steps()), (8, 0, 0));
    /// assert!(!beam.gold_tracking());
    /// assert!(beam.history().is_empty());
    /// ```
    pub fn new(max_size: usize) -> Self {
        Self {
            max_size,
            states: Vec::new(),
            history: Vec::new(),
            num_steps: 0,
            track_gold: false,
        }
    }

    /// Turns gold tracking on or off (off by default). With tracking off, [`init`](Self::init)
    /// clears every state's gold bit, advancing never asks the oracle, and
    /// [`contains_gold`](Self::contains_gold) is false.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let gold = SimpleState { gold: true, ..SimpleState::default() };
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![gold.clone()])?;
    /// assert!(!beam.contains_gold() && !beam.beam()[0].gold);
    /// beam.set_gold_tracking(true);
    /// beam.init(vec![gold])?;
    /// assert!(beam.contains_gold());
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn set_gold_tracking(&mut self, track_gold: bool) {
        self.track_gold = track_gold;
    }

    /// Whether gold tracking is on.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::<SimpleState>::new(4);
    /// beam.set_gold_tracking(true);
    /// assert!(beam.gold_tracking());
    /// ```
    pub fn gold_tracking(&self) -> bool {
        self.track_gold
    }

    /// Starts the beam afresh from `states` (at most [`max_size`](Self::max_size) of them):
    /// slot `i` gets beam index `i`, the history becomes the one row 0 of the states'
    /// parent beam indices (padded with -1), the step count becomes 0, and with gold
    /// tracking off every state's gold bit is cleared.
    ///
    /// Fails, leaving the beam as it was, with [`BeamError::TooManyStates`] when there are
    /// more states than the max size.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let child = |parent| SimpleState { parent_beam_index: parent, ..SimpleState::default() };
    /// let mut beam = Beam::new(3);
    /// beam.init(vec![child(1138), child(42)])?;
    /// assert_eq!(beam.beam()[1].beam_index, 1);
    /// assert_eq!(beam.history(), [vec![1138, 42, -1]]);
    /// assert!(beam.init(vec![child(0); 4]).is_err());
    /// assert_eq!(beam.size(), 2);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn init(&mut self, states: Vec<T>) -> Result<(), BeamError> {
        if states.len() > self.max_size {
            return Err(BeamError::TooManyStates {
                states: states.len(),
                max_size: self.max_size,
            });
        }
        self.states = states;
        let mut parents = vec![-1; self.max_size];
        for (i, state) in self.states.iter_mut().enumerate() {
            parents[i] = state.parent_beam_index();
            state.set_beam_index(slot_i32(i));
            if !self.track_gold {
                state.set_gold(false);
            }
        }
        self.history = vec![parents];
        self.num_steps = 0;
        Ok(())
    }

    /// Advances the beam one step from `scores`, a row-major `[max_size, num_actions]`
    /// matrix of action scores for each slot (rows of empty slots are ignored).
    ///
    /// * **`max_size == 1`** (the fast path): the state takes, in place, the allowed action
    ///   with the highest score (strictly greater than the best so far, starting from
    ///   `-inf`: ties go to the lowest action, and an action scored `-inf` is never taken);
    ///   its score becomes its score plus that action's score, its beam index 0; it stays
    ///   gold only if it was gold and the action is one of the oracle's (the oracle is only
    ///   asked about gold states). No history row is kept.
    /// * **`max_size > 1`**: every allowed `(slot, action)` is a candidate scoring
    ///   `state score + scores[slot * num_actions + action]`, visited slot-major then by
    ///   action, and the best `max_size` are kept, best first, equal scores in visiting
    ///   order. When the kept set is full, a candidate scoring at least the current minimum
    ///   evicts the last kept one (among tied minima, the one visited last), so at the
    ///   boundary a later tie wins. Each kept candidate is a clone of its source state with
    ///   the action performed, its score set, its beam index its rank, and gold only when
    ///   its source is gold and the action is one of the source's oracle actions. A history
    ///   row of source slots (padded with -1) is pushed. The beam may shrink (or empty) when
    ///   actions are forbidden.
    ///
    /// The step count grows by one on success. On failure the beam is unchanged:
    /// [`BeamError::MatrixSize`] when `scores.len() != max_size * num_actions`;
    /// [`BeamError::NanScore`] for a NaN anywhere in the row (`max_size == 1`) or a NaN
    /// resulting score of an allowed action (`max_size > 1`);
    /// [`BeamError::NoAllowedAction`] and [`BeamError::EmptyBeam`] (`max_size == 1` only).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, a| a != 1, // action 1 is forbidden
    ///     |_: &SimpleState| false,
    ///     |s: &mut SimpleState, a| s.actions.push(a),
    ///     |_: &SimpleState| vec![0],
    /// );
    /// // Beam of 1: the allowed argmax.
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![SimpleState::with_score(3.0)])?;
    /// beam.advance_from_prediction(&fns, &[30.0, 99.0, 40.0, 10.0], 4)?;
    /// assert_eq!((beam.beam()[0].actions.clone(), beam.beam()[0].score), (vec![2], 43.0));
    /// // Beam of 4 from one state: three allowed successors, so it shrinks to 3.
    /// let mut beam = Beam::new(4);
    /// beam.init(vec![SimpleState::with_score(4.0)])?;
    /// let mut scores = vec![0.0; 16];
    /// scores[..4].copy_from_slice(&[10.0, 1000.0, 40.0, 30.0]);
    /// beam.advance_from_prediction(&fns, &scores, 4)?;
    /// let actions: Vec<_> = beam.beam().iter().map(|s| s.actions[0]).collect();
    /// assert_eq!(actions, [2, 3, 0]);
    /// assert_eq!(beam.history()[1], [0, 0, 0, -1]);
    /// // A NaN fails and leaves the beam alone.
    /// scores[0] = f32::NAN;
    /// assert!(beam.advance_from_prediction(&fns, &scores, 4).is_err());
    /// assert_eq!(beam.num_steps(), 1);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn advance_from_prediction<F>(
        &mut self,
        f: &F,
        scores: &[f32],
        num_actions: usize,
    ) -> Result<(), BeamError>
    where
        F: BeamFunctions<T> + ?Sized,
    {
        if self.max_size.checked_mul(num_actions) != Some(scores.len()) {
            return Err(BeamError::MatrixSize {
                len: scores.len(),
                max_size: self.max_size,
                num_actions,
            });
        }
        if self.max_size == 1 {
            self.fast_advance(f, scores)?;
        } else {
            self.beam_advance(f, scores, num_actions)?;
        }
        self.num_steps += 1;
        Ok(())
    }

    /// The `max_size == 1` path of [`advance_from_prediction`](Self::advance_from_prediction);
    /// `scores` is the one row.
    fn fast_advance<F>(&mut self, f: &F, scores: &[f32]) -> Result<(), BeamError>
    where
        F: BeamFunctions<T> + ?Sized,
    {
        if self.states.is_empty() {
            return Err(BeamError::EmptyBeam);
        }
        let state = &self.states[0];
        let mut best: Option<(usize, f32)> = None;
        for (action, &score) in scores.iter().enumerate() {
            if score.is_nan() {
                return Err(BeamError::NanScore { slot: 0, action });
            }
            let best_score = best.map_or(f32::NEG_INFINITY, |(_, s)| s);
            if f.is_allowed(state, action) && score > best_score {
                best = Some((action, score));
            }
        }
        let Some((action, best_score)) = best else {
            return Err(BeamError::NoAllowedAction {
                num_actions: scores.len(),
            });
        };
        self.ensure_initialized();
        let track_gold = self.track_gold;
        let state = &mut self.states[0];
        let gold = track_gold && state.is_gold() && f.oracle(state).contains(&action);
        f.perform(state, action);
        // As the reference: the score after the action is performed, plus the action's.
        state.set_score(state.score() + best_score);
        state.set_beam_index(0);
        state.set_gold(gold);
        Ok(())
    }

    /// The `max_size > 1` path of [`advance_from_prediction`](Self::advance_from_prediction).
    ///
    /// A bounded heap whose top is the worst kept candidate reproduces the reference's
    /// ordered multimap exactly (same kept set, same order) in `O(n log max_size)` for `n`
    /// allowed candidates; most candidates of a large matrix are rejected in `O(1)` by the
    /// threshold test.
    fn beam_advance<F>(
        &mut self,
        f: &F,
        scores: &[f32],
        num_actions: usize,
    ) -> Result<(), BeamError>
    where
        F: BeamFunctions<T> + ?Sized,
    {
        let mut kept: BinaryHeap<Candidate> = BinaryHeap::with_capacity(self.max_size + 1);
        for (slot, state) in self.states.iter().enumerate() {
            let old = state.score();
            let row = &scores[slot * num_actions..(slot + 1) * num_actions];
            for (action, &delta) in row.iter().enumerate() {
                if !f.is_allowed(state, action) {
                    continue;
                }
                let score = old + delta;
                if score.is_nan() {
                    return Err(BeamError::NanScore { slot, action });
                }
                if self.max_size == 0 {
                    continue;
                }
                if kept.len() == self.max_size {
                    // The threshold is the minimum kept score; a candidate below it is
                    // dropped, one at or above it evicts the worst kept candidate.
                    match kept.peek() {
                        Some(worst) if score < worst.score => continue,
                        _ => {
                            kept.pop();
                        }
                    }
                }
                kept.push(Candidate {
                    score,
                    seq: slot * num_actions + action,
                    slot,
                    action,
                });
            }
        }
        let kept = kept.into_sorted_vec(); // ascending `Ord`: best first.

        self.ensure_initialized();
        let mut sources = vec![-1; self.max_size];
        let mut next = Vec::with_capacity(self.max_size);
        for (rank, c) in kept.iter().enumerate() {
            let source = &self.states[c.slot];
            let gold = self.track_gold && source.is_gold() && f.oracle(source).contains(&c.action);
            let mut state = source.clone();
            f.perform(&mut state, c.action);
            state.set_score(c.score);
            state.set_beam_index(slot_i32(rank));
            state.set_gold(gold);
            sources[rank] = slot_i32(c.slot);
            next.push(state);
        }
        self.states = next;
        self.history.push(sources);
        Ok(())
    }

    /// Advances every state that is not final along the oracle, in place: it takes its
    /// first oracle action, its score becomes 0.0 and its beam index stays its slot (final
    /// states are left alone). With `max_size > 1` an identity history row (`0, 1, …`,
    /// padded with -1) is pushed. The step count grows by one, even when every state is
    /// final.
    ///
    /// Fails, leaving the beam unchanged, with [`BeamError::EmptyOracle`] when the oracle
    /// returns no action for a state that is not final (the reference CHECK-failed).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| true,
    ///     |_: &SimpleState| false,
    ///     |s: &mut SimpleState, a| s.actions.push(a),
    ///     |s: &SimpleState| vec![s.beam_index as usize % 3],
    /// );
    /// let mut beam = Beam::new(4);
    /// beam.init(vec![SimpleState::with_score(10.0); 3])?;
    /// beam.advance_from_oracle(&fns)?;
    /// let actions: Vec<_> = beam.beam().iter().map(|s| s.actions[0]).collect();
    /// assert_eq!(actions, [0, 1, 2]);
    /// assert!(beam.beam().iter().all(|s| s.score == 0.0));
    /// assert_eq!(beam.history()[1], [0, 1, 2, -1]);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn advance_from_oracle<F>(&mut self, f: &F) -> Result<(), BeamError>
    where
        F: BeamFunctions<T> + ?Sized,
    {
        let mut actions = Vec::with_capacity(self.states.len());
        for (slot, state) in self.states.iter().enumerate() {
            if f.is_final(state) {
                actions.push(None);
                continue;
            }
            match f.oracle(state).first() {
                Some(&action) => actions.push(Some(action)),
                None => return Err(BeamError::EmptyOracle { slot }),
            }
        }
        self.ensure_initialized();
        for (slot, (state, action)) in self.states.iter_mut().zip(actions).enumerate() {
            if let Some(action) = action {
                f.perform(state, action);
                state.set_score(0.0);
                state.set_beam_index(slot_i32(slot));
            }
        }
        if self.max_size > 1 {
            let mut row = vec![-1; self.max_size];
            for (slot, entry) in row.iter_mut().enumerate().take(self.states.len()) {
                *entry = slot_i32(slot);
            }
            self.history.push(row);
        }
        self.num_steps += 1;
        Ok(())
    }

    /// Whether every state is final (true for an empty beam).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| true,
    ///     |s: &SimpleState| s.score > 0.0,
    ///     |_: &mut SimpleState, _| {},
    ///     |_: &SimpleState| vec![0],
    /// );
    /// let mut beam = Beam::new(2);
    /// beam.init(vec![SimpleState::with_score(1.0), SimpleState::with_score(0.0)])?;
    /// assert!(!beam.is_terminal(&fns));
    /// beam.init(vec![SimpleState::with_score(1.0); 2])?;
    /// assert!(beam.is_terminal(&fns));
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn is_terminal<F>(&self, f: &F) -> bool
    where
        F: BeamFunctions<T> + ?Sized,
    {
        self.states.iter().all(|s| f.is_final(s))
    }

    /// Drops the states, the history and the step count (the max size and gold tracking
    /// stay).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(8);
    /// beam.init(vec![SimpleState::with_score(1.0)])?;
    /// beam.reset();
    /// assert_eq!((beam.size(), beam.num_steps(), beam.history().len()), (0, 0, 0));
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn reset(&mut self) {
        self.states.clear();
        self.history.clear();
        self.num_steps = 0;
    }

    /// Sets the max size and [`reset`](Self::reset)s the beam.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(8);
    /// beam.init(vec![SimpleState::with_score(1.0)])?;
    /// beam.set_max_size(4);
    /// assert_eq!((beam.max_size(), beam.size(), beam.history().len()), (4, 0, 0));
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.reset();
    }

    /// The slot, at step `step`, of the ancestor of the state now in slot `current`: the
    /// history rows are walked back from the last one to row `step`, so step 0 gives the
    /// initial state's parent beam index (row 0) and step `k >= 1` the ancestor's slot after
    /// step `k - 1`. With `max_size == 1` the answer is always 0.
    ///
    /// Returns -1 when `step < 0` or `step > num_steps()`, when `current` is outside
    /// `[0, max_size)`, when (`max_size > 1`) slot `current` is empty, and when the walk
    /// reaches a -1 (an ancestor without a parent, asked for at step 0; the reference
    /// CHECK-failed there).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| true,
    ///     |_: &SimpleState| false,
    ///     |s: &mut SimpleState, a| s.actions.push(a),
    ///     |_: &SimpleState| vec![0],
    /// );
    /// let child = |parent, score| SimpleState {
    ///     parent_beam_index: parent,
    ///     score,
    ///     ..SimpleState::default()
    /// };
    /// let mut beam = Beam::new(4);
    /// beam.init(vec![child(1138, 5.0), child(42, 7.0)])?;
    /// beam.advance_from_prediction(&fns, &[3.0, 1.0, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0], 2)?;
    /// assert_eq!(beam.history()[1], [1, 0, 1, 0]);
    /// assert_eq!(beam.find_previous_index(0, 1), 1);
    /// assert_eq!(beam.find_previous_index(0, 0), 42);
    /// assert_eq!(beam.find_previous_index(1, 0), 1138);
    /// assert_eq!(beam.find_previous_index(0, 2), -1);
    /// assert_eq!(beam.find_previous_index(4, 0), -1);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn find_previous_index(&self, current: i32, step: i32) -> i32 {
        if self.max_size > 1 {
            debug_assert!(
                self.history.len() == self.num_steps + 1
                    || (self.history.is_empty() && self.num_steps == 0),
                "beam history has {} rows after {} steps",
                self.history.len(),
                self.num_steps
            );
        }
        let (Ok(step), Ok(current)) = (usize::try_from(step), usize::try_from(current)) else {
            return -1;
        };
        if step > self.num_steps || current >= self.max_size {
            return -1;
        }
        if self.max_size == 1 {
            return 0;
        }
        if self.history.len() != self.num_steps + 1 {
            return -1;
        }
        let mut index = current;
        for (row_index, row) in self.history.iter().enumerate().skip(step).rev() {
            let previous = row.get(index).copied().unwrap_or(-1);
            if row_index == step {
                return previous.max(-1);
            }
            match usize::try_from(previous) {
                Ok(p) => index = p,
                Err(_) => return -1,
            }
        }
        -1
    }

    /// The history rows: row 0 holds the initial states' parent beam indices, row `k` the
    /// source slot of each slot's state at step `k`, each padded with -1 to the max size.
    /// Empty before [`init`](Self::init). With `max_size == 1`, where no rows are kept, it
    /// is synthesised as `[[parent], [0], …]` with one `[0]` per step.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| true,
    ///     |_: &SimpleState| false,
    ///     |_: &mut SimpleState, _| {},
    ///     |_: &SimpleState| vec![0],
    /// );
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![SimpleState { parent_beam_index: 7, ..SimpleState::default() }])?;
    /// beam.advance_from_prediction(&fns, &[1.0, 2.0], 2)?;
    /// beam.advance_from_oracle(&fns)?;
    /// assert_eq!(beam.history(), [vec![7], vec![0], vec![0]]);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn history(&self) -> Vec<Vec<i32>> {
        if self.max_size != 1 {
            return self.history.clone();
        }
        let Some(parent) = self.history.first().and_then(|row| row.first()) else {
            return Vec::new();
        };
        let mut rows = vec![vec![*parent]];
        rows.resize(self.num_steps + 1, vec![0]);
        rows
    }

    /// Whether gold tracking is on and some state is gold.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(2);
    /// beam.set_gold_tracking(true);
    /// let gold = SimpleState { gold: true, ..SimpleState::default() };
    /// beam.init(vec![SimpleState::default(), gold])?;
    /// assert!(beam.contains_gold());
    /// beam.set_gold_tracking(false);
    /// assert!(!beam.contains_gold());
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn contains_gold(&self) -> bool {
        self.track_gold && self.states.iter().any(|s| s.is_gold())
    }

    /// The states, best first (slot `i` at index `i`).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(2);
    /// beam.init(vec![SimpleState::with_score(2.0)])?;
    /// assert_eq!(beam.beam().len(), 1);
    /// assert_eq!(beam.beam()[0].score, 2.0);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn beam(&self) -> &[T] {
        &self.states
    }

    /// The state in slot `index`, if there is one.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState, TransitionState};
    ///
    /// let mut beam = Beam::new(4);
    /// beam.init(vec![SimpleState::default(); 4])?;
    /// assert_eq!(beam.beam_state(3).map(|s| s.beam_index()), Some(3));
    /// assert!(beam.beam_state(4).is_none());
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn beam_state(&self, index: usize) -> Option<&T> {
        self.states.get(index)
    }

    /// The state in slot `index`, mutably, if there is one (for a component's bookkeeping;
    /// changing its beam index or score changes what the beam reports).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![SimpleState::default()])?;
    /// beam.beam_state_mut(0).unwrap().actions.push(5);
    /// assert_eq!(beam.beam()[0].actions, [5]);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn beam_state_mut(&mut self, index: usize) -> Option<&mut T> {
        self.states.get_mut(index)
    }

    /// The number of steps taken since [`init`](Self::init) (or [`reset`](Self::reset)).
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| false,
    ///     |_: &SimpleState| true,
    ///     |_: &mut SimpleState, _| {},
    ///     |_: &SimpleState| vec![0],
    /// );
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![SimpleState::default()])?;
    /// beam.advance_from_oracle(&fns)?; // counts even though the state is final
    /// assert!(beam.advance_from_prediction(&fns, &[1.0], 1).is_err()); // does not count
    /// assert_eq!(beam.num_steps(), 1);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn num_steps(&self) -> usize {
        self.num_steps
    }

    /// The most states the beam holds.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// assert_eq!(Beam::<SimpleState>::new(8).max_size(), 8);
    /// ```
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// The number of states the beam holds now.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, SimpleState};
    ///
    /// let mut beam = Beam::new(8);
    /// beam.init(vec![SimpleState::default(); 3])?;
    /// assert_eq!(beam.size(), 3);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn size(&self) -> usize {
        self.states.len()
    }

    /// Gives a beam that was never initialised (or was reset) the row 0 of an empty
    /// [`init`](Self::init), so that the history keeps one row per step plus row 0.
    fn ensure_initialized(&mut self) {
        if self.history.is_empty() {
            debug_assert_eq!(self.num_steps, 0);
            self.history.push(vec![-1; self.max_size]);
        }
    }
}

/// A minimal [`TransitionState`] for tests and examples: a score, a beam index, a parent
/// beam index, a gold bit and the actions performed on it (by whatever
/// [`BeamFunctions::perform`] records them).
///
/// ```
/// use kiln_dragnn::beam::{SimpleState, TransitionState};
///
/// let s = SimpleState::with_score(2.5);
/// assert_eq!((s.score(), s.beam_index(), s.parent_beam_index()), (2.5, 0, -1));
/// assert!(s.actions.is_empty() && !s.is_gold());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SimpleState {
    /// The parent's slot in the predecessor's beam (-1: none).
    pub parent_beam_index: i32,
    /// The slot in its beam.
    pub beam_index: i32,
    /// The score.
    pub score: f32,
    /// Whether the state is gold.
    pub gold: bool,
    /// The actions performed, in order.
    pub actions: Vec<usize>,
}

impl Default for SimpleState {
    /// No parent (-1), slot 0, score 0.0, not gold, no actions.
    ///
    /// ```
    /// use kiln_dragnn::beam::SimpleState;
    ///
    /// assert_eq!(SimpleState::default().parent_beam_index, -1);
    /// ```
    fn default() -> Self {
        Self {
            parent_beam_index: -1,
            beam_index: 0,
            score: 0.0,
            gold: false,
            actions: Vec::new(),
        }
    }
}

impl SimpleState {
    /// A [default](SimpleState::default) state with the given score.
    ///
    /// ```
    /// use kiln_dragnn::beam::SimpleState;
    ///
    /// assert_eq!(SimpleState::with_score(4.0).score, 4.0);
    /// ```
    pub fn with_score(score: f32) -> Self {
        Self {
            score,
            ..Self::default()
        }
    }
}

impl TransitionState for SimpleState {
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
        self.gold
    }
    fn set_gold(&mut self, gold: bool) {
        self.gold = gold;
    }
}

/// [`BeamFunctions`] from four closures, as the reference's `SetFunctions` took them:
/// `is_allowed(state, action)`, `is_final(state)`, `perform(state, action)` and
/// `oracle(state)`.
///
/// ```
/// use kiln_dragnn::beam::{BeamFunctions, FnBeamFunctions, SimpleState};
///
/// let fns = FnBeamFunctions::new(
///     |_: &SimpleState, a| a < 3,
///     |s: &SimpleState| s.actions.len() >= 2,
///     |s: &mut SimpleState, a| s.actions.push(a),
///     |_: &SimpleState| vec![2, 0],
/// );
/// let mut s = SimpleState::default();
/// fns.perform(&mut s, 1);
/// assert!(fns.is_allowed(&s, 2) && !fns.is_allowed(&s, 3) && !fns.is_final(&s));
/// assert_eq!(fns.oracle(&s), [2, 0]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FnBeamFunctions<A, Fi, P, O> {
    is_allowed: A,
    is_final: Fi,
    perform: P,
    oracle: O,
}

impl<A, Fi, P, O> FnBeamFunctions<A, Fi, P, O> {
    /// Wraps the four closures.
    ///
    /// ```
    /// use kiln_dragnn::beam::{Beam, FnBeamFunctions, SimpleState};
    ///
    /// let fns = FnBeamFunctions::new(
    ///     |_: &SimpleState, _| true,
    ///     |_: &SimpleState| false,
    ///     |s: &mut SimpleState, a| s.actions.push(a),
    ///     |_: &SimpleState| vec![1],
    /// );
    /// let mut beam = Beam::new(1);
    /// beam.init(vec![SimpleState::default()])?;
    /// beam.advance_from_oracle(&fns)?;
    /// assert_eq!(beam.beam()[0].actions, [1]);
    /// # Ok::<(), kiln_dragnn::beam::BeamError>(())
    /// ```
    pub fn new<T>(is_allowed: A, is_final: Fi, perform: P, oracle: O) -> Self
    where
        A: Fn(&T, usize) -> bool,
        Fi: Fn(&T) -> bool,
        P: Fn(&mut T, usize),
        O: Fn(&T) -> Vec<usize>,
    {
        Self {
            is_allowed,
            is_final,
            perform,
            oracle,
        }
    }
}

impl<T, A, Fi, P, O> BeamFunctions<T> for FnBeamFunctions<A, Fi, P, O>
where
    A: Fn(&T, usize) -> bool,
    Fi: Fn(&T) -> bool,
    P: Fn(&mut T, usize),
    O: Fn(&T) -> Vec<usize>,
{
    fn is_allowed(&self, state: &T, action: usize) -> bool {
        (self.is_allowed)(state, action)
    }
    fn is_final(&self, state: &T) -> bool {
        (self.is_final)(state)
    }
    fn perform(&self, state: &mut T, action: usize) {
        (self.perform)(state, action)
    }
    fn oracle(&self, state: &T) -> Vec<usize> {
        (self.oracle)(state)
    }
}

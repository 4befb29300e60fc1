//! Tests of [`kiln_dragnn::beam::Beam`]: every `beam_test` contract check of the reference's
//! section (f) and the worked examples of section (b) (argmax, gold tracking, shrinking,
//! interleaving, eviction, NaN, oracle advance, terminality, sizes, `find_previous_index`,
//! reset), the tie-at-the-boundary eviction rule, and a property test of
//! `advance_from_prediction` against a brute-force model of the reference's rule.
//!
//! Depends on `kiln_dragnn::beam` and `proptest`.

use kiln_dragnn::beam::{Beam, BeamError, BeamFunctions, TransitionState};
use proptest::prelude::*;
use std::cell::{Cell, RefCell};

// ---------------------------------------------------------------------------------------------
// A test transition state and transition system.
// ---------------------------------------------------------------------------------------------

/// A state that remembers where it came from: the initial state it descends from (`id`), the
/// actions performed, and every beam index it was given (`trail`).
#[derive(Clone, Debug, PartialEq)]
struct TState {
    id: usize,
    parent: i32,
    beam_index: i32,
    score: f32,
    gold: bool,
    actions: Vec<usize>,
    trail: Vec<i32>,
}

impl TState {
    fn new(id: usize, score: f32) -> Self {
        Self {
            id,
            parent: -1,
            beam_index: -7,
            score,
            gold: false,
            actions: Vec::new(),
            trail: Vec::new(),
        }
    }

    fn gold(id: usize, score: f32) -> Self {
        Self {
            gold: true,
            ..Self::new(id, score)
        }
    }

    fn with_parent(id: usize, score: f32, parent: i32) -> Self {
        Self {
            parent,
            ..Self::new(id, score)
        }
    }

    /// Everything, with the score as bits (so NaN compares equal to itself).
    fn snapshot(&self) -> (usize, i32, i32, u32, bool, Vec<usize>, Vec<i32>) {
        (
            self.id,
            self.parent,
            self.beam_index,
            self.score.to_bits(),
            self.gold,
            self.actions.clone(),
            self.trail.clone(),
        )
    }
}

impl TransitionState for TState {
    fn parent_beam_index(&self) -> i32 {
        self.parent
    }
    fn beam_index(&self) -> i32 {
        self.beam_index
    }
    fn set_beam_index(&mut self, index: i32) {
        self.beam_index = index;
        self.trail.push(index);
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

type AllowedFn = Box<dyn Fn(&TState, usize) -> bool>;
type FinalFn = Box<dyn Fn(&TState) -> bool>;
type OracleFn = Box<dyn Fn(&TState) -> Vec<usize>>;

/// The transition system: `perform` records the action; the rest are replaceable closures,
/// and oracle and permission calls are counted.
struct Fns {
    allowed: AllowedFn,
    is_final: FinalFn,
    oracle: OracleFn,
    /// `(id, number of actions taken, gold)` of each state the oracle was asked about.
    oracle_calls: RefCell<Vec<(usize, usize, bool)>>,
    allowed_calls: Cell<usize>,
}

impl Fns {
    /// Every action allowed, nothing final, the oracle says `[0]`.
    fn null() -> Self {
        Self {
            allowed: Box::new(|_, _| true),
            is_final: Box::new(|_| false),
            oracle: Box::new(|_| vec![0]),
            oracle_calls: RefCell::new(Vec::new()),
            allowed_calls: Cell::new(0),
        }
    }

    fn allowed(self, f: impl Fn(&TState, usize) -> bool + 'static) -> Self {
        Self {
            allowed: Box::new(f),
            ..self
        }
    }

    fn finality(self, f: impl Fn(&TState) -> bool + 'static) -> Self {
        Self {
            is_final: Box::new(f),
            ..self
        }
    }

    fn oracle(self, f: impl Fn(&TState) -> Vec<usize> + 'static) -> Self {
        Self {
            oracle: Box::new(f),
            ..self
        }
    }

    fn oracle_calls(&self) -> Vec<(usize, usize, bool)> {
        self.oracle_calls.borrow().clone()
    }
}

impl BeamFunctions<TState> for Fns {
    fn is_allowed(&self, state: &TState, action: usize) -> bool {
        self.allowed_calls.set(self.allowed_calls.get() + 1);
        (self.allowed)(state, action)
    }
    fn is_final(&self, state: &TState) -> bool {
        (self.is_final)(state)
    }
    fn perform(&self, state: &mut TState, action: usize) {
        state.actions.push(action);
    }
    fn oracle(&self, state: &TState) -> Vec<usize> {
        self.oracle_calls
            .borrow_mut()
            .push((state.id, state.actions.len(), state.gold));
        (self.oracle)(state)
    }
}

/// A beam of `max_size` initialised with `states`.
fn beam_with(max_size: usize, states: Vec<TState>) -> Beam<TState> {
    let mut beam = Beam::new(max_size);
    beam.init(states).unwrap();
    beam
}

/// `rows` of scores, padded with zeros to `max_size` rows of `num_actions`.
fn matrix(max_size: usize, num_actions: usize, rows: &[&[f32]]) -> Vec<f32> {
    let mut m = vec![0.0; max_size * num_actions];
    for (i, row) in rows.iter().enumerate() {
        m[i * num_actions..(i + 1) * num_actions].copy_from_slice(row);
    }
    m
}

fn last_actions(beam: &Beam<TState>) -> Vec<usize> {
    beam.beam()
        .iter()
        .map(|s| *s.actions.last().unwrap())
        .collect()
}

fn ids(beam: &Beam<TState>) -> Vec<usize> {
    beam.beam().iter().map(|s| s.id).collect()
}

fn scores(beam: &Beam<TState>) -> Vec<f32> {
    beam.beam().iter().map(|s| s.score).collect()
}

fn golds(beam: &Beam<TState>) -> Vec<bool> {
    beam.beam().iter().map(|s| s.gold).collect()
}

type BeamSnapshot = (
    Vec<(usize, i32, i32, u32, bool, Vec<usize>, Vec<i32>)>,
    Vec<Vec<i32>>,
    usize,
    usize,
);

fn snapshot(beam: &Beam<TState>) -> BeamSnapshot {
    (
        beam.beam().iter().map(TState::snapshot).collect(),
        beam.history(),
        beam.num_steps(),
        beam.max_size(),
    )
}

fn assert_beam_indices_are_slots(beam: &Beam<TState>) {
    for (i, s) in beam.beam().iter().enumerate() {
        assert_eq!(s.beam_index, i as i32);
    }
}

/// The reference's 8-state matrix: row `i` is `{30+i, 20+i, 40+i, 10+i}`.
fn eight_rows() -> Vec<f32> {
    (0..8)
        .flat_map(|i| {
            let i = i as f32;
            [30.0 + i, 20.0 + i, 40.0 + i, 10.0 + i]
        })
        .collect()
}

const OLD_SCORES: [f32; 8] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8];

// ---------------------------------------------------------------------------------------------
// Beam of max size 1: the fast path.
// ---------------------------------------------------------------------------------------------

#[test]
fn single_beam_nan_fails_and_leaves_the_beam_unchanged() {
    let fns = Fns::null();
    let mut beam = beam_with(1, vec![TState::new(0, 3.0)]);
    let before = snapshot(&beam);
    let err = beam
        .advance_from_prediction(&fns, &[1.0, f32::NAN, 2.0, 3.0], 4)
        .unwrap_err();
    assert_eq!(err, BeamError::NanScore { slot: 0, action: 1 });
    assert!(err.to_string().contains("NaN"));
    assert_eq!(snapshot(&beam), before);
    assert_eq!(beam.num_steps(), 0);
}

#[test]
fn single_beam_nan_in_a_forbidden_action_still_fails() {
    // The fast path rejects a NaN anywhere in its row, allowed or not.
    let fns = Fns::null().allowed(|_, a| a != 1);
    let mut beam = beam_with(1, vec![TState::new(0, 3.0)]);
    let err = beam
        .advance_from_prediction(&fns, &[1.0, f32::NAN, 2.0, 3.0], 4)
        .unwrap_err();
    assert_eq!(err, BeamError::NanScore { slot: 0, action: 1 });
}

#[test]
fn single_beam_with_no_allowed_action_fails() {
    let fns = Fns::null().allowed(|_, _| false);
    let mut beam = beam_with(1, vec![TState::new(0, 3.0)]);
    let before = snapshot(&beam);
    let err = beam
        .advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap_err();
    assert_eq!(err, BeamError::NoAllowedAction { num_actions: 4 });
    assert!(err.to_string().contains("No action was chosen"));
    assert_eq!(snapshot(&beam), before);
}

#[test]
fn single_beam_takes_the_allowed_argmax() {
    let fns = Fns::null();
    let mut beam = beam_with(1, vec![TState::new(0, 3.0)]);
    beam.advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap();
    assert_eq!(beam.size(), 1);
    assert_eq!(beam.beam()[0].actions, [2]);
    assert_eq!(beam.beam()[0].score, 3.0 + 40.0);
    assert_eq!(beam.beam()[0].beam_index, 0);
    assert!(std::ptr::eq(beam.beam_state(0).unwrap(), &beam.beam()[0]));
    let history = beam.history();
    assert_eq!(history[1][0], 0);
    assert_eq!(history, [vec![-1], vec![0]]);
    assert_eq!(beam.num_steps(), 1);
    // Tracking is off: the oracle was never asked.
    assert!(fns.oracle_calls().is_empty());
}

#[test]
fn single_beam_argmax_ties_go_to_the_lowest_action_and_forbidden_actions_are_skipped() {
    let fns = Fns::null().allowed(|_, a| a != 0);
    let mut beam = beam_with(1, vec![TState::new(0, 0.0)]);
    beam.advance_from_prediction(&fns, &[99.0, 5.0, 7.0, 7.0], 4)
        .unwrap();
    assert_eq!(beam.beam()[0].actions, [2]);
    assert_eq!(beam.beam()[0].score, 7.0);
}

#[test]
fn single_beam_never_takes_an_action_scored_minus_infinity() {
    let fns = Fns::null();
    let mut beam = beam_with(1, vec![TState::new(0, 0.0)]);
    let err = beam
        .advance_from_prediction(&fns, &[f32::NEG_INFINITY; 3], 3)
        .unwrap_err();
    assert_eq!(err, BeamError::NoAllowedAction { num_actions: 3 });
    beam.advance_from_prediction(&fns, &[f32::NEG_INFINITY, -1e30, f32::NEG_INFINITY], 3)
        .unwrap();
    assert_eq!(beam.beam()[0].actions, [1]);
}

#[test]
fn single_beam_that_is_empty_cannot_advance_from_a_prediction() {
    let fns = Fns::null();
    let mut beam = beam_with(1, vec![]);
    let err = beam
        .advance_from_prediction(&fns, &[1.0, 2.0], 2)
        .unwrap_err();
    assert_eq!(err, BeamError::EmptyBeam);
    assert_eq!(beam.num_steps(), 0);
}

// ---------------------------------------------------------------------------------------------
// Gold tracking.
// ---------------------------------------------------------------------------------------------

#[test]
fn tracking_off_at_init_clears_gold() {
    let mut beam = Beam::new(1);
    beam.set_gold_tracking(false); // the default
    beam.init(vec![TState::gold(0, 3.0)]).unwrap();
    assert!(!beam.contains_gold());
    assert!(!beam.beam()[0].gold);

    let mut beam = Beam::new(8);
    beam.init(vec![TState::gold(0, 3.0), TState::gold(1, 3.0)])
        .unwrap();
    assert_eq!(golds(&beam), [false, false]);
}

#[test]
fn single_beam_stays_gold_when_the_action_is_an_oracle_action() {
    let fns = Fns::null().oracle(|_| vec![1, 2]);
    let mut beam = Beam::new(1);
    beam.set_gold_tracking(true);
    beam.init(vec![TState::gold(0, 3.0)]).unwrap();
    beam.advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap();
    assert_eq!(beam.size(), 1);
    assert_eq!(beam.beam()[0].actions, [2]);
    assert_eq!(beam.beam()[0].score, 43.0);
    assert_eq!(beam.beam()[0].beam_index, 0);
    assert_eq!(beam.history()[1][0], 0);
    assert!(beam.contains_gold());
    // Asked once, about the state before it took the action.
    assert_eq!(fns.oracle_calls(), [(0, 0, true)]);
}

#[test]
fn single_beam_falls_off_gold_when_the_action_is_not_an_oracle_action() {
    let fns = Fns::null().oracle(|_| vec![0, 1]);
    let mut beam = Beam::new(1);
    beam.set_gold_tracking(true);
    beam.init(vec![TState::gold(0, 3.0)]).unwrap();
    beam.advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap();
    assert_eq!(beam.beam()[0].actions, [2]);
    assert_eq!(beam.beam()[0].score, 43.0);
    assert_eq!(beam.history()[1][0], 0);
    assert!(!beam.contains_gold());
    assert_eq!(fns.oracle_calls().len(), 1);
}

#[test]
fn a_non_gold_state_never_queries_the_oracle() {
    let fns = Fns::null().oracle(|_| vec![0, 1]);
    let mut beam = Beam::new(1);
    beam.set_gold_tracking(true);
    beam.init(vec![TState::gold(0, 3.0)]).unwrap();
    beam.advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap();
    assert!(!beam.contains_gold());
    beam.advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap();
    // Still exactly the one call, from the first (gold) step.
    assert_eq!(fns.oracle_calls(), [(0, 0, true)]);

    // The same with a larger beam: only gold sources of kept candidates are asked.
    let fns = Fns::null().oracle(|_| vec![0]);
    let mut beam = Beam::new(4);
    beam.set_gold_tracking(true);
    beam.init(vec![TState::new(0, 0.0), TState::new(1, 0.0)])
        .unwrap();
    beam.advance_from_prediction(&fns, &[1.0; 8], 2).unwrap();
    assert!(fns.oracle_calls().is_empty());
}

#[test]
fn multi_state_beam_gold_propagates_only_from_the_gold_source_through_an_oracle_action() {
    // Every state is gold, but the oracle only names actions for state 4.
    let fns = Fns::null().oracle(|s| if s.id == 4 { vec![0, 2] } else { vec![] });
    let m = eight_rows();
    let states = (0..8).map(|i| TState::gold(i, OLD_SCORES[i])).collect();
    let mut beam = Beam::new(8);
    beam.set_gold_tracking(true);
    beam.init(states).unwrap();
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(beam.size(), 8);
    assert_eq!(last_actions(&beam), [2; 8]);
    assert_eq!(ids(&beam), [7, 6, 5, 4, 3, 2, 1, 0]);
    for (rank, s) in beam.beam().iter().enumerate() {
        let src = 7 - rank;
        assert_eq!(s.score, OLD_SCORES[src] + m[src * 4 + 2]);
        assert_eq!(s.gold, rank == 3, "rank {rank}");
    }
    assert!(beam.contains_gold());
    // Each kept candidate's (gold) source was asked once; state 4 exactly once.
    let calls = fns.oracle_calls();
    assert_eq!(calls.len(), 8);
    assert_eq!(calls.iter().filter(|c| c.0 == 4).count(), 1);
}

#[test]
fn multi_state_beam_with_two_successors_of_the_one_gold_state() {
    let fns = Fns::null().oracle(|_| vec![0, 2]);
    let mut m = eight_rows();
    m[16] = 54.0; // state 4, action 0: the best candidate.
    let states = (0..8)
        .map(|i| {
            if i == 4 {
                TState::gold(i, OLD_SCORES[i])
            } else {
                TState::new(i, OLD_SCORES[i])
            }
        })
        .collect();
    let mut beam = Beam::new(8);
    beam.set_gold_tracking(true);
    beam.init(states).unwrap();
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(last_actions(&beam), [0, 2, 2, 2, 2, 2, 2, 2]);
    assert_eq!(ids(&beam), [4, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(beam.beam()[0].score, OLD_SCORES[4] + 54.0);
    assert_eq!(beam.beam()[4].score, OLD_SCORES[4] + 44.0);
    assert_eq!(
        golds(&beam),
        [true, false, false, false, true, false, false, false]
    );
    assert!(beam.contains_gold());
    // The gold source is asked once per kept successor; no other state is asked.
    assert_eq!(fns.oracle_calls(), [(4, 0, true), (4, 0, true)]);
    assert_eq!(beam.history()[1], [4, 7, 6, 5, 4, 3, 2, 1]);
}

#[test]
fn contains_gold_is_false_when_tracking_is_off() {
    let mut beam = Beam::new(2);
    beam.set_gold_tracking(true);
    beam.init(vec![TState::gold(0, 0.0)]).unwrap();
    assert!(beam.contains_gold());
    beam.set_gold_tracking(false);
    assert!(!beam.contains_gold());
}

// ---------------------------------------------------------------------------------------------
// Beams of max size > 1.
// ---------------------------------------------------------------------------------------------

#[test]
fn beam_of_8_from_one_state_with_4_successors() {
    let fns = Fns::null();
    let m = matrix(8, 4, &[&[30.0, 20.0, 40.0, 10.0]]);
    let mut beam = beam_with(8, vec![TState::new(0, 4.0)]);
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(beam.size(), 4);
    assert_eq!(last_actions(&beam), [2, 0, 1, 3]);
    assert_eq!(scores(&beam), [44.0, 34.0, 24.0, 14.0]);
    assert_beam_indices_are_slots(&beam);
    assert_eq!(beam.history()[1], [0, 0, 0, 0, -1, -1, -1, -1]);
    assert_eq!(beam.num_steps(), 1);
}

#[test]
fn two_states_interleave_by_score() {
    let fns = Fns::null();
    let rows: [&[f32]; 2] = [&[30.0, 20.0, 40.0, 10.0], &[31.0, 21.0, 41.0, 11.0]];
    let m = matrix(8, 4, &rows);
    let mut beam = beam_with(8, vec![TState::new(0, 5.0), TState::new(1, 7.0)]);
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(beam.size(), 8);
    assert_eq!(last_actions(&beam), [2, 2, 0, 0, 1, 1, 3, 3]);
    assert_eq!(
        scores(&beam),
        [
            7.0 + m[6],
            5.0 + m[2],
            7.0 + m[4],
            5.0 + m[0],
            7.0 + m[5],
            5.0 + m[1],
            7.0 + m[7],
            5.0 + m[3]
        ]
    );
    assert_beam_indices_are_slots(&beam);
    assert_eq!(beam.history()[1], [1, 0, 1, 0, 1, 0, 1, 0]);
}

#[test]
fn nan_in_the_multi_state_matrix_fails_and_leaves_the_beam_unchanged() {
    let fns = Fns::null();
    let rows: [&[f32]; 2] = [&[30.0, 20.0, 40.0, 10.0], &[31.0, 21.0, f32::NAN, 11.0]];
    let m = matrix(8, 4, &rows);
    let mut beam = beam_with(8, vec![TState::new(0, 5.0), TState::new(1, 7.0)]);
    let before = snapshot(&beam);
    let err = beam.advance_from_prediction(&fns, &m, 4).unwrap_err();
    assert_eq!(err, BeamError::NanScore { slot: 1, action: 2 });
    assert_eq!(snapshot(&beam), before);
    // A state score of +inf plus an action score of -inf is a NaN too.
    let mut beam = beam_with(2, vec![TState::new(0, f32::INFINITY)]);
    let err = beam
        .advance_from_prediction(&fns, &[1.0, f32::NEG_INFINITY, 0.0, 0.0], 2)
        .unwrap_err();
    assert_eq!(err, BeamError::NanScore { slot: 0, action: 1 });
}

#[test]
fn nan_outside_the_candidates_is_ignored_by_a_multi_state_beam() {
    // Decision (the reference checks resulting scores of allowed actions only): a NaN in a
    // forbidden action or in the row of an empty slot does not fail.
    let fns = Fns::null().allowed(|_, a| a != 1);
    let rows: [&[f32]; 3] = [&[1.0, f32::NAN], &[2.0, 3.0], &[f32::NAN, f32::NAN]];
    let m = matrix(3, 2, &rows);
    let mut beam = beam_with(3, vec![TState::new(0, 0.0), TState::new(1, 0.0)]);
    beam.advance_from_prediction(&fns, &m, 2).unwrap();
    assert_eq!(ids(&beam), [1, 0]);
    assert_eq!(beam.history()[1], [1, 0, -1]);
}

#[test]
fn a_full_beam_keeps_the_top_8() {
    let fns = Fns::null();
    let m = eight_rows();
    let states = (0..8).map(|i| TState::new(i, OLD_SCORES[i])).collect();
    let mut beam = beam_with(8, states);
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(beam.size(), 8);
    assert_eq!(last_actions(&beam), [2; 8]);
    for (rank, s) in beam.beam().iter().enumerate() {
        let src = 7 - rank;
        assert_eq!(s.score, OLD_SCORES[src] + m[src * 4 + 2]);
    }
    assert_beam_indices_are_slots(&beam);
    assert_eq!(beam.history()[1], [7, 6, 5, 4, 3, 2, 1, 0]);
}

#[test]
fn forbidden_actions_shrink_the_beam() {
    let fns = Fns::null().allowed(|s, a| {
        assert_eq!(s.id, 0);
        a != 1
    });
    let m = matrix(4, 4, &[&[10.0, 1000.0, 40.0, 30.0]]);
    let mut beam = beam_with(4, vec![TState::new(0, 4.0)]);
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    // Each action of the one state was asked about exactly once.
    assert_eq!(fns.allowed_calls.get(), 4);
    assert_eq!(beam.size(), 3);
    assert_eq!(last_actions(&beam), [2, 3, 0]);
    assert_eq!(scores(&beam), [44.0, 34.0, 14.0]);
    assert_beam_indices_are_slots(&beam);
    assert_eq!(beam.history()[1], [0, 0, 0, -1]);
}

#[test]
fn with_every_action_forbidden_a_multi_state_beam_empties() {
    let fns = Fns::null().allowed(|_, _| false);
    let mut beam = beam_with(2, vec![TState::new(0, 0.0), TState::new(1, 0.0)]);
    beam.advance_from_prediction(&fns, &[1.0; 4], 2).unwrap();
    assert_eq!(beam.size(), 0);
    assert_eq!(beam.history()[1], [-1, -1]);
    assert_eq!(beam.num_steps(), 1);
    assert!(beam.is_terminal(&fns));
}

#[test]
fn at_the_boundary_a_later_tie_evicts_the_earlier_one() {
    // The reference's bounded multimap: once full, a candidate scoring at least the minimum
    // evicts the last kept entry, so among candidates tied at the boundary the latest wins
    // the last place (not what "stable sort, then truncate" would keep).
    let fns = Fns::null();
    let mut beam = beam_with(2, vec![TState::new(0, 0.0)]);
    beam.advance_from_prediction(&fns, &[5.0, 3.0, 3.0, 0.0, 0.0, 0.0], 3)
        .unwrap();
    assert_eq!(last_actions(&beam), [0, 2]);

    let mut beam = beam_with(3, vec![TState::new(0, 0.0)]);
    let m = matrix(3, 4, &[&[3.0, 5.0, 3.0, 3.0]]);
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(last_actions(&beam), [1, 0, 3]);

    // Ties above the boundary keep their visiting order; a lower score evicts nothing.
    let mut beam = beam_with(3, vec![TState::new(0, 0.0), TState::new(1, 0.0)]);
    let rows: [&[f32]; 2] = [&[4.0, 4.0, 1.0], &[4.0, 2.0, 1.0]];
    beam.advance_from_prediction(&fns, &matrix(3, 3, &rows), 3)
        .unwrap();
    assert_eq!(ids(&beam), [0, 0, 1]);
    assert_eq!(last_actions(&beam), [0, 1, 0]);

    // -0.0 and 0.0 are the same score.
    let mut beam = beam_with(2, vec![TState::new(0, 0.0)]);
    beam.advance_from_prediction(&fns, &[1.0, 0.0, -0.0, 0.0, 0.0, 0.0], 3)
        .unwrap();
    assert_eq!(last_actions(&beam), [0, 2]);
}

#[test]
fn infinite_scores_are_ordinary_candidates_in_a_multi_state_beam() {
    let fns = Fns::null();
    let mut beam = beam_with(3, vec![TState::new(0, 0.0)]);
    let inf = f32::INFINITY;
    let m = matrix(3, 3, &[&[-inf, inf, 1.0]]);
    beam.advance_from_prediction(&fns, &m, 3).unwrap();
    assert_eq!(last_actions(&beam), [1, 2, 0]);
    assert_eq!(scores(&beam), [inf, 1.0, -inf]);
}

#[test]
fn a_wrong_matrix_size_fails() {
    let fns = Fns::null();
    let mut beam = beam_with(8, vec![TState::new(0, 0.0), TState::new(1, 0.0)]);
    let before = snapshot(&beam);
    let err = beam
        .advance_from_prediction(&fns, &[30.0, 20.0, 40.0, 10.0], 4)
        .unwrap_err();
    assert_eq!(
        err,
        BeamError::MatrixSize {
            len: 4,
            max_size: 8,
            num_actions: 4
        }
    );
    assert!(err.to_string().contains(
        "Transition matrix size does not match max beam size * number of state transitions"
    ));
    assert_eq!(snapshot(&beam), before);

    let mut beam = beam_with(1, vec![TState::new(0, 0.0)]);
    assert!(matches!(
        beam.advance_from_prediction(&fns, &[1.0, 2.0, 3.0], 4),
        Err(BeamError::MatrixSize { .. })
    ));
    // The error converts into the crate's error.
    let err: kiln_dragnn::Error = beam
        .advance_from_prediction(&fns, &[], 4)
        .unwrap_err()
        .into();
    assert!(err.to_string().contains("Transition matrix size"));
}

// ---------------------------------------------------------------------------------------------
// Advancing along the oracle; terminality.
// ---------------------------------------------------------------------------------------------

#[test]
fn oracle_advance_with_a_single_beam() {
    let fns = Fns::null().oracle(|_| vec![3]);
    let mut beam = beam_with(1, vec![TState::new(0, 0.0)]);
    beam.advance_from_oracle(&fns).unwrap();
    assert_eq!(beam.size(), 1);
    assert_eq!(beam.beam()[0].actions, [3]);
    assert_eq!(beam.beam()[0].score, 0.0);
    assert_eq!(beam.beam()[0].beam_index, 0);
    assert_eq!(beam.history()[1][0], 0);
    assert_eq!(beam.num_steps(), 1);
}

#[test]
fn oracle_advance_with_multiple_states() {
    let fns = Fns::null().oracle(|s| vec![s.id % 3, 9]);
    let states = (0..8).map(|i| TState::new(i, 10.0)).collect();
    let mut beam = beam_with(8, states);
    beam.advance_from_oracle(&fns).unwrap();
    for (i, s) in beam.beam().iter().enumerate() {
        assert_eq!(s.actions, [i % 3]);
        assert_eq!(s.score, 0.0);
        assert_eq!(s.beam_index, i as i32);
    }
    assert_eq!(beam.history()[1], [0, 1, 2, 3, 4, 5, 6, 7]);
    // Each state was asked exactly once.
    let mut asked: Vec<usize> = fns.oracle_calls().iter().map(|c| c.0).collect();
    asked.sort_unstable();
    assert_eq!(asked, (0..8).collect::<Vec<_>>());
}

#[test]
fn oracle_advance_skips_final_states_and_always_counts_a_step() {
    let fns = Fns::null().finality(|s| s.id == 1).oracle(|_| vec![4]);
    let mut beam = beam_with(3, vec![TState::new(0, 2.0), TState::new(1, 2.0)]);
    beam.advance_from_oracle(&fns).unwrap();
    assert_eq!(beam.beam()[0].actions, [4]);
    assert_eq!(beam.beam()[0].score, 0.0);
    assert!(beam.beam()[1].actions.is_empty());
    assert_eq!(beam.beam()[1].score, 2.0);
    assert_eq!(beam.history()[1], [0, 1, -1]);
    let fns = Fns::null().finality(|_| true);
    beam.advance_from_oracle(&fns).unwrap();
    assert_eq!(beam.num_steps(), 2);
    assert_eq!(beam.history().len(), 3);
}

#[test]
fn oracle_advance_with_an_empty_oracle_fails_and_leaves_the_beam_unchanged() {
    let fns = Fns::null().oracle(|s| if s.id == 1 { vec![] } else { vec![0] });
    let mut beam = beam_with(3, vec![TState::new(0, 2.0), TState::new(1, 2.0)]);
    let before = snapshot(&beam);
    assert_eq!(
        beam.advance_from_oracle(&fns).unwrap_err(),
        BeamError::EmptyOracle { slot: 1 }
    );
    assert_eq!(snapshot(&beam), before);
}

#[test]
fn is_terminal_needs_every_state_final() {
    let states: Vec<TState> = (0..8).map(|i| TState::new(i, 10.0)).collect();
    let beam = beam_with(8, states);
    let one_open = Fns::null().finality(|s| s.id != 3);
    assert!(!beam.is_terminal(&one_open));
    let all_final = Fns::null().finality(|_| true);
    assert!(beam.is_terminal(&all_final));
    assert!(beam_with(8, vec![]).is_terminal(&Fns::null()));
}

// ---------------------------------------------------------------------------------------------
// Init, indices, find_previous_index, reset.
// ---------------------------------------------------------------------------------------------

#[test]
fn init_with_more_states_than_the_max_size_fails() {
    let states: Vec<TState> = (0..5).map(|i| TState::new(i, 0.0)).collect();
    let mut beam = Beam::new(4);
    let err = beam.init(states).unwrap_err();
    assert_eq!(
        err,
        BeamError::TooManyStates {
            states: 5,
            max_size: 4
        }
    );
    assert!(err
        .to_string()
        .contains("Attempted to initialize a beam with more states"));
    assert_eq!(
        err.to_string(),
        "Attempted to initialize a beam with more states (5) than the max size 4"
    );
    assert_eq!(beam.size(), 0);
    assert!(beam.history().is_empty());
}

#[test]
fn beam_indices_are_set_by_init() {
    let states: Vec<TState> = (0..4).map(|i| TState::new(i, 0.0)).collect();
    let beam = beam_with(4, states);
    for i in 0..4 {
        assert_eq!(beam.beam_state(i).unwrap().beam_index(), i as i32);
    }
    assert!(beam.beam_state(4).is_none());
}

#[test]
fn init_starts_afresh() {
    let fns = Fns::null();
    let mut beam = beam_with(2, vec![TState::new(0, 0.0)]);
    beam.advance_from_prediction(&fns, &[1.0, 2.0, 0.0, 0.0], 2)
        .unwrap();
    beam.init(vec![TState::with_parent(5, 0.0, 3)]).unwrap();
    assert_eq!(beam.num_steps(), 0);
    assert_eq!(beam.history(), [vec![3, -1]]);
}

#[test]
fn find_previous_index_walks_back_to_the_parent_beam_indices() {
    let fns = Fns::null();
    let rows: [&[f32]; 2] = [&[30.0, 20.0, 40.0, 10.0], &[31.0, 21.0, 41.0, 11.0]];
    let m = matrix(8, 4, &rows);
    let mut beam = beam_with(
        8,
        vec![
            TState::with_parent(0, 5.0, 1138),
            TState::with_parent(1, 7.0, 42),
        ],
    );
    beam.advance_from_prediction(&fns, &m, 4).unwrap();
    assert_eq!(beam.size(), 8);
    assert_eq!(last_actions(&beam), [2, 2, 0, 0, 1, 1, 3, 3]);
    let history = beam.history();
    assert_eq!(history[1], [1, 0, 1, 0, 1, 0, 1, 0]);
    assert_eq!(history[0], [1138, 42, -1, -1, -1, -1, -1, -1]);
    assert_eq!(beam.find_previous_index(4, 0), 42);
    assert_eq!(beam.find_previous_index(7, 0), 1138);
    // Step 1 (the last row): the slot before the step.
    assert_eq!(beam.find_previous_index(4, 1), 1);
    assert_eq!(beam.find_previous_index(7, 1), 0);
}

#[test]
fn find_previous_index_returns_minus_one_on_error() {
    let mut beam = beam_with(8, vec![TState::with_parent(0, 0.0, 3)]);
    assert_eq!(beam.find_previous_index(0, 0), 3);
    // A step past the steps taken, or before 0.
    assert_eq!(beam.find_previous_index(0, 1), -1);
    assert_eq!(beam.find_previous_index(0, -1), -1);
    assert_eq!(beam.find_previous_index(0, 8), -1);
    // An index outside [0, max).
    assert_eq!(beam.find_previous_index(-1, 0), -1);
    assert_eq!(beam.find_previous_index(8, 0), -1);
    // An empty slot.
    assert_eq!(beam.find_previous_index(1, 0), -1);
    // An ancestor with no parent, asked for at step 0.
    beam.init(vec![TState::new(0, 0.0)]).unwrap();
    assert_eq!(beam.find_previous_index(0, 0), -1);
    // Before init.
    assert_eq!(Beam::<TState>::new(8).find_previous_index(0, 0), -1);
}

#[test]
fn find_previous_index_with_max_size_1_is_0() {
    let fns = Fns::null();
    let mut beam = beam_with(1, vec![TState::with_parent(0, 0.0, 9)]);
    assert_eq!(beam.find_previous_index(0, 0), 0);
    beam.advance_from_prediction(&fns, &[1.0, 2.0], 2).unwrap();
    beam.advance_from_oracle(&fns).unwrap();
    assert_eq!(beam.find_previous_index(0, 0), 0);
    assert_eq!(beam.find_previous_index(0, 2), 0);
    assert_eq!(beam.find_previous_index(0, 3), -1);
    assert_eq!(beam.find_previous_index(1, 0), -1);
    assert_eq!(beam.history(), [vec![9], vec![0], vec![0]]);
}

#[test]
fn find_previous_index_follows_lineage_over_several_steps() {
    let fns = Fns::null();
    let mut beam = beam_with(
        3,
        vec![
            TState::with_parent(0, 0.0, 10),
            TState::with_parent(1, 0.5, 11),
        ],
    );
    // Step 1: [1/a0 (2.5), 0/a1 (2.0), 1/a1 (1.5)].
    let rows: [&[f32]; 2] = [&[1.0, 2.0], &[2.0, 1.0]];
    beam.advance_from_prediction(&fns, &matrix(3, 2, &rows), 2)
        .unwrap();
    assert_eq!(ids(&beam), [1, 0, 1]);
    assert_eq!(beam.history()[1], [1, 0, 1]);
    // Step 2: [slot 2/a1 (11.5), slot 0/a0 (2.5), slot 1/a0 (2.0)].
    let rows: [&[f32]; 3] = [&[0.0, -1.0], &[0.0, -5.0], &[-3.0, 10.0]];
    beam.advance_from_prediction(&fns, &matrix(3, 2, &rows), 2)
        .unwrap();
    assert_eq!(beam.history()[2], [2, 0, 1]);
    assert_eq!(ids(&beam), [1, 1, 0]);
    for slot in 0..3 {
        let s = &beam.beam()[slot];
        assert_eq!(s.trail.len(), 3);
        assert_eq!(beam.find_previous_index(slot as i32, 2), s.trail[1]);
        assert_eq!(beam.find_previous_index(slot as i32, 1), s.trail[0]);
        assert_eq!(beam.find_previous_index(slot as i32, 0), 10 + s.id as i32);
    }
}

#[test]
fn reset_clears_the_beam_and_its_history() {
    let fns = Fns::null();
    let mut beam = beam_with(8, vec![TState::new(0, 1.0)]);
    assert_eq!(beam.beam().len(), 1);
    assert_eq!(beam.history().len(), 1);
    beam.advance_from_oracle(&fns).unwrap();
    beam.reset();
    assert_eq!(beam.beam().len(), 0);
    assert_eq!(beam.history().len(), 0);
    assert_eq!(beam.num_steps(), 0);
    assert_eq!(beam.max_size(), 8);
}

#[test]
fn set_max_size_resets_the_beam() {
    let mut beam = beam_with(8, vec![TState::new(0, 1.0)]);
    assert_eq!(beam.history().len(), 1);
    beam.set_max_size(4);
    assert_eq!(beam.max_size(), 4);
    assert_eq!(beam.history().len(), 0);
    assert_eq!(beam.size(), 0);
}

#[test]
fn advancing_a_beam_that_was_never_initialised_behaves_as_an_empty_init() {
    let fns = Fns::null();
    let mut beam = Beam::<TState>::new(3);
    beam.advance_from_prediction(&fns, &[0.0; 6], 2).unwrap();
    assert_eq!(beam.history(), [vec![-1; 3], vec![-1; 3]]);
    assert_eq!(beam.num_steps(), 1);
    let mut beam = Beam::<TState>::new(1);
    beam.advance_from_oracle(&fns).unwrap();
    assert_eq!(beam.history(), [vec![-1], vec![0]]);
}

// ---------------------------------------------------------------------------------------------
// Property test: advance_from_prediction against a brute-force model.
// ---------------------------------------------------------------------------------------------

/// One step of a scenario: the score matrix, which (slot, action) pairs are allowed, the
/// oracle's actions for each slot, and whether to hand over one score too many.
#[derive(Debug, Clone)]
struct Step {
    scores: Vec<f32>,
    allowed: Vec<bool>,
    oracle: Vec<Vec<usize>>,
    bad_len: bool,
}

#[derive(Debug, Clone)]
struct Scenario {
    max_size: usize,
    num_actions: usize,
    /// `(score, gold, parent)` of each initial state.
    init: Vec<(f32, bool, i32)>,
    track_gold: bool,
    steps: Vec<Step>,
}

/// Scores with many ties, both infinities, both zeros, and (rarely) NaN.
fn score_value(nan_weight: u32) -> impl Strategy<Value = f32> {
    prop_oneof![
        30 => prop::sample::select(vec![-1.0f32, 0.0, -0.0, 0.5, 1.0, 2.0]),
        4 => prop::sample::select(vec![f32::INFINITY, f32::NEG_INFINITY]),
        nan_weight => Just(f32::NAN),
    ]
}

fn step_strategy(max_size: usize, num_actions: usize) -> impl Strategy<Value = Step> {
    let n = max_size * num_actions;
    (
        prop::collection::vec(score_value(1), n),
        prop::collection::vec(prop::bool::weighted(0.75), n),
        prop::collection::vec(prop::collection::vec(0..num_actions, 0..=2), max_size),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(scores, allowed, oracle, bad_len)| Step {
            scores,
            allowed,
            oracle,
            bad_len,
        })
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (1usize..=6, 1usize..=5)
        .prop_flat_map(|(max_size, num_actions)| {
            (
                Just(max_size),
                Just(num_actions),
                prop::collection::vec((score_value(0), any::<bool>(), -1i32..50), 0..=max_size),
                any::<bool>(),
                prop::collection::vec(step_strategy(max_size, num_actions), 1..=4),
            )
        })
        .prop_map(
            |(max_size, num_actions, init, track_gold, steps)| Scenario {
                max_size,
                num_actions,
                init,
                track_gold,
                steps,
            },
        )
}

/// The functions of one step: `allowed` and `oracle` look the state up by its beam index (the
/// slot it holds in the beam being advanced).
fn step_fns(step: &Step, num_actions: usize) -> Fns {
    let allowed = step.allowed.clone();
    let oracle = step.oracle.clone();
    Fns::null()
        .allowed(move |s, a| allowed[s.beam_index as usize * num_actions + a])
        .oracle(move |s| oracle[s.beam_index as usize].clone())
}

/// What the model expects of one step: an error, or the new states and (max size > 1) the
/// new history row.
type Expected = Result<(Vec<TState>, Option<Vec<i32>>), BeamError>;

/// The reference's rule, written out literally and independently of the implementation.
fn model_step(
    states: &[TState],
    max_size: usize,
    num_actions: usize,
    step: &Step,
    track_gold: bool,
) -> Expected {
    let allowed = |slot: usize, a: usize| step.allowed[slot * num_actions + a];
    let oracle_has = |slot: usize, a: usize| step.oracle[slot].contains(&a);
    if step.bad_len {
        return Err(BeamError::MatrixSize {
            len: step.scores.len() + 1,
            max_size,
            num_actions,
        });
    }
    if max_size == 1 {
        if states.is_empty() {
            return Err(BeamError::EmptyBeam);
        }
        let mut best_action = None;
        let mut best = f32::NEG_INFINITY;
        for a in 0..num_actions {
            let v = step.scores[a];
            if v.is_nan() {
                return Err(BeamError::NanScore { slot: 0, action: a });
            }
            if allowed(0, a) && v > best {
                best = v;
                best_action = Some(a);
            }
        }
        let Some(a) = best_action else {
            return Err(BeamError::NoAllowedAction { num_actions });
        };
        let mut s = states[0].clone();
        let gold = track_gold && s.gold && oracle_has(0, a);
        s.actions.push(a);
        s.score += best;
        s.set_beam_index(0);
        s.gold = gold;
        return Ok((vec![s], None));
    }

    // Every candidate, visited slot-major then by action.
    let mut candidates = Vec::new();
    for (slot, state) in states.iter().enumerate() {
        for a in 0..num_actions {
            if !allowed(slot, a) {
                continue;
            }
            let score = state.score + step.scores[slot * num_actions + a];
            if score.is_nan() {
                return Err(BeamError::NanScore { slot, action: a });
            }
            candidates.push((score, slot, a));
        }
    }
    // The documented eviction rule applied literally: a list kept sorted by descending
    // score, each candidate inserted after every entry scoring at least as much; when the
    // list is full, a candidate below the last entry is dropped, otherwise the last entry
    // is evicted first.
    let mut kept: Vec<(f32, usize, usize)> = Vec::new();
    for &(score, slot, a) in &candidates {
        if kept.len() == max_size {
            if score < kept[kept.len() - 1].0 {
                continue;
            }
            kept.pop();
        }
        let at = kept.iter().position(|e| e.0 < score).unwrap_or(kept.len());
        kept.insert(at, (score, slot, a));
    }
    // Cross-check: the kept scores are those of "stable sort by descending score, keep the
    // first max_size" (only which of the tied boundary candidates survive can differ).
    let mut sorted = candidates.clone();
    sorted.sort_by(|x, y| y.0.partial_cmp(&x.0).unwrap());
    sorted.truncate(max_size);
    let kept_scores: Vec<f32> = kept.iter().map(|e| e.0).collect();
    let sorted_scores: Vec<f32> = sorted.iter().map(|e| e.0).collect();
    assert_eq!(kept_scores, sorted_scores);

    let mut row = vec![-1; max_size];
    let mut next = Vec::new();
    for (rank, &(score, slot, a)) in kept.iter().enumerate() {
        let mut s = states[slot].clone();
        let gold = track_gold && s.gold && oracle_has(slot, a);
        s.actions.push(a);
        s.score = score;
        s.set_beam_index(rank as i32);
        s.gold = gold;
        row[rank] = slot as i32;
        next.push(s);
    }
    Ok((next, Some(row)))
}

fn run_scenario(sc: &Scenario) -> Result<(), TestCaseError> {
    let states: Vec<TState> = sc
        .init
        .iter()
        .enumerate()
        .map(|(id, &(score, gold, parent))| TState {
            gold,
            ..TState::with_parent(id, score, parent)
        })
        .collect();
    let parents: Vec<i32> = sc.init.iter().map(|x| x.2).collect();
    let mut beam = Beam::new(sc.max_size);
    beam.set_gold_tracking(sc.track_gold);
    beam.init(states).unwrap();
    for (i, s) in beam.beam().iter().enumerate() {
        prop_assert_eq!(s.gold, sc.track_gold && sc.init[i].1);
    }

    // For max size > 1: each state's trail holds its slot after every step (init included)
    // as long as only predictions advance the beam, which is what this test does.
    for step in &sc.steps {
        let fns = step_fns(step, sc.num_actions);
        let before = snapshot(&beam);
        let mut scores = step.scores.clone();
        if step.bad_len {
            scores.push(0.0);
        }
        let expected = model_step(
            beam.beam(),
            sc.max_size,
            sc.num_actions,
            step,
            sc.track_gold,
        );
        let got = beam.advance_from_prediction(&fns, &scores, sc.num_actions);
        // The oracle is asked only about gold states, and only while tracking.
        for &(_, _, gold) in fns.oracle_calls().iter() {
            prop_assert!(gold && sc.track_gold);
        }
        match expected {
            Err(e) => {
                prop_assert_eq!(got, Err(e));
                prop_assert_eq!(snapshot(&beam), before);
            }
            Ok((next, row)) => {
                prop_assert_eq!(got, Ok(()));
                let want: Vec<_> = next.iter().map(TState::snapshot).collect();
                let have: Vec<_> = beam.beam().iter().map(TState::snapshot).collect();
                prop_assert_eq!(have, want);
                prop_assert_eq!(beam.num_steps(), before.2 + 1);
                let history = beam.history();
                prop_assert_eq!(history.len(), beam.num_steps() + 1);
                prop_assert_eq!(&history[..history.len() - 1], &before.1[..]);
                match row {
                    Some(row) => prop_assert_eq!(&history[history.len() - 1], &row),
                    None => prop_assert_eq!(&history[history.len() - 1], &vec![0]),
                }
            }
        }
        prop_assert_eq!(
            beam.contains_gold(),
            sc.track_gold && beam.beam().iter().any(|s| s.gold)
        );
        check_previous_indices(&beam, &parents)?;
    }
    Ok(())
}

/// `find_previous_index` against each state's own record of its lineage.
fn check_previous_indices(beam: &Beam<TState>, parents: &[i32]) -> Result<(), TestCaseError> {
    let steps = beam.num_steps() as i32;
    let max = beam.max_size() as i32;
    for current in -1..=max {
        for step in -1..=steps + 1 {
            let got = beam.find_previous_index(current, step);
            let in_range = (0..=steps).contains(&step) && (0..max).contains(&current);
            let want = if !in_range {
                -1
            } else if max == 1 {
                0
            } else {
                match beam.beam_state(current as usize) {
                    None => -1,
                    Some(s) if step == 0 => {
                        if parents[s.id] < 0 {
                            -1
                        } else {
                            parents[s.id]
                        }
                    }
                    Some(s) => s.trail[step as usize - 1],
                }
            };
            prop_assert_eq!(got, want, "current {}, step {}", current, step);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn advance_from_prediction_matches_the_brute_force_model(sc in scenario_strategy()) {
        run_scenario(&sc)?;
    }
}

#[test]
fn large_beam_matches_the_model_on_a_big_tied_matrix() {
    // A beam of 64 over 64 × 50 candidates with heavy ties, several steps: the heap-based
    // selection against the literal model.
    let (max_size, num_actions) = (64, 50);
    let states: Vec<TState> = (0..max_size)
        .map(|i| TState::new(i, (i % 3) as f32))
        .collect();
    let mut beam = beam_with(max_size, states);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..5 {
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let scores: Vec<f32> = (0..max_size * num_actions)
            .map(|_| (next() % 7) as f32 - 3.0)
            .collect();
        let allowed: Vec<bool> = (0..max_size * num_actions)
            .map(|_| next() % 5 != 0)
            .collect();
        let step = Step {
            scores: scores.clone(),
            allowed,
            oracle: vec![vec![]; max_size],
            bad_len: false,
        };
        let fns = step_fns(&step, num_actions);
        let (want, row) = model_step(beam.beam(), max_size, num_actions, &step, false).unwrap();
        beam.advance_from_prediction(&fns, &scores, num_actions)
            .unwrap();
        let have: Vec<_> = beam.beam().iter().map(TState::snapshot).collect();
        let want: Vec<_> = want.iter().map(TState::snapshot).collect();
        assert_eq!(have, want);
        assert_eq!(beam.history().last(), row.as_ref());
    }
}

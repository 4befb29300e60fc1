//! Index translators against the reference's contract (`index_translator_test` and the
//! translator rows of `compute_session_impl_test`): paths, the order of the calls made on
//! each component along a path, and the steps of the universal methods.
//!
//! Depends on `kiln_dragnn::translator`.

use kiln_dragnn::translator::{
    IndexTranslator, LinkIndex, Method, TranslationSource, TranslatorError,
};
use std::cell::RefCell;

/// A component that answers with fixed maps and records every call made on it.
struct Mock {
    name: &'static str,
    steps: i32,
    calls: RefCell<Vec<String>>,
}

impl Mock {
    fn new(name: &'static str, steps: i32) -> Mock {
        Mock {
            name,
            steps,
            calls: RefCell::new(Vec::new()),
        }
    }
    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl TranslationSource for Mock {
    fn name(&self) -> &str {
        self.name
    }
    fn source_beam_index(&self, current_index: i32, batch: usize) -> i32 {
        self.calls
            .borrow_mut()
            .push(format!("source({current_index},{batch})"));
        current_index + 10 // a recognisable walk
    }
    fn beam_index_at_step(&self, step: i32, current_index: i32, batch: usize) -> i32 {
        self.calls
            .borrow_mut()
            .push(format!("at_step({step},{current_index},{batch})"));
        if step < 0 {
            -1
        } else {
            current_index + 100
        }
    }
    fn steps_taken(&self, batch: usize) -> i32 {
        self.calls.borrow_mut().push(format!("steps({batch})"));
        self.steps
    }
    fn lookup_step(
        &self,
        method: Method,
        batch: usize,
        beam: i32,
        value: i32,
    ) -> Result<i32, TranslatorError> {
        self.calls
            .borrow_mut()
            .push(format!("lookup({method},{batch},{beam},{value})"));
        match method {
            Method::ShiftReduceStep => Ok(value * 2),
            _ => Err(TranslatorError::Unsupported {
                component: self.name.into(),
                method,
            }),
        }
    }
}

#[test]
fn identity_asks_the_source_for_the_beam_slot_at_the_value() {
    let a = Mock::new("A", 0);
    let t = IndexTranslator::new(&["A"], 0, "A", "identity").unwrap();
    let got = t.translate(&[&a], 3, 1, 7).unwrap();
    assert_eq!(
        got,
        LinkIndex {
            batch_index: 3,
            beam_index: 101,
            step_index: 7
        }
    );
    assert_eq!(a.calls(), ["at_step(7,1,3)"]);
}

#[test]
fn history_counts_back_from_the_latest_step() {
    let a = Mock::new("A", 8);
    let t = IndexTranslator::new(&["A"], 0, "A", "history").unwrap();
    assert_eq!(t.translate(&[&a], 0, 0, 2).unwrap().step_index, 5);
    assert_eq!(t.translate(&[&a], 0, 0, 0).unwrap().step_index, 7);
    assert_eq!(t.translate(&[&a], 0, 0, 7).unwrap().step_index, 0);
    let out = t.translate(&[&a], 0, 0, 8).unwrap();
    assert_eq!((out.step_index, out.beam_index), (-1, -1));
    assert_eq!(t.translate(&[&a], 0, 0, -1).unwrap().step_index, -1);
}

#[test]
fn a_three_component_path_walks_source_indices_then_asks_the_last() {
    // Components in spec order C, B, A; A (index 2) links to C (index 0).
    let (c, b, a) = (Mock::new("C", 0), Mock::new("B", 0), Mock::new("A", 0));
    let t = IndexTranslator::new(&["C", "B", "A"], 2, "C", "identity").unwrap();
    assert_eq!(t.path(), &[2, 1, 0]);
    let got = t.translate(&[&c, &b, &a], 4, 0, 6).unwrap();
    assert_eq!(a.calls(), ["source(0,4)"]);
    assert_eq!(b.calls(), ["source(10,4)"]);
    assert_eq!(c.calls(), ["at_step(6,20,4)"]);
    assert_eq!(
        got,
        LinkIndex {
            batch_index: 4,
            beam_index: 120,
            step_index: 6
        }
    );
}

#[test]
fn component_specific_methods_are_asked_of_the_last_component_with_the_walked_slot() {
    let (b, a) = (Mock::new("B", 0), Mock::new("A", 0));
    let t = IndexTranslator::new(&["B", "A"], 1, "B", "shift-reduce-step").unwrap();
    let got = t.translate(&[&b, &a], 0, 2, 3).unwrap();
    assert_eq!(
        b.calls(),
        ["lookup(shift-reduce-step,0,12,3)", "at_step(6,12,0)"]
    );
    assert_eq!(got.step_index, 6);
    // A component that does not support the method says so.
    let t = IndexTranslator::new(&["B", "A"], 1, "B", "reduce-step").unwrap();
    let e = t.translate(&[&b, &a], 0, 0, 0).unwrap_err();
    assert!(e.to_string().contains("Method not supported"), "{e}");
}

#[test]
fn paths_follow_predecessors_and_keep_self_links_short() {
    let names = ["A", "B", "C"];
    assert_eq!(
        IndexTranslator::new(&names, 1, "A", "identity")
            .unwrap()
            .path(),
        &[1, 0]
    );
    assert_eq!(
        IndexTranslator::new(&names, 2, "A", "identity")
            .unwrap()
            .path(),
        &[2, 1, 0]
    );
    assert_eq!(
        IndexTranslator::new(&names, 0, "A", "history")
            .unwrap()
            .path(),
        &[0]
    );
    for m in Method::ALL {
        assert_eq!(
            IndexTranslator::new(&names, 2, "B", m.name())
                .unwrap()
                .method(),
            m
        );
    }
}

#[test]
fn bad_links_are_the_reference_errors() {
    let names = ["A", "B"];
    let e = IndexTranslator::new(&names, 1, "Z", "identity").unwrap_err();
    assert!(
        e.to_string().contains("Unable to find source component Z"),
        "{e}"
    );
    let e = IndexTranslator::new(&names, 0, "B", "identity").unwrap_err();
    assert!(matches!(e, TranslatorError::NoLink { .. }), "{e}");
    assert!(e.to_string().contains("No link to source B"), "{e}");
    let e = IndexTranslator::new(&names, 1, "A", "sideways").unwrap_err();
    assert!(
        e.to_string()
            .contains("Unable to find step lookup function sideways"),
        "{e}"
    );
    // A predecessor cycle (B → C → B, never reaching A) is a loop, not a hang.
    let names = ["A", "B", "C"];
    let e = IndexTranslator::with_predecessors(&names, 1, "A", "identity", |i| {
        Some(if i == 1 { 2 } else { 1 })
    })
    .unwrap_err();
    assert!(e.to_string().contains("Too many jumps"), "{e}");
    // Translating with fewer components than the path names is an error, not a panic.
    let a = Mock::new("A", 0);
    let t = IndexTranslator::new(&["A", "B"], 1, "A", "identity").unwrap();
    assert!(matches!(
        t.translate(&[&a], 0, 0, 0),
        Err(TranslatorError::MissingComponent { .. })
    ));
}

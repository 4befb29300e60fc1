//! Component checks (reference sections (b), (c), (f)): [`SyntaxNetComponent`]'s errors,
//! advancing from predictions and the oracle, step lookups (reverse-token/reverse-char
//! round trips, shift-reduce steps), fixed/bulk/link feature layouts with test channels,
//! oracle labels and tracing; [`StatelessComponent`]'s pass-through.
//!
//! Depends on kiln-dragnn's component, features, transition, translator, input and spec
//! modules.

use std::sync::Arc;

use kiln_dragnn::component::{
    BulkFeatures, Component, FixedFeatureOutput, StatelessComponent, SyntaxNetComponent,
};
use kiln_dragnn::document::read_conllu;
use kiln_dragnn::features::{FixedFeature, FixedFeatures, LinkFeatures};
use kiln_dragnn::input::InputBatchCache;
use kiln_dragnn::spec::ComponentSpec;
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use kiln_dragnn::transition::ParserState;
use kiln_dragnn::translator::{Method, TranslationSource};
use kiln_dragnn::Result;

const TWO: &str = "1\tEv\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n";
const THREE: &str = "1\tBu\t_\tDET\t_\t_\t2\tdet\t_\t_\n2\tev\t_\tNOUN\t_\t_\t3\tnsubj\t_\t_\n3\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n";

fn maps() -> Arc<TermMaps> {
    let docs = read_conllu(&format!("{TWO}\n{THREE}")).unwrap();
    Arc::new(TermMaps::build(&docs, &TermMapOptions::default()))
}

fn component(system: &str) -> SyntaxNetComponent {
    let spec = ComponentSpec::from_text(&format!(
        "name: 'c' transition_system {{ registered_name: '{system}' }}"
    ))
    .unwrap();
    SyntaxNetComponent::new(&spec, maps()).unwrap()
}

fn batch() -> InputBatchCache {
    InputBatchCache::new(vec![TWO.into(), THREE.into()])
}

/// Test channel: slot 0 = the next token + 1; slot 1 = the number of stack items, only
/// when the stack is not empty.
#[derive(Debug)]
struct TestFixed;
impl FixedFeatures for TestFixed {
    fn name(&self) -> &str {
        "test"
    }
    fn size(&self) -> usize {
        2
    }
    fn vocabulary_size(&self) -> usize {
        100
    }
    fn extract(&self, s: &ParserState, out: &mut Vec<FixedFeature>) {
        out.push(FixedFeature {
            slot: 0,
            id: i64::from(s.next() + 1),
            weight: 1.0,
        });
        if s.stack_size() > 0 {
            out.push(FixedFeature {
                slot: 1,
                id: s.stack_size() as i64,
                weight: 0.5,
            });
        }
    }
}

/// Test link channel: [next token, stack top].
#[derive(Debug)]
struct TestLink;
impl LinkFeatures for TestLink {
    fn name(&self) -> &str {
        "link"
    }
    fn size(&self) -> usize {
        2
    }
    fn extract(&self, s: &ParserState) -> Vec<i32> {
        vec![s.input(0), s.stack(0)]
    }
}

fn with_test_channels(system: &str) -> SyntaxNetComponent {
    let spec = ComponentSpec::from_text(&format!(
        "name: 'c' transition_system {{ registered_name: '{system}' }}"
    ))
    .unwrap();
    SyntaxNetComponent::with_channels(
        &spec,
        maps(),
        vec![Box::new(TestFixed)],
        vec![Box::new(TestLink)],
    )
    .unwrap()
}

#[test]
fn initialize_data_checks_beam_size_and_batch() -> Result<()> {
    let mut c = component("tagger");
    let err = c.initialize_data(&[], 0, &mut batch()).unwrap_err();
    assert!(err
        .to_string()
        .contains("Requested max beam size must be greater than 0."));
    assert!(!c.is_ready());
    let mut b = batch();
    c.initialize_data(&[], 2, &mut b)?;
    assert!(c.is_ready());
    assert_eq!((c.batch_size(), c.beam_size()), (2, 2));
    let parents = c.get_beam();
    let mut c2 = component("arc-standard");
    let err = c2.initialize_data(&parents[..1], 1, &mut b).unwrap_err();
    assert!(err.to_string().contains("2 sentences"), "{err}");
    c2.initialize_data(&parents, 1, &mut b)?;
    assert_eq!(c2.source_beam_index(0, 1), 0);
    c.reset_component();
    assert!(!c.is_ready());
    assert_eq!((c.batch_size(), c.beam_size()), (0, 0));
    Ok(())
}

#[test]
fn advance_from_prediction_checks_the_action_count() -> Result<()> {
    let mut c = component("tagger");
    c.initialize_data(&[], 1, &mut batch())?;
    let err = c.advance_from_prediction(&[0.0; 10], 2, 5).unwrap_err();
    assert!(
        err.to_string()
            .contains("[c] static action set does not match transition matrix"),
        "{err}"
    );
    Ok(())
}

#[test]
fn advance_from_prediction_skips_terminal_beams_and_fails_on_the_first_bad_one() -> Result<()> {
    let mut c = component("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    // shift-only: 1 action; TWO ends after 2 steps, THREE after 3.
    for _ in 0..2 {
        c.advance_from_prediction(&[1.0, 1.0], 2, 1)?;
    }
    assert_eq!((c.steps_taken(0), c.steps_taken(1)), (2, 2));
    c.advance_from_prediction(&[f32::NAN, 1.0], 2, 1)?; // the NaN is in a terminal beam
    assert_eq!((c.steps_taken(0), c.steps_taken(1)), (2, 3));
    assert!(c.is_terminal());

    let mut c = component("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    let err = c
        .advance_from_prediction(&[f32::NAN, 1.0], 2, 1)
        .unwrap_err();
    assert!(err.to_string().contains("batch item 0"), "{err}");
    assert!(
        c.advance_from_prediction(&[1.0], 1, 1).is_err(),
        "wrong item count"
    );
    Ok(())
}

#[test]
fn tagger_prediction_with_a_beam_reorders_and_tracks_history() -> Result<()> {
    let mut c = component("tagger");
    let n = maps().tags.len();
    c.initialize_data(&[], 2, &mut batch())?;
    let mut scores = vec![0.0f32; 2 * 2 * n];
    scores[1] = 5.0; // batch 0, slot 0, action 1
    scores[2] = 3.0; // batch 0, slot 0, action 2
    c.advance_from_prediction(&scores, 4, n)?;
    let beam = &c.beams()[0];
    assert_eq!(beam.size(), 2);
    assert_eq!(beam.beam()[0].tag(0), 1);
    assert_eq!(beam.beam()[1].tag(0), 2);
    assert_eq!(c.beam_index_at_step(1, 1, 0), 0);
    // Only the top of each beam goes downstream.
    assert!(c.get_beam().iter().all(|b| b.len() == 1));
    Ok(())
}

#[test]
fn reverse_token_and_reverse_char_round_trip() -> Result<()> {
    let mut c = component("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    for (batch, n) in [(0usize, 2i32), (1, 3)] {
        for i in 0..n {
            assert_eq!(c.lookup_step(Method::ReverseToken, batch, 0, n - 1 - i)?, i);
        }
        assert_eq!(c.lookup_step(Method::ReverseToken, batch, 0, n)?, -1);
        assert_eq!(c.lookup_step(Method::ReverseToken, batch, 0, -1)?, -1);
    }
    let chars = "Ev güzel".chars().count() as i32;
    for i in 0..chars {
        assert_eq!(c.lookup_step(Method::ReverseChar, 0, 0, chars - 1 - i)?, i);
    }
    assert_eq!(c.lookup_step(Method::ReverseChar, 0, 0, chars)?, -1);
    // A missing beam slot gives -1.
    assert_eq!(c.lookup_step(Method::ReverseToken, 0, 3, 0)?, -1);
    Ok(())
}

#[test]
fn shift_reduce_steps_come_from_the_parser_state() -> Result<()> {
    let mut c = component("arc-standard");
    c.initialize_data(&[], 1, &mut InputBatchCache::new(vec![TWO.into()]))?;
    while !c.is_terminal() {
        c.advance_from_oracle()?;
    }
    let s = &c.beams()[0].beam()[0];
    for token in 0..2 {
        assert_eq!(
            c.lookup_step(Method::ShiftReduceStep, 0, 0, token)?,
            s.step_for_token(token)
        );
        assert_eq!(
            c.lookup_step(Method::ReduceStep, 0, 0, token)?,
            s.parent_step_for_token(token)
        );
        assert_eq!(
            c.lookup_step(Method::ParentShiftReduceStep, 0, 0, token)?,
            s.step_for_token(s.parent_step_for_token(token))
        );
    }
    // token 0 ("Ev") is attached to token 1 by a left arc: a reduce step exists.
    assert!(c.lookup_step(Method::ReduceStep, 0, 0, 0)? >= 0);
    assert_eq!(
        c.lookup_step(Method::History, 0, 0, 0)?,
        c.steps_taken(0) - 1
    );
    Ok(())
}

#[test]
fn oracle_labels_are_the_first_gold_action_or_minus_one() -> Result<()> {
    let mut c = component("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    assert_eq!(c.get_oracle_labels()?, [vec![0], vec![0]]);
    c.advance_from_oracle()?;
    c.advance_from_oracle()?;
    assert_eq!(c.get_oracle_labels()?, [vec![-1], vec![0]]);
    Ok(())
}

#[test]
fn fixed_features_are_laid_out_by_batch_beam_and_slot() -> Result<()> {
    let mut c = with_test_channels("shift-only");
    c.initialize_data(&[], 3, &mut batch())?;
    let mut out = FixedFeatureOutput::default();
    assert_eq!(c.get_fixed_features(0, &mut out)?, 2);
    // One state per batch item (slot 0); max beam 3, channel size 2.
    assert_eq!(out.indices, [0, 3 * 2]);
    assert_eq!(out.ids, [1, 1]);
    assert_eq!(out.weights, [1.0, 1.0]);
    assert!(c.get_fixed_features(1, &mut out).is_err());
    Ok(())
}

#[test]
fn bulk_fixed_features_follow_the_oracle_path() -> Result<()> {
    let mut c = with_test_channels("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    let mut bulk = BulkFeatures::default();
    let steps = c.bulk_get_fixed_features(&mut bulk)?;
    assert_eq!(steps, 3);
    assert!(c.is_terminal());
    let ch = &bulk.channels[0];
    // elements = 2 (batch) × 1 (beam); index = slot*(2*3) + element*3 + step.
    // Slot 0 at every step for batch 0 (2 steps while not final, the 3rd step sees a final state too:
    // bulk extraction covers every state at each step until all are terminal).
    let mut got: Vec<(i32, i64)> = ch
        .indices
        .iter()
        .copied()
        .zip(ch.ids.iter().copied())
        .collect();
    got.sort();
    let slot0: Vec<(i32, i64)> = got.iter().copied().filter(|(i, _)| *i < 6).collect();
    assert_eq!(slot0, [(0, 1), (1, 2), (2, 3), (3, 1), (4, 2), (5, 3)]);
    // Padding changes the layout.
    let mut c = with_test_channels("shift-only");
    c.initialize_data(&[], 1, &mut batch())?;
    let mut bulk = BulkFeatures {
        pad_to_batch: Some(4),
        pad_to_step: Some(5),
        ..Default::default()
    };
    c.bulk_get_fixed_features(&mut bulk)?;
    let mut idx = bulk.channels[0].indices.clone();
    idx.sort();
    assert_eq!(&idx[..6], &[0, 1, 2, 5, 6, 7]);
    Ok(())
}

#[test]
fn raw_link_features_are_padded_to_the_max_beam() -> Result<()> {
    let mut c = with_test_channels("arc-standard");
    c.initialize_data(&[], 2, &mut batch())?;
    let raw = c.get_raw_link_features(0)?;
    assert_eq!(raw.len(), 2 * 2 * 2);
    assert!(raw[0].is_some() && raw[1].is_some());
    assert!(raw[2].is_none() && raw[3].is_none()); // slot 1 of batch 0 is padding
    let f = raw[4].unwrap();
    assert_eq!((f.batch_idx, f.beam_idx, f.feature_value), (1, 0, 0));
    assert!(c.get_raw_link_features(1).is_err());
    Ok(())
}

#[test]
fn tracing_needs_data_and_records_steps() -> Result<()> {
    let mut c = component("shift-only");
    let err = c.initialize_tracing().unwrap_err();
    assert!(err
        .to_string()
        .contains("Cannot initialize trace before InitializeData()."));
    c.initialize_data(&[], 1, &mut batch())?;
    assert!(c
        .get_trace_protos()
        .unwrap_err()
        .to_string()
        .contains("Tracing is not enabled."));
    c.initialize_tracing()?;
    c.advance_from_oracle()?;
    c.advance_from_oracle()?;
    let traces = c.get_trace_protos()?;
    assert_eq!(traces.len(), 2);
    assert_eq!(traces[0][0].steps.len(), 2);
    assert_eq!(traces[0][0].steps[1].action, 0);
    c.disable_tracing();
    assert!(c.get_trace_protos().is_err());
    Ok(())
}

#[test]
fn finalize_writes_the_top_item() -> Result<()> {
    let mut c = component("tagger");
    let mut b = batch();
    c.initialize_data(&[], 1, &mut b)?;
    while !c.is_terminal() {
        c.advance_from_oracle()?;
    }
    c.finalize_data(&mut b)?;
    assert_eq!(b.serialized_data()?, [TWO, THREE]);
    Ok(())
}

#[test]
fn stateless_component_forwards_its_predecessor() -> Result<()> {
    let mut parser = component("shift-only");
    let mut b = batch();
    parser.initialize_data(&[], 1, &mut b)?;
    while !parser.is_terminal() {
        parser.advance_from_oracle()?;
    }
    let spec = ComponentSpec::from_text("name: 'bulk'")?;
    let mut s = StatelessComponent::new(&spec);
    assert!(s.is_ready() && s.is_terminal());
    s.initialize_data(&parser.get_beam(), 4, &mut b)?;
    assert_eq!((s.batch_size(), s.beam_size(), s.steps_taken(0)), (2, 4, 0));
    assert_eq!(s.source_beam_index(3, 1), 3);
    assert_eq!(s.get_beam().len(), 2);
    let msg = |e: kiln_dragnn::Error| e.to_string();
    let m = "[bulk] Method not supported";
    assert!(msg(s.advance_from_oracle().unwrap_err()).contains(m));
    assert!(msg(s.advance_from_prediction(&[], 0, 0).unwrap_err()).contains(m));
    assert!(msg(s
        .get_fixed_features(0, &mut FixedFeatureOutput::default())
        .unwrap_err())
    .contains(m));
    assert!(msg(s
        .bulk_get_fixed_features(&mut BulkFeatures::default())
        .unwrap_err())
    .contains(m));
    assert!(msg(s.get_raw_link_features(0).unwrap_err()).contains(m));
    assert!(msg(s.get_oracle_labels().unwrap_err()).contains(m));
    assert!(msg(s.get_trace_protos().unwrap_err()).contains(m));
    assert!(s.lookup_step(Method::ReverseToken, 0, 0, 0).is_err());
    s.reset_component();
    assert_eq!(s.batch_size(), 0);
    Ok(())
}

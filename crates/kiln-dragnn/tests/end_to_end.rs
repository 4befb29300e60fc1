//! End to end: the reference's tagger → parser pipeline (a shift-only "features" component,
//! a tagger, an arc-standard parser) with real fixed and linked features, driven through
//! [`ComputeSession`] along the oracle as a training loop drives it: at every step every
//! fixed channel is extracted and every linked channel translated, and the invariants a
//! network relies on are checked (rows inside the `[batch × beam × size]` output, ids below
//! the channel's vocabulary size, link steps that exist in the source, the tagger's
//! `input.focus` link at the token it tags); the serialized predictions must equal the gold
//! CoNLL-U for projective sentences, and bulk extraction of the features component must give
//! the ids of the step-by-step extraction.
//!
//! Runs on `tests/fixtures/features.conllu` always, and on the training part of the Turkish
//! treebank when `data/turkish-treebanks/` holds it (skipped with a message otherwise; a
//! failure when `CI=true`).
//!
//! Depends on kiln-dragnn's session, component, features, spec, transition, translator,
//! document and term-map modules.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_dragnn::component::{BulkFeatures, FixedFeatureOutput};
use kiln_dragnn::document::{read_conllu, read_turkish_treebank, write_conllu, Sentence};
use kiln_dragnn::features::chen_manning::{fml, LABEL_LOCATORS, LOCATORS};
use kiln_dragnn::features::fixed_channel_with_actions;
use kiln_dragnn::session::ComputeSession;
use kiln_dragnn::spec::{ComponentSpec, GridPoint, MasterSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use kiln_dragnn::transition::{create, is_projective};
use kiln_dragnn::Result;

/// The reference's tagger_parser spec (`tests/fixtures/specs/tagger_parser.textproto`) with
/// real features: the parser reads Chen & Manning's 20 words, 20 tags and 12 labels, its last
/// action, the features component's word embedding at the input, the tagger at the stack top,
/// and itself at the top two stack tokens. (The tagger does not join category to POS, so
/// its predictions are the gold UPOS column.)
fn tagger_parser_spec() -> MasterSpec {
    let text = format!(
        r#"
component {{
  name: "features"
  transition_system {{ registered_name: "shift-only" }}
  fixed_feature {{ name: "words" size: 7 embedding_dim: 64
    fml: "input(-1).word input(-2).word input(-3).word input.word input(1).word input(2).word input(3).word" }}
  network_unit {{ registered_name: "IdentityNetwork" }}
  backend {{ registered_name: "SyntaxNetComponent" }}
  inference_beam_size: 1
}}
component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  fixed_feature {{ name: "suffix" fml: "input.suffix(length=3) input(1).suffix(length=3)" size: 2 embedding_dim: 16 }}
  fixed_feature {{ name: "shape" fml: "input.digit input.hyphen input.capitalization" size: 3 embedding_dim: 8 }}
  linked_feature {{ name: "words" fml: "input.focus" embedding_dim: -1 size: 1
    source_component: "features" source_translator: "identity" source_layer: "input_embeddings" }}
  linked_feature {{ name: "rnn" fml: "stack.focus" embedding_dim: 32 size: 1
    source_component: "tagger" source_translator: "shift-reduce-step" source_layer: "layer_0" }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "64" }} }}
  backend {{ registered_name: "SyntaxNetComponent" }}
  inference_beam_size: 1
}}
component {{
  name: "parser"
  transition_system {{ registered_name: "arc-standard" }}
  fixed_feature {{ name: "words" fml: "{words}" size: 20 embedding_dim: 64 }}
  fixed_feature {{ name: "tags" fml: "{tags}" size: 20 embedding_dim: 32 }}
  fixed_feature {{ name: "labels" fml: "{labels}" size: 12 embedding_dim: 32 }}
  fixed_feature {{ name: "action" fml: "last-action" size: 1 embedding_dim: 32 }}
  linked_feature {{ name: "words" fml: "input.focus" embedding_dim: -1 size: 1
    source_component: "features" source_translator: "identity" source_layer: "input_embeddings" }}
  linked_feature {{ name: "tagger" fml: "stack.focus" embedding_dim: 32 size: 1
    source_component: "tagger" source_translator: "identity" source_layer: "layer_0" }}
  linked_feature {{ name: "rnn" fml: "stack.focus stack(1).focus" embedding_dim: 32 size: 2
    source_component: "parser" source_translator: "shift-reduce-step" source_layer: "layer_0" }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "64" }} }}
  backend {{ registered_name: "SyntaxNetComponent" }}
  inference_beam_size: 4
}}
"#,
        words = fml(&LOCATORS, "word"),
        tags = fml(&LOCATORS, "tag"),
        labels = fml(LABEL_LOCATORS, "label"),
    );
    MasterSpec::from_text(&text).unwrap_or_else(|e| panic!("{e}"))
}

/// The vocabulary size of each fixed channel of `spec`, as the component computes it.
fn vocabulary_sizes(spec: &ComponentSpec, maps: &TermMaps) -> Vec<usize> {
    let system = spec.transition_system.as_ref().unwrap();
    let num_actions = create(system.registered_name(), system.parameters.iter())
        .unwrap()
        .num_actions(maps);
    spec.fixed_feature
        .iter()
        .map(|c| {
            fixed_channel_with_actions(c, maps, num_actions)
                .unwrap()
                .vocabulary_size()
        })
        .collect()
}

fn items(sentences: &[Sentence]) -> Vec<String> {
    sentences
        .iter()
        .map(|s| write_conllu(std::slice::from_ref(s)))
        .collect()
}

/// What a step-by-step run gives.
struct Run {
    predictions: Vec<String>,
    /// The features component's fixed features as `(step, index, id)`, per channel.
    features: Vec<Vec<(usize, i32, i64)>>,
    /// Its number of steps.
    features_steps: usize,
    /// Fixed features and non-padding linked features extracted, over all components.
    fixed_count: usize,
    linked_count: usize,
}

/// Runs every component of `spec` along the oracle, extracting and checking every channel at
/// every step, and finalizes each.
fn run_step_by_step(
    session: &mut ComputeSession,
    spec: &MasterSpec,
    maps: &TermMaps,
    sentences: &[Sentence],
) -> Result<Run> {
    session.set_input_data(items(sentences));
    let mut run = Run {
        predictions: Vec::new(),
        features: Vec::new(),
        features_steps: 0,
        fixed_count: 0,
        linked_count: 0,
    };
    for comp in &spec.component {
        let name = comp.name();
        let vocab = vocabulary_sizes(comp, maps);
        session.initialize_component_data(name, comp.inference_beam_size().max(1) as usize)?;
        let batch = session.batch_size(name)?;
        let beam = session.beam_size(name)?;
        assert_eq!(batch, sentences.len());
        if name == "features" {
            run.features = vec![Vec::new(); comp.fixed_feature.len()];
        }
        let mut step = 0usize;
        while !session.is_terminal(name)? {
            for (c, channel) in comp.fixed_feature.iter().enumerate() {
                let size = channel.size() as usize;
                let mut out = FixedFeatureOutput::default();
                let n = session.get_input_features(name, c, &mut out)?;
                assert_eq!((n, out.ids.len(), out.weights.len()), (out.len(), n, n));
                for i in 0..n {
                    let (index, id) = (out.indices[i], out.ids[i]);
                    assert!(
                        index >= 0 && (index as usize) < batch * beam * size,
                        "{name}/{}: step {step}: index {index} outside [0, {})",
                        channel.name(),
                        batch * beam * size
                    );
                    assert!(
                        id >= 0 && (id as usize) < vocab[c],
                        "{name}/{}: step {step}: id {id} outside [0, {})",
                        channel.name(),
                        vocab[c]
                    );
                    assert_eq!(out.weights[i], 1.0);
                    if name == "features" {
                        run.features[c].push((step, index, id));
                    }
                }
                run.fixed_count += n;
            }
            for (c, channel) in comp.linked_feature.iter().enumerate() {
                let size = channel.size() as usize;
                let links = session.get_translated_link_features(name, c)?;
                assert_eq!(
                    links.len(),
                    batch * beam * size,
                    "{name}/{}",
                    channel.name()
                );
                let source = session.readied_component(channel.source_component())?;
                let source_beam = session.source_component_beam_size(name, c)? as i32;
                let this = session.readied_component(name)?;
                for (i, link) in links.iter().enumerate() {
                    let Some(link) = link else { continue };
                    run.linked_count += 1;
                    let b = i / size / beam;
                    let what = format!("{name}/{}: step {step}, batch {b}", channel.name());
                    assert_eq!(link.batch_index, b, "{what}");
                    let taken = source.steps_taken(b);
                    assert!(
                        link.step_index >= -1 && link.step_index < taken.max(0),
                        "{what}: link step {} outside [-1, {taken})",
                        link.step_index
                    );
                    if link.step_index >= 0 {
                        assert!(
                            link.beam_index >= 0 && link.beam_index < source_beam,
                            "{what}: beam {} outside [0, {source_beam})",
                            link.beam_index
                        );
                    }
                    if name == "tagger" && channel.name() == "words" {
                        // The tagger tags one token a step: its focus is its step count.
                        let at = this.steps_taken(b);
                        let expected = if (at as usize) < sentences[b].len() {
                            at
                        } else {
                            -1
                        };
                        assert_eq!(link.step_index, expected, "{what}: tagger focus");
                    }
                }
            }
            session.advance_from_oracle(name)?;
            step += 1;
            assert!(step < 10_000, "{name} does not terminate");
        }
        if name == "features" {
            run.features_steps = step;
        }
        session.finalize_data(name)?;
    }
    run.predictions = session.get_serialized_predictions()?;
    Ok(run)
}

/// Checks one batch: the step-by-step run, its predictions against gold, and the bulk
/// extraction of the features component against the step-by-step ids. Returns the number of
/// projective sentences compared and the features extracted.
fn check_batch(
    spec: &MasterSpec,
    maps: &Arc<TermMaps>,
    sentences: &[Sentence],
) -> Result<(usize, usize)> {
    let mut session = ComputeSession::new(0, spec, &GridPoint::default(), maps.clone())?;
    let run = run_step_by_step(&mut session, spec, maps, sentences)?;
    let gold = items(sentences);
    assert_eq!(run.predictions.len(), gold.len());
    let mut projective = 0;
    for (i, s) in sentences.iter().enumerate() {
        if is_projective(&s.heads()) {
            assert_eq!(run.predictions[i], gold[i], "sentence {i}");
            projective += 1;
        }
    }
    assert!(run.fixed_count > 0 && run.linked_count > 0);

    // The bulk path: a fresh session, the features component alone.
    session.reset_session();
    session.set_input_data(gold);
    session.initialize_component_data("features", 1)?;
    let mut bulk = BulkFeatures::default();
    let steps = session.bulk_get_input_features("features", &mut bulk)?;
    assert_eq!(steps, run.features_steps);
    assert!(session.is_terminal("features")?);
    let features = &spec.component[0];
    assert_eq!(bulk.channels.len(), features.fixed_feature.len());
    let elements = sentences.len(); // beam 1
    for (c, channel) in features.fixed_feature.iter().enumerate() {
        let size = channel.size() as usize;
        let mut expected: Vec<(i32, i64)> = run.features[c]
            .iter()
            .map(|&(step, index, id)| {
                let (element, slot) = (index as usize / size, index as usize % size);
                (
                    (slot * elements * steps + element * steps + step) as i32,
                    id,
                )
            })
            .collect();
        let out = &bulk.channels[c];
        let mut got: Vec<(i32, i64)> = out
            .indices
            .iter()
            .copied()
            .zip(out.ids.iter().copied())
            .collect();
        expected.sort_unstable();
        got.sort_unstable();
        assert_eq!(
            got,
            expected,
            "bulk != step by step for channel {}",
            channel.name()
        );
    }
    Ok((projective, run.fixed_count + run.linked_count))
}

#[test]
fn tagger_parser_with_real_features_on_the_fixture() -> Result<()> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/features.conllu"
    ))
    .unwrap();
    let sentences = read_conllu(&text)?;
    assert!(sentences.iter().all(|s| is_projective(&s.heads())));
    let maps = Arc::new(TermMaps::build(&sentences, &TermMapOptions::default()));
    let spec = tagger_parser_spec();
    let (projective, _) = check_batch(&spec, &maps, &sentences)?;
    assert_eq!(projective, sentences.len());
    // one sentence at a time too
    for s in &sentences {
        check_batch(&spec, &maps, std::slice::from_ref(s))?;
    }
    Ok(())
}

fn treebank_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KILN_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data")))
        .join("turkish-treebanks");
    if dir.join("web.conllu").exists() && dir.join("wiki.conllu").exists() {
        return Some(dir);
    }
    let msg = format!(
        "{} has no web.conllu/wiki.conllu (run scripts/fetch-data.sh)",
        dir.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and {msg}");
    }
    eprintln!("skipping: {msg}");
    None
}

#[test]
fn tagger_parser_with_real_features_on_the_treebank() -> Result<()> {
    let Some(dir) = treebank_dir() else {
        return Ok(());
    };
    let train = read_turkish_treebank(&dir)?.train;
    assert_eq!(train.len(), 3881);
    let maps = Arc::new(TermMaps::build(&train, &TermMapOptions::default()));
    let spec = tagger_parser_spec();
    let (mut projective, mut features) = (0, 0);
    for batch in train.chunks(64) {
        let (p, f) = check_batch(&spec, &maps, batch)?;
        projective += p;
        features += f;
    }
    eprintln!(
        "{} training sentences, {projective} projective, {features} features checked",
        train.len()
    );
    assert!(projective > train.len() / 2);
    Ok(())
}

//! Contract checks of DRAGNN's `compute_session_impl_test` (reference section (f)) on
//! [`ComputeSession`], with mock components where the reference used mocks, and an
//! end-to-end oracle run (tagger, then arc-standard parser) on real sentences whose
//! serialized predictions must equal the gold CoNLL-U for projective trees.
//!
//! Depends on kiln-dragnn's session, component, spec, input, document and term-map modules.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kiln_dragnn::component::{
    BulkFeatures, Component, ComponentStepTrace, ComponentTrace, FeatureAllocator,
    FixedFeatureOutput, RawLinkFeature,
};
use kiln_dragnn::document::{read_conllu, read_conllu_file, write_conllu, Sentence};
use kiln_dragnn::input::InputBatchCache;
use kiln_dragnn::session::ComputeSession;
use kiln_dragnn::spec::{ComponentSpec, GridPoint, MasterSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use kiln_dragnn::transition::{is_projective, ParserState};
use kiln_dragnn::translator::{LinkIndex, Method, TranslationSource, TranslatorError};
use kiln_dragnn::Result;

type Log = Arc<Mutex<Vec<String>>>;

/// A scriptable component that logs its calls.
struct Mock {
    name: String,
    log: Log,
    ready: bool,
    terminal: bool,
    batch: usize,
    beam: usize,
    states: Vec<Vec<ParserState>>,
    raw_links: Vec<Option<RawLinkFeature>>,
    traces: Vec<Vec<ComponentTrace>>,
    /// source_beam_index(i) = i + source_offset
    source_offset: i32,
    /// beam_index_at_step(step, i) = i * 10 + step
    steps_taken: i32,
}

impl Mock {
    fn new(name: &str, log: &Log) -> Mock {
        Mock {
            name: name.into(),
            log: log.clone(),
            ready: false,
            terminal: true,
            batch: 0,
            beam: 0,
            states: Vec::new(),
            raw_links: Vec::new(),
            traces: Vec::new(),
            source_offset: 0,
            steps_taken: 0,
        }
    }
    fn record(&self, call: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}.{call}", self.name));
    }
}

impl TranslationSource for Mock {
    fn name(&self) -> &str {
        &self.name
    }
    fn source_beam_index(&self, current_index: i32, batch: usize) -> i32 {
        self.record(format!("source_beam_index({current_index},{batch})"));
        current_index + self.source_offset
    }
    fn beam_index_at_step(&self, step: i32, current_index: i32, batch: usize) -> i32 {
        self.record(format!(
            "beam_index_at_step({step},{current_index},{batch})"
        ));
        current_index * 10 + step
    }
    fn steps_taken(&self, _batch: usize) -> i32 {
        self.steps_taken
    }
    fn lookup_step(
        &self,
        method: Method,
        _: usize,
        beam: i32,
        value: i32,
    ) -> Result<i32, TranslatorError> {
        self.record(format!("lookup_step({method},{beam},{value})"));
        Ok(value + 100)
    }
}

impl Component for Mock {
    fn initialize_data(
        &mut self,
        parent_states: &[Vec<ParserState>],
        max_beam_size: usize,
        input: &mut InputBatchCache,
    ) -> Result<()> {
        self.record(format!(
            "initialize_data({},{max_beam_size},{})",
            parent_states.len(),
            input.size()
        ));
        self.ready = true;
        self.beam = max_beam_size;
        Ok(())
    }
    fn is_ready(&self) -> bool {
        self.ready
    }
    fn initialize_tracing(&mut self) -> Result<()> {
        self.record("initialize_tracing".into());
        Ok(())
    }
    fn disable_tracing(&mut self) {
        self.record("disable_tracing".into());
    }
    fn batch_size(&self) -> usize {
        self.batch
    }
    fn beam_size(&self) -> usize {
        self.beam
    }
    fn advance_from_prediction(&mut self, _: &[f32], _: usize, _: usize) -> Result<()> {
        self.record("advance_from_prediction".into());
        Ok(())
    }
    fn advance_from_oracle(&mut self) -> Result<()> {
        self.record("advance_from_oracle".into());
        Ok(())
    }
    fn is_terminal(&self) -> bool {
        self.terminal
    }
    fn get_beam(&self) -> Vec<Vec<ParserState>> {
        self.record("get_beam".into());
        self.states.clone()
    }
    fn get_fixed_features(&self, _: usize, out: &mut dyn FeatureAllocator) -> Result<usize> {
        out.allocate(0);
        Ok(0)
    }
    fn bulk_get_fixed_features(&mut self, _: &mut BulkFeatures) -> Result<usize> {
        Ok(0)
    }
    fn get_raw_link_features(&self, channel: usize) -> Result<Vec<Option<RawLinkFeature>>> {
        self.record(format!("get_raw_link_features({channel})"));
        Ok(self.raw_links.clone())
    }
    fn get_oracle_labels(&self) -> Result<Vec<Vec<i32>>> {
        Ok(vec![])
    }
    fn finalize_data(&mut self, _: &mut InputBatchCache) -> Result<()> {
        self.record("finalize_data".into());
        Ok(())
    }
    fn reset_component(&mut self) {
        self.record("reset_component".into());
        self.ready = false;
    }
    fn get_trace_protos(&self) -> Result<Vec<Vec<ComponentTrace>>> {
        Ok(self.traces.clone())
    }
    fn add_translated_link_features_to_trace(
        &self,
        features: &[Option<LinkIndex>],
        channel: usize,
    ) -> Result<()> {
        self.record(format!("add_trace({},{channel})", features.len()));
        Ok(())
    }
}

const ONE_WORD: &str = "1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n";

fn three_component_spec() -> MasterSpec {
    MasterSpec::from_text(
        r#"
        component { name: "A" backend { registered_name: "Mock" } }
        component { name: "B" backend { registered_name: "Mock" }
          linked_feature { name: "ba" source_component: "A" source_translator: "identity" size: 1 }
          linked_feature { name: "ba2" source_component: "A" source_translator: "history" size: 1 } }
        component { name: "C" backend { registered_name: "Mock" }
          linked_feature { name: "ca" source_component: "A" source_translator: "reverse-token" size: 1 }
          linked_feature { name: "cc" source_component: "C" source_translator: "shift-reduce-step" size: 1 } }
        "#,
    )
    .unwrap()
}

/// A session of mocks over `spec`; `edit` adjusts each mock before it is boxed.
fn mock_session(spec: &MasterSpec, log: &Log, edit: impl Fn(&mut Mock)) -> Result<ComputeSession> {
    let components = spec
        .component
        .iter()
        .map(|c| {
            let mut m = Mock::new(c.name(), log);
            edit(&mut m);
            Box::new(m) as Box<dyn Component>
        })
        .collect();
    ComputeSession::from_components(0, spec, &GridPoint::default(), components)
}

fn calls(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

#[test]
fn a_translator_to_an_unknown_source_fails_init() {
    let spec = MasterSpec::from_text(
        r#"component { name: "A" linked_feature { name: "l" source_component: "Z" source_translator: "identity" size: 1 } }"#,
    )
    .unwrap();
    let log = Log::default();
    let err = mock_session(&spec, &log, |_| {}).unwrap_err();
    assert!(
        err.to_string().contains("Unable to find source component"),
        "{err}"
    );
}

#[test]
fn initializing_without_input_data_fails() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |_| {})?;
    let err = s.initialize_component_data("A", 1).unwrap_err();
    assert!(
        err.to_string().contains("without providing input data"),
        "{err}"
    );
    Ok(())
}

#[test]
fn unknown_component_names_fail() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |_| {})?;
    s.set_input_data(vec![]);
    let msg = |r: Result<()>| r.unwrap_err().to_string();
    assert!(msg(s.batch_size("Z").map(drop)).contains("Could not find component"));
    assert!(msg(s.initialize_component_data("Z", 1)).contains("Could not find component"));
    assert!(msg(s.advance_from_oracle("Z")).contains("Could not find component"));
    assert!(msg(s.spec("Z").map(drop)).contains("Missing component"));
    Ok(())
}

#[test]
fn a_non_terminal_predecessor_fails() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |m| {
        m.terminal = m.name != "A"
    })?;
    s.set_input_data(vec![ONE_WORD.into()]);
    s.initialize_component_data("A", 1)?;
    let err = s.initialize_component_data("B", 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Source component 'A' for currently active component 'B' is not terminal. Are you using \
         bulk feature extraction with only linked features? If so, consider using the \
         StatelessComponent instead."
    );
    Ok(())
}

#[test]
fn every_readied_method_needs_initialized_data() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |_| {})?;
    let mut out = FixedFeatureOutput::default();
    let errors = vec![
        s.batch_size("B").map(drop),
        s.beam_size("B").map(drop),
        s.emit_oracle_labels("B").map(drop),
        s.is_terminal("B").map(drop),
        s.get_input_features("B", 0, &mut out).map(drop),
        s.get_translated_link_features("B", 0).map(drop),
        s.advance_from_oracle("B"),
        s.advance_from_prediction("B", &[], 0, 0),
        s.finalize_data("B"),
        s.bulk_get_input_features("B", &mut BulkFeatures::default())
            .map(drop),
    ];
    for e in errors {
        let e = e.unwrap_err().to_string();
        assert!(e.contains("without first initializing it"), "{e}");
    }
    Ok(())
}

#[test]
fn translator_paths_and_methods() -> Result<()> {
    let log = Log::default();
    let s = mock_session(&three_component_spec(), &log, |_| {})?;
    assert_eq!(s.translator_paths("B")?, [vec!["B", "A"], vec!["B", "A"]]);
    let methods: Vec<_> = s
        .translators("B")?
        .iter()
        .map(|t| t.method().name())
        .collect();
    assert_eq!(methods, ["identity", "history"]);
    assert_eq!(s.translator_paths("C")?, [vec!["C", "B", "A"], vec!["C"]]);
    assert_eq!(s.translators("C")?[1].method(), Method::ShiftReduceStep);
    let err = s.translators("A").unwrap_err().to_string();
    assert!(
        err.contains("Could not find component 'A' in the translator set"),
        "{err}"
    );
    Ok(())
}

#[test]
fn source_component_beam_size_is_the_sources() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |_| {})?;
    s.set_input_data(vec![ONE_WORD.into()]);
    s.initialize_component_data("A", 7)?;
    s.initialize_component_data("B", 2)?;
    s.initialize_component_data("C", 3)?;
    assert_eq!(s.source_component_beam_size("B", 0)?, 7);
    assert_eq!(s.source_component_beam_size("C", 0)?, 7);
    assert_eq!(s.source_component_beam_size("C", 1)?, 3);
    Ok(())
}

#[test]
fn initialization_passes_the_source_beam_and_reset_resets_all() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |_| {})?;
    s.set_input_data(vec![ONE_WORD.into(), ONE_WORD.into()]);
    s.initialize_component_data("A", 3)?;
    s.initialize_component_data("B", 4)?;
    assert_eq!(
        calls(&log),
        [
            "A.initialize_data(0,3,2)",
            "A.get_beam",
            "B.initialize_data(0,4,2)"
        ]
    );
    s.reset_session();
    assert_eq!(
        calls(&log),
        [
            "A.reset_component",
            "B.reset_component",
            "C.reset_component"
        ]
    );
    assert!(s.input_batch_cache().is_none());
    assert!(s.batch_size("A").is_err());
    Ok(())
}

#[test]
fn translated_link_features_walk_the_path_and_keep_padding() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |m| {
        if m.name == "B" {
            m.source_offset = 1;
            m.raw_links = vec![
                Some(RawLinkFeature {
                    batch_idx: 0,
                    beam_idx: 2,
                    feature_value: 5,
                }),
                None,
                Some(RawLinkFeature {
                    batch_idx: 1,
                    beam_idx: 0,
                    feature_value: -2,
                }),
            ];
        }
    })?;
    s.set_input_data(vec![ONE_WORD.into()]);
    s.initialize_component_data("A", 1)?;
    s.initialize_component_data("B", 1)?;
    calls(&log);
    let got = s.get_translated_link_features("B", 0)?;
    assert_eq!(
        got,
        [
            Some(LinkIndex {
                batch_index: 0,
                beam_index: 35,
                step_index: 5
            }),
            None,
            Some(LinkIndex {
                batch_index: 1,
                beam_index: 8,
                step_index: -1
            }),
        ]
    );
    assert_eq!(
        calls(&log),
        [
            "B.get_raw_link_features(0)",
            "B.source_beam_index(2,0)",
            "A.beam_index_at_step(5,3,0)",
            "B.source_beam_index(0,1)",
            "A.beam_index_at_step(-2,1,1)",
        ]
    );
    Ok(())
}

#[test]
fn tracing_records_link_features_until_turned_off() -> Result<()> {
    let log = Log::default();
    let mut s = mock_session(&three_component_spec(), &log, |m| {
        m.raw_links = vec![
            Some(RawLinkFeature {
                batch_idx: 0,
                beam_idx: 0,
                feature_value: 0,
            }),
            None,
        ];
    })?;
    s.set_tracing(true);
    s.set_input_data(vec![ONE_WORD.into()]);
    s.initialize_component_data("A", 1)?;
    s.initialize_component_data("B", 1)?;
    assert!(calls(&log).contains(&"B.initialize_tracing".to_string()));
    s.get_translated_link_features("B", 0)?;
    assert!(calls(&log).contains(&"B.add_trace(2,0)".to_string()));
    s.set_tracing(false);
    assert_eq!(
        calls(&log),
        [
            "A.disable_tracing",
            "B.disable_tracing",
            "C.disable_tracing"
        ]
    );
    s.get_translated_link_features("B", 0)?;
    assert!(!calls(&log).iter().any(|c| c.contains("add_trace")));
    Ok(())
}

fn trace(name: &str, step: usize) -> ComponentTrace {
    ComponentTrace {
        name: name.into(),
        steps: vec![ComponentStepTrace {
            step,
            action: step as i32,
            action_name: String::new(),
            score: 0.0,
            linked_features: vec![],
        }],
    }
}

#[test]
fn trace_protos_backtrack_the_beam_path() -> Result<()> {
    let spec = MasterSpec::from_text(r#"component { name: "A" } component { name: "B" }"#)?;
    let log = Log::default();
    let mut s = mock_session(&spec, &log, |m| {
        if m.name == "A" {
            // batch 0: slots 0..3, batch 1: slot 0..2, distinguished by step
            m.traces = vec![
                vec![trace("A", 0), trace("A", 1), trace("A", 2)],
                vec![trace("A", 10), trace("A", 11)],
            ];
        } else {
            m.source_offset = 1; // slot i of B came from slot i + 1 of A
            m.traces = vec![vec![trace("B", 0), trace("B", 1)], vec![trace("B", 10)]];
        }
    })?;
    s.set_tracing(true);
    s.set_input_data(vec![ONE_WORD.into(), ONE_WORD.into()]);
    s.initialize_component_data("A", 3)?;
    s.initialize_component_data("B", 2)?;
    let traces = s.get_trace_protos()?;
    assert_eq!(traces.len(), 3);
    let steps: Vec<(usize, usize)> = traces
        .iter()
        .map(|t| {
            (
                t.component_trace[0].steps[0].step,
                t.component_trace[1].steps[0].step,
            )
        })
        .collect();
    assert_eq!(steps, [(1, 0), (2, 1), (11, 10)]);
    Ok(())
}

#[test]
fn sessions_build_components_by_backend_name() -> Result<()> {
    let spec = MasterSpec::from_text(
        r#"component { name: "A" transition_system { registered_name: "shift-only" }
                       backend { registered_name: "SyntaxNetComponent" } }
           component { name: "B" backend { registered_name: "StatelessComponent" } }"#,
    )?;
    let maps = Arc::new(TermMaps::default());
    let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), maps.clone())?;
    s.set_input_data(vec![ONE_WORD.into()]);
    s.initialize_component_data("A", 1)?;
    let err = s.initialize_component_data("B", 1).unwrap_err().to_string();
    assert!(err.contains("is not terminal"), "{err}");
    s.advance_from_oracle("A")?;
    s.initialize_component_data("B", 1)?;
    // The stateless component forwards A's top states and is terminal.
    assert_eq!((s.batch_size("B")?, s.is_terminal("B")?), (1, true));
    let err = s.advance_from_oracle("B").unwrap_err().to_string();
    assert!(err.contains("[B] Method not supported"), "{err}");
    let _ = maps;
    Ok(())
}

#[test]
fn an_unknown_backend_fails() {
    let spec =
        MasterSpec::from_text(r#"component { name: "A" backend { registered_name: "Nope" } }"#)
            .unwrap();
    let err = ComputeSession::new(
        0,
        &spec,
        &GridPoint::default(),
        Arc::new(TermMaps::default()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown backend 'Nope'"), "{err}");
}

// ---------------------------------------------------------------------------------------
// End to end: tagger then arc-standard parser along the oracle.

fn tagger_parser_spec() -> MasterSpec {
    MasterSpec::from_text(
        r#"component { name: "tagger" transition_system { registered_name: "tagger" }
                       backend { registered_name: "SyntaxNetComponent" } }
           component { name: "parser" transition_system { registered_name: "arc-standard" }
                       backend { registered_name: "SyntaxNetComponent" } }"#,
    )
    .unwrap()
}

/// Runs the oracle through every component; returns the serialized predictions.
fn oracle_run(
    session: &mut ComputeSession,
    items: Vec<String>,
    beam: usize,
) -> Result<Vec<String>> {
    session.set_input_data(items);
    for name in ["tagger", "parser"] {
        session.initialize_component_data(name, beam)?;
        let mut steps = 0;
        while !session.is_terminal(name)? {
            session.advance_from_oracle(name)?;
            steps += 1;
            assert!(steps < 10_000, "{name} does not terminate");
        }
        session.finalize_data(name)?;
    }
    session.get_serialized_predictions()
}

fn items(sentences: &[Sentence]) -> Vec<String> {
    sentences
        .iter()
        .map(|s| write_conllu(std::slice::from_ref(s)))
        .collect()
}

#[test]
fn oracle_run_reproduces_the_fixture() -> Result<()> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/features.conllu"
    ))
    .unwrap();
    let sentences = read_conllu(&text)?;
    assert!(sentences.iter().all(|s| is_projective(&s.heads())));
    let maps = Arc::new(TermMaps::build(&sentences, &TermMapOptions::default()));
    let mut session = ComputeSession::new(0, &tagger_parser_spec(), &GridPoint::default(), maps)?;
    let gold = items(&sentences);
    for beam in [1, 4] {
        let got = oracle_run(&mut session, gold.clone(), beam)?;
        assert_eq!(got, gold, "beam {beam}");
        assert_eq!(got.concat(), text);
        session.reset_session();
    }
    Ok(())
}

#[test]
fn oracle_run_reproduces_projective_treebank_sentences() -> Result<()> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/turkish-treebanks"
    ));
    if !dir.join("web.conllu").exists() {
        eprintln!("skipping: {} has no web.conllu", dir.display());
        return Ok(());
    }
    let sentences = read_conllu_file(dir.join("web.conllu"))?;
    let maps = Arc::new(TermMaps::build(&sentences, &TermMapOptions::default()));
    let projective: Vec<Sentence> = sentences
        .into_iter()
        .filter(|s| is_projective(&s.heads()))
        .collect();
    assert!(projective.len() > 100);
    let mut session = ComputeSession::new(0, &tagger_parser_spec(), &GridPoint::default(), maps)?;
    for chunk in projective.chunks(64) {
        let gold = items(chunk);
        let got = oracle_run(&mut session, gold.clone(), 1)?;
        assert_eq!(got, gold);
        session.reset_session();
    }
    Ok(())
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<ComputeSession>();
    let _ = ComponentSpec::default;
}

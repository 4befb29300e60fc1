//! Tests of `kiln_dragnn::spec`: the fixture master specs (the reference's tagger, parser and
//! tagger→parser shapes, the English parser and the UD Hungarian baseline) load from text and
//! JSON and validate; text and JSON give equal specs; text and JSON round trips; proto2
//! defaults; one failing spec per validation rule, the error naming component and field;
//! parse errors with positions; hostile input gives errors, not panics.

use std::path::PathBuf;

use kiln_dragnn::spec::{
    ComponentSpec, GridPoint, MasterSpec, Position, SpecError, SpecFormat, TrainingGridSpec,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/specs")
        .join(name)
}

const TEXT_FIXTURES: &[&str] = &[
    "simple_tagger.textproto",
    "simple_parser.textproto",
    "tagger_parser.textproto",
    "en_parser.textproto",
    "ud_hungarian.master-spec",
];

const JSON_TWINS: &[(&str, &str)] = &[
    ("simple_tagger.textproto", "simple_tagger.json"),
    ("tagger_parser.textproto", "tagger_parser.json"),
];

fn load(name: &str) -> MasterSpec {
    MasterSpec::from_file(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_fixture_loads_and_validates() {
    for name in TEXT_FIXTURES
        .iter()
        .chain(JSON_TWINS.iter().map(|(_, json)| json))
    {
        let spec = load(name);
        assert!(!spec.component.is_empty(), "{name}");
        if let Err(e) = spec.validate() {
            panic!("{name}: {e}");
        }
        assert!(spec.validation_errors().is_empty(), "{name}");
    }
}

#[test]
fn fixtures_have_the_reference_shapes() {
    let tagger = load("simple_tagger.textproto");
    let c = &tagger.component[0];
    assert_eq!(c.name(), "tagger");
    assert_eq!(c.transition_system_name(), "tagger");
    assert_eq!(c.transition_parameter("join_category_to_pos"), Some("true"));
    assert_eq!(c.fixed_feature[0].size(), 7);
    assert_eq!(c.fixed_feature[0].templates().unwrap().len(), 7);
    assert_eq!(c.linked_feature[0].source_translator(), "shift-reduce-step");
    assert!(c.is_recurrent(&c.linked_feature[0]));
    assert_eq!(c.inference_beam_size(), 3);
    assert_eq!(
        c.network_unit
            .as_ref()
            .unwrap()
            .parameter("hidden_layer_sizes"),
        Some("64")
    );

    let parser = load("simple_parser.textproto");
    let c = &parser.component[0];
    assert_eq!(c.transition_system_name(), "arc-standard");
    assert_eq!(c.linked_feature[0].size(), 2);
    assert_eq!(c.inference_beam_size(), 4);

    let pipeline = load("tagger_parser.textproto");
    let names: Vec<_> = pipeline.component.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["features", "tagger", "parser"]);
    assert_eq!(pipeline.component_index("parser"), Some(2));
    let parser = pipeline.component_by_name("parser").unwrap();
    assert_eq!(parser.num_actions(), 93);
    assert_eq!(parser.inference_beam_size(), 5);
    assert_eq!(parser.linked_feature.len(), 3);
    let tagger = pipeline.component_by_name("tagger").unwrap();
    assert_eq!(tagger.linked_feature[0].embedding_dim(), -1);
    assert_eq!(tagger.num_actions(), 49);

    let english = load("en_parser.textproto");
    assert_eq!(english.component.len(), 4);
    assert_eq!(
        english.component[0].transition_system_name(),
        "char-shift-only"
    );
    assert_eq!(english.component[3].fixed_feature[0].size, None);

    let hungarian = load("ud_hungarian.master-spec");
    let encoder = &hungarian.component[0];
    assert_eq!(encoder.fixed_feature[1].size(), 4);
    assert_eq!(
        encoder.fixed_feature[1].templates().unwrap(),
        [
            "input.token.digit",
            "input.token.hyphen",
            "input.token.punctuation-amount",
            "input.token.quote"
        ]
    );
    assert_eq!(hungarian.component[2].fixed_feature[1].size(), 12);
    assert_eq!(hungarian.component[2].num_actions(), 109);
}

#[test]
fn fill_sizes_completes_the_english_spec() {
    let mut english = load("en_parser.textproto");
    english.fill_sizes().unwrap();
    let parser = english.component_by_name("parser").unwrap();
    assert_eq!(parser.fixed_feature[0].size, Some(12));
    let sizes: Vec<_> = parser.linked_feature.iter().map(|l| l.size()).collect();
    assert_eq!(sizes, [1, 3, 2]);
    english.validate().unwrap();
    // Sizes already set are kept.
    let mut hungarian = load("ud_hungarian.master-spec");
    let before = hungarian.clone();
    hungarian.fill_sizes().unwrap();
    assert_eq!(hungarian, before);
}

#[test]
fn text_and_json_forms_give_equal_specs() {
    for (text, json) in JSON_TWINS {
        assert_eq!(load(text), load(json), "{text} vs {json}");
    }
}

#[test]
fn text_and_json_round_trips() {
    for name in TEXT_FIXTURES {
        let spec = load(name);
        let text = spec.to_text();
        assert_eq!(MasterSpec::from_text(&text).unwrap(), spec, "{name}");
        // Printing is stable.
        assert_eq!(MasterSpec::from_text(&text).unwrap().to_text(), text);
        let json = spec.to_json();
        assert_eq!(MasterSpec::from_json(&json).unwrap(), spec, "{name}");
    }
    let grid = TrainingGridSpec::from_text(
        &std::fs::read_to_string(fixture("training_grid.textproto")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        TrainingGridSpec::from_text(&grid.to_text().unwrap()).unwrap(),
        grid
    );
    let component = load("tagger_parser.textproto").component[2].clone();
    assert_eq!(
        ComponentSpec::from_text(&component.to_text()).unwrap(),
        component
    );
}

#[test]
fn to_text_keeps_explicit_defaults_and_map_parameters() {
    let spec = MasterSpec::from_text(
        "component { name: 'a' training_beam_size: 1 attention_component: '' \
         transition_system { registered_name: 'x' parameters { key: 'k' value: 'v' } } }",
    )
    .unwrap();
    let c = &spec.component[0];
    assert_eq!(c.training_beam_size, Some(1));
    assert_eq!(c.attention_component.as_deref(), Some(""));
    assert_eq!(c.inference_beam_size, None);
    let text = spec.to_text();
    assert!(text.contains("training_beam_size: 1"), "{text}");
    assert!(!text.contains("inference_beam_size"), "{text}");
    let again = MasterSpec::from_text(&text).unwrap();
    assert_eq!(again.component[0].transition_parameter("k"), Some("v"));
}

#[test]
fn grid_point_defaults() {
    let g = GridPoint::default();
    assert_eq!(g.learning_rate(), 0.1);
    assert_eq!(g.momentum(), 0.9);
    assert_eq!(g.decay_base(), 0.96);
    assert_eq!(g.decay_steps(), 1000);
    assert!(g.decay_staircase());
    assert_eq!(g.seed(), 0);
    assert_eq!(g.learning_method(), "momentum");
    assert!(!g.use_moving_average());
    assert_eq!(g.average_weight(), 0.9999);
    assert_eq!(g.dropout_rate(), 1.0);
    assert_eq!(g.recurrent_dropout_rate(), -1.0);
    assert_eq!(g.gradient_clip_norm(), 0.0);
    assert_eq!(g.adam_beta1(), 0.01);
    assert_eq!(g.adam_beta2(), 0.9999);
    assert_eq!(g.adam_eps(), 1e-8);
    assert_eq!(g.l2_regularization_coefficient(), 1e-4);
    assert_eq!(g.self_norm_alpha(), 0.0);
    assert_eq!(g.self_norm_components_filter(), "");
    assert!(!g.pbt_optimize_learning_rate());
    assert!(g.composite_optimizer_spec.is_none());
    // The same defaults through the text format, and a set value wins.
    let g = GridPoint::from_text("momentum: 0.5").unwrap();
    assert_eq!(g.momentum(), 0.5);
    assert_eq!(g.learning_rate(), 0.1);

    let grid = TrainingGridSpec::from_text(
        &std::fs::read_to_string(fixture("training_grid.textproto")).unwrap(),
    )
    .unwrap();
    let point = &grid.grid_point[0];
    let composite = point.composite_optimizer_spec.as_ref().unwrap();
    assert_eq!(composite.switch_after_steps(), 10000);
    assert!(!composite.reset_learning_rate());
    let adam = composite.method1.as_ref().unwrap();
    assert_eq!(adam.adam_eps(), 1e-12);
    assert_eq!(adam.learning_rate(), 0.1);
    assert_eq!(grid.target[0].component_weights, [0.0, 0.5, 0.5]);
    assert_eq!(grid.target[0].unroll_using_oracle, [false, true, true]);
    assert_eq!(grid.target[0].max_index(), 3);
    assert_eq!(kiln_dragnn::spec::TrainTarget::default().max_index(), -1);
}

#[test]
fn component_and_channel_defaults() {
    let c = ComponentSpec::default();
    assert_eq!(c.name(), "");
    assert_eq!(c.num_actions(), 0);
    assert_eq!(c.attention_component(), "");
    assert_eq!(c.training_beam_size(), 1);
    assert_eq!(c.inference_beam_size(), 1);
    assert_eq!(c.transition_system_name(), "");
    assert_eq!(c.backend_name(), "");
    let spec = MasterSpec::default();
    assert!(!spec.debug_tracing());
    spec.validate().unwrap(); // an empty spec is valid (the pool's default spec)
    let fixed = kiln_dragnn::spec::FixedFeatureChannel::default();
    assert_eq!(fixed.dropout_id(), -1);
    assert!(!fixed.is_constant());
    assert_eq!(fixed.embedding_dim(), 0);
    let linked = kiln_dragnn::spec::LinkedFeatureChannel::default();
    assert_eq!(linked.source_translator(), "");
}

// ---------------------------------------------------------------------------------------
// Validation: one failing case per rule.

/// A valid two-component spec (`tagger` then `parser`) into which `edit` is spliced.
fn base_spec() -> MasterSpec {
    MasterSpec::from_text(
        r#"
        component {
          name: "tagger"
          num_actions: 45
          transition_system { registered_name: "tagger" }
          fixed_feature { name: "words" fml: "input.word input(1).word" embedding_dim: 32
                          vocabulary_size: 100 size: 2 }
          linked_feature { name: "rnn" fml: "constant" embedding_dim: 16 size: 1
                           source_component: "tagger" source_translator: "history"
                           source_layer: "layer_0" }
          backend { registered_name: "SyntaxNetComponent" }
          network_unit { registered_name: "FeedForwardNetwork" }
        }
        component {
          name: "parser"
          num_actions: 5
          transition_system { registered_name: "arc-standard" }
          fixed_feature { name: "tags" fml: "stack.tag" embedding_dim: 16 size: 1 }
          linked_feature { name: "tagger" fml: "input.focus stack.focus" embedding_dim: 32
                           size: 2 source_component: "tagger" source_translator: "identity"
                           source_layer: "layer_0" }
          linked_feature { name: "rnn" fml: "stack.focus" embedding_dim: 32 size: 1
                           source_component: "parser" source_translator: "shift-reduce-step"
                           source_layer: "layer_0" }
          backend { registered_name: "SyntaxNetComponent" }
        }
    "#,
    )
    .unwrap()
}

#[track_caller]
fn assert_invalid(spec: &MasterSpec, component: &str, field: &str, message_part: &str) {
    match spec.validate() {
        Err(SpecError::Invalid {
            component: c,
            field: f,
            message,
        }) => {
            assert_eq!(
                (c.as_str(), f.as_str()),
                (component, field),
                "message: {message}"
            );
            assert!(
                message.contains(message_part),
                "{message:?} does not contain {message_part:?}"
            );
            let shown = spec.validate().unwrap_err().to_string();
            assert!(
                shown.contains(component) && shown.contains(field),
                "{shown}"
            );
        }
        other => panic!("expected an Invalid error for {component}/{field}, got {other:?}"),
    }
}

#[test]
fn the_base_spec_is_valid() {
    base_spec().validate().unwrap();
}

#[test]
fn component_names_are_non_empty_and_unique() {
    let mut spec = base_spec();
    spec.component[1].name = Some(String::new());
    // The parser's own recurrent link then names no component; the name error comes first.
    assert_invalid(&spec, "#1", "name", "is empty");

    let mut spec = base_spec();
    spec.component[1].name = Some("tagger".into());
    assert_invalid(&spec, "tagger", "name", "unique");
}

#[test]
fn links_go_only_to_earlier_components_or_to_self() {
    let mut spec = base_spec();
    spec.component[0].linked_feature[0].source_component = Some("parser".into());
    assert_invalid(
        &spec,
        "tagger",
        "linked_feature[0].source_component",
        "links only to earlier components or to itself",
    );

    let mut spec = base_spec();
    spec.component[1].linked_feature[0].source_component = Some("lexer".into());
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_component",
        "no component is named \"lexer\"",
    );

    let mut spec = base_spec();
    spec.component[1].linked_feature[0].source_component = None;
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_component",
        "is empty",
    );
}

#[test]
fn recurrent_links_need_a_recurrent_translator() {
    for translator in ["identity", "reverse-token", "reverse-char"] {
        let mut spec = base_spec();
        spec.component[1].linked_feature[1].source_translator = Some(translator.into());
        assert_invalid(
            &spec,
            "parser",
            "linked_feature[1].source_translator",
            "recurrent",
        );
    }
    for translator in [
        "history",
        "shift-reduce-step",
        "reduce-step",
        "parent-shift-reduce-step",
    ] {
        let mut spec = base_spec();
        spec.component[1].linked_feature[1].source_translator = Some(translator.into());
        spec.validate().unwrap();
    }
}

#[test]
fn translators_must_be_known() {
    let mut spec = base_spec();
    spec.component[1].linked_feature[0].source_translator = Some("token".into());
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_translator",
        "unknown translator \"token\"",
    );
}

#[test]
fn stateless_sources_and_bulk_builders_take_only_universal_translators() {
    let mut spec = base_spec();
    spec.component[0].backend = Some(kiln_dragnn::spec::RegisteredModuleSpec::named(
        "StatelessComponent",
    ));
    spec.component[1].linked_feature[0].source_translator = Some("reverse-token".into());
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_translator",
        "StatelessComponent",
    );

    let mut spec = base_spec();
    spec.component[1].component_builder = Some(kiln_dragnn::spec::RegisteredModuleSpec::named(
        "bulk_component.BulkFeatureExtractorComponentBuilder",
    ));
    spec.component[1].linked_feature.truncate(1);
    spec.validate().unwrap();
    spec.component[1].linked_feature[0].source_translator = Some("reverse-token".into());
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_translator",
        "bulk",
    );
    let mut spec = base_spec();
    spec.component[0].component_builder = Some(kiln_dragnn::spec::RegisteredModuleSpec::named(
        "BulkFeatureExtractorComponentBuilder",
    ));
    assert_invalid(
        &spec,
        "tagger",
        "linked_feature[0].source_translator",
        "bulk",
    );
}

#[test]
fn size_equals_the_number_of_fml_templates() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].size = Some(3);
    assert_invalid(
        &spec,
        "tagger",
        "fixed_feature[0].size",
        "has 2 feature templates",
    );

    let mut spec = base_spec();
    spec.component[1].linked_feature[0].size = Some(1);
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].size",
        "has 2 feature templates",
    );

    // A token group counts its members.
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].fml = Some("input.token {digit hyphen}".into());
    spec.validate().unwrap();
    spec.component[0].fixed_feature[0].fml = Some("input.token {digit hyphen quote}".into());
    assert_invalid(
        &spec,
        "tagger",
        "fixed_feature[0].size",
        "has 3 feature templates",
    );
}

#[test]
fn fml_must_parse() {
    for fml in ["", "input.token {digit", "input(1.word", "input..word"] {
        let mut spec = base_spec();
        spec.component[0].fixed_feature[0].fml = Some(fml.into());
        assert_invalid(&spec, "tagger", "fixed_feature[0].fml", "");
    }
    let mut spec = base_spec();
    spec.component[1].linked_feature[1].fml = Some("stack.focus }".into());
    assert_invalid(&spec, "parser", "linked_feature[1].fml", "'}'");
}

#[test]
fn transition_systems_must_be_known_and_in_scope() {
    let mut spec = base_spec();
    spec.component[1].transition_system =
        Some(kiln_dragnn::spec::RegisteredModuleSpec::named("arc-eager"));
    assert_invalid(
        &spec,
        "parser",
        "transition_system.registered_name",
        "out of scope",
    );

    let mut spec = base_spec();
    spec.component[1].transition_system =
        Some(kiln_dragnn::spec::RegisteredModuleSpec::named("arc-hybrid"));
    assert_invalid(
        &spec,
        "parser",
        "transition_system.registered_name",
        "unknown transition system",
    );

    let mut spec = base_spec();
    spec.component[0].transition_system = None;
    assert_invalid(&spec, "tagger", "transition_system", "missing");
}

#[test]
fn num_actions_fits_the_transition_system() {
    let mut spec = base_spec();
    spec.component[1].num_actions = Some(6);
    assert_invalid(&spec, "parser", "num_actions", "odd");

    let mut spec = base_spec();
    spec.component[0].num_actions = Some(-1);
    assert_invalid(&spec, "tagger", "num_actions", ">= 0");

    let mut spec = base_spec();
    spec.component[0].transition_system =
        Some(kiln_dragnn::spec::RegisteredModuleSpec::named("shift-only"));
    assert_invalid(&spec, "tagger", "num_actions", "exactly 1 action");
}

#[test]
fn backends_must_be_known() {
    let mut spec = base_spec();
    spec.component[0].backend = Some(kiln_dragnn::spec::RegisteredModuleSpec::named(
        "SyntaxNetComponentX",
    ));
    assert_invalid(
        &spec,
        "tagger",
        "backend.registered_name",
        "unknown backend",
    );

    let mut spec = base_spec();
    spec.component[1].backend = None;
    assert_invalid(&spec, "parser", "backend", "missing");
}

#[test]
fn beam_sizes_are_at_least_one() {
    let mut spec = base_spec();
    spec.component[0].training_beam_size = Some(0);
    assert_invalid(&spec, "tagger", "training_beam_size", ">= 1");

    let mut spec = base_spec();
    spec.component[1].inference_beam_size = Some(-3);
    assert_invalid(&spec, "parser", "inference_beam_size", ">= 1");
}

#[test]
fn embedding_dims_are_minus_one_or_positive() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].embedding_dim = Some(0);
    assert_invalid(&spec, "tagger", "fixed_feature[0].embedding_dim", "-1");

    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].embedding_dim = None;
    assert_invalid(&spec, "tagger", "fixed_feature[0].embedding_dim", "is 0");

    let mut spec = base_spec();
    spec.component[1].linked_feature[0].embedding_dim = Some(-2);
    assert_invalid(&spec, "parser", "linked_feature[0].embedding_dim", "-1");

    let mut spec = base_spec();
    spec.component[1].linked_feature[0].embedding_dim = Some(-1);
    spec.validate().unwrap();
}

#[test]
fn vocabulary_sizes_are_not_negative() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].vocabulary_size = Some(-5);
    assert_invalid(&spec, "tagger", "fixed_feature[0].vocabulary_size", ">= 0");
}

#[test]
fn channels_need_unique_names() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].name = None;
    assert_invalid(&spec, "tagger", "fixed_feature[0].name", "is empty");

    let mut spec = base_spec();
    spec.component[1].linked_feature[1].name = Some("tagger".into());
    assert_invalid(&spec, "parser", "linked_feature[1].name", "two linked");

    let mut spec = base_spec();
    let copy = spec.component[0].fixed_feature[0].clone();
    spec.component[0].fixed_feature.push(copy);
    assert_invalid(&spec, "tagger", "fixed_feature[1].name", "two fixed");
}

#[test]
fn linked_features_need_a_source_layer() {
    let mut spec = base_spec();
    spec.component[1].linked_feature[0].source_layer = Some(String::new());
    assert_invalid(
        &spec,
        "parser",
        "linked_feature[0].source_layer",
        "is empty",
    );
}

#[test]
fn constant_embeddings_need_a_pretrained_matrix() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].is_constant = Some(true);
    assert_invalid(
        &spec,
        "tagger",
        "fixed_feature[0].is_constant",
        "pretrained_embedding_matrix",
    );
}

#[test]
fn feature_dropout_settings_are_consistent() {
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].dropout_id = Some(99);
    assert_invalid(
        &spec,
        "tagger",
        "fixed_feature[0].dropout_keep_probability",
        "is empty",
    );
    spec.component[0].fixed_feature[0].dropout_keep_probability = vec![0.9, 1.5];
    assert_invalid(
        &spec,
        "tagger",
        "fixed_feature[0].dropout_keep_probability[1]",
        "[0, 1]",
    );
    spec.component[0].fixed_feature[0].dropout_keep_probability = vec![0.9];
    spec.validate().unwrap();
    spec.component[0].fixed_feature[0].dropout_id = Some(-2);
    spec.validate().unwrap();
    spec.component[0].fixed_feature[0].dropout_id = Some(-3);
    assert_invalid(&spec, "tagger", "fixed_feature[0].dropout_id", "-1");
}

#[test]
fn attention_goes_to_an_earlier_component() {
    let mut spec = base_spec();
    spec.component[0].attention_component = Some("parser".into());
    assert_invalid(&spec, "tagger", "attention_component", "earlier");

    let mut spec = base_spec();
    spec.component[1].attention_component = Some("nowhere".into());
    assert_invalid(&spec, "parser", "attention_component", "no component");

    let mut spec = base_spec();
    spec.component[1].attention_component = Some("tagger".into());
    spec.validate().unwrap();
}

#[test]
fn registered_modules_and_resources_are_named() {
    let mut spec = base_spec();
    spec.component[0].network_unit = Some(Default::default());
    assert_invalid(&spec, "tagger", "network_unit.registered_name", "is empty");

    let mut spec = MasterSpec::from_text(
        r#"component { name: "a" transition_system { registered_name: "once" }
           backend { registered_name: "StatelessComponent" }
           resource { name: "word-map" part { file_pattern: "w" } }
           resource { name: "word-map" part { file_pattern: "x" } } }"#,
    )
    .unwrap();
    assert_invalid(&spec, "a", "resource[1].name", "two resources");
    spec.component[0].resource[1].name = Some("tag-map".into());
    spec.component[0].resource[1].part[0].file_pattern = None;
    assert_invalid(&spec, "a", "resource[1].part[0].file_pattern", "is empty");
}

#[test]
fn validation_errors_lists_every_broken_rule() {
    let mut spec = base_spec();
    spec.component[0].training_beam_size = Some(0);
    spec.component[1].linked_feature[0].size = Some(7);
    let errors = spec.validation_errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(&errors[0], SpecError::Invalid { component, .. } if component == "tagger"));
    assert!(
        matches!(&errors[1], SpecError::Invalid { field, .. } if field == "linked_feature[0].size")
    );
}

// ---------------------------------------------------------------------------------------
// Parse errors and hostile input.

#[track_caller]
fn parse_position(result: Result<MasterSpec, SpecError>) -> (SpecFormat, Option<Position>, String) {
    match result {
        Err(SpecError::Parse {
            format,
            position,
            message,
            ..
        }) => (format, position, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn malformed_text_gives_a_parse_error_with_position() {
    let (format, position, message) = parse_position(MasterSpec::from_text(
        "component {\n  name: \"a\"\n  nmae: \"b\"\n}\n",
    ));
    assert_eq!(format, SpecFormat::Text);
    assert_eq!(position, Some(Position { line: 3, column: 3 }));
    assert!(message.contains("nmae"), "{message}");

    let (_, position, _) = parse_position(MasterSpec::from_text("component {\n  name: \"a\"\n"));
    assert_eq!(position.map(|p| p.line), Some(3)); // the end of the input

    let (_, position, message) =
        parse_position(MasterSpec::from_text("component { num_actions: \"many\" }"));
    assert_eq!(
        position,
        Some(Position {
            line: 1,
            column: 26
        })
    );
    assert!(!message.is_empty());

    let (_, position, _) = parse_position(MasterSpec::from_text("component { name: 'a }"));
    assert!(position.is_some());

    let shown = MasterSpec::from_text("x: 1").unwrap_err().to_string();
    assert!(shown.contains("line 1, column 1"), "{shown}");
}

#[test]
fn malformed_json_gives_a_parse_error_with_position() {
    let (format, position, _) = parse_position(MasterSpec::from_json(
        "{\n  \"component\": [\n    {\"name\": 3}\n  ]\n}",
    ));
    assert_eq!(format, SpecFormat::Json);
    assert_eq!(position.map(|p| p.line), Some(3));

    let (_, position, message) = parse_position(MasterSpec::from_json(
        "{\"component\": [{\"nmae\": \"a\"}]}",
    ));
    assert!(position.is_some());
    assert!(message.contains("nmae"), "{message}");

    let (_, position, _) = parse_position(MasterSpec::from_json("{\"component\": []} trailing"));
    assert!(position.is_some());
}

#[test]
fn huge_numbers_are_range_errors() {
    for text in [
        "component { num_actions: 99999999999999999999999 }",
        "component { inference_beam_size: 2147483648 }",
        "component { fixed_feature { dropout_id: 9223372036854775808 } }",
        "component { num_actions: -2147483649 }",
    ] {
        let (_, position, _) = parse_position(MasterSpec::from_text(text));
        assert!(position.is_some(), "{text}");
    }
    parse_position(MasterSpec::from_json(
        r#"{"component": [{"num_actions": 1e300}]}"#,
    ));
    parse_position(MasterSpec::from_json(
        r#"{"component": [{"num_actions": 99999999999999999999999999}]}"#,
    ));
    // In range is fine, and so are extreme floats in a grid point.
    let spec = MasterSpec::from_text("component { num_actions: 2147483647 }").unwrap();
    assert_eq!(spec.component[0].num_actions(), i32::MAX);
    let g = GridPoint::from_text("learning_rate: 1e308 momentum: -0.0").unwrap();
    assert_eq!(g.learning_rate(), 1e308);
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 100_000;
    let text = "component { ".repeat(depth) + &"}".repeat(depth);
    let (_, position, message) = parse_position(MasterSpec::from_text(&text));
    assert!(position.is_some());
    assert!(message.contains("nested"), "{message}");

    let grid = "composite_optimizer_spec { method1 { ".repeat(depth) + &"} }".repeat(depth);
    assert!(matches!(
        GridPoint::from_text(&grid),
        Err(SpecError::Parse { .. })
    ));
    let json = "{\"component\": [".repeat(depth) + &"]}".repeat(depth);
    parse_position(MasterSpec::from_json(&json));

    // Nesting within the limit loads: a 20-level composite optimizer.
    let grid = "composite_optimizer_spec { method1 { ".repeat(20) + &"} }".repeat(20);
    let g = GridPoint::from_text(&grid).unwrap();
    assert_eq!(GridPoint::from_text(&g.to_text().unwrap()).unwrap(), g);

    // Braces inside strings and comments do not count.
    let spec = MasterSpec::from_text(&format!(
        "# {}\ncomponent {{ name: \"{}\" }}",
        "{".repeat(1000),
        "{".repeat(1000)
    ))
    .unwrap();
    assert_eq!(spec.component[0].name().len(), 1000);

    // A deep fml is a validation error.
    let mut spec = base_spec();
    spec.component[0].fixed_feature[0].fml = Some("input.".repeat(10_000) + "word");
    assert_invalid(&spec, "tagger", "fixed_feature[0].fml", "nested");
}

#[test]
fn from_file_reports_bad_files() {
    let dir = std::env::temp_dir().join(format!("kiln_dragnn_spec_test_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let bad_utf8 = dir.join("bad.textproto");
    std::fs::write(&bad_utf8, b"component {\n  name: \"ab\xff\xfe\"\n}\n").unwrap();
    match MasterSpec::from_file(&bad_utf8) {
        Err(SpecError::Parse {
            origin,
            position,
            message,
            ..
        }) => {
            assert!(origin.ends_with("bad.textproto"), "{origin}");
            assert_eq!(
                position,
                Some(Position {
                    line: 2,
                    column: 12
                })
            );
            assert!(message.contains("UTF-8"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let bad_json = dir.join("bad.json");
    std::fs::write(&bad_json, b"{\"component\": [{\"name\": \"\xc3\x28\"}]}").unwrap();
    assert!(matches!(
        MasterSpec::from_file(&bad_json),
        Err(SpecError::Parse {
            format: SpecFormat::Json,
            ..
        })
    ));

    let unknown = dir.join("spec.yaml");
    std::fs::write(&unknown, "component: []").unwrap();
    assert!(matches!(
        MasterSpec::from_file(&unknown),
        Err(SpecError::UnknownFormat { .. })
    ));
    assert!(matches!(
        MasterSpec::from_file(dir.join("missing.textproto")),
        Err(SpecError::Io { .. })
    ));
    let binary = dir.join("noise.pbtxt");
    let noise: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(&binary, noise).unwrap();
    assert!(MasterSpec::from_file(&binary).is_err());
    let empty = dir.join("empty.textproto");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(
        MasterSpec::from_file(&empty).unwrap(),
        MasterSpec::default()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn garbage_text_never_panics() {
    let samples = [
        "{",
        "}",
        "<",
        ">",
        "[",
        "]",
        "component",
        "component {",
        "component <>",
        "component [{}, {}]",
        "component: {}",
        "\"",
        "'",
        "\\",
        "#",
        "component { name: \"\\x\" }",
        "component { name: \"\\u12\" }",
        "debug_tracing: maybe",
        "debug_tracing: 1",
        "component { transition_system { parameters { key: 1 } } }",
        "component { fixed_feature { dropout_keep_probability: [0.5, nan, inf] } }",
        "\u{0}",
        "component { name: \"\u{0}\" }",
        "component { resource { part { } } } }",
        "debug_tracing: true debug_tracing: false",
        "[syntaxnet.dragnn.ext]: 1",
    ];
    for text in samples {
        let _ = MasterSpec::from_text(text);
        let _ = MasterSpec::from_json(text);
        let _ = GridPoint::from_text(text);
    }
}

//! Training and inference of whole models (`kiln_dragnn::model`) on a tiny synthetic
//! language whose every tag and tree is known:
//! - a tagger alone, a tagger → arc-standard parser pipeline (the parser reading only tags
//!   and labels, so that it parses through the tagger's *predicted* tags), a right-to-left
//!   lookahead `LSTMNetwork` read by a tagger through a linked feature, and a model with
//!   every kind of link (recurrent included), each trained by oracle with `Trainer::step`
//!   until it is perfect on the training batches, then reaching 100 % UPOS, UAS and LAS
//!   on held-out generated sentences from blank input (scored by
//!   `kiln_dragnn::scorer::score` against the generator's gold annotation), with beams of
//!   1 and 4; the training loss goes down;
//! - bulk and step-by-step unrolling give the same loss and gradients (to 1e-5, in `f64`)
//!   on a spec with fixed features, a non-recurrent linked feature, a recurrent linked
//!   feature and LSTM components (one with a character n-gram channel: several ids per
//!   slot), and those gradients match central finite differences;
//! - the pieces of a training step against hand computations: the cost (mean softmax
//!   cross-entropy over valid rows), the L2 term (½·coefficient·Σw² over the reference's
//!   regularised weights), dropout (on only with a seed, deterministic per seed), SGD with
//!   per-tensor gradient clipping and staircase learning-rate decay, Adam's first step,
//!   train targets (which parameters each updates, the weighted loss) and their errors;
//! - distillation (`Trainer::set_teachers`): a teacher that is the model itself gives a
//!   zero gradient at weight 1 (the soft cross-entropy's gradient is p − q), adding it to
//!   another teacher halves that teacher's gradient (the teachers' mean), weight 0 changes
//!   nothing, teachers whose steps are padded differently line up row for row, a student
//!   taught only by a perfect teacher (weight 1, no oracle labels) becomes perfect, and
//!   teachers that do not fit are refused with the model left as it was;
//! - a saved and loaded model parses exactly as the original;
//! - the inference output contract: words, ID/FORM/LEMMA/XPOS/FEATS/DEPS/MISC columns,
//!   comments, multiword tokens and empty nodes as in the input, UPOS/HEAD/DEPREL filled,
//!   heads forming a tree (also for unknown words and one-word sentences);
//! - parsing and training more batches of the same shape compiles nothing new
//!   (`kiln::cache_stats`), for feed-forward and recurrent models;
//! - with `use_moving_average`, a run evaluates and returns the parameters' exponential
//!   moving averages, recomputed here from runs stopped after each step.
//!
//! The feed-forward units use `tanh`: with `relu`, a unit this small can lose an input to
//! dead hidden units and never learn it (seen with 16 units at learning rate 0.02).
//!
//! Every test takes one process-wide lock: kiln's graph cache is global, and the
//! compile-count tests must not see other tests' compiles.
//!
//! Depends on kiln's public API (`Array`, `eval`, `cache_stats`), kiln-optim's
//! `Parameter::assign` (through `ParamStore::parameter`) and kiln-dragnn's `model`,
//! `spec`, `term_map`, `document`, `scorer`, `features::chen_manning` and `network`
//! modules; the contract test reads `tests/fixtures/features.conllu`.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use kiln::{Array, DType};
use kiln_dragnn::document::{read_conllu, write_conllu, Column, Sentence};
use kiln_dragnn::features::chen_manning::{fml, LABEL_LOCATORS, LOCATORS};
use kiln_dragnn::model::infer::{parse, InferOptions};
use kiln_dragnn::model::run::{run_training, RunOptions};
use kiln_dragnn::model::train::{Trainer, Unroll};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::scorer::score;
use kiln_dragnn::spec::{GridPoint, MasterSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Taken by every test: kiln's graph cache is process-wide.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------
// The synthetic language
// ---------------------------------------------------------------------------------------

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len())]
    }

    fn sym(&mut self, scale: f64) -> f64 {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
    }
}

const DETS: [&str; 3] = ["the", "a", "this"];
const ADJS: [&str; 4] = ["big", "red", "old", "small"];
const NOUNS: [&str; 5] = ["dog", "cat", "man", "ball", "house"];
const VERBS: [&str; 3] = ["sees", "likes", "takes"];

/// One generated word: FORM, UPOS, XPOS, HEAD (0: root), DEPREL.
#[derive(Debug, Clone)]
struct Word {
    form: &'static str,
    upos: &'static str,
    xpos: &'static str,
    head: usize,
    deprel: &'static str,
}

/// A sentence of the language: `NP VERB [NP] [.]` with `NP = [DET] ADJ{0,2} NOUN`.
/// Every word's tag is a function of the word; determiners (`det`) and adjectives (`amod`)
/// hang from their noun, the subject noun (`nsubj`), the object noun (`obj`) and the full
/// stop (`punct`) from the verb, the verb from the root. Trees are projective.
fn generate(rng: &mut Rng) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    // Returns the noun's index; its dependents' heads are patched then.
    let np = |rng: &mut Rng, words: &mut Vec<Word>, role: &'static str| -> usize {
        let start = words.len();
        if rng.below(3) > 0 {
            words.push(Word {
                form: rng.pick(&DETS),
                upos: "DET",
                xpos: "DT",
                head: 0,
                deprel: "det",
            });
        }
        for _ in 0..rng.below(3) {
            words.push(Word {
                form: rng.pick(&ADJS),
                upos: "ADJ",
                xpos: "JJ",
                head: 0,
                deprel: "amod",
            });
        }
        let noun = words.len();
        words.push(Word {
            form: rng.pick(&NOUNS),
            upos: "NOUN",
            xpos: "NN",
            head: 0,
            deprel: role,
        });
        for w in &mut words[start..noun] {
            w.head = noun + 1;
        }
        noun
    };
    let subject = np(rng, &mut words, "nsubj");
    let verb = words.len();
    words.push(Word {
        form: rng.pick(&VERBS),
        upos: "VERB",
        xpos: "VB",
        head: 0,
        deprel: "root",
    });
    words[subject].head = verb + 1;
    if rng.below(4) > 0 {
        let object = np(rng, &mut words, "obj");
        words[object].head = verb + 1;
    }
    if rng.below(2) > 0 {
        words.push(Word {
            form: ".",
            upos: "PUNCT",
            xpos: ".",
            head: verb + 1,
            deprel: "punct",
        });
    }
    words
}

/// CoNLL-U of a generated sentence, gold or with UPOS/XPOS/FEATS/HEAD/DEPREL blank
/// (`_`). LEMMA, DEPS and MISC carry values an annotator must keep.
fn conllu(words: &[Word], id: &str, blank: bool) -> String {
    let forms: Vec<&str> = words.iter().map(|w| w.form).collect();
    let mut out = format!("# sent_id = {id}\n# text = {}\n", forms.join(" "));
    for (i, w) in words.iter().enumerate() {
        let misc = if words.get(i + 1).is_some_and(|n| n.form == ".") {
            "SpaceAfter=No"
        } else {
            "_"
        };
        let lemma = w.form.to_uppercase();
        let (upos, xpos, head, deprel) = if blank {
            ("_", "_", "_".to_string(), "_")
        } else {
            (w.upos, w.xpos, w.head.to_string(), w.deprel)
        };
        out.push_str(&format!(
            "{}\t{}\t{lemma}\t{upos}\t{xpos}\t_\t{head}\t{deprel}\t_\t{misc}\n",
            i + 1,
            w.form
        ));
    }
    out.push('\n');
    out
}

/// `n` sentences from `seed`: gold, and the same with blank annotation columns.
fn corpus(seed: u64, n: usize, prefix: &str) -> R<(Vec<Sentence>, Vec<Sentence>)> {
    let mut rng = Rng(seed);
    let (mut gold, mut blank) = (String::new(), String::new());
    for i in 0..n {
        let words = generate(&mut rng);
        let id = format!("{prefix}-{i}");
        gold.push_str(&conllu(&words, &id, false));
        blank.push_str(&conllu(&words, &id, true));
    }
    Ok((read_conllu(&gold)?, read_conllu(&blank)?))
}

// ---------------------------------------------------------------------------------------
// Specs and training
// ---------------------------------------------------------------------------------------

const BACKEND: &str = r#"backend { registered_name: "SyntaxNetComponent" }"#;

fn tagger_component(hidden: usize) -> String {
    format!(
        r#"component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  fixed_feature {{ name: "words" fml: "input(-1).word input.word input(1).word" embedding_dim: 8 size: 3 }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "{hidden}" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
  inference_beam_size: 1
}}
"#
    )
}

/// An arc-standard parser reading Chen & Manning's tags (20) and labels (12): no words, so
/// that it parses only through the tags the tagger predicts.
fn parser_component() -> String {
    format!(
        r#"component {{
  name: "parser"
  transition_system {{ registered_name: "arc-standard" }}
  fixed_feature {{ name: "tags" fml: "{tags}" embedding_dim: 8 size: 20 }}
  fixed_feature {{ name: "labels" fml: "{labels}" embedding_dim: 4 size: 12 }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "32" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
  inference_beam_size: 1
}}
"#,
        tags = fml(&LOCATORS, "tag"),
        labels = fml(LABEL_LOCATORS, "label"),
    )
}

/// A right-to-left shift-only `LSTMNetwork` over the words, and a tagger that sees the
/// words only through it (`input.focus` by `reverse-token`).
fn lookahead_tagger_spec() -> String {
    format!(
        r#"component {{
  name: "lookahead"
  transition_system {{ registered_name: "shift-only" parameters {{ key: "left_to_right" value: "false" }} }}
  fixed_feature {{ name: "words" fml: "input.word" embedding_dim: 8 size: 1 }}
  network_unit {{ registered_name: "LSTMNetwork" parameters {{ key: "hidden_layer_sizes" value: "16" }} }}
  {BACKEND}
  inference_beam_size: 1
}}
component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  linked_feature {{ name: "lookahead" fml: "input.focus" embedding_dim: -1 size: 1
    source_component: "lookahead" source_translator: "reverse-token" source_layer: "layer_0" }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "16" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
  inference_beam_size: 1
}}
"#
    )
}

fn grid(learning_rate: f64, l2: f64) -> R<GridPoint> {
    Ok(GridPoint::from_text(&format!(
        "learning_method: 'adam' learning_rate: {learning_rate} adam_beta1: 0.9 adam_beta2: 0.999 \
         adam_eps: 1e-6 l2_regularization_coefficient: {l2} dropout_rate: 1.0 seed: 1"
    ))?)
}

fn model(spec: &str, train: &[Sentence], dtype: DType, grid: GridPoint) -> R<MasterModel> {
    let maps = TermMaps::build(train, &TermMapOptions::default());
    Ok(MasterModel::new(
        MasterSpec::from_text(spec)?,
        grid,
        Arc::new(maps),
        dtype,
    )?)
}

/// What a training run saw.
struct Run {
    steps: usize,
    first_loss: f64,
    last_loss: f64,
}

/// Trains by oracle on batches of `batch` sentences, cycling through `train`, until every
/// weighted component has been perfect on `patience` consecutive batches (or `max_steps`).
fn train_until_perfect(
    trainer: &mut Trainer,
    train: &[Sentence],
    batch: usize,
    max_steps: usize,
    patience: usize,
) -> R<Run> {
    let mut perfect = 0;
    let (mut first_loss, mut last_loss) = (f64::NAN, f64::NAN);
    let batches: Vec<&[Sentence]> = train.chunks(batch).collect();
    for step in 0..max_steps {
        let stats = trainer.step(0, batches[step % batches.len()])?;
        assert!(stats.loss.is_finite(), "step {step}: loss {}", stats.loss);
        if step == 0 {
            first_loss = stats.loss;
        }
        last_loss = stats.loss;
        assert!(!stats.accuracy.is_empty());
        if stats.accuracy.iter().all(|(_, c, t)| c == t) {
            perfect += 1;
            if perfect >= patience {
                return Ok(Run {
                    steps: step + 1,
                    first_loss,
                    last_loss,
                });
            }
        } else {
            perfect = 0;
        }
    }
    Err(format!(
        "not perfect on {patience} consecutive batches after {max_steps} steps (loss {last_loss})"
    )
    .into())
}

fn assert_perfect(what: &str, gold: &[Sentence], system: &[Sentence], parsed: bool) -> R {
    let s = score(gold, system)?;
    assert!(s.all.words > 0);
    assert_eq!(s.all.upos, s.all.words, "{what}: UPOS {}", s.all.upos_pct());
    if parsed {
        assert_eq!(s.all.heads, s.all.words, "{what}: UAS {}", s.all.uas_pct());
        assert_eq!(
            s.all.labeled,
            s.all.words,
            "{what}: LAS {}",
            s.all.las_pct()
        );
        assert_eq!(s.all.complete_labeled, gold.len());
    }
    Ok(())
}

/// The tagger → parser pipeline, trained once and shared by the tests that need a trained
/// model (under [`LOCK`]).
struct Pipeline {
    model: MasterModel,
    steps: usize,
}

fn pipeline() -> R<&'static Pipeline> {
    static PIPELINE: OnceLock<Pipeline> = OnceLock::new();
    if let Some(p) = PIPELINE.get() {
        return Ok(p);
    }
    let (train, _) = corpus(1, 160, "train")?;
    let spec = format!("{}{}", tagger_component(16), parser_component());
    let m = model(&spec, &train, DType::F32, grid(0.02, 0.0)?)?;
    let mut trainer = Trainer::new(m, &[], Unroll::Bulk)?;
    let run = train_until_perfect(&mut trainer, &train, 8, 1500, 20)?;
    assert!(run.last_loss < run.first_loss / 10.0);
    Ok(PIPELINE.get_or_init(|| Pipeline {
        model: trainer.into_model(),
        steps: run.steps,
    }))
}

fn options(batch_size: usize) -> InferOptions {
    InferOptions {
        beam: None,
        batch_size,
        threads: 1,
    }
}

// ---------------------------------------------------------------------------------------
// Reaching 100 %
// ---------------------------------------------------------------------------------------

#[test]
fn a_tagger_alone_learns_the_language() -> R {
    let _g = lock();
    let (train, _) = corpus(11, 80, "train")?;
    let (test, test_blank) = corpus(12, 40, "test")?;
    let m = model(&tagger_component(16), &train, DType::F32, grid(0.02, 0.0)?)?;
    let mut trainer = Trainer::new(m, &[], Unroll::Bulk)?;
    assert_eq!(trainer.target_names(), ["all"]);
    let run = train_until_perfect(&mut trainer, &train, 8, 600, 10)?;
    assert!(
        run.last_loss < run.first_loss / 10.0,
        "loss {} -> {}",
        run.first_loss,
        run.last_loss
    );
    let out = parse(trainer.model(), &test_blank, &options(16))?;
    assert_perfect("tagger", &test, &out, false)?;
    // A tagger alone leaves HEAD and DEPREL as they were.
    for (o, b) in out.iter().zip(&test_blank) {
        for i in 0..o.len() {
            assert_eq!(o.field(i, Column::Head), b.field(i, Column::Head));
            assert_eq!(o.field(i, Column::Deprel), b.field(i, Column::Deprel));
        }
    }
    eprintln!("tagger: perfect after {} steps", run.steps);
    Ok(())
}

#[test]
fn a_tagger_parser_pipeline_learns_the_language() -> R {
    let _g = lock();
    let p = pipeline()?;
    eprintln!("pipeline: perfect after {} steps", p.steps);
    let (test, test_blank) = corpus(2, 60, "test")?;
    // From blank input the parser sees only the tags the tagger predicted.
    let out = parse(&p.model, &test_blank, &options(16))?;
    assert_perfect("pipeline (blank input)", &test, &out, true)?;
    // Several threads and small batches give the same.
    let threads = parse(
        &p.model,
        &test_blank,
        &InferOptions {
            beam: None,
            batch_size: 5,
            threads: 3,
        },
    )?;
    assert_eq!(write_conllu(&threads), write_conllu(&out));
    // A beam of 4 too.
    let beam = parse(
        &p.model,
        &test_blank,
        &InferOptions {
            beam: Some(4),
            batch_size: 16,
            threads: 1,
        },
    )?;
    assert_perfect("pipeline (beam 4)", &test, &beam, true)?;
    Ok(())
}

#[test]
fn a_lookahead_lstm_feeds_a_tagger() -> R {
    let _g = lock();
    let (train, _) = corpus(21, 80, "train")?;
    let (test, test_blank) = corpus(22, 40, "test")?;
    let m = model(
        &lookahead_tagger_spec(),
        &train,
        DType::F32,
        grid(0.02, 0.0)?,
    )?;
    assert!(m.components()[0].unit.is_recurrent());
    let mut trainer = Trainer::new(m, &[], Unroll::Bulk)?;
    let run = train_until_perfect(&mut trainer, &train, 8, 1500, 10)?;
    assert!(run.last_loss < run.first_loss / 10.0);
    // The LSTM was trained: its weights left their 1e-4 initialisation.
    let x2ico = trainer
        .model()
        .params()
        .value("lookahead/x2ico")?
        .to_vec::<f32>()?;
    assert!(
        x2ico.iter().any(|v| v.abs() > 1e-2),
        "the LSTM did not train"
    );
    let out = parse(trainer.model(), &test_blank, &options(16))?;
    assert_perfect("lookahead LSTM tagger", &test, &out, false)?;
    eprintln!("lookahead: perfect after {} steps", run.steps);
    Ok(())
}

#[test]
fn a_model_with_every_kind_of_link_learns_the_language() -> R {
    let _g = lock();
    // The spec of the bulk = step-by-step test: a lookahead LSTM, a tagger reading it and
    // its own history (a recurrent link), a parser reading the tagger.
    let (train, _) = corpus(71, 120, "train")?;
    let (test, test_blank) = corpus(72, 40, "test")?;
    let m = model(&mixed_spec(), &train, DType::F32, grid(0.02, 0.0)?)?;
    let mut trainer = Trainer::new(m, &[], Unroll::Bulk)?;
    let run = train_until_perfect(&mut trainer, &train, 8, 1500, 15)?;
    eprintln!("mixed: perfect after {} steps", run.steps);
    let out = parse(trainer.model(), &test_blank, &options(16))?;
    assert_perfect("mixed spec", &test, &out, true)?;
    // Beams of 4 in the tagger and the parser: links then read beam slots.
    let beam = parse(
        trainer.model(),
        &test_blank,
        &InferOptions {
            beam: Some(4),
            batch_size: 16,
            threads: 2,
        },
    )?;
    assert_perfect("mixed spec, beam 4", &test, &beam, true)
}

// ---------------------------------------------------------------------------------------
// Bulk = step by step, and finite differences through the whole model
// ---------------------------------------------------------------------------------------

/// Fixed features, a non-recurrent linked feature with a projection (tagger ← lookahead),
/// a recurrent linked feature (the tagger's own `layer_0` at `stack.focus`), one without
/// projection (parser ← tagger), an `LSTMNetwork` component and a parser that runs in one
/// bulk piece.
fn mixed_spec() -> String {
    format!(
        r#"component {{
  name: "lookahead"
  transition_system {{ registered_name: "shift-only" parameters {{ key: "left_to_right" value: "false" }} }}
  fixed_feature {{ name: "words" fml: "input.word input(1).word" embedding_dim: 3 size: 2 }}
  network_unit {{ registered_name: "LSTMNetwork" parameters {{ key: "hidden_layer_sizes" value: "4" }} }}
  {BACKEND}
}}
component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  fixed_feature {{ name: "words" fml: "input.word input(-1).word" embedding_dim: 3 size: 2 }}
  linked_feature {{ name: "lookahead" fml: "input.focus" embedding_dim: 3 size: 1
    source_component: "lookahead" source_translator: "reverse-token" source_layer: "layer_0" }}
  linked_feature {{ name: "rnn" fml: "stack.focus stack(1).focus" embedding_dim: 2 size: 2
    source_component: "tagger" source_translator: "shift-reduce-step" source_layer: "layer_0" }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "5" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
}}
component {{
  name: "parser"
  transition_system {{ registered_name: "arc-standard" }}
  fixed_feature {{ name: "tags" fml: "input.tag stack.tag stack(1).tag" embedding_dim: 3 size: 3 }}
  fixed_feature {{ name: "labels" fml: "stack.child(1).label stack.child(-1).label" embedding_dim: 2 size: 2 }}
  linked_feature {{ name: "tagger" fml: "stack.focus" embedding_dim: -1 size: 1
    source_component: "tagger" source_translator: "identity" source_layer: "layer_0" }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "6" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
}}
"#
    )
}

/// A hash of a parameter name: the seed of its test values.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Gives every parameter values of order 0.5 that depend only on its name (gains about 1),
/// so that two models of one spec get the same values and gradients are not dominated by
/// the tiny initial weights.
fn randomize(model: &MasterModel) -> R {
    randomize_salted(model, 0)
}

/// [`randomize`] with other values for each `salt`.
fn randomize_salted(model: &MasterModel, salt: u64) -> R {
    for p in model.params().parameters() {
        let mut rng = Rng(name_seed(p.name()) ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let n: usize = p.shape().iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| {
                if p.name().ends_with("gamma") {
                    1.0 + rng.sym(0.3)
                } else {
                    rng.sym(0.5)
                }
            })
            .collect();
        let a = Array::from_vec(v, p.shape())?;
        p.assign(if p.dtype() == DType::F64 {
            a
        } else {
            a.cast(p.dtype())
        })?;
    }
    Ok(())
}

/// The loss and gradients of target 0 on `batch`, evaluated: `(loss, names, grads)`.
fn evaluated(trainer: &mut Trainer, batch: &[Sentence]) -> R<(f64, Vec<String>, Vec<Vec<f64>>)> {
    let lg = trainer.loss_and_grads(0, batch, None)?;
    let mut all: Vec<&Array> = vec![&lg.loss];
    all.extend(lg.grads.iter());
    kiln::eval(&all)?;
    let grads = lg
        .grads
        .iter()
        .map(|g| g.to_vec::<f64>())
        .collect::<Result<_, _>>()?;
    Ok((lg.loss.item::<f64>()?, lg.names, grads))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn bulk_and_step_by_step_give_the_same_loss_and_gradients() -> R {
    let _g = lock();
    let (train, _) = corpus(31, 12, "train")?;
    let batch = &train[..5];
    let spec = mixed_spec();
    let grid = grid(0.01, 1e-3)?; // L2 on: its term is part of the loss
    let bulk_model = model(&spec, &train, DType::F64, grid.clone())?;
    let step_model = model(&spec, &train, DType::F64, grid)?;
    randomize(&bulk_model)?;
    randomize(&step_model)?;
    let mut bulk = Trainer::new(bulk_model, &[], Unroll::Bulk)?;
    let mut step = Trainer::new(step_model, &[], Unroll::StepByStep)?;
    let (lb, names_b, gb) = evaluated(&mut bulk, batch)?;
    let (ls, names_s, gs) = evaluated(&mut step, batch)?;
    assert_eq!(names_b, names_s);
    // Every parameter of the three components is trained (the LSTM through its link).
    for prefix in [
        "lookahead/x2ico",
        "tagger/linked_embedding_matrix_1",
        "parser/weights_0",
    ] {
        assert!(
            names_b.iter().any(|n| n == prefix),
            "{prefix} not in {names_b:?}"
        );
    }
    assert!(lb.is_finite() && lb > 0.1, "loss {lb}");
    assert!(close(lb, ls, 1e-5), "loss: bulk {lb}, step by step {ls}");
    let mut nonzero = 0;
    for ((name, a), b) in names_b.iter().zip(&gb).zip(&gs) {
        assert_eq!(a.len(), b.len(), "{name}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                close(*x, *y, 1e-5),
                "d loss / d {name}[{i}]: bulk {x}, step by step {y}"
            );
        }
        if a.iter().any(|v| v.abs() > 1e-6) {
            nonzero += 1;
        }
    }
    assert!(
        nonzero == names_b.len(),
        "only {nonzero} of {} gradients are non-zero",
        names_b.len()
    );

    // The same gradients by central finite differences of the loss, for a few elements of
    // a parameter of each kind (through the LSTM, both links, the recurrent link's
    // projection, the embeddings and the softmax).
    let by_name: HashMap<&str, &Vec<f64>> = names_b.iter().map(String::as_str).zip(&gb).collect();
    let checks = [
        "lookahead/fixed_embedding_matrix_0",
        "lookahead/x2ico",
        "lookahead/c2o",
        "tagger/linked_embedding_matrix_0",
        "tagger/linked_embedding_matrix_1",
        "tagger/weights_0",
        "parser/fixed_embedding_matrix_1",
        "parser/weights_0",
        "parser/bias_softmax",
    ];
    let mut rng = Rng(33);
    for name in checks {
        let g = by_name
            .get(name)
            .ok_or_else(|| format!("no gradient of {name}"))?;
        let (shape, base) = {
            let p = bulk
                .model()
                .params()
                .parameter(name)
                .ok_or_else(|| format!("no parameter {name}"))?;
            (p.shape().to_vec(), p.value().to_vec::<f64>()?)
        };
        let set = |trainer: &Trainer, values: Vec<f64>| -> R {
            let p = trainer.model().params().parameter(name).ok_or("gone")?;
            p.assign(Array::from_vec(values, &shape)?)?;
            Ok(())
        };
        // the largest element's gradient and two random ones
        let largest = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap_or(0);
        for i in [largest, rng.below(g.len()), rng.below(g.len())] {
            let eps = 1e-6;
            let mut v = base.clone();
            v[i] = base[i] + eps;
            set(&bulk, v.clone())?;
            let plus = bulk.loss_and_grads(0, batch, None)?.loss.item::<f64>()?;
            v[i] = base[i] - eps;
            set(&bulk, v)?;
            let minus = bulk.loss_and_grads(0, batch, None)?.loss.item::<f64>()?;
            set(&bulk, base.clone())?;
            let fd = (plus - minus) / (2.0 * eps);
            assert!(
                (fd - g[i]).abs() <= 1e-7 + 1e-5 * fd.abs().max(g[i].abs()),
                "d loss / d {name}[{i}]: kiln::grad {}, finite differences {fd}",
                g[i]
            );
        }
    }
    Ok(())
}

#[test]
fn bulk_and_step_by_step_agree_on_a_recurrent_layer_norm_lstm_too() -> R {
    let _g = lock();
    let (train, _) = corpus(41, 8, "train")?;
    let spec = format!(
        r#"component {{
  name: "lookahead"
  transition_system {{ registered_name: "shift-only" }}
  fixed_feature {{ name: "words" fml: "input.word" embedding_dim: 3 size: 1 }}
  fixed_feature {{ name: "ngrams" fml: "input.char-ngram(use_terminators=true)" embedding_dim: 2 size: 1 }}
  network_unit {{ registered_name: "LayerNormBasicLSTMNetwork" parameters {{ key: "hidden_layer_sizes" value: "3" }} }}
  {BACKEND}
}}
component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  linked_feature {{ name: "lookahead" fml: "input.focus" embedding_dim: -1 size: 1
    source_component: "lookahead" source_translator: "identity" source_layer: "layer_0" }}
  linked_feature {{ name: "history" fml: "stack.focus" embedding_dim: 2 size: 1
    source_component: "tagger" source_translator: "shift-reduce-step" source_layer: "layer_0" }}
  network_unit {{ registered_name: "LSTMNetwork" parameters {{ key: "hidden_layer_sizes" value: "4" }} }}
  {BACKEND}
}}
"#
    );
    let a = model(&spec, &train, DType::F64, grid(0.01, 0.0)?)?;
    let b = model(&spec, &train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&a)?;
    randomize(&b)?;
    let mut bulk = Trainer::new(a, &[], Unroll::Bulk)?;
    let mut step = Trainer::new(b, &[], Unroll::StepByStep)?;
    let (lb, names, gb) = evaluated(&mut bulk, &train[..4])?;
    let (ls, _, gs) = evaluated(&mut step, &train[..4])?;
    assert!(close(lb, ls, 1e-5), "loss: bulk {lb}, step by step {ls}");
    for ((name, x), y) in names.iter().zip(&gb).zip(&gs) {
        for (i, (x, y)) in x.iter().zip(y).enumerate() {
            assert!(
                close(*x, *y, 1e-5),
                "{name}[{i}]: bulk {x}, step by step {y}"
            );
        }
    }
    assert!(names.iter().any(|n| n == "lookahead/gates/gamma"));
    // the character n-grams (several ids per slot, summed) have their own embedding
    assert!(
        names
            .iter()
            .any(|n| n == "lookahead/fixed_embedding_matrix_1"),
        "{names:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Save and load; the output contract
// ---------------------------------------------------------------------------------------

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kiln-dragnn-training-{tag}-{}", std::process::id()))
}

#[test]
fn a_saved_and_loaded_model_parses_identically() -> R {
    let _g = lock();
    let p = pipeline()?;
    let dir = temp_dir("save-load");
    p.model.save(&dir)?;
    let loaded = MasterModel::load(&dir)?;
    std::fs::remove_dir_all(&dir)?;
    assert_eq!(loaded.spec(), p.model.spec());
    assert_eq!(loaded.grid(), p.model.grid());
    assert_eq!(**loaded.maps(), **p.model.maps());
    let names: Vec<&str> = p.model.params().parameters().map(|q| q.name()).collect();
    let loaded_names: Vec<&str> = loaded.params().parameters().map(|q| q.name()).collect();
    assert_eq!(names, loaded_names);
    for q in p.model.params().parameters() {
        assert_eq!(
            loaded.params().value(q.name())?.to_vec::<f32>()?,
            q.value().to_vec::<f32>()?,
            "{}",
            q.name()
        );
    }
    let (_, blank) = corpus(3, 30, "saved")?;
    let a = parse(&p.model, &blank, &options(8))?;
    let b = parse(&loaded, &blank, &options(8))?;
    assert_eq!(write_conllu(&a), write_conllu(&b));
    // A model freshly built from the spec parses differently (the loaded one did load).
    let fresh = MasterModel::new(
        loaded.spec().clone(),
        loaded.grid().clone(),
        loaded.maps().clone(),
        DType::F32,
    )?;
    assert_ne!(
        write_conllu(&parse(&fresh, &blank, &options(8))?),
        write_conllu(&a)
    );
    Ok(())
}

/// Whether `heads` (1-based, 0 the root) form one tree.
fn is_tree(heads: &[Option<i32>]) -> Result<(), String> {
    let n = heads.len();
    let mut roots = 0;
    for (i, h) in heads.iter().enumerate() {
        match h {
            Some(0) => roots += 1,
            Some(h) if *h >= 1 && (*h as usize) <= n && *h as usize != i + 1 => {}
            other => return Err(format!("word {} has head {other:?}", i + 1)),
        }
    }
    if roots != 1 {
        return Err(format!("{roots} roots"));
    }
    for start in 0..n {
        let mut at = start;
        let mut hops = 0;
        while let Some(h) = heads[at].filter(|&h| h != 0) {
            at = h as usize - 1;
            hops += 1;
            if hops > n {
                return Err(format!("a cycle through word {}", start + 1));
            }
        }
    }
    Ok(())
}

#[test]
fn parsing_fills_the_annotation_columns_and_keeps_the_rest() -> R {
    let _g = lock();
    let p = pipeline()?;
    let (_, blank) = corpus(4, 25, "contract")?;
    let out = parse(&p.model, &blank, &options(8))?;
    assert_eq!(out.len(), blank.len());
    let tags: BTreeSet<&str> = ["DET", "ADJ", "NOUN", "VERB", "PUNCT"].into();
    let labels: BTreeSet<&str> = ["det", "amod", "nsubj", "obj", "punct", "root"].into();
    for (k, (o, b)) in out.iter().zip(&blank).enumerate() {
        assert_eq!(o.len(), b.len(), "sentence {k}: words");
        assert_eq!(
            o.comments().collect::<Vec<_>>(),
            b.comments().collect::<Vec<_>>(),
            "sentence {k}: comments"
        );
        for i in 0..o.len() {
            for c in [
                Column::Id,
                Column::Form,
                Column::Lemma,
                Column::Xpos,
                Column::Feats,
                Column::Deps,
                Column::Misc,
            ] {
                assert_eq!(o.field(i, c), b.field(i, c), "sentence {k} word {i}: {c}");
            }
            assert!(
                tags.contains(o.upos(i)),
                "sentence {k} word {i}: UPOS {:?}",
                o.upos(i)
            );
            assert!(
                labels.contains(o.deprel(i)),
                "sentence {k} word {i}: DEPREL {:?}",
                o.deprel(i)
            );
        }
        // The HEAD column as written (1-based, 0 the root).
        let heads: Vec<Option<i32>> = (0..o.len())
            .map(|i| o.field(i, Column::Head).parse().ok())
            .collect();
        if let Err(e) = is_tree(&heads) {
            panic!("sentence {k}: {e}:\n{}", o.to_conllu());
        }
    }
    // The serialized output is the input with the three columns filled: re-blanking them
    // gives the input back byte for byte.
    let mut reblanked = out.clone();
    for s in &mut reblanked {
        for i in 0..s.len() {
            for c in [Column::Upos, Column::Head, Column::Deprel] {
                s.set_field(i, c, "_")?;
            }
        }
    }
    assert_eq!(write_conllu(&reblanked), write_conllu(&blank));

    // Unknown words, a one-word sentence, multiword tokens, empty nodes, FEATS, DEPS and
    // comments (the reader's fixture, its UPOS/HEAD/DEPREL blanked): the same contract.
    let mut odd = read_conllu(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/features.conllu"
    ))?)?;
    odd.extend(read_conllu(
        "# sent_id = one\n1\tdog\tDOG\t_\t_\t_\t_\t_\t_\t_\n\n\
         # sent_id = unknown\n1\tthe\t_\t_\t_\t_\t_\t_\t_\t_\n2\tzebra\t_\t_\t_\t_\t_\t_\t_\t_\n\
         3\tgrazes\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n4\t.\t_\t_\t_\t_\t_\t_\t_\t_\n",
    )?);
    for s in &mut odd {
        for i in 0..s.len() {
            for c in [Column::Upos, Column::Head, Column::Deprel] {
                s.set_field(i, c, "_")?;
            }
        }
    }
    let out = parse(&p.model, &odd, &options(8))?;
    assert_eq!(out.len(), odd.len());
    let mut reblanked = out.clone();
    for (k, s) in reblanked.iter_mut().enumerate() {
        let heads: Vec<Option<i32>> = (0..s.len())
            .map(|i| s.field(i, Column::Head).parse().ok())
            .collect();
        if let Err(e) = is_tree(&heads) {
            panic!("odd sentence {k}: {e}:\n{}", s.to_conllu());
        }
        for i in 0..s.len() {
            assert!(tags.contains(s.upos(i)) && labels.contains(s.deprel(i)));
            for c in [Column::Upos, Column::Head, Column::Deprel] {
                s.set_field(i, c, "_")?;
            }
        }
    }
    assert_eq!(write_conllu(&reblanked), write_conllu(&odd));
    assert!(parse(&p.model, &[], &options(8))?.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Compiles
// ---------------------------------------------------------------------------------------

#[test]
fn more_batches_of_the_same_shape_compile_nothing() -> R {
    let _g = lock();
    let p = pipeline()?;
    let (_, a) = corpus(5, 12, "warm")?;
    let (_, b) = corpus(6, 12, "more")?;
    // Warm up: every component's step graph is compiled.
    parse(&p.model, &a, &options(4))?;
    let before = kiln::cache_stats();
    // Other sentences (other lengths), the same batch size.
    parse(&p.model, &b, &options(4))?;
    parse(&p.model, &a, &options(4))?;
    let after = kiln::cache_stats();
    assert_eq!(
        after.misses,
        before.misses,
        "parsing compiled {} new plans: {:?}",
        after.misses - before.misses,
        &after.recent_misses[after.recent_misses.len().saturating_sub(4)..]
    );
    assert!(after.hits > before.hits);

    // Training steps on other batches of the same size compile nothing either once warm.
    let (train, _) = corpus(7, 40, "train")?;
    let m = model(&tagger_component(8), &train, DType::F32, grid(0.01, 1e-4)?)?;
    let mut trainer = Trainer::new(m, &[], Unroll::Bulk)?;
    for batch in train.chunks(8).take(2) {
        trainer.step(0, batch)?;
    }
    let before = kiln::cache_stats();
    for batch in train.chunks(8).skip(2) {
        trainer.step(0, batch)?;
    }
    let after = kiln::cache_stats();
    assert_eq!(
        after.misses,
        before.misses,
        "training compiled {} new plans",
        after.misses - before.misses
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The pipeline's parser reads the tagger's predictions
// ---------------------------------------------------------------------------------------

#[test]
fn the_pipeline_parser_parses_through_the_predicted_tags() -> R {
    let _g = lock();
    let p = pipeline()?;
    let (gold, blank) = corpus(8, 30, "control")?;
    // The trained parser alone, without the tagger in front of it.
    let alone = MasterModel::new(
        MasterSpec::from_text(&parser_component())?,
        p.model.grid().clone(),
        p.model.maps().clone(),
        DType::F32,
    )?;
    for q in alone.params().parameters() {
        q.assign(p.model.params().value(q.name())?)?;
    }
    // With gold tags in the input it parses perfectly...
    let mut tagged = blank.clone();
    for (t, g) in tagged.iter_mut().zip(&gold) {
        for i in 0..t.len() {
            t.set_field(i, Column::Upos, g.upos(i))?;
        }
    }
    assert_perfect(
        "parser alone, gold tags",
        &gold,
        &parse(&alone, &tagged, &options(8))?,
        true,
    )?;
    // ...and with `_` tags it cannot: so the pipeline's perfect parses of blank input come
    // from the tags the tagger predicted and wrote before the parser ran.
    let s = score(&gold, &parse(&alone, &blank, &options(8))?)?;
    assert!(
        s.all.labeled < s.all.words,
        "the parser parses as well without tags (LAS {})",
        s.all.las_pct()
    );
    assert_perfect(
        "pipeline",
        &gold,
        &parse(&p.model, &blank, &options(8))?,
        true,
    )
}

// ---------------------------------------------------------------------------------------
// The cost, the L2 term, dropout, the optimizer, targets
// ---------------------------------------------------------------------------------------

#[test]
fn cost_is_the_mean_cross_entropy_over_valid_rows() -> R {
    let _g = lock();
    use kiln_dragnn::model::train::cost;
    let mut rng = Rng(51);
    let (rows, actions) = (7, 4);
    let logits: Vec<f64> = (0..rows * actions).map(|_| rng.sym(3.0)).collect();
    let labels = [2i64, -1, 0, 3, -1, 1, 3];
    let c = cost(&Array::from_vec(logits.clone(), &[rows, actions])?, &labels)?;
    let (mut sum, mut valid, mut correct) = (0.0, 0, 0);
    for (r, &l) in labels.iter().enumerate() {
        if l < 0 {
            continue;
        }
        let row = &logits[r * actions..(r + 1) * actions];
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        sum += lse - row[l as usize];
        valid += 1;
        let argmax = (0..actions)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap_or(0);
        correct += usize::from(argmax == l as usize);
    }
    assert_eq!(c.total, valid);
    assert!((c.cost.item::<f64>()? - sum / valid as f64).abs() < 1e-12);
    assert_eq!(c.correct.item::<i64>()?, correct as i64);
    // No valid row: zero cost, not NaN.
    let c = cost(&Array::from_vec(logits, &[rows, actions])?, &[-1; 7])?;
    assert_eq!((c.total, c.cost.item::<f64>()?), (0, 0.0));
    Ok(())
}

/// The reference's regularised weights: hidden-layer weights and the LSTM's matrices (not
/// embeddings, projections, biases, gains or the softmax).
fn regularized_by_reference(name: &str) -> bool {
    let rest = name.split_once('/').map_or(name, |(_, r)| r);
    rest.strip_prefix("weights_")
        .is_some_and(|i| i.parse::<usize>().is_ok())
        || ["x2ico", "h2ico", "c2i", "c2o", "x2h", "h2h"].contains(&rest)
}

#[test]
fn the_l2_term_is_half_the_coefficient_times_the_squared_regularized_weights() -> R {
    let _g = lock();
    let (train, _) = corpus(52, 10, "train")?;
    let batch = &train[..4];
    let coefficient = 0.01;
    let plain = model(&mixed_spec(), &train, DType::F64, grid(0.01, 0.0)?)?;
    let l2 = model(&mixed_spec(), &train, DType::F64, grid(0.01, coefficient)?)?;
    randomize(&plain)?;
    randomize(&l2)?;
    let mut squares = 0.0;
    let mut weights: HashMap<String, Vec<f64>> = HashMap::new();
    for q in l2.params().parameters() {
        assert_eq!(
            l2.params().is_regularized(q.name()),
            regularized_by_reference(q.name()),
            "{}",
            q.name()
        );
        let v = q.value().to_vec::<f64>()?;
        if regularized_by_reference(q.name()) {
            squares += v.iter().map(|x| x * x).sum::<f64>();
        }
        weights.insert(q.name().to_string(), v);
    }
    let (l0, names, g0) = evaluated(&mut Trainer::new(plain, &[], Unroll::Bulk)?, batch)?;
    let (l1, _, g1) = evaluated(&mut Trainer::new(l2, &[], Unroll::Bulk)?, batch)?;
    let want = 0.5 * coefficient * squares;
    assert!(
        ((l1 - l0) - want).abs() < 1e-9 * (1.0 + want),
        "L2 term {} != {want}",
        l1 - l0
    );
    for ((name, a), b) in names.iter().zip(&g0).zip(&g1) {
        let w = &weights[name];
        for i in 0..a.len() {
            let extra = if regularized_by_reference(name) {
                coefficient * w[i]
            } else {
                0.0
            };
            assert!(
                (b[i] - a[i] - extra).abs() < 1e-9,
                "{name}[{i}]: {} - {} != {extra}",
                b[i],
                a[i]
            );
        }
    }
    Ok(())
}

#[test]
fn dropout_is_on_only_with_a_seed_and_deterministic_per_seed() -> R {
    let _g = lock();
    let (train, _) = corpus(53, 10, "train")?;
    let batch = &train[..4];
    let g = GridPoint::from_text(
        "learning_method: 'adam' learning_rate: 0.01 l2_regularization_coefficient: 0 \
         dropout_rate: 0.5 seed: 1",
    )?;
    let m = model(&mixed_spec(), &train, DType::F64, g)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let mut loss =
        |seed: Option<u64>| -> R<f64> { Ok(t.loss_and_grads(0, batch, seed)?.loss.item::<f64>()?) };
    let (none, a, again, b) = (loss(None)?, loss(Some(7))?, loss(Some(7))?, loss(Some(8))?);
    assert_eq!(a, again, "one seed, one loss");
    assert_ne!(a, b, "another seed, other masks");
    assert_ne!(a, none, "a seed turns dropout on");
    assert_eq!(none, loss(None)?);
    Ok(())
}

/// Every parameter's values, by name.
fn values(model: &MasterModel) -> R<HashMap<String, Vec<f64>>> {
    let mut out = HashMap::new();
    for q in model.params().parameters() {
        out.insert(
            q.name().to_string(),
            q.value().cast(DType::F64).to_vec::<f64>()?,
        );
    }
    Ok(out)
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[test]
fn a_step_is_sgd_with_per_tensor_clipping_and_staircase_decay() -> R {
    let _g = lock();
    let (train, _) = corpus(54, 12, "train")?;
    let batch = &train[..6];
    let spec = mixed_spec();
    let sgd = |clip: f64| -> R<GridPoint> {
        Ok(GridPoint::from_text(&format!(
            "learning_method: 'momentum' momentum: 0 learning_rate: 0.1 decay_steps: 2 \
             decay_base: 0.5 decay_staircase: true gradient_clip_norm: {clip} \
             l2_regularization_coefficient: 0 dropout_rate: 1.0 seed: 2"
        ))?)
    };
    // A clip norm between the gradients' norms: some tensors are clipped, some not.
    let probe = model(&spec, &train, DType::F64, sgd(0.0)?)?;
    randomize(&probe)?;
    let (_, _, g) = evaluated(&mut Trainer::new(probe, &[], Unroll::Bulk)?, batch)?;
    let mut norms: Vec<f64> = g.iter().map(|g| norm(g)).collect();
    norms.sort_by(f64::total_cmp);
    let clip = norms[norms.len() / 2];
    let m = model(&spec, &train, DType::F64, sgd(clip)?)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let (mut clipped, mut unclipped) = (0, 0);
    for step in 0..4 {
        let (_, names, grads) = evaluated(&mut t, batch)?;
        let before = values(t.model())?;
        t.step(0, batch)?;
        let after = values(t.model())?;
        let lr = 0.1 * 0.5f64.powi(step / 2);
        for (name, g) in names.iter().zip(&grads) {
            let n = norm(g);
            let scale = if n > clip {
                clipped += 1;
                clip / n
            } else {
                unclipped += 1;
                1.0
            };
            for i in 0..g.len() {
                let want = before[name][i] - lr * scale * g[i];
                assert!(
                    (after[name][i] - want).abs() < 1e-9,
                    "step {step}: {name}[{i}] = {}, want {want}",
                    after[name][i]
                );
            }
        }
        // Parameters outside the target do not move (there are none here: all trained).
        assert_eq!(before.len(), names.len());
    }
    assert!(
        clipped > 0 && unclipped > 0,
        "{clipped} clipped, {unclipped} not"
    );
    Ok(())
}

#[test]
fn a_first_adam_step_moves_every_weight_by_the_learning_rate() -> R {
    let _g = lock();
    let (train, _) = corpus(55, 8, "train")?;
    let batch = &train[..4];
    let m = model(&mixed_spec(), &train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let (_, names, grads) = evaluated(&mut t, batch)?;
    let before = values(t.model())?;
    let stats = t.step(0, batch)?;
    assert_eq!(stats.target, "all");
    let after = values(t.model())?;
    let mut checked = 0;
    for (name, g) in names.iter().zip(&grads) {
        for i in 0..g.len() {
            let delta = after[name][i] - before[name][i];
            assert!(
                delta.abs() <= 0.01 * (1.0 + 1e-6),
                "{name}[{i}] moved {delta}"
            );
            if g[i].abs() > 1e-3 {
                assert!(
                    (delta + 0.01 * g[i].signum()).abs() < 1e-5,
                    "{name}[{i}]: moved {delta} for gradient {}",
                    g[i]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} elements checked");
    Ok(())
}

#[test]
fn targets_train_the_components_they_weigh_and_what_those_read() -> R {
    let _g = lock();
    use kiln_dragnn::spec::TrainTarget;
    let (train, _) = corpus(56, 8, "train")?;
    let batch = &train[..3];
    let m = model(&mixed_spec(), &train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let all: Vec<String> = m
        .params()
        .parameters()
        .map(|q| q.name().to_string())
        .collect();
    let target = |name: &str, weights: &[f64], max_index: i32| TrainTarget {
        name: Some(name.into()),
        component_weights: weights.to_vec(),
        max_index: Some(max_index),
        ..Default::default()
    };
    let targets = [
        target("tagger", &[0.0, 1.0, 0.0], -1),
        target("parser", &[0.0, 0.0, 1.0], -1),
        target("first-two", &[], 2),
        target("both", &[0.0, 1.0, 3.0], -1),
    ];
    let mut t = Trainer::new(m, &targets, Unroll::Bulk)?;
    assert_eq!(t.target_names(), ["tagger", "parser", "first-two", "both"]);
    let is = |prefix: &str| -> Vec<String> {
        all.iter()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect()
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // The tagger reads the lookahead: both are trained, the parser is not.
    let tagger = sorted([is("lookahead/"), is("tagger/")].concat());
    // The parser reads the tagger's layer_0 (not its logits): the tagger's softmax is not
    // trained by the parser's cost.
    let tagger_no_softmax: Vec<String> = is("tagger/")
        .into_iter()
        .filter(|n| !n.ends_with("_softmax"))
        .collect();
    let parser = sorted([is("lookahead/"), tagger_no_softmax, is("parser/")].concat());
    for (k, want, costs) in [
        (0, &tagger, 1),
        (1, &parser, 1),
        (2, &tagger, 1),
        (3, &all, 2),
    ] {
        let lg = t.loss_and_grads(k, batch, None)?;
        assert_eq!(
            &sorted(lg.names.clone()),
            &sorted(want.clone()),
            "target {k}"
        );
        assert_eq!(lg.costs.len(), costs, "target {k}");
        assert_eq!(lg.grads.len(), lg.names.len());
    }
    // The weighted loss: target "both" is ¼ tagger + ¾ parser.
    let cost_of = |t: &mut Trainer, k: usize| -> R<Vec<f64>> {
        let lg = t.loss_and_grads(k, batch, None)?;
        lg.costs.iter().map(|c| Ok(c.cost.item::<f64>()?)).collect()
    };
    let (tag, par, both) = (
        cost_of(&mut t, 0)?,
        cost_of(&mut t, 1)?,
        cost_of(&mut t, 3)?,
    );
    assert_eq!(both.len(), 2);
    assert!((both[0] - tag[0]).abs() < 1e-12 && (both[1] - par[0]).abs() < 1e-12);
    let loss = t.loss_and_grads(3, batch, None)?.loss.item::<f64>()?;
    assert!(
        (loss - (0.25 * tag[0] + 0.75 * par[0])).abs() < 1e-12,
        "{loss}"
    );
    // A step of the tagger target leaves the parser alone.
    let before = values(t.model())?;
    let stats = t.step(0, batch)?;
    assert_eq!(stats.target, "tagger");
    assert_eq!(
        stats
            .accuracy
            .iter()
            .map(|a| a.0.as_str())
            .collect::<Vec<_>>(),
        ["tagger"]
    );
    let after = values(t.model())?;
    for name in &all {
        let moved = before[name] != after[name];
        assert_eq!(moved, tagger.contains(name), "{name} moved: {moved}");
    }
    Ok(())
}

#[test]
fn bad_targets_and_optimizers_are_errors_naming_them() -> R {
    let _g = lock();
    use kiln_dragnn::spec::TrainTarget;
    let (train, _) = corpus(57, 4, "train")?;
    let build = |targets: &[TrainTarget], g: GridPoint| -> String {
        let result = model(&mixed_spec(), &train, DType::F32, g)
            .and_then(|m| Ok(Trainer::new(m, targets, Unroll::Bulk)?));
        match result {
            Ok(_) => "built".into(),
            Err(e) => e.to_string(),
        }
    };
    let named = |weights: &[f64]| TrainTarget {
        name: Some("odd".into()),
        component_weights: weights.to_vec(),
        ..Default::default()
    };
    let cases = [
        (named(&[1.0, 1.0]), "2 component_weights for 3 components"),
        (named(&[0.0, 0.0, 0.0]), "all 0"),
        (named(&[1.0, -1.0, 1.0]), "finite and ≥ 0"),
    ];
    for (t, want) in cases {
        let e = build(&[t], grid(0.01, 0.0)?);
        assert!(e.contains("odd") && e.contains(want), "{e}");
    }
    let greedy = TrainTarget {
        name: Some("greedy".into()),
        unroll_using_oracle: vec![true, false, true],
        ..Default::default()
    };
    let e = build(&[greedy], grid(0.01, 0.0)?);
    assert!(
        e.contains("greedy") && e.contains("unroll_using_oracle"),
        "{e}"
    );
    let e = build(&[], GridPoint::from_text("learning_method: 'rmsprop'")?);
    assert!(
        e.contains("rmsprop") && e.contains("learning_method"),
        "{e}"
    );
    Ok(())
}

/// A tagger whose unit sets its own dropout keep probability.
fn dropout_tagger_spec() -> String {
    tagger_component(8).replace(
        r#"value: "tanh" }"#,
        r#"value: "tanh" }
    parameters { key: "dropout_keep_prob" value: "0.5" }"#,
    )
}

/// The loss of target 0 on `batch` without dropout, and the loss a training step reports.
fn plain_and_step_loss(grid_text: &str) -> R<(f64, f64)> {
    let (train, _) = corpus(64, 8, "train")?;
    let spec = dropout_tagger_spec();
    assert!(spec.contains("dropout_keep_prob"));
    let g = GridPoint::from_text(&format!(
        "learning_method: 'momentum' momentum: 0 learning_rate: 0.1 \
         l2_regularization_coefficient: 0 seed: 1 {grid_text}"
    ))?;
    let m = model(&spec, &train, DType::F64, g)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let plain = t.loss_and_grads(0, &train[..4], None)?.loss.item::<f64>()?;
    Ok((plain, t.step(0, &train[..4])?.loss))
}

#[test]
fn a_training_step_applies_the_units_own_dropout() -> R {
    let _g = lock();
    let (plain, step) = plain_and_step_loss("dropout_rate: 1.0")?;
    assert_ne!(plain, step, "the step's loss is the loss without dropout");
    Ok(())
}

#[test]
fn a_training_step_applies_the_units_own_dropout_when_the_grid_has_none() -> R {
    let _g = lock();
    let (plain, step) = plain_and_step_loss("dropout_rate: 1.0 recurrent_dropout_rate: 1.0")?;
    assert_ne!(
        plain, step,
        "the unit's dropout_keep_prob 0.5 was not applied"
    );
    Ok(())
}

#[test]
fn a_model_tagging_xpos_saves_and_loads() -> R {
    let _g = lock();
    use kiln_dragnn::term_map::TagColumn;
    let (train, _) = corpus(66, 40, "train")?;
    let (gold, blank) = corpus(67, 10, "test")?;
    let options_xpos = TermMapOptions {
        tag_column: TagColumn::Xpos,
        ..Default::default()
    };
    let maps = TermMaps::build(&train, &options_xpos);
    assert_eq!(maps.tags.term(0), Some("NN"));
    let m = MasterModel::new(
        MasterSpec::from_text(&tagger_component(16))?,
        grid(0.02, 0.0)?,
        Arc::new(maps),
        DType::F32,
    )?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    train_until_perfect(&mut t, &train, 8, 600, 10)?;
    let out = parse(t.model(), &blank, &options(8))?;
    for (o, g) in out.iter().zip(&gold) {
        for i in 0..o.len() {
            assert_eq!(o.field(i, Column::Xpos), g.field(i, Column::Xpos));
            assert_eq!(o.upos(i), "_");
        }
    }
    let dir = temp_dir("xpos");
    t.model().save(&dir)?;
    let loaded = MasterModel::load(&dir);
    std::fs::remove_dir_all(&dir)?;
    let loaded = loaded?;
    assert_eq!(loaded.maps().tag_column, TagColumn::Xpos);
    assert_eq!(
        write_conllu(&parse(&loaded, &blank, &options(8))?),
        write_conllu(&out)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// More compile counts, and models in f64
// ---------------------------------------------------------------------------------------

#[test]
fn recurrent_models_compile_nothing_new_after_an_epoch() -> R {
    let _g = lock();
    let (train, _) = corpus(58, 48, "train")?;
    let (_, other) = corpus(59, 24, "other")?;
    let m = model(
        &lookahead_tagger_spec(),
        &train,
        DType::F32,
        grid(0.02, 0.0)?,
    )?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    // One epoch compiles a plan per step bucket; a second epoch compiles nothing.
    for batch in train.chunks(6) {
        t.step(0, batch)?;
    }
    let before = kiln::cache_stats();
    for batch in train.chunks(6) {
        t.step(0, batch)?;
    }
    let after = kiln::cache_stats();
    assert_eq!(after.misses, before.misses, "training compiled new plans");
    // Inference pads a batch's steps only to its bucket (`inference_steps`: exact below
    // 16), so it compiles one plan per component and step bucket: once batches of every
    // length up to the longest have run, new sentences compile nothing.
    let longest = other.iter().map(Sentence::len).max().unwrap_or(0);
    assert!(longest < 16, "the lengths of this corpus are exact buckets");
    let words: Vec<&str> = train
        .iter()
        .flat_map(|s| (0..s.len()).map(move |i| s.form(i)))
        .collect();
    let mut text = String::new();
    for len in 1..=longest {
        // Six sentences of each length: one batch of `options(6)` per length.
        for copy in 0..6 {
            for i in 0..len {
                let form = words[(len * 7 + copy * 3 + i) % words.len()];
                text.push_str(&format!("{}\t{form}\t_\t_\t_\t_\t_\t_\t_\t_\n", i + 1));
            }
            text.push('\n');
        }
    }
    let every_length = read_conllu(&text)?;
    parse(t.model(), &every_length, &options(6))?;
    let before = kiln::cache_stats();
    parse(t.model(), &other, &options(6))?;
    let after = kiln::cache_stats();
    assert_eq!(after.misses, before.misses, "inference compiled new plans");
    Ok(())
}

#[test]
fn an_f64_model_saves_and_loads() -> R {
    let _g = lock();
    let (train, _) = corpus(60, 8, "train")?;
    let m = model(&tagger_component(4), &train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let dir = temp_dir("f64");
    m.save(&dir)?;
    let loaded = MasterModel::load(&dir);
    std::fs::remove_dir_all(&dir)?;
    let loaded = loaded?;
    for q in m.params().parameters() {
        let v = loaded
            .params()
            .value(q.name())?
            .cast(DType::F64)
            .to_vec::<f64>()?;
        assert_eq!(v.len(), q.value().to_vec::<f64>()?.len());
    }
    let (_, blank) = corpus(61, 5, "f64")?;
    assert_eq!(
        write_conllu(&parse(&m, &blank, &options(8))?),
        write_conllu(&parse(&loaded, &blank, &options(8))?)
    );
    Ok(())
}

#[test]
fn an_f64_model_trains_and_parses_like_its_f32_twin() -> R {
    let _g = lock();
    let (train, _) = corpus(62, 40, "train")?;
    let (gold, blank) = corpus(63, 20, "test")?;
    let m = model(&tagger_component(16), &train, DType::F64, grid(0.02, 0.0)?)?;
    let mut t = Trainer::new(m, &[], Unroll::StepByStep)?;
    train_until_perfect(&mut t, &train, 8, 600, 10)?;
    assert_perfect(
        "f64 tagger, step by step",
        &gold,
        &parse(t.model(), &blank, &options(8))?,
        false,
    )
}

/// `use_moving_average`: a training run evaluates and returns the exponential moving
/// averages of the parameters, `avg ← d·avg + (1 − d)·θₙ` with `d = min(average_weight,
/// (1 + n) / (10 + n))` from the initial values, here recomputed in `f64` from the parameters
/// θₙ of identical runs stopped after each of the `k` steps (averaging does not change the
/// training trajectory). The average weight 0.25 makes the first update take the step
/// formula (2/11) and later ones the weight.
#[test]
fn a_run_with_moving_averages_returns_the_averaged_parameters() -> R {
    let _g = lock();
    let (train, _) = corpus(21, 24, "avg")?;
    let (dev, _) = corpus(22, 8, "avg-dev")?;
    let spec = tagger_component(8);
    let run = |steps: usize, average: bool| -> R<HashMap<String, Vec<f64>>> {
        let mut g = grid(0.05, 0.0)?;
        g.use_moving_average = Some(average);
        g.average_weight = Some(0.25);
        let mut trainer = Trainer::new(model(&spec, &train, DType::F64, g)?, &[], Unroll::Bulk)?;
        if steps > 0 {
            let options = RunOptions {
                batch_size: 4,
                train_steps: vec![steps],
                report_every: steps,
                ..RunOptions::default()
            };
            run_training(&mut trainer, &train, &dev, &options, |_| {})?;
        }
        values(trainer.model())
    };
    let k = 4;
    let thetas: Vec<HashMap<String, Vec<f64>>> =
        (0..=k).map(|j| run(j, false)).collect::<R<_>>()?;
    let got = run(k, true)?;
    let mut moved = 0.0f64;
    for (name, initial) in &thetas[0] {
        let mut avg = initial.clone();
        for (n, theta) in thetas.iter().enumerate().skip(1) {
            let d = 0.25f64.min((1.0 + n as f64) / (10.0 + n as f64));
            for (a, x) in avg.iter_mut().zip(&theta[name]) {
                *a = d * *a + (1.0 - d) * x;
            }
        }
        for (i, (g, w)) in got[name].iter().zip(&avg).enumerate() {
            assert!(
                close(*g, *w, 1e-12),
                "{name}[{i}]: {g} against the average {w}"
            );
        }
        for (g, last) in got[name].iter().zip(&thetas[k][name]) {
            moved = moved.max((g - last).abs());
        }
    }
    eprintln!("largest difference between the averages and the last values: {moved}");
    // The averages are not the last values: the test would see a run that ignored them.
    assert!(moved > 1e-6, "the averaged parameters equal the last ones");
    let mut g = grid(0.05, 0.0)?;
    g.use_moving_average = Some(true);
    g.average_weight = Some(1.5);
    let mut trainer = Trainer::new(model(&spec, &train, DType::F64, g)?, &[], Unroll::Bulk)?;
    let options = RunOptions {
        batch_size: 4,
        train_steps: vec![1],
        ..RunOptions::default()
    };
    let e = run_training(&mut trainer, &train, &dev, &options, |_| {})
        .err()
        .ok_or("an average weight of 1.5 was accepted")?
        .to_string();
    assert!(e.contains("average_weight is 1.5"), "{e}");
    Ok(())
}

/// A tagger over the words whose words channel drops with `dropout`.
fn dropout_tagger(dropout: &str, fml: &str) -> String {
    format!(
        r#"component {{
  name: "tagger"
  transition_system {{ registered_name: "tagger" }}
  fixed_feature {{ name: "words" fml: "{fml}" embedding_dim: 8 {dropout} }}
  network_unit {{ registered_name: "FeedForwardNetwork" parameters {{ key: "hidden_layer_sizes" value: "16" }}
    parameters {{ key: "nonlinearity" value: "tanh" }} }}
  {BACKEND}
  inference_beam_size: 1
}}
"#
    )
}

#[test]
fn dropping_every_word_to_the_unknown_term_is_tagging_unseen_words() -> R {
    let _g = lock();
    let mut rng = Rng(61);
    let sentences: Vec<Vec<Word>> = (0..6).map(|_| generate(&mut rng)).collect();
    let text = |unseen: bool| -> String {
        let mut out = String::new();
        for (i, words) in sentences.iter().enumerate() {
            let words: Vec<Word> = words
                .iter()
                .map(|w| Word {
                    form: if unseen { "unseen" } else { w.form },
                    ..w.clone()
                })
                .collect();
            out.push_str(&conllu(&words, &format!("s-{i}"), false));
        }
        out
    };
    let (known, unseen) = (read_conllu(&text(false))?, read_conllu(&text(true))?);
    // input(-1) and input(1) reach past the ends: <ROOT> and <OUTSIDE> are never dropped,
    // as they are not replaced in the reference either.
    let spec = dropout_tagger(
        "dropout_id: -2 dropout_keep_probability: 0.0",
        "input(-1).word input.word input(1).word",
    );
    let m = model(&spec, &known, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let mut loss = |batch: &[Sentence], seed: Option<u64>| -> R<f64> {
        Ok(t.loss_and_grads(0, batch, seed)?.loss.item::<f64>()?)
    };
    let dropped = loss(&known, Some(3))?;
    let reference = loss(&unseen, None)?;
    let kept = loss(&known, None)?;
    assert!(
        close(dropped, reference, 1e-12),
        "every word dropped: {dropped}, unseen words: {reference}"
    );
    assert!(!close(kept, reference, 1e-6), "no seed, no dropout: {kept}");
    Ok(())
}

#[test]
fn feature_dropout_settings_the_channel_cannot_meet_are_errors() -> R {
    let _g = lock();
    let (train, _) = corpus(62, 4, "train")?;
    let build = |dropout: &str, fml: &str| {
        model(
            &dropout_tagger(dropout, fml),
            &train,
            DType::F32,
            grid(0.01, 0.0)?,
        )
    };
    let message = |r: R<MasterModel>| match r {
        Ok(_) => panic!("the model was built"),
        Err(e) => e.to_string(),
    };
    let e = message(build(
        "dropout_id: -2 dropout_keep_probability: 0.5",
        "input.word input.digit",
    ));
    assert!(e.contains("words") && e.contains("no unknown term"), "{e}");
    let e = message(build(
        "dropout_id: 1000000 dropout_keep_probability: 0.5",
        "input.word",
    ));
    assert!(e.contains("1000000") && e.contains("outside"), "{e}");
    build(
        "dropout_id: 0 dropout_keep_probability: [1.0, 0.5]",
        "input.word",
    )?;
    build(
        "dropout_id: -2 dropout_keep_probability: 0.5",
        "input.word stack.word",
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Distillation
// ---------------------------------------------------------------------------------------

/// [`mixed_spec`] with the tagger's recurrent link moved to the parser: the tagger's steps
/// are not padded and the parser's are, the other way round from the mixed spec.
fn mixed_spec_moved_link() -> String {
    let rnn = r#"  linked_feature { name: "rnn" fml: "stack.focus stack(1).focus" embedding_dim: 2 size: 2
    source_component: "tagger" source_translator: "shift-reduce-step" source_layer: "layer_0" }
"#;
    let spec = mixed_spec();
    assert!(spec.contains(rnn));
    let spec = spec.replace(rnn, "");
    let anchor = r#"  network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "6" }"#;
    assert!(spec.contains(anchor));
    spec.replace(
        anchor,
        &format!(
            "{}{anchor}",
            rnn.replace(
                "\"tagger\" source_translator",
                "\"parser\" source_translator"
            )
        ),
    )
}

/// Asserts that each gradient element of `got` is close (to `tol`) to `want` of the same
/// element of `base`.
fn assert_each_close(
    what: &str,
    names: &[String],
    base: &[Vec<f64>],
    got: &[Vec<f64>],
    want: impl Fn(f64) -> f64,
    tol: f64,
) {
    for ((name, a), b) in names.iter().zip(base).zip(got) {
        assert_eq!(a.len(), b.len(), "{what}: {name}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                close(want(*x), *y, tol),
                "{what}: d loss / d {name}[{i}] is {y}, expected {} (from {x})",
                want(*x)
            );
        }
    }
}

/// The gradients of target 0 on `batch` with `teachers` at distillation `weight`.
fn distilled_grads(
    spec: &str,
    train: &[Sentence],
    batch: &[Sentence],
    teachers: Vec<MasterModel>,
    weight: f64,
) -> R<(f64, Vec<String>, Vec<Vec<f64>>)> {
    let m = model(spec, train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    t.set_teachers(teachers, weight)?;
    evaluated(&mut t, batch)
}

#[test]
fn distillation_fits_the_teachers_mean_distribution() -> R {
    let _g = lock();
    let (train, _) = corpus(61, 12, "train")?;
    let batch = &train[..5];
    let spec = mixed_spec();
    let twin = || -> R<MasterModel> {
        let m = model(&spec, &train, DType::F64, grid(0.01, 0.0)?)?;
        randomize(&m)?;
        Ok(m)
    };
    // Another spec's model with other values, in `dtype`.
    let other_in = |dtype: DType| -> R<MasterModel> {
        let m = model(&mixed_spec_moved_link(), &train, dtype, grid(0.01, 0.0)?)?;
        randomize_salted(&m, 7)?;
        Ok(m)
    };
    let other = || other_in(DType::F64);
    let (plain_loss, names, plain) = distilled_grads(&spec, &train, batch, Vec::new(), 0.5)?;
    let max = |g: &[Vec<f64>]| g.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(
        max(&plain) > 1e-3,
        "the oracle's gradient is {}",
        max(&plain)
    );

    // Weight 0: the oracle's loss and gradients, exactly.
    let (loss0, names0, g0) = distilled_grads(&spec, &train, batch, vec![other()?], 0.0)?;
    assert_eq!(names0, names);
    assert_eq!(loss0, plain_loss);
    assert_eq!(g0, plain);

    // The model as its own teacher at weight 1: the gradient p − q is zero everywhere, and
    // the loss is the mean entropy of the model's distributions (positive).
    let (loss1, _, g1) = distilled_grads(&spec, &train, batch, vec![twin()?], 1.0)?;
    assert!(max(&g1) < 1e-12, "self-distillation gradient {}", max(&g1));
    assert!(loss1 > 0.1, "loss {loss1}");

    // Another teacher alone, and with the model beside it: the mean distribution
    // (p + q) / 2 halves the gradient, p − (p + q) / 2 = (p − q) / 2. The other teacher's
    // tagger steps are unpadded and its parser steps padded, unlike the model's.
    let (_, _, g_other) = distilled_grads(&spec, &train, batch, vec![other()?], 1.0)?;
    assert!(
        max(&g_other) > 1e-3,
        "other-teacher gradient {}",
        max(&g_other)
    );
    let (_, _, g_both) = distilled_grads(&spec, &train, batch, vec![twin()?, other()?], 1.0)?;
    assert_each_close(
        "the model beside the teacher",
        &names,
        &g_other,
        &g_both,
        |x| x / 2.0,
        1e-9,
    );

    // A teacher of another float type: its f32 distribution, cast, gives the f64
    // model's gradient to f32 precision.
    let (_, _, g32) = distilled_grads(&spec, &train, batch, vec![other_in(DType::F32)?], 1.0)?;
    assert_each_close("an f32 teacher", &names, &g_other, &g32, |x| x, 1e-5);

    // Halfway: the mean of the oracle's and the teacher's gradients.
    let (_, _, g_half) = distilled_grads(&spec, &train, batch, vec![other()?], 0.5)?;
    for ((name, h), (o, t)) in names.iter().zip(&g_half).zip(plain.iter().zip(&g_other)) {
        for (i, (x, (a, b))) in h.iter().zip(o.iter().zip(t)).enumerate() {
            assert!(
                close(*x, (a + b) / 2.0, 1e-9),
                "d loss / d {name}[{i}]: weight ½ {x}, oracle {a}, teacher {b}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_student_taught_only_by_a_perfect_teacher_learns_the_language() -> R {
    let _g = lock();
    let p = pipeline()?;
    let dir = temp_dir("teacher");
    p.model.save(&dir)?;
    let teacher = MasterModel::load(&dir)?;
    std::fs::remove_dir_all(&dir)?;
    let (train, _) = corpus(1, 160, "train")?;
    let spec = format!("{}{}", tagger_component(16), parser_component());
    let student = model(&spec, &train, DType::F32, grid(0.02, 0.0)?)?;
    let mut trainer = Trainer::new(student, &[], Unroll::Bulk)?;
    // Weight 1: the oracle's labels do not enter the loss.
    trainer.set_teachers(vec![teacher], 1.0)?;
    let run = train_until_perfect(&mut trainer, &train, 8, 1500, 20)?;
    eprintln!(
        "student: perfect after {} steps (the teacher after {})",
        run.steps, p.steps
    );
    let (test, test_blank) = corpus(2, 60, "test")?;
    let out = parse(trainer.model(), &test_blank, &options(16))?;
    assert_perfect("distilled pipeline", &test, &out, true)?;
    Ok(())
}

#[test]
fn teachers_that_do_not_fit_are_refused() -> R {
    let _g = lock();
    let (train, _) = corpus(62, 8, "train")?;
    let batch = &train[..3];
    let spec = mixed_spec();
    let m = model(&spec, &train, DType::F64, grid(0.01, 0.0)?)?;
    randomize(&m)?;
    let mut t = Trainer::new(m, &[], Unroll::Bulk)?;
    let (loss, _, grads) = evaluated(&mut t, batch)?;
    let message = |r: Result<(), kiln_dragnn::Error>| match r {
        Ok(()) => panic!("the teachers were taken"),
        Err(e) => e.to_string(),
    };
    let twin = || model(&spec, &train, DType::F64, grid(0.01, 0.0)?);
    for w in [-0.5, 1.5, f64::NAN] {
        let e = message(t.set_teachers(vec![twin()?], w));
        assert!(
            e.contains("distillation weight") && e.contains("[0, 1]"),
            "{e}"
        );
    }
    // Fewer components.
    let tagger_only = model(&tagger_component(4), &train, DType::F64, grid(0.01, 0.0)?)?;
    let e = message(t.set_teachers(vec![tagger_only], 1.0));
    assert!(
        e.contains("set_teachers") && e.contains("teacher 0") && e.contains("lookahead"),
        "{e}"
    );
    // Another label map: the parser's actions would not line up.
    let (other_train, _) = corpus(63, 8, "other")?;
    let mut relabelled = other_train.clone();
    for s in &mut relabelled {
        for i in 0..s.len() {
            s.set_field(i, Column::Deprel, "dep")?;
        }
    }
    let relabelled = model(&spec, &relabelled, DType::F64, grid(0.01, 0.0)?)?;
    let e = message(t.set_teachers(vec![twin()?, relabelled], 1.0));
    assert!(
        e.contains("teacher 1") && (e.contains("label map") || e.contains("actions")),
        "{e}"
    );
    // Nothing changed: the same loss and gradients as before.
    let (loss_after, _, grads_after) = evaluated(&mut t, batch)?;
    assert_eq!(loss_after, loss);
    assert_eq!(grads_after, grads);
    Ok(())
}

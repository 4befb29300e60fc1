//! kiln-dragnn's oracle-driven runtime speed without a network (issue 28's benchmark).
//! It runs an arc-standard parser over the training part of the Turkish treebank (3,881 sentences) along the oracle, and at every step extracts every fixed channel (Chen & Manning's 20 words, 20 tags and 12 labels) and translates every linked channel (the recurrent `stack.focus stack(1).focus` link to the parser's own earlier steps), as a training loop feeding a network would.
//! Sentences are cut into batches of `--batch` and the batches dealt round-robin to `--threads` threads, each with its own session from one `ComputeSessionPool`.
//! Reading the treebank, building the term maps and serializing the sentences are not timed; setting each batch's input (parsing its CoNLL-U), extraction, translation and oracle advance are.
//!
//! It prints one JSON line (`serde_json`): the CPU model (from `/proc/cpuinfo`), threads, batch, sentences, tokens, seconds, sentences per second and features extracted (fixed features plus non-padding linked features).
//!
//! Usage: `cargo run --release -p kiln-benches --bin dragnn-oracle -- [--threads N] [--batch B] [--data DIR]`.
//!
//! Depends on kiln-dragnn's public API, `clap`, `serde` and `serde_json`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use kiln_dragnn::component::FixedFeatureOutput;
use kiln_dragnn::document::{read_turkish_treebank, write_conllu};
use kiln_dragnn::features::chen_manning::{fml, LABEL_LOCATORS, LOCATORS};
use kiln_dragnn::pool::ComputeSessionPool;
use kiln_dragnn::session::ComputeSession;
use kiln_dragnn::spec::{GridPoint, MasterSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use serde::Serialize;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "dragnn-oracle",
    version,
    about = "Times kiln-dragnn's oracle-driven feature extraction of an arc-standard parser over the Turkish treebank's training part and prints one JSON line."
)]
struct Cli {
    /// Threads, 1 to 256, each with its own session from the pool.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    threads: usize,
    /// Sentences per batch (one session call chain per batch), 1 to 65536.
    #[arg(long, value_name = "B", default_value_t = 32, value_parser = RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    batch: usize,
    /// The directory holding web.conllu and wiki.conllu [default: $KILN_DATA_DIR or data/, then turkish-treebanks/].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
}

/// The JSON line.
#[derive(Serialize, Debug)]
struct Line {
    bench: &'static str,
    cpu: String,
    threads: usize,
    batch: usize,
    sentences: usize,
    tokens: usize,
    seconds: f64,
    sentences_per_s: f64,
    features: u64,
}

/// The parser spec: Chen & Manning's fixed features and the recurrent link.
fn parser_spec() -> MasterSpec {
    let text = format!(
        r#"component {{
  name: "parser"
  transition_system {{ registered_name: "arc-standard" }}
  fixed_feature {{ name: "words" fml: "{words}" size: 20 embedding_dim: 64 }}
  fixed_feature {{ name: "tags" fml: "{tags}" size: 20 embedding_dim: 32 }}
  fixed_feature {{ name: "labels" fml: "{labels}" size: 12 embedding_dim: 32 }}
  linked_feature {{ name: "rnn" fml: "stack.focus stack(1).focus" embedding_dim: 32 size: 2
    source_component: "parser" source_translator: "shift-reduce-step" source_layer: "layer_0" }}
  backend {{ registered_name: "SyntaxNetComponent" }}
}}"#,
        words = fml(&LOCATORS, "word"),
        tags = fml(&LOCATORS, "tag"),
        labels = fml(LABEL_LOCATORS, "label"),
    );
    MasterSpec::from_text(&text).expect("the bench's spec parses")
}

/// Runs the parser over `batches` along the oracle, extracting every channel at every step;
/// returns the features extracted.
fn run(session: &mut ComputeSession, batches: &[&[String]]) -> kiln_dragnn::Result<u64> {
    let spec = session.spec("parser")?.clone();
    let (fixed, linked) = (spec.fixed_feature.len(), spec.linked_feature.len());
    let mut out = FixedFeatureOutput::default();
    let mut features = 0u64;
    for batch in batches {
        session.reset_session();
        session.set_input_data(batch.to_vec());
        session.initialize_component_data("parser", 1)?;
        while !session.is_terminal("parser")? {
            for c in 0..fixed {
                features += session.get_input_features("parser", c, &mut out)? as u64;
            }
            for c in 0..linked {
                let links = session.get_translated_link_features("parser", c)?;
                features += links.iter().filter(|l| l.is_some()).count() as u64;
            }
            session.advance_from_oracle("parser")?;
        }
    }
    Ok(features)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let dir = cli.data.unwrap_or_else(|| {
        std::env::var_os("KILN_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("data"))
            .join("turkish-treebanks")
    });
    let train = read_turkish_treebank(&dir)
        .map_err(|e| format!("{}: {e} (run scripts/fetch-data.sh)", dir.display()))?
        .train;
    let maps = Arc::new(TermMaps::build(&train, &TermMapOptions::default()));
    let items: Vec<String> = train
        .iter()
        .map(|s| write_conllu(std::slice::from_ref(s)))
        .collect();
    let tokens = train.iter().map(|s| s.len()).sum();
    let batches: Vec<&[String]> = items.chunks(cli.batch).collect();
    let mut shares: Vec<Vec<&[String]>> = vec![Vec::new(); cli.threads];
    for (i, b) in batches.iter().enumerate() {
        shares[i % cli.threads].push(b);
    }

    let pool = ComputeSessionPool::new(parser_spec(), GridPoint::default(), maps);
    let sessions = (0..cli.threads)
        .map(|_| pool.get_session())
        .collect::<kiln_dragnn::Result<Vec<_>>>()?;

    let start = Instant::now();
    let results: Vec<(ComputeSession, kiln_dragnn::Result<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .into_iter()
            .zip(&shares)
            .map(|(mut session, share)| {
                scope.spawn(move || {
                    let r = run(&mut session, share);
                    (session, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();

    let mut features = 0;
    for (session, r) in results {
        features += r?;
        pool.return_session(session);
    }
    let line = Line {
        bench: "dragnn-oracle",
        cpu: kiln_benches::cpu_model(),
        threads: cli.threads,
        batch: cli.batch,
        sentences: items.len(),
        tokens,
        seconds,
        sentences_per_s: items.len() as f64 / seconds,
        features,
    };
    println!("{}", serde_json::to_string(&line)?);
    Ok(())
}

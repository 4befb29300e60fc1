//! g2p-en decoding throughput with kiln-beam (issue 6's benchmark).
//! It decodes a fixed word list (`benches/data/g2p_words.txt`, 1,000 common English words) at beam 1, 4 and 12 on 1 and 2 threads with `decode_parallel` (mini-batches sorted by length, as `kiln-translate` does).
//! It prints one JSON object per setting ([`BeamLine`]): the median over repetitions, words per second, and the graph compiles per 1,000 words (from an empty graph cache).
//!
//! Threads: each thread count runs in its own child process (its own graph-cache counters), with that many decoding threads (`decode_parallel`) and kiln's thread team (which also splits large GEMMs) at one thread (`KILN_NUM_THREADS=1`), so "1 thread" uses one core and "2 threads" two.
//! The parent resolves the options and passes them to each child in full ([`child_args`]).
//!
//! Options are parsed with `clap` into [`Cli`] (`--help` lists them) and resolved into [`Opts`] (the defaults `--quick` changes applied).
//! The JSON lines are `#[derive(Serialize)]` records printed with `serde_json` (a NaN or infinite number is written `null`, so every line is valid JSON).
//!
//! Usage: `cargo run --release -p kiln-benches --bin beam -- [--quick] [--beams 1,4,12] [--threads 1,2] [--mini-batch 16] [--reps 5] [--words PATH] [--limit N] [--model PATH] [--nbest PATH]`.
//! `--nbest PATH` also writes every finished hypothesis of every word (1-thread run) as tab-separated `beam word rank phonemes cost score`, for the comparison with the numpy reference (`benches/peers/beam.sh`).
//!
//! Depends on kiln-beam's and kiln's public APIs, `clap` and `serde_json`.

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use kiln_beam::{decode_parallel, BeamSearch, G2p, History, SearchConfig};
use serde::Serialize;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

const CHILD_ENV: &str = "KILN_BEAM_BENCH_CHILD";

/// The largest beam.
const MAX_BEAM: u64 = 1024;
/// The most decoding threads.
const MAX_THREADS: u64 = 256;
/// The largest mini-batch (words).
const MAX_BATCH: u64 = 65_536;
/// The most repetitions.
const MAX_REPS: u64 = 100_000;
/// The largest `--max-length-factor`.
const MAX_LENGTH_FACTOR: f64 = 100.0;

/// The command line as given (see [`Opts`] for the values the bench uses).
#[derive(Parser, Debug)]
#[command(
    name = "beam",
    version,
    about = "Times g2p-en beam-search decoding with kiln-beam and prints one JSON object per setting."
)]
struct Cli {
    /// Smoke run: --reps 2 and --limit 200 unless given.
    #[arg(long)]
    quick: bool,
    /// Beam sizes (comma-separated), each 1 to 1024 [default: 1,4,12].
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1, 4, 12], hide_default_value = true, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BEAM), allow_hyphen_values = true)]
    beams: Vec<usize>,
    /// Decoding thread counts (comma-separated), each 1 to 256, each in its own child process [default: 1,2].
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1, 2], hide_default_value = true, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_THREADS), allow_hyphen_values = true)]
    threads: Vec<usize>,
    /// Words per mini-batch, 1 to 65536.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BATCH), allow_hyphen_values = true)]
    mini_batch: usize,
    /// Timed repetitions after the cold pass, 1 to 100000 [default: 5, 2 with --quick].
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_REPS), allow_hyphen_values = true)]
    reps: Option<usize>,
    /// The word list, one word per line [default: benches/data/g2p_words.txt].
    #[arg(long, value_name = "PATH")]
    words: Option<PathBuf>,
    /// Decode the first N words only, at least 1 [default: all, 200 with --quick].
    #[arg(long, value_name = "N", value_parser = RangedU64ValueParser::<usize>::new().range(1..), allow_hyphen_values = true)]
    limit: Option<usize>,
    /// g2p-en's checkpoint [default: $KILN_DATA_DIR or data/, then g2p_en/checkpoint20.npz].
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// Also write every finished hypothesis of every word (1-thread run) to PATH, tab-separated.
    #[arg(long, value_name = "PATH")]
    nbest: Option<PathBuf>,
    /// Time the model's GEMM alone instead of decoding.
    #[arg(long)]
    gemm: bool,
    /// Stop a hypothesis at this many times its word's length, finite, above 0 and at most 100.
    #[arg(long, value_name = "X", default_value_t = 3.0, value_parser = length_factor, allow_hyphen_values = true)]
    max_length_factor: f64,
    /// Length normalisation exponent (0: none), finite.
    #[arg(long, value_name = "X", default_value_t = 0.0, value_parser = finite, allow_hyphen_values = true)]
    normalize: f64,
    /// Word penalty, finite.
    #[arg(long, value_name = "X", default_value_t = 0.0, value_parser = finite, allow_hyphen_values = true)]
    word_penalty: f64,
}

/// clap's parser of a finite number.
fn finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err("expected a finite number (such as 0.5)".into()),
    }
}

/// clap's parser of `--max-length-factor`: finite, above 0 and at most [`MAX_LENGTH_FACTOR`].
fn length_factor(s: &str) -> Result<f64, String> {
    let x = finite(s)?;
    if x > 0.0 && x <= MAX_LENGTH_FACTOR {
        Ok(x)
    } else {
        Err(format!(
            "{x} is out of range: give a number above 0 and at most {MAX_LENGTH_FACTOR}"
        ))
    }
}

/// The options the bench runs with: the command line with the defaults applied.
#[derive(Debug, Clone, PartialEq)]
struct Opts {
    beams: Vec<usize>,
    threads: Vec<usize>,
    mini_batch: usize,
    reps: usize,
    words: PathBuf,
    /// `None`: every word of the list.
    limit: Option<usize>,
    model: PathBuf,
    nbest: Option<PathBuf>,
    gemm: bool,
    max_length_factor: f64,
    normalize: f64,
    word_penalty: f64,
}

/// The workspace root (the default word list and data directory are under it).
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Applies the defaults (those `--quick` changes included) to the command line.
fn options(cli: Cli) -> Opts {
    let data = || {
        std::env::var_os("KILN_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("data"))
    };
    Opts {
        beams: cli.beams,
        threads: cli.threads,
        mini_batch: cli.mini_batch,
        reps: cli.reps.unwrap_or(if cli.quick { 2 } else { 5 }),
        words: cli
            .words
            .unwrap_or_else(|| root().join("benches/data/g2p_words.txt")),
        limit: cli.limit.or(cli.quick.then_some(200)),
        model: cli
            .model
            .unwrap_or_else(|| data().join("g2p_en/checkpoint20.npz")),
        nbest: cli.nbest,
        gemm: cli.gemm,
        max_length_factor: cli.max_length_factor,
        normalize: cli.normalize,
        word_penalty: cli.word_penalty,
    }
}

/// `--name=value` (the `=` form, so that a value starting with `-` stays a value).
fn arg(name: &str, value: impl AsRef<std::ffi::OsStr>) -> OsString {
    let mut a = OsString::from(format!("--{name}="));
    a.push(value);
    a
}

/// The command line of the child process that runs `threads` threads: every resolved option of `o`, so that the child needs no defaults of its own.
/// Only the 1-thread child writes the n-best lists.
fn child_args(o: &Opts, threads: usize) -> Vec<OsString> {
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let mut a = vec![
        arg("beams", list(&o.beams)),
        arg("threads", threads.to_string()),
        arg("mini-batch", o.mini_batch.to_string()),
        arg("reps", o.reps.to_string()),
        arg("words", &o.words),
        arg("model", &o.model),
        // `Display` of an `f64` is the shortest text that parses back to the same value.
        arg("max-length-factor", o.max_length_factor.to_string()),
        arg("normalize", o.normalize.to_string()),
        arg("word-penalty", o.word_penalty.to_string()),
    ];
    if let Some(l) = o.limit {
        a.push(arg("limit", l.to_string()));
    }
    if let Some(p) = o.nbest.as_ref().filter(|_| threads == 1) {
        a.push(arg("nbest", p));
    }
    if o.gemm {
        a.push("--gemm".into());
    }
    a
}

/// Runs one child process per thread count (its own cache counters and thread pools) and passes its JSON lines through.
/// A failing child ends the bench with its exit status.
fn spawn_children(o: &Opts) {
    let exe = std::env::current_exe().expect("the bench binary's path");
    for &t in &o.threads {
        let status = Command::new(&exe)
            .args(child_args(o, t))
            .env(CHILD_ENV, "1")
            .env("KILN_NUM_THREADS", "1")
            .status()
            .unwrap_or_else(|e| {
                eprintln!("beam bench: running {}: {e}", exe.display());
                std::process::exit(1);
            });
        if !status.success() {
            eprintln!("beam bench: the {t}-thread run failed: {status}");
            std::process::exit(status.code().unwrap_or(1));
        }
    }
}

/// A `g2p_gemm` line (`--gemm`).
#[derive(Serialize)]
struct GemmLine {
    workload: &'static str,
    #[serde(rename = "impl")]
    implementation: &'static str,
    m: usize,
    k: usize,
    n: usize,
    median_us: f64,
    gflops: f64,
}

/// A `g2p_beam` line: one beam size at one thread count.
#[derive(Serialize)]
struct BeamLine {
    workload: &'static str,
    #[serde(rename = "impl")]
    implementation: &'static str,
    beam: usize,
    threads: usize,
    mini_batch: usize,
    words: usize,
    reps: usize,
    median_s: f64,
    min_s: f64,
    max_s: f64,
    words_per_s: f64,
    cold_s: f64,
    compiles_per_1000_words: f64,
    compiles_cold: u64,
    compiles_timed: u64,
    compile_ms_cold: f64,
    mean_output_len: f64,
    runs_s: Vec<f64>,
}

/// Prints `record` as one JSON line and flushes stdout (the parent passes a child's lines through as they come).
fn emit<T: Serialize>(record: &T) {
    let text = serde_json::to_string(record).expect("a record of strings and numbers serializes");
    println!("{text}");
    std::io::stdout().flush().ok();
}

/// `x` rounded to `decimals` decimal places (the precision a line reports).
fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

/// The first `limit` (default: all) non-empty lines of the word list, trimmed.
fn load_words(path: &Path, limit: Option<usize>) -> std::io::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .take(limit.unwrap_or(usize::MAX))
        .map(String::from)
        .collect())
}

fn write_nbest(
    out: &mut impl Write,
    beam: usize,
    words: &[String],
    hist: &[History],
    cfg: &SearchConfig,
) {
    for (w, h) in words.iter().zip(hist) {
        for (rank, f) in h.nbest(h.len()).iter().enumerate() {
            let phon: Vec<&str> = f
                .hyp
                .words()
                .into_iter()
                .filter(|&p| p != cfg.eos)
                .map(G2p::phoneme)
                .collect();
            let ended = f.hyp.word == cfg.eos;
            writeln!(
                out,
                "{beam}\t{w}\t{rank}\t{}{}\t{:.9}\t{:.9}",
                phon.join(" "),
                if ended { "" } else { " <cut>" },
                f.hyp.cost,
                f.score
            )
            .expect("write the n-best file");
        }
    }
}

/// The model's GEMM alone, `x @ W + b` with `W` `[256, 768]` (a GRU's gate projection) at the
/// row counts of a mini-batch of 16 words at beam 1, 4 and 12, one `eval` each: what bounds a
/// decoding step (`--gemm`; set `KILN_NUM_THREADS=1` for one core).
fn gemm(reps: usize) {
    let w = kiln::Array::uniform(&[256, 768], -0.1, 0.1, 1, kiln::DType::F32).expect("w");
    let b = kiln::Array::uniform(&[768], -0.1, 0.1, 2, kiln::DType::F32).expect("b");
    kiln::eval(&[&w, &b]).expect("eval");
    for rows in [16usize, 64, 192] {
        let x = kiln::Array::uniform(&[rows, 256], -1.0, 1.0, 3, kiln::DType::F32).expect("x");
        x.eval().expect("eval");
        let mut times = Vec::with_capacity(reps);
        for i in 0..=reps {
            let t = Instant::now();
            let y = x.matmul(&w) + &b;
            y.eval().expect("eval");
            if i > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        let med = median(times);
        emit(&GemmLine {
            workload: "g2p_gemm",
            implementation: "kiln",
            m: rows,
            k: 256,
            n: 768,
            median_us: round(med * 1e6, 2),
            gflops: round(2.0 * rows as f64 * 256.0 * 768.0 / med / 1e9, 1),
        });
    }
}

fn main() {
    let o = options(Cli::parse());
    if !o.model.exists() {
        eprintln!(
            "beam bench: {} is absent (run scripts/fetch-data.sh)",
            o.model.display()
        );
        std::process::exit(1);
    }
    if o.gemm {
        gemm(o.reps * 40);
        return;
    }
    if std::env::var_os(CHILD_ENV).is_none() {
        spawn_children(&o);
        return;
    }
    let threads = o.threads[0];
    let words = match load_words(&o.words, o.limit) {
        Ok(w) if !w.is_empty() => w,
        Ok(_) => {
            eprintln!("beam bench: {} has no words", o.words.display());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("beam bench: {}: {e}", o.words.display());
            std::process::exit(1);
        }
    };
    let sources: Vec<Vec<usize>> = words.iter().map(|w| G2p::encode_word(w)).collect();
    let n = words.len() as f64;
    let mut nbest = o.nbest.as_ref().map(|p| {
        std::io::BufWriter::new(
            std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        )
    });
    for &beam in &o.beams {
        let cfg = SearchConfig {
            beam,
            bos: G2p::BOS,
            eos: G2p::EOS,
            unk: Some(G2p::UNK),
            max_length_factor: o.max_length_factor,
            normalize: o.normalize,
            word_penalty: o.word_penalty,
            ..Default::default()
        };
        // Models are loaded before each timed pass (one per decoding thread), so the time is
        // decoding only: encoder, beam steps, hypothesis bookkeeping.
        let loaded: Mutex<Vec<G2p>> = Mutex::new(Vec::new());
        let reload = || {
            let mut l = loaded.lock().expect("model pool");
            l.clear();
            for _ in 0..threads {
                l.push(G2p::load(&o.model).expect("load the g2p-en checkpoint"));
            }
        };
        let make = || -> kiln_beam::Result<BeamSearch> {
            let g = loaded
                .lock()
                .expect("model pool")
                .pop()
                .expect("a loaded model per thread");
            Ok(BeamSearch::new(vec![Box::new(g)], cfg.clone()))
        };
        // cold pass from an empty graph cache: the compiles a fresh process pays
        reload();
        kiln::clear_cache();
        let t0 = Instant::now();
        let hist = decode_parallel(&sources, &make, o.mini_batch, threads).expect("decode");
        let cold = t0.elapsed().as_secs_f64();
        let stats = kiln::cache_stats();
        let cold_compiles = stats.misses;
        if let Some(out) = nbest.as_mut() {
            write_nbest(out, beam, &words, &hist, &cfg);
        }
        let steps_out: usize = hist
            .iter()
            .map(|h| h.best().map_or(0, |f| f.hyp.length))
            .sum();
        let mut times = Vec::with_capacity(o.reps);
        let mut timed_compiles = 0;
        for _ in 0..o.reps {
            reload();
            let before = kiln::cache_stats().misses;
            let t = Instant::now();
            let h = decode_parallel(&sources, &make, o.mini_batch, threads).expect("decode");
            times.push(t.elapsed().as_secs_f64());
            timed_compiles += kiln::cache_stats().misses - before;
            assert_eq!(h.len(), hist.len());
        }
        let lo = times.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = times.iter().copied().fold(0.0, f64::max);
        let reps = times.len();
        let runs_s: Vec<f64> = times.iter().map(|&t| round(t, 4)).collect();
        let med = median(times);
        emit(&BeamLine {
            workload: "g2p_beam",
            implementation: "kiln",
            beam,
            threads,
            mini_batch: o.mini_batch,
            words: words.len(),
            reps,
            median_s: round(med, 6),
            min_s: round(lo, 6),
            max_s: round(hi, 6),
            words_per_s: round(n / med, 1),
            cold_s: round(cold, 6),
            compiles_per_1000_words: round(cold_compiles as f64 * 1000.0 / n, 2),
            compiles_cold: cold_compiles,
            compiles_timed: timed_compiles,
            compile_ms_cold: round(stats.compile_time.as_secs_f64() * 1e3, 2),
            mean_output_len: round(steps_out as f64 / n, 3),
            runs_s,
        });
    }
    if let Some(mut out) = nbest {
        out.flush().expect("write the n-best file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        Cli::try_parse_from(std::iter::once("beam").chain(args.iter().copied())).map(options)
    }

    #[test]
    fn documented_invocations_parse() {
        // benches/peers/beam_numpy.py, docs/performance.md
        let o = parse(&[
            "--beams",
            "4",
            "--threads",
            "1",
            "--limit",
            "200",
            "--reps",
            "2",
            "--nbest",
            "/tmp/n.tsv",
        ])
        .unwrap();
        assert_eq!(
            (o.beams, o.threads, o.limit, o.reps),
            (vec![4], vec![1], Some(200), 2)
        );
        let o = parse(&["--beams", "4,12", "--threads", "2", "--reps", "5"]).unwrap();
        assert_eq!((o.beams, o.threads, o.limit), (vec![4, 12], vec![2], None));
        let o = parse(&["--quick"]).unwrap();
        assert_eq!((o.beams, o.threads), (vec![1, 4, 12], vec![1, 2]));
        assert_eq!((o.reps, o.limit, o.mini_batch), (2, Some(200), 16));
        let o = parse(&["--quick", "--reps", "3", "--normalize", "-0.5"]).unwrap();
        assert_eq!((o.reps, o.normalize), (3, -0.5));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            &["--reps", "0"][..],
            &["--reps", "-1"],
            &["--beams", "1,0"],
            &["--threads", "0"],
            &["--threads", ""],
            &["--mini-batch", "0"],
            &["--limit", "0"],
            &["--max-length-factor", "0"],
            &["--max-length-factor", "inf"],
            &["--normalize", "nan"],
            &["--word-penalty", "1e999"],
            &["--bogus"],
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn children_get_the_parents_options() {
        let o = parse(&[
            "--quick",
            "--beams",
            "1,12",
            "--threads",
            "1,2",
            // a value starting with `-` needs the `=` form here; the children get every value so
            "--nbest=-odd name.tsv",
            "--words",
            "/tmp/w.txt",
            "--max-length-factor",
            "0.1",
            "--normalize",
            "-0.3",
            "--word-penalty",
            "1e-7",
        ])
        .unwrap();
        for t in [1, 2] {
            let args = child_args(&o, t);
            let child = Cli::try_parse_from(std::iter::once(OsString::from("beam")).chain(args))
                .map(options)
                .unwrap();
            let want = Opts {
                threads: vec![t],
                nbest: o.nbest.clone().filter(|_| t == 1),
                ..o.clone()
            };
            assert_eq!(child, want);
        }
    }
}

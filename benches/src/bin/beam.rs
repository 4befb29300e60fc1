//! g2p-en decoding throughput with kiln-beam (issue 6's benchmark): decodes a fixed word list
//! (`benches/data/g2p_words.txt`, 1,000 common English words) at beam 1, 4 and 12 on 1 and 2
//! threads with `decode_parallel` (mini-batches sorted by length, as `kiln-translate` does)
//! and prints one JSON object per setting: the median over repetitions, words per second,
//! and the graph compiles per 1,000 words (from an empty graph cache).
//!
//! Threads: each thread count runs in its own child process (its own graph-cache counters),
//! with that many decoding threads (`decode_parallel`) and kiln's thread team (which
//! also splits large GEMMs) at one thread (`KILN_NUM_THREADS=1`), so "1 thread" uses one core
//! and "2 threads" two.
//!
//! Usage: `cargo run --release -p kiln-benches --bin beam -- [--quick] [--beams 1,4,12]
//! [--threads 1,2] [--mini-batch 16] [--reps 5] [--words PATH] [--limit N]
//! [--model PATH] [--nbest PATH]`. `--nbest PATH` also writes every finished hypothesis of
//! every word (1-thread run) as tab-separated `beam word rank phonemes cost score`, for the
//! comparison with the numpy reference (`benches/peers/beam.sh`).

use kiln_beam::{decode_parallel, BeamSearch, G2p, History, SearchConfig};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

const CHILD_ENV: &str = "KILN_BEAM_BENCH_CHILD";

struct Opts {
    beams: Vec<usize>,
    threads: Vec<usize>,
    mini_batch: usize,
    reps: usize,
    words: PathBuf,
    limit: usize,
    model: PathBuf,
    nbest: Option<PathBuf>,
    gemm: bool,
    max_length_factor: f64,
    normalize: f64,
    word_penalty: f64,
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn list(v: &str) -> Vec<usize> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .expect("a comma-separated list of integers")
        })
        .collect()
}

fn parse() -> Opts {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let data = std::env::var_os("KILN_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("data"));
    let mut o = Opts {
        beams: vec![1, 4, 12],
        threads: vec![1, 2],
        mini_batch: 16,
        reps: if quick { 2 } else { 5 },
        words: root().join("benches/data/g2p_words.txt"),
        limit: if quick { 200 } else { usize::MAX },
        model: data.join("g2p_en/checkpoint20.npz"),
        nbest: None,
        gemm: false,
        max_length_factor: 3.0,
        normalize: 0.0,
        word_penalty: 0.0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .unwrap_or_else(|| panic!("{a} needs a value"))
        };
        match a.as_str() {
            "--quick" => {}
            "--beams" => o.beams = list(&val()),
            "--threads" => o.threads = list(&val()),
            "--mini-batch" => o.mini_batch = val().parse().expect("--mini-batch N"),
            "--reps" => o.reps = val().parse().expect("--reps N"),
            "--words" => o.words = val().into(),
            "--limit" => o.limit = val().parse().expect("--limit N"),
            "--model" => o.model = val().into(),
            "--nbest" => o.nbest = Some(val().into()),
            "--gemm" => o.gemm = true,
            "--max-length-factor" => o.max_length_factor = val().parse().expect("a number"),
            "--normalize" => o.normalize = val().parse().expect("a number"),
            "--word-penalty" => o.word_penalty = val().parse().expect("a number"),
            other => {
                panic!("unknown option {other:?} (see the module docs of benches/src/bin/beam.rs)")
            }
        }
    }
    o
}

/// Runs one child process per thread count (its own cache counters and thread pools) and
/// passes its JSON lines through.
fn spawn_children(o: &Opts) {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    for &t in &o.threads {
        let mut child_args = Vec::new();
        let mut skip = false;
        for a in &args {
            if skip {
                skip = false;
                continue;
            }
            if a == "--threads" {
                skip = true;
                continue;
            }
            // only the 1-thread child writes the n-best lists
            if a == "--nbest" && t != 1 {
                skip = true;
                continue;
            }
            child_args.push(a.clone());
        }
        child_args.push("--threads".into());
        child_args.push(t.to_string());
        let status = Command::new(&exe)
            .args(&child_args)
            .env(CHILD_ENV, "1")
            .env("KILN_NUM_THREADS", "1")
            .status()
            .expect("run the bench child process");
        assert!(status.success(), "the {t}-thread run failed: {status}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

fn load_words(path: &Path, limit: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .take(limit)
        .map(String::from)
        .collect()
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
        println!(
            "{{\"workload\":\"g2p_gemm\",\"impl\":\"kiln\",\"m\":{rows},\"k\":256,\"n\":768,\
             \"median_us\":{:.2},\"gflops\":{:.1}}}",
            med * 1e6,
            2.0 * rows as f64 * 256.0 * 768.0 / med / 1e9
        );
    }
}

fn main() {
    let o = parse();
    if !o.model.exists() {
        eprintln!(
            "beam bench: {} is absent (run scripts/fetch-data.sh)",
            o.model.display()
        );
        std::process::exit(1);
    }
    if o.gemm {
        gemm(o.reps.max(1) * 40);
        return;
    }
    if std::env::var_os(CHILD_ENV).is_none() {
        spawn_children(&o);
        return;
    }
    let threads = o.threads[0];
    let words = load_words(&o.words, o.limit);
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
        for _ in 0..o.reps.max(1) {
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
        let runs: Vec<String> = times.iter().map(|t| format!("{t:.4}")).collect();
        let med = median(times);
        println!(
            "{{\"workload\":\"g2p_beam\",\"impl\":\"kiln\",\"beam\":{beam},\"threads\":{threads},\
             \"mini_batch\":{},\"words\":{},\"reps\":{reps},\"median_s\":{med:.6},\"min_s\":{lo:.6},\
             \"max_s\":{hi:.6},\"words_per_s\":{:.1},\"cold_s\":{cold:.6},\
             \"compiles_per_1000_words\":{:.2},\"compiles_cold\":{cold_compiles},\
             \"compiles_timed\":{timed_compiles},\"compile_ms_cold\":{:.2},\
             \"mean_output_len\":{:.3},\"runs_s\":[{}]}}",
            o.mini_batch,
            words.len(),
            n / med,
            cold_compiles as f64 * 1000.0 / n,
            stats.compile_time.as_secs_f64() * 1e3,
            steps_out as f64 / n,
            runs.join(","),
        );
        std::io::stdout().flush().ok();
    }
    if let Some(mut out) = nbest {
        out.flush().expect("write the n-best file");
    }
}

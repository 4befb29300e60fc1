//! `io-load`: loads one file with kiln-io and prints one JSON object: the seconds to load it
//! and the seconds to then read every element (a sum), so that a lazy (memory-mapped) load
//! and an eager one compare on the same work (the sum is in the file's dtype, as numpy's
//! `a.sum()` is). Peak memory is measured by the caller
//! (`benches/io/run.py` reads the child's `ru_maxrss`).
//!
//! Depends on kiln's and kiln-io's public APIs, `clap` and `serde_json`.

use clap::{Parser, ValueEnum};
use std::time::Instant;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Npy,
    Safetensors,
}

/// Load a file with kiln-io and time it.
#[derive(Parser, Debug)]
struct Args {
    /// The file's format.
    #[arg(long, value_enum)]
    format: Format,
    /// The file.
    path: std::path::PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let t0 = Instant::now();
    let arrays: Vec<kiln::Array> = match args.format {
        Format::Npy => vec![kiln_io::read_npy(&args.path)?],
        Format::Safetensors => kiln_io::read_safetensors(&args.path)?
            .into_tensors()
            .into_iter()
            .map(|(_, a)| a)
            .collect(),
    };
    let load = t0.elapsed().as_secs_f64();
    let sums: Vec<kiln::Array> = arrays
        .iter()
        .map(|a| a.sum(None, false).cast(kiln::DType::F64))
        .collect();
    kiln::eval(&sums.iter().collect::<Vec<_>>())?;
    let total = t0.elapsed().as_secs_f64();
    let checksum: f64 = sums
        .iter()
        .map(|s| s.item::<f64>())
        .sum::<Result<f64, _>>()?;
    let line = serde_json::json!({
        "tool": "kiln",
        "format": format!("{:?}", args.format).to_lowercase(),
        "load_s": load,
        "load_and_sum_s": total,
        "checksum": checksum,
    });
    println!("{line}");
    Ok(())
}

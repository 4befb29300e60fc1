//! Fuzz target: `kiln_io::npz_from_bytes` on arbitrary bytes (a zip of `.npy` members).
//! It must never panic or abort; a failure must be an `Err` naming the operation, and every
//! array it returns must evaluate and hold no more elements than the input can encode.
//!
//! Depends on `kiln_io`, kiln's public API and `libfuzzer-sys`.
#![no_main]

use kiln::{Array, DType};
use libfuzzer_sys::fuzz_target;

/// Evaluates a returned array, of at most `most` elements, and reads its values back.
fn consume(most: usize, a: &Array) {
    assert!(a.size() <= most, "{} elements, past {most}", a.size());
    a.eval().expect("a returned array evaluates");
    match a.dtype() {
        DType::Bool => drop(a.to_vec::<bool>().unwrap()),
        DType::I32 => drop(a.to_vec::<i32>().unwrap()),
        DType::I64 => drop(a.to_vec::<i64>().unwrap()),
        DType::F32 => drop(a.to_vec::<f32>().unwrap()),
        DType::F64 => drop(a.to_vec::<f64>().unwrap()),
    }
}

fuzz_target!(|data: &[u8]| {
    match kiln_io::npz_from_bytes(data) {
        // Deflate encodes up to 1032 bytes in one.
        Ok(arrays) => arrays.values().for_each(|a| consume(data.len() * 1032, a)),
        Err(e) => assert!(e.to_string().contains("npz_from_bytes"), "{e}"),
    }
});

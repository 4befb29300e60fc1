//! Fuzz target: `kiln_io::npy_from_bytes` on arbitrary bytes. It must never panic or abort;
//! a failure must be an `Err` naming the operation, and an array it returns must evaluate
//! and hold no more elements than the input has bytes.
//!
//! Depends on `kiln_io`, kiln's public API and `libfuzzer-sys`.
#![no_main]

use kiln::{Array, DType};
use libfuzzer_sys::fuzz_target;

/// Evaluates a returned array and reads its values back.
fn consume(input_len: usize, a: &Array) {
    assert!(
        a.size() <= input_len,
        "{} elements from {input_len} bytes",
        a.size()
    );
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
    match kiln_io::npy_from_bytes(data) {
        Ok(a) => consume(data.len(), &a),
        Err(e) => assert!(e.to_string().contains("npy_from_bytes"), "{e}"),
    }
});

//! Fuzz target: `kiln_io::npz_from_bytes` on arbitrary bytes (a zip of `.npy` members).
//! It must never panic or abort; a failure must be an `Err` naming the operation, and every
//! array it returns must evaluate and hold no more elements than the input can encode.
//!
//! Depends on `kiln_io`, `libfuzzer-sys` and the shared check in `common`.
#![no_main]

mod common;

use common::consume;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match kiln_io::npz_from_bytes(data) {
        // Deflate encodes up to 1032 bytes in one.
        Ok(arrays) => arrays.values().for_each(|a| consume(data.len() * 1032, a)),
        Err(e) => assert!(e.to_string().contains("npz_from_bytes"), "{e}"),
    }
});

//! Fuzz target: `kiln_io::pickle::loads` on arbitrary bytes. It must never panic, abort or
//! allocate what the input only declares; a failure must be an `Err` that displays, and a
//! value it returns must be printable.
//!
//! Depends on `kiln_io` (its pickle module) and `libfuzzer-sys`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match kiln_io::pickle::loads(data) {
        Ok(v) => {
            let _ = format!("{v:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});

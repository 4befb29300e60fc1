//! Fuzz target: `kiln_io::safetensors_from_bytes` on arbitrary bytes. It must never panic
//! or abort; a failure must be an `Err` naming the operation, and every tensor it returns
//! must evaluate and hold no more elements than the input has bytes.
//!
//! Depends on `kiln_io`, `libfuzzer-sys` and the shared check in `common`.
#![no_main]

mod common;

use common::consume;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match kiln_io::safetensors_from_bytes(data) {
        Ok(st) => {
            let _ = st.metadata().len();
            st.tensors()
                .iter()
                .for_each(|(_, a)| consume(data.len(), a));
        }
        Err(e) => assert!(e.to_string().contains("safetensors_from_bytes"), "{e}"),
    }
});

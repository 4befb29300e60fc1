//! Fuzz target: `kiln_io::pth_from_bytes` on arbitrary bytes (a `torch.save` zip of a
//! `data.pkl` pickle and its storages). It must never panic, abort or allocate what the
//! input only declares; a failure must be an `Err` that displays, and every tensor it
//! returns is converted with `to_array()`, evaluated and read back (errors there are
//! allowed, panics are not).
//!
//! Unlike the other array targets it sets no bound on a tensor's element count: a zero
//! stride legitimately expands one stored element to many, so libFuzzer's `-malloc_limit_mb`
//! and `-rss_limit_mb` are what catch an oversized tensor.
//!
//! Depends on `kiln_io`, kiln's public API and `libfuzzer-sys`.
#![no_main]

use kiln::DType;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match kiln_io::pth_from_bytes(data) {
        Ok(tensors) => {
            for t in tensors.values() {
                let Ok(a) = t.to_array() else { continue };
                if a.eval().is_err() {
                    continue;
                }
                let _ = match a.dtype() {
                    DType::Bool => a.to_vec::<bool>().map(drop),
                    DType::I32 => a.to_vec::<i32>().map(drop),
                    DType::I64 => a.to_vec::<i64>().map(drop),
                    DType::F32 => a.to_vec::<f32>().map(drop),
                    DType::F64 => a.to_vec::<f64>().map(drop),
                };
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});

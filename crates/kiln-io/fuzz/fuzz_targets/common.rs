//! What the fuzz targets of the array readers (`npy`, `npz`, `safetensors`) check of every
//! array a reader returns: it holds no more elements than the input can encode, it
//! evaluates, and its values read back. Each of those targets declares `mod common;`.
//!
//! Depends on kiln's public API.

use kiln::{Array, DType};

/// Evaluates a returned array, of at most `most` elements, and reads its values back.
pub fn consume(most: usize, a: &Array) {
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

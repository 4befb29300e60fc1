//! Deterministic test arrays: the dtypes kiln's formats hold, the f32 and f64 bit patterns
//! every writer must keep (signed zeros, subnormals, extremes, infinities, quiet and
//! signalling NaNs with payloads), and [`sample`] arrays that start with such extremes.
//!
//! Depends on kiln's public API.

use kiln::{Array, DType};

/// Every dtype kiln reads and writes.
pub const DTYPES: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];

/// f32 bit patterns: ±0, the smallest subnormal, the largest subnormal, the smallest normal,
/// the largest finite, ±∞, the quiet NaN, NaNs with payloads (positive and negative),
/// signalling NaNs (the smallest and the largest payload), and 1/3.
pub const F32_SPECIALS: [u32; 14] = [
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x007F_FFFF,
    0x0080_0000,
    0x7F7F_FFFF,
    0x7F80_0000,
    0xFF80_0000,
    0x7FC0_0000,
    0x7FC1_2345,
    0xFFD5_4321,
    0x7F80_0001,
    0x7FBF_FFFF,
    0x3EAA_AAAB,
];

/// The f64 bit patterns of the same kinds as [`F32_SPECIALS`], in the same order.
pub const F64_SPECIALS: [u64; 14] = [
    0,
    0x8000_0000_0000_0000,
    1,
    0x000F_FFFF_FFFF_FFFF,
    0x0010_0000_0000_0000,
    0x7FEF_FFFF_FFFF_FFFF,
    0x7FF0_0000_0000_0000,
    0xFFF0_0000_0000_0000,
    0x7FF8_0000_0000_0000,
    0x7FF8_1234_5678_9ABC,
    0xFFFD_EADB_EEF0_0001,
    0x7FF0_0000_0000_0001,
    0x7FF7_FFFF_FFFF_FFFF,
    0x3FD5_5555_5555_5555,
];

/// A deterministic array of `dtype` and `shape` starting with the dtype's extremes, the
/// rest mixed from `salt`.
pub fn sample(dtype: DType, shape: &[usize], salt: u64) -> Array {
    let n: usize = shape.iter().product();
    let f32s = [
        0x8000_0000u32,
        0x7FC1_2345,
        0x7F80_0001,
        0xFF80_0000,
        0x0000_0001,
    ];
    let f64s = [
        0x8000_0000_0000_0000u64,
        0x7FF8_1234_5678_9ABC,
        0xFFF0_0000_0000_0000,
        1,
    ];
    let mix = |i: usize| (i as u64 + salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    match dtype {
        DType::Bool => {
            Array::from_vec((0..n).map(|i| mix(i) >> 63 == 1).collect::<Vec<_>>(), shape)
        }
        DType::I32 => Array::from_vec(
            (0..n)
                .map(|i| {
                    if i == 0 {
                        i32::MIN
                    } else {
                        (mix(i) >> 32) as i32
                    }
                })
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::I64 => Array::from_vec(
            (0..n)
                .map(|i| if i == 0 { i64::MIN } else { mix(i) as i64 })
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F32 => Array::from_vec(
            (0..n)
                .map(|i| f32::from_bits(f32s.get(i).copied().unwrap_or((mix(i) >> 32) as u32)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F64 => Array::from_vec(
            (0..n)
                .map(|i| f64::from_bits(f64s.get(i).copied().unwrap_or(mix(i))))
                .collect::<Vec<_>>(),
            shape,
        ),
    }
    .unwrap()
}

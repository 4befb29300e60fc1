//! The counter-based generator behind [`crate::Op::Random`]: Philox-4x32-10 (Salmon et al.,
//! "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//!
//! Element `i` of a random array with seed `s` is a pure function of `(s, i)`, so results do
//! not depend on thread count, block size, backend or evaluation order. Depends on nothing.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox-4x32 with 10 rounds.
///
/// ```
/// // Known-answer vector from the Random123 distribution (counter 0, key 0).
/// assert_eq!(kiln_ir::random::philox4x32([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
/// ```
pub fn philox4x32(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

fn block(seed: u64, index: u64) -> [u32; 4] {
    philox4x32(
        [index as u32, (index >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

fn unit53(hi: u32, lo: u32) -> f64 {
    ((((hi as u64) << 32) | lo as u64) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Element `index` of a uniform `[0, 1)` stream with `seed`, with 53 random bits.
///
/// ```
/// let u = kiln_ir::random::uniform(42, 7);
/// assert!((0.0..1.0).contains(&u));
/// assert_eq!(u, kiln_ir::random::uniform(42, 7));
/// ```
pub fn uniform(seed: u64, index: u64) -> f64 {
    let b = block(seed, index);
    unit53(b[0], b[1])
}

/// Element `index` of a uniform `[0, 1)` stream with `seed`, with 24 random bits (exactly
/// representable in `f32`, so it never rounds up to 1).
///
/// ```
/// let u = kiln_ir::random::uniform_f32(42, 7);
/// assert!((0.0..1.0).contains(&u));
/// ```
pub fn uniform_f32(seed: u64, index: u64) -> f32 {
    let b = block(seed, index);
    (b[0] >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// Element `index` of a standard normal stream with `seed` (Box–Muller on one Philox block).
///
/// ```
/// let z = kiln_ir::random::normal(1, 0);
/// assert!(z.is_finite());
/// ```
pub fn normal(seed: u64, index: u64) -> f64 {
    let b = block(seed, index);
    let u1 = 1.0 - unit53(b[0], b[1]); // (0, 1]
    let u2 = unit53(b[2], b[3]);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_all_ones() {
        assert_eq!(
            philox4x32([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
    }

    #[test]
    fn moments_are_plausible() {
        let n = 100_000u64;
        let m: f64 = (0..n).map(|i| uniform(3, i)).sum::<f64>() / n as f64;
        assert!((m - 0.5).abs() < 0.01, "uniform mean {m}");
        let z: Vec<f64> = (0..n).map(|i| normal(3, i)).collect();
        let mean = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.02,
            "normal {mean} {var}"
        );
    }
}

//! The blocked form for large products: the right operand copied block by block into panels
//! of `NR` columns, the left operand `MR` rows at a time into panels kept for the later
//! blocks of columns, per thread ([`super::Scratch`]); its register block
//! ([`super::micro::Micro::packed`]) walks both panels contiguously, and the steps of a long
//! product go in blocks that continue the previous block's partial sums.
//!
//! Depends on [`super`] (the descriptor, `Real`, `Scratch`, `Scale`), [`super::micro`],
//! [`super::broadcast`], [`super::tuning`] and `crate::tune` (the cache blocks).

use super::broadcast::{b_block_bytes, pack_panels, store, tile};
use super::micro::Micro;
use super::tuning::A_BLOCK_BYTES;
use super::{Gemm, Real, Scale, Scratch};

/// Bytes of the blocked form's packed panel of the left operand (`MR` rows × `kc` steps,
/// read once per register block: it stays in L1): [`crate::CacheBlocks::gemm_a_panel_bytes`].
pub(super) fn a_panel_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_a_panel_bytes
}

/// Whether a scaled product (`c = α·a@b + β·c` other than `α = 1, β = 0`) with `k` steps
/// of `elem`-byte elements takes the blocked form in one block of steps at AVX-512 (12-row
/// panels), so without its scratch of partial sums: with that scratch the blocked form was
/// no faster than `matrixmultiply` (`relu(x @ w + b)` at 1024², `x @ w + b` at
/// 256×784×512: within the noise, 3–9 % slower in most runs). At AVX2 the blocked form takes
/// scaled products of any length (`Gemm::blocked`): there it beat `matrixmultiply` with its
/// scratch too.
pub(super) fn scaled_in_one_block(k: usize, elem: usize) -> bool {
    k <= a_panel_bytes() / (12 * elem)
}

/// The cache blocks of [`gemm_blocked`] (tests shrink them to reach every block edge with
/// small operands).
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocking {
    /// [`a_panel_bytes`].
    pub(super) a_panel: usize,
    /// [`b_block_bytes`].
    pub(super) b_block: usize,
    /// [`A_BLOCK_BYTES`].
    pub(super) a_block: usize,
}

impl Blocking {
    /// The blocks of the caches in force ([`crate::tuning`]).
    pub(super) fn current() -> Blocking {
        Blocking {
            a_panel: a_panel_bytes(),
            b_block: b_block_bytes(),
            a_block: A_BLOCK_BYTES,
        }
    }
}

/// The blocked form for large products: the right operand is copied block by block
/// (`kc × nc`, [`b_block_bytes`]: it stays in L2) into panels of `NR` columns
/// ([`pack_panels`]), the left operand `MR` rows at a time into `kc × MR` panels
/// ([`a_panel_bytes`]: in L1) kept for the later blocks of columns (in groups of rows of
/// [`A_BLOCK_BYTES`]), and each register block walks both panels contiguously
/// ([`Micro::packed`]). The steps `p` go in blocks of `kc`, each register block
/// continuing the partial sums the previous one stored (so every element is the one
/// ordered sum over `p`): in `c` for a product stored unscaled, else in a scratch block
/// (`c` then holds what the scaling adds in, read once by the last block).
#[inline(always)]
pub(super) fn gemm_blocked<T: Real, K: Micro<T>, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
    bk: Blocking,
) {
    let k = g.k;
    let size = std::mem::size_of::<T>();
    let kblocks = k.div_ceil((bk.a_panel / (MR * size)).max(1)).max(1);
    let kc = k.div_ceil(kblocks);
    let nc = (bk.b_block / (kc * size)).max(NR) / NR * NR;
    let mc = (bk.a_block / (kc * size)).max(MR) / MR * MR;
    // The buffers are moved out of the thread-local and back rather than used inside a
    // closure passed to it: a closure's body is compiled with the thread-local's code, at the
    // baseline ISA level in a default build, so the loops, packing and stores of `blocks`
    // ran as SSE2 there (default build 4–8 % slower than `-C target-cpu=native` at 1024³).
    let mut scratch = T::take_scratch();
    let Scratch { b: bp, a: ap, part } = &mut scratch;
    blocks::<T, K, MR, NR>(g, a, b, c, sc, (kblocks, kc, nc, mc), (bp, ap, part));
    T::put_scratch(scratch);
}

/// The loops of [`gemm_blocked`] over its blocks, `part` holding the partial sums of a
/// scaled product (whose `c` holds what the last block adds in).
#[inline(always)]
#[allow(clippy::type_complexity)]
pub(super) fn blocks<T: Real, K: Micro<T>, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
    (kblocks, kc, nc, mc): (usize, usize, usize, usize),
    (bp, ap, part): (&mut Vec<T>, &mut Vec<T>, &mut Vec<T>),
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let unscaled = Scale::plain();
    let plain = sc.alpha == T::ONE && sc.beta == T::default();
    for ic in (0..m).step_by(mc) {
        let mn = mc.min(m - ic);
        if !plain && kblocks > 1 {
            part.clear();
            part.resize(mn * n, T::default());
        }
        for q in 0..kblocks {
            let p0 = q * kc;
            let kq = kc.min(k - p0);
            // Rows `ic..ic + mn` as `MR`-row panels, each packed just before the first block
            // of columns uses it (still in L1 then) and read again by the later ones.
            ap.resize(mn.div_ceil(MR) * MR * kq, T::default());
            let last = q + 1 == kblocks;
            for jc in (0..n).step_by(nc) {
                let jn = nc.min(n - jc);
                pack_panels::<T, NR>(g, b, (p0, kq), (jc, jn), bp);
                for (t, apanel) in ap.chunks_exact_mut(kq * MR).enumerate() {
                    let i0 = ic + t * MR;
                    let rows = MR.min(m - i0);
                    if jc == 0 {
                        pack_rows::<T, MR>(g, a, (i0, rows), (p0, kq), apanel);
                    }
                    let apanel = &*apanel;
                    for (s, panel) in bp.chunks_exact(kq * NR).enumerate() {
                        let j0 = jc + s * NR;
                        let (at, at_part) = ((i0, j0), (i0 - ic, j0));
                        let w = NR.min(jc + jn - j0);
                        let init = (q > 0).then(|| {
                            if plain {
                                tile::<T, MR, NR>(c, n, at, (rows, w))
                            } else {
                                tile::<T, MR, NR>(part, n, at_part, (rows, w))
                            }
                        });
                        let acc = K::packed::<MR, NR>(apanel, panel, kq, init.as_ref());
                        if last {
                            store(c, n, at, &acc[..rows], w, sc);
                        } else if plain {
                            store(c, n, at, &acc[..rows], w, unscaled);
                        } else {
                            store(part, n, at_part, &acc[..rows], w, unscaled);
                        }
                    }
                }
            }
        }
    }
}

/// Copies rows `i0..i0+rows` (`rows <= MR`), columns `p0..p0+kq` of `a` into `out` as a
/// `kq × MR` panel (entry `p` holds element `p` of each row), rows past `rows` zero.
pub(super) fn pack_rows<T: Real, const MR: usize>(
    g: &Gemm,
    a: &[T],
    (i0, rows): (usize, usize),
    (p0, kq): (usize, usize),
    out: &mut [T],
) {
    debug_assert_eq!(out.len(), kq * MR);
    if rows < MR {
        out.fill(T::default());
    }
    let base = |r: usize| g.aoff + (i0 + r) as isize * g.rsa + p0 as isize * g.csa;
    if g.csa == 1 {
        // Rows read in place, written `MR` apart: one group of `MR` at a time (a write
        // every `MR` elements along each row compiled to a scatter, a sixth of the time).
        let src: [&[T]; MR] = std::array::from_fn(|r| {
            if r < rows {
                let at = base(r) as usize;
                &a[at..at + kq]
            } else {
                &[]
            }
        });
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            for r in 0..rows {
                o[r] = src[r][p];
            }
        }
    } else if g.rsa == 1 {
        // A transposed `a`: the `rows` elements of each step are contiguous.
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            let at = (base(0) + p as isize * g.csa) as usize;
            o[..rows].copy_from_slice(&a[at..at + rows]);
        }
    } else {
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            for (r, x) in o[..rows].iter_mut().enumerate() {
                *x = a[(base(r) + p as isize * g.csa) as usize];
            }
        }
    }
}

//! The broadcast form: blocks of `MR` rows by `NR` columns held in registers, each step `p`
//! multiplying element `p` of the block's rows of `a` by `NR` contiguous elements of row `p`
//! of `b` read in place (or packed in panels for many rows, [`pack_panels`]); the register
//! blocks' stores ([`store`]) that every form shares.
//!
//! Depends on [`super`] (the descriptor, `Real`, `Rows`, `Scale`), [`super::micro`],
//! [`super::tuning`] and `crate::tune` (the cache blocks).

use super::micro::{InPlace, Micro, Packed, Panel};
use super::tuning::{PACK_MIN_BYTES, PACK_ROWS};
use super::{Gemm, Real, Rows, Scale};

/// Where the blocks of one block of the product go: columns `jc..jc + g.n` of `c`, whose
/// rows are `ldc` long; `cont`: the accumulators continue the partial sums already there
/// (a later block of the steps `p`), else they start at zero; `sc` scales what is stored.
#[derive(Clone, Copy)]
pub(super) struct Dest<'a, T> {
    ldc: usize,
    jc: usize,
    cont: bool,
    sc: Scale<'a, T>,
    /// `Some(kc)`: the right operand is packed in panels of `NR` columns, `kc` rows each
    /// ([`pack_panels`]), instead of read as rows.
    panels: Option<usize>,
}

/// Rows `i0..i0+MR` of `c`. Rows of `a` with unit column stride are read in place; others
/// are first copied into `scratch` (a `k × MR` panel: contiguous copies when `a` is
/// transposed).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn row_block<T: Real, K: Micro<T>, const MR: usize, const NR: usize, const NV: usize>(
    g: &Gemm,
    a: &[T],
    i0: usize,
    b: Rows<'_, T>,
    tail: &[T],
    scratch: &mut Vec<[T; MR]>,
    c: &mut [T],
    to: Dest<'_, T>,
) {
    let k = g.k;
    let base = |r: usize| g.aoff + (i0 + r) as isize * g.rsa;
    if g.csa == 1 {
        let rows = InPlace(std::array::from_fn(|r| {
            let start = base(r) as usize;
            &a[start..start + k]
        }));
        columns::<T, K, _, MR, NR, NV>(rows, g, i0, b, tail, c, to);
    } else {
        scratch.clear();
        let first = base(0);
        scratch.extend((0..k).map(|p| {
            let at = first + p as isize * g.csa;
            if g.rsa == 1 {
                let at = at as usize;
                a[at..at + MR].try_into().expect("MR elements")
            } else {
                std::array::from_fn(|r| a[(at + r as isize * g.rsa) as usize])
            }
        }));
        columns::<T, K, _, MR, NR, NV>(Packed(scratch), g, i0, b, tail, c, to);
    }
}

/// The blocks of rows `i0..i0+MR` of `c`, left to right.
#[inline(always)]
pub(super) fn columns<
    T: Real,
    K: Micro<T>,
    P: Panel<T, MR>,
    const MR: usize,
    const NR: usize,
    const NV: usize,
>(
    rows: P,
    g: &Gemm,
    i0: usize,
    b: Rows<'_, T>,
    tail: &[T],
    c: &mut [T],
    to: Dest<'_, T>,
) {
    let (k, n) = (g.k, g.n);
    let mut j0 = 0;
    if let Some(kc) = to.panels {
        // `b` holds `NR`-column panels, `kc × NR` each, the last one zero-padded.
        while j0 < n {
            let w = NR.min(n - j0);
            let panel = Rows {
                data: b.data,
                off: (j0 * kc) as isize,
                rs: NR as isize,
            };
            let at = (i0, to.jc + j0);
            one::<T, K, P, MR, NR>(rows, k, (panel, 0), c, at, w, to);
            j0 += w;
        }
        return;
    }
    while j0 + NR <= n {
        one::<T, K, P, MR, NR>(rows, k, (b, j0), c, (i0, to.jc + j0), NR, to);
        j0 += NR;
    }
    // Columns left over: one vector at a time in place (a constant width: the stores are
    // vector moves, not `memmove` calls), the last partial vector through the zero-padded
    // copy of those columns.
    while j0 + NV <= n {
        one::<T, K, P, MR, NV>(rows, k, (b, j0), c, (i0, to.jc + j0), NV, to);
        j0 += NV;
    }
    if j0 < n {
        let w = n - j0;
        let panel = Rows {
            data: tail,
            off: 0,
            rs: NV as isize,
        };
        one::<T, K, P, MR, NV>(rows, k, (panel, 0), c, (i0, to.jc + j0), w, to);
    }
}

/// One `MR × W` register block of [`columns`]: columns `from..` of `b` into the block of `c`
/// at `at`, its first `w` columns stored (continuing the partial sums there when `to.cont`).
#[inline(always)]
pub(super) fn one<T: Real, K: Micro<T>, P: Panel<T, MR>, const MR: usize, const W: usize>(
    rows: P,
    k: usize,
    (b, from): (Rows<'_, T>, usize),
    c: &mut [T],
    at: (usize, usize),
    w: usize,
    to: Dest<'_, T>,
) {
    let init = to.cont.then(|| tile::<T, MR, W>(c, to.ldc, at, (MR, w)));
    let acc = K::block::<P, MR, W>(rows, k, b, from, init.as_ref());
    store(c, to.ldc, at, &acc, w, to.sc);
}

/// The `MR × W` block of `c` (rows `ldc` long) at `(i0, j0)`, its first `rows` rows and
/// `w` columns read and the others zero: the partial sums a continued register block
/// starts from.
#[inline(always)]
pub(super) fn tile<T: Real, const MR: usize, const W: usize>(
    c: &[T],
    ldc: usize,
    (i0, j0): (usize, usize),
    (rows, w): (usize, usize),
) -> [[T; W]; MR] {
    let mut t = [[T::default(); W]; MR];
    for (r, row) in t.iter_mut().enumerate().take(rows) {
        let at = (i0 + r) * ldc + j0;
        if w == W {
            // A constant width: vector moves, not a `memmove` call per row.
            *row = c[at..at + W].try_into().expect("W elements");
        } else {
            row[..w].copy_from_slice(&c[at..at + w]);
        }
    }
    t
}

/// Writes the first `w` columns of `acc` to rows `i0..` of `c` (`n` columns) from column
/// `j0`, scaled by `sc`.
#[inline(always)]
pub(super) fn store<T: Real, const W: usize>(
    c: &mut [T],
    n: usize,
    (i0, j0): (usize, usize),
    acc: &[[T; W]],
    w: usize,
    sc: Scale<'_, T>,
) {
    for (r, row) in acc.iter().enumerate() {
        let at = (i0 + r) * n + j0;
        let out = &mut c[at..at + w];
        if sc.alpha == T::ONE && sc.beta == T::default() {
            if w == W {
                // A constant width: vector moves, not a `memmove` call per row.
                let out: &mut [T; W] = out.try_into().expect("W elements");
                *out = *row;
            } else {
                out.copy_from_slice(&row[..w]);
            }
        } else if sc.beta == T::default() {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x;
            }
        } else if let Some(add) = sc.add {
            let prior = add.row(i0 + r, j0, w);
            if w == W && W * std::mem::size_of::<T>() <= 64 {
                // LLVM cannot tell that `c` and the addend do not overlap: a short row
                // (one zmm, two ymm) is finished in registers and stored whole (it went
                // through memory one element at a time, a tenth of a 64×64 `x @ w + b` at
                // AVX2); longer ones vectorise behind LLVM's own overlap check.
                let mut v: [T; W] = prior.try_into().expect("W elements");
                if sc.alpha == T::ONE && sc.beta == T::ONE {
                    for (o, &x) in v.iter_mut().zip(row) {
                        *o = x + *o;
                    }
                } else {
                    for (o, &x) in v.iter_mut().zip(row) {
                        *o = sc.alpha * x + sc.beta * *o;
                    }
                }
                let out: &mut [T; W] = out.try_into().expect("W elements");
                *out = v;
            } else if sc.alpha == T::ONE && sc.beta == T::ONE {
                // `x @ w + b`: no multiplications by one (the same roundings).
                for ((o, &x), &l) in out.iter_mut().zip(row).zip(prior) {
                    *o = x + l;
                }
            } else {
                for ((o, &x), &l) in out.iter_mut().zip(row).zip(prior) {
                    *o = sc.alpha * x + sc.beta * l;
                }
            }
        } else {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x + sc.beta * *o;
            }
        }
    }
}

/// Bytes of the right operand's block that both forms keep in the L2 cache while every
/// block of rows passes over it: [`crate::CacheBlocks::gemm_b_block_bytes`].
pub(super) fn b_block_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_b_block_bytes
}

/// Bytes of one row of the left operand's panel per block of steps `p` at most (the panel,
/// `MR` such rows, stays in L1), when the product is stored unscaled:
/// [`crate::CacheBlocks::gemm_kc_bytes`].
pub(super) fn kc_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_kc_bytes
}

/// Copies rows `p0..p0+kq`, columns `jc..jc+jn` of `b` into `out` as panels of `NR`
/// columns: panel `s` holds columns `jc + s·NR ..` for each row in turn (`kq × NR`
/// contiguous), the last panel zero-padded to `NR` columns.
pub(super) fn pack_panels<T: Real, const NR: usize>(
    g: &Gemm,
    b: &[T],
    (p0, kq): (usize, usize),
    (jc, jn): (usize, usize),
    out: &mut Vec<T>,
) {
    out.clear();
    out.resize(jn.div_ceil(NR) * NR * kq, T::default());
    for (s, panel) in out.chunks_exact_mut(NR * kq).enumerate() {
        let j0 = jc + s * NR;
        let w = NR.min(jc + jn - j0);
        for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
            let base = g.boff + (p0 + p) as isize * g.rsb + j0 as isize * g.csb;
            if g.csb == 1 && w == NR {
                // A constant width: vector moves, not a `memmove` call per row.
                let at = base as usize;
                let src: &[T; NR] = b[at..at + NR].try_into().expect("NR elements");
                row.copy_from_slice(src);
            } else if g.csb == 1 {
                let at = base as usize;
                row[..w].copy_from_slice(&b[at..at + w]);
            } else {
                for (j, o) in row[..w].iter_mut().enumerate() {
                    *o = b[(base + j as isize * g.csb) as usize];
                }
            }
        }
    }
}

/// The broadcast form (see the module docs), blocked for the caches: columns in blocks of
/// `nc` whose `kc × nc` slice of `b` fits [`b_block_bytes`], and, for a product stored
/// unscaled, the steps `p` in blocks of `kc` ([`kc_bytes`]), the register blocks of each
/// continuing the partial sums the previous one stored in `c` (so every element is still
/// the one ordered sum over `p`). A product small enough is one block.
#[inline(always)]
pub(super) fn gemm_broadcast<
    T: Real,
    K: Micro<T>,
    const MR: usize,
    const NR: usize,
    const NV: usize,
>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let size = std::mem::size_of::<T>();
    let unscaled = Scale::plain();
    let plain = sc.alpha == T::ONE && sc.beta == T::default();
    let kblocks = if plain {
        k.div_ceil((kc_bytes() / size).max(1)).max(1)
    } else {
        1
    };
    let kc = k.div_ceil(kblocks);
    let nc = (b_block_bytes() / (kc * size)).max(NR) / NR * NR;
    let mut packed: Vec<T> = Vec::new();
    let mut tail = Vec::new();
    let mut scratch = Vec::new();
    let mut scratch1 = Vec::new();
    for jc in (0..n).step_by(nc) {
        let jn = nc.min(n - jc);
        for q in 0..kblocks {
            let p0 = q * kc;
            let kq = kc.min(k - p0);
            let pack = g.csb != 1 || (m >= PACK_ROWS && kq * jn * size > PACK_MIN_BYTES);
            let rows = if !pack {
                Rows {
                    data: b,
                    off: g.boff + p0 as isize * g.rsb + jc as isize,
                    rs: g.rsb,
                }
            } else {
                pack_panels::<T, NR>(g, b, (p0, kq), (jc, jn), &mut packed);
                Rows {
                    data: &packed,
                    off: 0,
                    rs: NR as isize,
                }
            };
            let nfull = jn / NV * NV;
            if !pack && nfull < jn {
                tail.clear();
                tail.resize(kq * NV, T::default());
                for (p, t) in tail.chunks_exact_mut(NV).enumerate() {
                    let start = (rows.off + p as isize * rows.rs) as usize + nfull;
                    t[..jn - nfull].copy_from_slice(&rows.data[start..start + jn - nfull]);
                }
            }
            let sub = Gemm {
                k: kq,
                n: jn,
                aoff: g.aoff + p0 as isize * g.csa,
                ..*g
            };
            let to = Dest {
                ldc: n,
                jc,
                cont: q > 0,
                sc: if q + 1 == kblocks { sc } else { unscaled },
                panels: pack.then_some(kq),
            };
            let mut i0 = 0;
            while i0 + MR <= m {
                row_block::<T, K, MR, NR, NV>(&sub, a, i0, rows, &tail, &mut scratch, c, to);
                i0 += MR;
            }
            while i0 < m {
                row_block::<T, K, 1, NR, NV>(&sub, a, i0, rows, &tail, &mut scratch1, c, to);
                i0 += 1;
            }
        }
    }
}

//! kiln's own float GEMM and the product descriptor every matrix-product kernel reads.
//!
//! The files: this one holds [`Gemm`] (one `m×k @ k×n` product over strided operands, with
//! its bounds check), the float types' trait [`Real`] with each thread's packing buffers
//! ([`Scratch`]), and what the forms share ([`Scale`], [`Addend`], `Rows`); [`tuning`] every
//! constant of the GEMM choices with its reason; [`dispatch`] the one decision of which form
//! computes a product and the per-level entry points; [`broadcast`], [`dot`],
//! [`transposed`] and [`blocked`] the forms; [`micro`] the register block's interface and
//! its portable implementation; [`x86`] the intrinsic register blocks.
//! Which products come here rather than to `matrixmultiply` is decided in
//! [`super::matmul`].
//!
//! kiln's own float GEMM: the small forms, for small products, without `matrixmultiply`'s
//! set-up (no packing of the right operand when its rows are contiguous, no allocation
//! proportional to it, no threading), and the blocked form for large ones
//! ([`blocked::gemm_blocked`]: both operands packed block by block for the caches, 12×32 register
//! blocks at AVX-512, 6×16 at AVX2; [`super::matmul`] says which products take it).
//!
//! `c = α·(a @ b) + β·c` (`c` contiguous `m×n`; [`Scale`]) is computed in blocks of `MR` rows
//! by `NR` columns held in registers: each step `p` of the dot products multiplies element `p`
//! of the block's `MR` rows of `a` by `NR` contiguous elements of `b`'s row `p`, read in
//! place. Rows of `a` with unit column stride are read in place too; other layouts are copied
//! per block into a `k × MR` panel (contiguous copies for a transposed `a`). Rows left over
//! (`m % MR`) run one at a time; columns left over (`n % NR`) run one vector (`NV`) at a time,
//! the last partial vector through a zero-padded `k × NV` copy of those columns of `b`. A
//! right operand whose column stride is not 1 is first copied into a contiguous `k × n`
//! matrix.
//!
//! Like the other hot loops, the kernel is `#[inline(always)]` generic code compiled once per
//! [`crate::isa`] level: `NR` is four vector registers wide at the AVX-512 level (32
//! registers) and two below it (16), `MR = 4`, so a block is sixteen (eight) accumulator
//! registers, enough independent multiply-adds to keep both FMA units busy (64³ f32 on one
//! core: 78–85 GMAC/s at AVX-512, `matrixmultiply` 53 with its packing). The register block
//! itself ([`micro::Micro`]) is portable array code below AVX-512 and `std::arch` intrinsics at
//! AVX-512 ([`x86::Zmm`]: a fixed vector width whatever the target's preferred width). Every
//! element is an ordered sum over `p` of `a[i,p]·b[p,j]` (fused at the AVX2 and AVX-512
//! levels), so results do not depend on the block an element falls in.
//!
//! That is the broadcast form. Products with fewer columns than a vector (`n < NV`: a
//! 10-class output layer) would fill `n` of its lanes, so two other forms take them
//! ([`dispatch::choose`]): when `a` is transposed (`hᵀ @ g`, a weight gradient), the broadcast form
//! computes the transposed product `bᵀ @ aᵀ`, whose right operand then has contiguous rows
//! and whose columns fill the vectors ([`transposed::gemm_transposed`]: the same sums); when `a`'s rows
//! are contiguous (`h @ w`), each element is a dot product over `NV` lanes of a row of `a`
//! and a packed column of `b`, two rows by up to five columns at a time ([`dot::gemm_dot`]:
//! lane-strided partial sums, added pairwise at the end). Each form is compiled as its own
//! copy per level.
//!
//! The blocked form copies the right operand's `kc × nc` block into panels of `NR` columns
//! and `MR` rows of the left operand's `kc` steps into a panel, per thread (each thread
//! keeps its buffers, [`Scratch`]); its register block ([`micro::Micro::packed`]) walks the two
//! panels contiguously, and the steps of a long product go in blocks whose register
//! blocks continue the previous block's partial sums, so every element is still the one
//! ordered sum over `p`.
//!
//! All indexing is safe (bounds-checked slices), except in the AVX-512 packed register
//! block, which walks its panels with pointers after checking their lengths once.
//! `unsafe`: the calls into the `#[target_feature]` copies (as in [`crate::simd`]), the
//! AVX-512 blocks' and the dot products' (`simd_dot!`) unaligned vector loads and stores
//! inside fixed-size arrays and slices, and the packed block's pointer walk; all compiled
//! out under Miri (which runs the portable copies of every form, the blocked one included).
//!
//! Depends on [`crate::walk`] (the bounds check), `crate::tune` (the cache blocks) and
//! `crate::simd` (the ISA level).

pub(crate) mod tuning;

mod blocked;
mod broadcast;
mod dispatch;
mod dot;
mod micro;
mod transposed;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86;

pub(crate) use dispatch::{dgemm, dgemm_large, sgemm, sgemm_large};
use tuning::SCRATCH_KEEP;

use crate::walk::Walk;

pub(crate) use tuning::FEW_COLUMNS;

/// One `m×k @ k×n` product; every element `aoff + i*rsa + p*csa` (`i < m`, `p < k`) lies in
/// `a`, likewise for `b` (checked by `source::build` against the buffers), and `c` is the
/// contiguous `m×n` output.
#[derive(Clone, Copy)]
pub(crate) struct Gemm {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) aoff: isize,
    pub(crate) rsa: isize,
    pub(crate) csa: isize,
    pub(crate) boff: isize,
    pub(crate) rsb: isize,
    pub(crate) csb: isize,
}

impl Gemm {
    /// Debug check of the bounds the callers guarantee.
    pub(crate) fn in_bounds(&self, alen: usize, blen: usize, clen: usize) -> bool {
        let a = Walk::new(&[self.m, self.k], &[self.rsa, self.csa], self.aoff);
        let b = Walk::new(&[self.k, self.n], &[self.rsb, self.csb], self.boff);
        a.check(alen, "a").is_ok() && b.check(blen, "b").is_ok() && clen == self.m * self.n
    }

    /// Panics unless the operand views lie inside the slices (see [`Self::in_bounds`]).
    pub(crate) fn check(&self, alen: usize, blen: usize, clen: usize) {
        assert!(
            self.in_bounds(alen, blen, clen),
            "matmul operand views out of bounds"
        );
    }
}

/// The float types the kernel handles.
pub(super) trait Real:
    Copy + Default + PartialEq + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ONE: Self;
    /// `a·b + c`, fused when `F`.
    fn madd<const F: bool>(a: Self, b: Self, c: Self) -> Self;
    /// The calling thread's [`Scratch`] of this type, moved out (empty buffers if already
    /// taken); [`Real::put_scratch`] hands it back.
    fn take_scratch() -> Scratch<Self>;
    /// Keeps `s` (trimmed) as the calling thread's scratch.
    fn put_scratch(s: Scratch<Self>);
}

/// The blocked form's packing buffers, one set per thread and type, kept across products:
/// a fresh megabyte per product cost its page faults each time (`relu(x @ w + b)` at
/// 1024², 2 threads, ~8 % slower). What a product leaves beyond [`SCRATCH_KEEP`] elements
/// is freed.
#[derive(Default)]
pub(super) struct Scratch<T> {
    b: Vec<T>,
    a: Vec<T>,
    part: Vec<T>,
}

impl<T> Scratch<T> {
    fn trim(&mut self) {
        for v in [&mut self.b, &mut self.a, &mut self.part] {
            if v.capacity() > SCRATCH_KEEP {
                *v = Vec::new();
            }
        }
    }
}

macro_rules! scratch_of {
    ($t:ty, $scratch:ident) => {
        thread_local! {
            static $scratch: std::cell::RefCell<Scratch<$t>> = Default::default();
        }
        impl Real for $t {
            const ONE: $t = 1.0;
            #[inline(always)]
            fn madd<const F: bool>(a: $t, b: $t, c: $t) -> $t {
                if F {
                    a.mul_add(b, c)
                } else {
                    a * b + c
                }
            }
            fn take_scratch() -> Scratch<$t> {
                $scratch.with(|s| std::mem::take(&mut *s.borrow_mut()))
            }
            fn put_scratch(mut s: Scratch<$t>) {
                s.trim();
                $scratch.with(|c| *c.borrow_mut() = s);
            }
        }
    };
}

scratch_of!(f32, SCRATCH_F32);
scratch_of!(f64, SCRATCH_F64);

/// The right operand as the kernel reads it: row `p` starts at `off + p*rs` and its
/// elements are contiguous.
#[derive(Clone, Copy)]
struct Rows<'a, T> {
    data: &'a [T],
    off: isize,
    rs: isize,
}

/// What is stored: `c = α·(a@b) + β·L`, the product scaled and rounded first, then `β·L`
/// (`β = ±1` in practice: exact) added and rounded: the rounding of the epilogue
/// `α·acc ± L` it stands for. `L` is `c` itself unless `add` names it; neither is read
/// when `β = 0`.
#[derive(Clone, Copy)]
pub(super) struct Scale<'a, T> {
    pub(super) alpha: T,
    pub(super) beta: T,
    pub(super) add: Option<Addend<'a, T>>,
}

/// The addend `L` of [`Scale`] read in place: row `i` is `data[off + i·rs..][..n]` (unit
/// column stride; `rs = 0` repeats one row, a broadcast bias). Read by the stores, so `L`
/// is not copied into `c` first (a prefill cost about a tenth of a small affine product's
/// whole evaluation).
#[derive(Clone, Copy)]
pub(super) struct Addend<'a, T> {
    pub(super) data: &'a [T],
    pub(super) off: isize,
    pub(super) rs: isize,
}

impl<'a, T> Addend<'a, T> {
    /// Columns `j0..j0 + w` of row `i` (panics outside `data`).
    #[inline(always)]
    fn row(&self, i: usize, j0: usize, w: usize) -> &'a [T] {
        let s = (self.off + i as isize * self.rs) as usize + j0;
        &self.data[s..s + w]
    }
}

impl<T: Real> Scale<'_, T> {
    /// `α = 1, β = 0`: the product as it is.
    fn plain() -> Self {
        Scale {
            alpha: T::ONE,
            beta: T::default(),
            add: None,
        }
    }

    /// `α·x + β·prior`, `prior` ignored when `β = 0` (it may be anything, NaN included):
    /// what [`broadcast::store`] writes, one element at a time.
    #[inline(always)]
    fn apply(self, x: T, prior: T) -> T {
        if self.beta == T::default() {
            self.alpha * x
        } else {
            self.alpha * x + self.beta * prior
        }
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    //! Every level the machine runs, against an `f64` triple loop, over small shapes with
    //! row-major, transposed, reversed and broadcast operands. Miri runs a subset.
    use super::blocked::Blocking;
    use super::dispatch::{choose, dgemm_at, sgemm_at, Choice};
    use super::*;
    use crate::kernels::matmul::tests::naive;
    use crate::simd::{detected_isa, Isa};

    /// The layouts of an `r × s` operand stored in `r·s + 1` elements (one of offset):
    /// row-major, column-major (transposed), rows reversed, columns reversed, and (when
    /// `r > 1`) every row the same (row stride 0).
    fn layouts(r: usize, s: usize) -> Vec<(isize, isize, isize)> {
        let (ri, si) = (r as isize, s as isize);
        let mut v = vec![
            (1, si, 1),
            (1, 1, ri),
            (1 + (ri - 1) * si, -si, 1),
            (si, si, -1),
        ];
        if r > 1 {
            v.push((0, 0, 1));
        }
        v
    }

    fn check(level: Isa, m: usize, k: usize, n: usize, all_layouts: bool) {
        check_form(level, None, (m, k, n), all_layouts)
    }

    /// [`check`] of the small forms (`None`) or the blocked form with blocks `large`.
    fn check_form(
        level: Isa,
        large: Option<Blocking>,
        (m, k, n): (usize, usize, usize),
        all_layouts: bool,
    ) {
        let a64: Vec<f64> = (0..m * k + 1)
            .map(|x| ((x * 7) % 13) as f64 * 0.25 - 1.5)
            .collect();
        let b64: Vec<f64> = (0..k * n + 1)
            .map(|x| ((x * 5) % 11) as f64 * 0.5 - 2.0)
            .collect();
        let a32: Vec<f32> = a64.iter().map(|&x| x as f32).collect();
        let b32: Vec<f32> = b64.iter().map(|&x| x as f32).collect();
        let (la, lb) = (layouts(m, k), layouts(k, n));
        let pairs: Vec<_> = if all_layouts {
            la.iter()
                .flat_map(|&x| lb.iter().map(move |&y| (x, y)))
                .collect()
        } else {
            vec![(la[0], lb[0]), (la[1], lb[1])]
        };
        for ((aoff, rsa, csa), (boff, rsb, csb)) in pairs {
            let g = Gemm {
                m,
                k,
                n,
                aoff,
                rsa,
                csa,
                boff,
                rsb,
                csb,
            };
            assert!(g.in_bounds(a64.len(), b64.len(), m * n));
            let want = naive(&g, &a64, &b64);
            // `c = α·(a@b) + β·c` for the plain product, a scaled one over a `c` that must
            // not be read (NaN), and an SGD-like update of a prefilled `c`.
            let prior: Vec<f64> = (0..m * n).map(|x| (x % 9) as f64 * 0.5 - 2.0).collect();
            for (alpha, beta) in [(1.0, 0.0), (2.0, 0.0), (-0.5, 1.0), (1.0, -1.0)] {
                let expect: Vec<f64> = want
                    .iter()
                    .zip(&prior)
                    .map(|(&p, &c)| alpha * p + beta * c)
                    .collect();
                let start = |x: f64| if beta == 0.0 { f64::NAN } else { x };
                let mut c: Vec<f64> = prior.iter().map(|&x| start(x)).collect();
                let sc = Scale {
                    alpha,
                    beta,
                    add: None,
                };
                dgemm_at(level, large, &g, &a64, &b64, &mut c, sc);
                // The inputs are multiples of 1/4 and 1/2 with small sums, the coefficients
                // powers of two: every result is exact in f64 and f32.
                assert_eq!(
                    c,
                    expect,
                    "f64 {m}x{k}x{n} {level:?} {large:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
                let mut c32: Vec<f32> = prior.iter().map(|&x| start(x) as f32).collect();
                let sc = Scale {
                    alpha: alpha as f32,
                    beta: beta as f32,
                    add: None,
                };
                sgemm_at(level, large, &g, &a32, &b32, &mut c32, sc);
                let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                assert_eq!(
                    c32,
                    expect,
                    "f32 {m}x{k}x{n} {level:?} {large:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
                if beta == 0.0 {
                    continue;
                }
                // The addend read in place instead of from `c` (which must then not be
                // read: NaN): rows `n + 3` apart from element 2, and one row for all.
                for rs in [n + 3, 0] {
                    let len = 2 + (m - 1) * rs + n;
                    let l64: Vec<f64> = (0..len).map(|x| (x % 7) as f64 * 0.5 - 1.5).collect();
                    let l32: Vec<f32> = l64.iter().map(|&x| x as f32).collect();
                    let expect: Vec<f64> = (0..m * n)
                        .map(|e| alpha * want[e] + beta * l64[2 + (e / n) * rs + e % n])
                        .collect();
                    let mut c = vec![f64::NAN; m * n];
                    let sc = Scale {
                        alpha,
                        beta,
                        add: Some(Addend {
                            data: &l64[..],
                            off: 2,
                            rs: rs as isize,
                        }),
                    };
                    dgemm_at(level, large, &g, &a64, &b64, &mut c, sc);
                    assert_eq!(
                        c, expect,
                        "f64 addend rs={rs} {m}x{k}x{n} {level:?} {large:?} α={alpha} β={beta}"
                    );
                    let mut c32 = vec![f32::NAN; m * n];
                    let sc = Scale {
                        alpha: alpha as f32,
                        beta: beta as f32,
                        add: Some(Addend {
                            data: &l32[..],
                            off: 2,
                            rs: rs as isize,
                        }),
                    };
                    sgemm_at(level, large, &g, &a32, &b32, &mut c32, sc);
                    let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                    assert_eq!(
                        c32, expect,
                        "f32 addend rs={rs} {m}x{k}x{n} {level:?} {large:?} α={alpha} β={beta}"
                    );
                }
            }
        }
    }

    #[test]
    fn small_gemm_matches_the_triple_loop_at_every_level() {
        // Under Miri every level runs the same baseline copy: one level, a few shapes.
        let levels: Vec<Isa> = if cfg!(miri) {
            vec![Isa::Sse2]
        } else {
            Isa::ALL
                .into_iter()
                .filter(|&l| l <= detected_isa())
                .collect()
        };
        let dims: &[usize] = if cfg!(miri) {
            &[1, 5, 9]
        } else if std::env::var_os("KILN_EMULATED").is_some() {
            // Under qemu-user (`.ci/run`'s aarch64 step) the full sweep takes minutes: the
            // block-size edges only.
            &[1, 3, 4, 5, 8, 9, 16, 17, 33, 65]
        } else {
            &[
                1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 70,
            ]
        };
        for &level in &levels {
            for &m in dims {
                for &k in dims {
                    for &n in dims {
                        // Every layout pair on a spread of shapes, two pairs on the rest.
                        let all = (m + k + n) % 5 == 0 || m.max(k).max(n) <= 9;
                        check(level, m, k, n, all);
                    }
                }
            }
        }
    }

    /// A 784-512-10 MLP's products at batch 256 (its training step, W7) and others: the
    /// output layer and its gradients take the narrow forms at every vector width, square
    /// and wide products the broadcast form.
    #[test]
    fn the_blocked_form_matches_the_triple_loop_across_its_block_edges() {
        // Blocks shrunk so that small operands cross every edge: steps in blocks of 5 to 20
        // (the continued partial sums of an unscaled product), column blocks of one or two
        // panels with a partial last panel, groups of one or two row panels with a partial
        // last one; every layout.
        let tiny = Blocking {
            a_panel: 480,
            b_block: 4 << 10,
            a_block: 3 << 8,
        };
        let levels: Vec<Isa> = if cfg!(miri) {
            vec![Isa::Sse2]
        } else {
            Isa::ALL
                .into_iter()
                .filter(|&l| l <= detected_isa())
                .collect()
        };
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(7, 11, 9)]
        } else {
            &[
                (1, 1, 1),
                (13, 13, 33),
                (12, 37, 70),
                (25, 7, 100),
                (6, 50, 31),
                (31, 21, 65),
            ]
        };
        for &level in &levels {
            for &shape in shapes {
                check_form(level, Some(tiny), shape, true);
                check_form(level, Some(Blocking::current()), shape, false);
            }
        }
    }

    /// Products as large as those [`crate::Tuning::gemm_broadcast_avx512`] sends to the
    /// broadcast form (a parser's `32×1404 @ 1404×256` step and shapes crossing its blocks of
    /// steps and of the right operand's columns), at every level, row-major and transposed.
    #[test]
    fn the_broadcast_form_matches_the_triple_loop_on_large_products() {
        if cfg!(miri) {
            return;
        }
        for level in Isa::ALL.into_iter().filter(|&l| l <= detected_isa()) {
            for shape in [(32, 1404, 256), (37, 700, 300), (70, 300, 530)] {
                check(level, shape.0, shape.1, shape.2, false);
            }
        }
    }

    #[test]
    fn few_columns_take_the_transposed_or_the_dot_form() {
        let g = |m: usize, k: usize, n: usize, (rsa, csa): (isize, isize)| Gemm {
            m,
            k,
            n,
            aoff: 0,
            rsa,
            csa,
            boff: 0,
            rsb: n as isize,
            csb: 1,
        };
        for nv in [16, 8, 4] {
            // h @ w2 (h row-major): dot products.
            assert_eq!(choose(&g(256, 512, 3, (512, 1)), nv), Choice::Dot);
            // hᵀ @ dl (h transposed in place): the transposed product.
            assert_eq!(choose(&g(512, 256, 3, (1, 512)), nv), Choice::Transposed);
            // dl @ w2ᵀ (512 columns) and a square product: the broadcast form.
            assert_eq!(choose(&g(256, 10, 512, (10, 1)), nv), Choice::Broadcast);
            assert_eq!(choose(&g(64, 64, 64, (64, 1)), nv), Choice::Broadcast);
            // Too few rows to transpose, too short to take dot products.
            assert_eq!(choose(&g(2, 256, 3, (1, 2)), nv), Choice::Broadcast);
            assert_eq!(choose(&g(256, 2, 3, (2, 1)), nv), Choice::Broadcast);
        }
        for nv in [16, 8, 4] {
            assert_eq!(choose(&g(256, 512, 10, (512, 1)), nv), Choice::Dot);
            assert_eq!(choose(&g(512, 256, 15, (1, 512)), nv), Choice::Transposed);
            assert_eq!(choose(&g(256, 512, 16, (512, 1)), nv), Choice::Broadcast);
        }
    }

    #[test]
    fn every_size_from_1_to_100_in_each_dimension() {
        let sizes: Vec<usize> = if cfg!(miri) {
            vec![1, 6]
        } else {
            // Up to 100: a full 64-column block, then a 16-column vector and a partial one.
            (1..=100).collect()
        };
        for &s in &sizes {
            check(crate::simd::isa(), s, 3, 5, false);
            check(crate::simd::isa(), 5, s, 3, false);
            check(crate::simd::isa(), 3, 5, s, false);
        }
    }
}

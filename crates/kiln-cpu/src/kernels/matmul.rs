//! `KernelKind::MatMul`: batched `[.., m, k] @ [.., k, n]` over strided views (no copies:
//! `matrixmultiply` takes arbitrary row/column strides, including 0 and negative), then the
//! optional epilogue run elementwise over the product. Float products with few rows or few
//! multiply-adds ([`Gemm::small`]) go to [`gemm`] instead, which never packs the
//! right operand into a fresh buffer (its rows split over the team only when the product's
//! stores make it long, [`Gemm::parallel`]). An epilogue affine in the product
//! (`α·acc ± L`: a bias add, an SGD step, a scaling; [`Affine`]) runs inside the GEMM
//! instead, as `C = α·A@B + β·L`: kiln's GEMM reads `L` in place in its stores where its view
//! allows ([`AddendRows`]), else (and for `matrixmultiply`) `C` is prefilled from `L`;
//! what follows the affine part (the `relu` of `relu(x @ w + b)`), or a whole epilogue that is
//! not affine, then runs over `C` in place, without a separate product buffer.
//!
//! Prefill, product and epilogue run block of output rows by block of rows, each block in the
//! thread that computes its product ([`Around`]): the epilogue reads rows still in that core's
//! cache and needs no second dispatch to the pool (a 256×512 `relu` epilogue dispatched on
//! its own cost more than its GEMM here). Only an epilogue that would read an input aliased
//! with the output after the product overwrote it, or an output dtype other than the
//! product's, takes a scratch product buffer.
//!
//! Depends on the elementwise kernels' loops, `gemm` (the product's description, which kernel takes it, and kiln's own GEMM), `crate::interp` (epilogues), `crate::source`, `crate::typed`, `crate::buffer`, `matrixmultiply` and kiln-compiler's plan types.

use super::elementwise::{check_outputs, run_blocks, run_space};
use super::gemm::tuning::PAR_GEMM_ROWS;
use super::gemm::{self, Gemm, Scale};
use crate::buffer::{BufferPool, CpuBuffer};
use crate::interp::Interp;
use crate::ops::Int;
use crate::source::{self, AliasPolicy, Src, SrcKind};
use crate::typed::{copy_cast, TSlice, TSliceMut, TypedVec};
use crate::walk::{internal, Walk};
use kiln_compiler::{Arg, InstOp, Kernel, Launch, Program, RegId, Strided};
use kiln_ir::{BinaryOp, DType, Id, Result, Scalar, UnaryOp};
use smallvec::SmallVec;

/// One operand: its data with the strides and offset of its `[.., rows, cols]` view.
struct Operand<'a> {
    data: TSlice<'a>,
    strides: SmallVec<[isize; 4]>,
    offset: isize,
}

/// Runs a matmul kernel.
pub fn run(
    kernel: &Kernel,
    epilogue: Option<&Program>,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
    pool: &BufferPool,
) -> Result<()> {
    let space = launch.space.dims();
    let r = space.len();
    if r < 2 || launch.views.len() < 2 {
        return Err(internal(format!(
            "matmul over the space {} with {} inputs",
            launch.space,
            launch.views.len()
        )));
    }
    let (m, n) = (space[r - 2], space[r - 1]);
    let (va, vb) = (&launch.views[0], &launch.views[1]);
    let k = va.shape.0.last().copied().unwrap_or(0);
    let shapes_ok = va.shape.rank() == r
        && vb.shape.rank() == r
        && va.shape.0[..r - 2] == space[..r - 2]
        && vb.shape.0[..r - 2] == space[..r - 2]
        && va.shape.0[r - 2] == m
        && vb.shape.0[r - 2] == k
        && vb.shape.0[r - 1] == n;
    if !shapes_ok {
        return Err(internal(format!(
            "matmul of {} and {} into {}",
            va.shape, vb.shape, launch.space
        )));
    }
    let numel = launch.space.numel();
    check_outputs(outputs, 1, numel)?;
    // The product is written before the epilogue reads anything, so operands aliased with
    // the output are copied first; epilogue inputs are read block by block as elementwise.
    let (ins, views) = (source::ins(inputs), source::views(outputs));
    let snaps = source::snapshots(
        launch,
        &ins,
        &views,
        |i| {
            if i < 2 {
                AliasPolicy::Snapshot
            } else {
                AliasPolicy::InPlace
            }
        },
        None,
    );
    let srcs = source::build(kernel, launch, &ins, &snaps, &views, None)?;
    drop(views);
    let dt = srcs[0].dtype;
    if srcs[1].dtype != dt {
        return Err(internal(format!("matmul of {} and {}", dt, srcs[1].dtype)));
    }
    // Virtual operands are generated into contiguous storage.
    let mat_a = materialize_virtual(&srcs[0]);
    let mat_b = materialize_virtual(&srcs[1]);
    let a = operand(&srcs[0], va, mat_a.as_ref());
    let b = operand(&srcs[1], vb, mat_b.as_ref());
    let dims = Dims {
        batch: &space[..r - 2],
        m,
        k,
        n,
    };

    let same = outputs[0].dtype() == dt;
    let plain = Around::default();
    let inplace = match epilogue {
        Some(program) if same => in_place(program, &srcs, launch.scalars, k),
        _ => None,
    };
    match (epilogue, inplace) {
        (None, _) if same => product(
            &dims,
            &a,
            &b,
            outputs[0].as_mut_slice().range(0, numel),
            None,
            &plain,
        ),
        (Some(_), Some(split)) => {
            // Affine in the product (either GEMM's C = α·A@B + β·C): C ← β·L first (in place
            // when L is the output itself), then C ← α·A@B + C, then the rest of the
            // epilogue over C in place. Otherwise the product goes into C and the whole
            // epilogue runs over it in place. Both run per block of output rows, inside the
            // task that computes those rows (no second pass over the output, no second
            // dispatch to the thread pool).
            let (coefs, load, rest) = match split.affine {
                Some(aff) => {
                    let load = aff.load.map(|(i, _)| &srcs[i]).filter(|src| {
                        !(matches!(src.kind, SrcKind::Alias(0))
                            && src.walk.contiguous_offset() == Some(0))
                    });
                    let coefs = Coefs {
                        alpha: aff.alpha,
                        beta: aff.load.map_or(0.0, |(_, beta)| beta),
                    };
                    (Some(coefs), load, split.rest)
                }
                None => (None, None, split.rest),
            };
            // L read in place by the GEMM where its view allows, else copied into C first.
            let addend = load.and_then(|src| AddendRows::of(src, n));
            let copied = load.filter(|_| addend.is_none());
            let prefill = |start: usize, mut c: TSliceMut<'_>| {
                if let Some(src) = copied {
                    let len = c.len();
                    src.read_own(start, c.range(0, len), &[]);
                }
            };
            // The epilogue reads the product as `Acc` from output 0, in place (sources
            // listed only when something of the epilogue runs after the product).
            let mut esrcs: Vec<Src<'_>> = Vec::new();
            if rest.is_some() {
                esrcs.extend_from_slice(&srcs);
                esrcs.push(Src {
                    kind: SrcKind::Alias(0),
                    dtype: dt,
                    walk: Walk::contiguous(numel, 0),
                });
            }
            let acc = Some(srcs.len());
            if let Some(rest) = &rest {
                // Fails here (not inside a task) if the program cannot run.
                let interp = Interp::new(rest, &esrcs, acc, launch.scalars, numel)?;
                if interp.results() != 1 {
                    return Err(internal(format!(
                        "a matmul epilogue with {} results",
                        interp.results()
                    )));
                }
            }
            let finish = |start: usize, c: TSliceMut<'_>| -> Result<()> {
                let Some(rest) = &rest else { return Ok(()) };
                let mut interp = Interp::new(rest, &esrcs, acc, launch.scalars, numel)?;
                let len = c.len();
                run_blocks(&mut interp, &esrcs, &mut [c], start, start + len)
            };
            let around = Around {
                before: copied.is_some().then_some(&prefill as &BlockFn<'_>),
                after: rest.is_some().then_some(&finish as &BlockTry<'_>),
                addend,
            };
            let mut c = outputs[0].as_mut_slice();
            product(&dims, &a, &b, c.range(0, numel), coefs, &around)
        }
        _ => {
            // The output's dtype differs from the product's, or the epilogue reads an input
            // the product would overwrite: product into a scratch buffer, then the epilogue
            // (or a cast) from it.
            let mut tmp = pool.take(dt, numel);
            let result = product(&dims, &a, &b, tmp.as_mut_slice(), None, &plain).and_then(|()| {
                match epilogue {
                    None => {
                        copy_cast(tmp.as_slice(), outputs[0].as_mut_slice().range(0, numel));
                        Ok(())
                    }
                    Some(program) => epilogue_run(program, launch, &srcs, &tmp, outputs, numel),
                }
            });
            pool.put(tmp);
            result
        }
    }
}

/// Runs `program` over the product held in `acc` (whole space, in parallel chunks).
fn epilogue_run(
    program: &Program,
    launch: &Launch<'_>,
    srcs: &[Src<'_>],
    acc: &TypedVec,
    outputs: &mut [CpuBuffer],
    numel: usize,
) -> Result<()> {
    let mut esrcs: Vec<Src<'_>> = srcs.to_vec();
    esrcs.push(Src {
        kind: SrcKind::Data(acc.as_slice()),
        dtype: acc.dtype(),
        walk: Walk::contiguous(numel, 0),
    });
    let mut interp = Interp::new(program, &esrcs, Some(srcs.len()), launch.scalars, numel)?;
    if interp.results() != 1 {
        return Err(internal(format!(
            "a matmul epilogue with {} results",
            interp.results()
        )));
    }
    let outs: Vec<TSliceMut<'_>> = outputs.iter_mut().map(|b| b.as_mut_slice()).collect();
    let acc_src = Some(srcs.len());
    let fresh = || Interp::new(program, &esrcs, acc_src, launch.scalars, numel);
    run_space(&mut interp, fresh, &esrcs, outs, numel)
}

/// How an epilogue runs over the output in place: `affine` computed inside the GEMM (then
/// `rest`, if any, over the result), or (`affine: None`) the product written first and the
/// whole program (`rest`) over it.
struct InPlace {
    affine: Option<Affine>,
    rest: Option<Program>,
}

/// The in-place plan for `program`, or `None` when what runs after the product is written
/// would read an input aliased with the output (the product would have overwritten it): the
/// product then goes into a scratch buffer instead.
fn in_place(program: &Program, srcs: &[Src<'_>], scalars: &[Scalar], k: usize) -> Option<InPlace> {
    let dt = srcs[0].dtype;
    let reads_alias = |p: &Program| {
        p.insts.values().any(|inst| {
            matches!(inst.op, InstOp::Load(x)
                if srcs.get(x.index()).is_some_and(|s| matches!(s.kind, SrcKind::Alias(_))))
        })
    };
    let split = (k > 0)
        .then(|| Affine::split(program, dt, scalars, srcs.len()))
        .flatten();
    match split {
        Some((aff, rest)) if !rest.as_ref().is_some_and(reads_alias) => Some(InPlace {
            affine: Some(aff),
            rest,
        }),
        _ if !reads_alias(program) => Some(InPlace {
            affine: None,
            rest: Some(program.clone()),
        }),
        _ => None,
    }
}

/// Work around the product of each block of output rows, run by the task that computes the
/// block: `before` gets the block's first position and its elements before the product is
/// written (or accumulated) into them, `after` once it is.
/// `addend`, when given, is the `L` of the affine part (`C = α·A@B + β·L`), read in place
/// by the GEMM's stores rather than copied into the block by `before`.
#[derive(Default)]
struct Around<'a> {
    before: Option<&'a BlockFn<'a>>,
    after: Option<&'a BlockTry<'a>>,
    addend: Option<AddendRows<'a>>,
}

/// An epilogue input read as rows of the product's shape: position `r·n + j` of the output
/// (row `r` counted over every batch index, column `j < n`) is element `off + r·rs + j` of
/// `data`.
#[derive(Clone, Copy)]
struct AddendRows<'a> {
    data: TSlice<'a>,
    off: isize,
    rs: isize,
}

impl<'a> AddendRows<'a> {
    /// The rows of `src` (an `n`-column output's epilogue input), when it is buffer data
    /// whose view has a unit column stride and rows a fixed distance apart (a contiguous
    /// array, a bias repeated over the rows, a column of a wider array); `None` for other
    /// views, which are copied into the output first.
    fn of(src: &Src<'a>, n: usize) -> Option<Self> {
        let SrcKind::Data(data) = src.kind else {
            return None;
        };
        let w = &src.walk;
        let rs = match (&w.shape[..], &w.strides[..]) {
            ([_], [1]) => n as isize,
            ([_], &[s]) if n == 1 => s,
            ([_, cols], &[s, 1]) if *cols == n => s,
            _ => return None,
        };
        Some(AddendRows {
            data,
            off: w.offset,
            rs,
        })
    }
}

/// Work on a block of output rows: its first position and its elements.
type BlockFn<'a> = dyn Fn(usize, TSliceMut<'_>) + Sync + 'a;
/// [`BlockFn`] that can fail.
type BlockTry<'a> = dyn Fn(usize, TSliceMut<'_>) -> Result<()> + Sync + 'a;

fn materialize_virtual(src: &Src<'_>) -> Option<TypedVec> {
    match src.kind {
        SrcKind::Data(_) => None,
        _ => Some(src.materialize(&[])),
    }
}

fn operand<'a>(src: &Src<'a>, view: &Strided, mat: Option<&'a TypedVec>) -> Operand<'a> {
    match (src.kind, mat) {
        (SrcKind::Data(d), _) => Operand {
            data: d,
            strides: view.strides.clone(),
            offset: view.offset,
        },
        (_, Some(v)) => Operand {
            data: v.as_slice(),
            strides: Strided::contiguous(view.shape.clone()).strides,
            offset: 0,
        },
        _ => unreachable!("virtual operands are materialized"),
    }
}

/// `C = α·A@B + β·C` (`matrixmultiply`'s contract).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Coefs {
    alpha: f64,
    beta: f64,
}

/// An epilogue that is affine in the product: `α·acc + β·L` with `L` one input (any view:
/// a broadcast bias, the previous value of a parameter) or absent, and `α`, `β` constants or
/// run-time scalars. Such an epilogue runs inside the GEMM (`C` prefilled with `L`, then
/// `C = α·A@B + β·C`): no product buffer, no second pass over it (`x @ w + b`, an SGD step
/// `w - lr * (xᵀ @ g)`, `(a @ b) * s`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Affine {
    alpha: f64,
    /// Input index and its coefficient.
    load: Option<(usize, f64)>,
}

impl Affine {
    /// Finds the affine part of an epilogue (`dt` float, one result; `nsrc` kernel inputs,
    /// the product is `InstOp::Acc`): the value `α·acc + β·L` that the product flows into
    /// before anything else touches it. Returns it with the rest of the epilogue rewritten to
    /// read that value as `Acc` (dead instructions dropped), or `None` for the rest when the
    /// affine value is the result itself. `relu(x @ w + b)` gives `(α = 1, L = b)` and
    /// `relu(acc)`.
    fn split(
        program: &Program,
        dt: DType,
        scalars: &[Scalar],
        nsrc: usize,
    ) -> Option<(Affine, Option<Program>)> {
        if !matches!(dt, DType::F32 | DType::F64) || program.results.len() != 1 {
            return None;
        }
        // Per value: a constant, a linear form α·acc + β·L (`scaled`: a multiplication
        // already applied; one is allowed, so the rounding is the epilogue's: `α·acc` rounded
        // once, then `± L`), or anything else.
        #[derive(Clone, Copy)]
        enum V {
            Const(f64),
            Lin(f64, Option<(usize, f64)>, bool),
            Other,
        }
        let insts = program.insts.as_slice();
        let round = |x: f64| if dt == DType::F32 { x as f32 as f64 } else { x };
        let mut vals: Vec<V> = Vec::with_capacity(insts.len());
        let mut uses = vec![0usize; insts.len()];
        for inst in insts {
            let at = |i: RegId| vals.get(i.index()).copied().unwrap_or(V::Other);
            let v = match inst.op {
                _ if inst.dtype != dt => V::Other,
                InstOp::Acc => V::Lin(1.0, None, false),
                InstOp::Load(i) if (2..nsrc).contains(&i.index()) => {
                    V::Lin(0.0, Some((i.index(), 1.0)), false)
                }
                InstOp::Scalar(j) => match scalars.get(j as usize) {
                    Some(x) => V::Const(round(x.as_f64())),
                    None => V::Other,
                },
                InstOp::Unary(UnaryOp::Neg, x) => match at(x) {
                    V::Const(c) => V::Const(-c),
                    V::Lin(a, l, m) => V::Lin(-a, l.map(|(i, b)| (i, -b)), m),
                    V::Other => V::Other,
                },
                InstOp::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), x, y) => {
                    let sign = if op == BinaryOp::Sub { -1.0 } else { 1.0 };
                    match (at(x), at(y)) {
                        // The product once, added to one input at most once.
                        (V::Lin(a1, l1, m1), V::Lin(a2, l2, m2)) if a1 == 0.0 || a2 == 0.0 => {
                            match (l1, l2) {
                                (l, None) => V::Lin(a1 + sign * a2, l, m1 || m2),
                                (None, Some((i, b))) => {
                                    V::Lin(a1 + sign * a2, Some((i, sign * b)), m1 || m2)
                                }
                                // Two inputs (or one twice): not one prefill.
                                (Some(_), Some(_)) => V::Other,
                            }
                        }
                        _ => V::Other,
                    }
                }
                InstOp::Binary(BinaryOp::Mul, x, y) => match (at(x), at(y)) {
                    (V::Const(c), V::Lin(a, None, false))
                    | (V::Lin(a, None, false), V::Const(c)) => V::Lin(a * c, None, true),
                    _ => V::Other,
                },
                _ => V::Other,
            };
            vals.push(v);
            for o in operands(&inst.op) {
                uses[o] += 1;
            }
        }
        // The affine value: the last one holding the product. Every earlier value holding it
        // must feed only the next one (else the rest would need the raw product too).
        let holds = |v: &V| matches!(v, V::Lin(a, _, _) if *a != 0.0);
        let root = (0..insts.len()).rev().find(|&i| holds(&vals[i]))?;
        let result = program.results[0].index();
        let chain_ok = (0..root)
            .filter(|&i| holds(&vals[i]))
            .all(|i| uses[i] == 1 && i != result);
        let V::Lin(alpha, load, _) = vals[root] else {
            return None;
        };
        if !chain_ok || load.is_some_and(|(_, b)| b != 1.0 && b != -1.0) {
            return None;
        }
        let affine = Affine { alpha, load };
        if root == result {
            return Some((affine, None));
        }
        // The rest: the affine value becomes `Acc`; drop what only it used.
        let mut live = vec![false; insts.len()];
        live[result] = true;
        for i in (0..insts.len()).rev() {
            if live[i] && i != root {
                for o in operands(&insts[i].op) {
                    live[o] = true;
                }
            }
        }
        let mut index = vec![RegId::default(); insts.len()];
        let mut rest = Program::default();
        for (i, inst) in insts.iter().enumerate().filter(|(i, _)| live[*i]) {
            let m = |v: RegId| index[v.index()];
            let op = match inst.op {
                _ if i == root => InstOp::Acc,
                InstOp::Unary(u, x) => InstOp::Unary(u, m(x)),
                InstOp::Binary(b, x, y) => InstOp::Binary(b, m(x), m(y)),
                InstOp::Where(c, x, y) => InstOp::Where(m(c), m(x), m(y)),
                InstOp::Cast(x) => InstOp::Cast(m(x)),
                InstOp::Load(x) => InstOp::Load(x),
                InstOp::Scalar(x) => InstOp::Scalar(x),
                InstOp::Acc => InstOp::Acc,
            };
            index[i] = rest.insts.push(kiln_compiler::Inst {
                op,
                dtype: inst.dtype,
            });
        }
        rest.results.push(index[result]);
        Some((affine, Some(rest)))
    }
}

/// The positions of the values an instruction reads.
fn operands(op: &InstOp) -> impl Iterator<Item = usize> {
    op.operands().into_iter().map(RegId::index)
}

struct Dims<'a> {
    batch: &'a [usize],
    m: usize,
    k: usize,
    n: usize,
}

/// `c = a @ b` for every batch index (`c` contiguous `[.., m, n]`), or `c = α·a @ b + β·c`
/// for float products given `Some(Coefs)`.
fn product(
    d: &Dims<'_>,
    a: &Operand<'_>,
    b: &Operand<'_>,
    c: TSliceMut<'_>,
    coefs: Option<Coefs>,
    around: &Around<'_>,
) -> Result<()> {
    let (m, k, n) = (d.m, d.k, d.n);
    let mn = m * n;
    if mn == 0 {
        return Ok(());
    }
    let nb = d.batch.len();
    let nbatch: usize = d.batch.iter().product();
    let mut bi: SmallVec<[usize; 4]> = SmallVec::from_elem(0, nb);
    let (mut aoff, mut boff) = (a.offset, b.offset);
    let (rsa, csa) = (a.strides[nb], a.strides[nb + 1]);
    let (rsb, csb) = (b.strides[nb], b.strides[nb + 1]);
    let mut c = c;
    for t in 0..nbatch {
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
        let base = t * mn;
        // Integer and bool products: one block, the plain loop.
        let whole = |z: TSliceMut<'_>, f: &mut dyn FnMut(TSliceMut<'_>)| -> Result<()> {
            let mut z = z;
            let len = z.len();
            if let Some(before) = around.before {
                before(base, z.range(0, len));
            }
            f(z.range(0, len));
            match around.after {
                Some(after) => after(base, z),
                None => Ok(()),
            }
        };
        match (a.data, b.data, c.range(base, base + mn)) {
            (TSlice::F32(x), TSlice::F32(y), TSliceMut::F32(z)) => {
                g.float_blocks(x, y, z, coefs, base, around)?
            }
            (TSlice::F64(x), TSlice::F64(y), TSliceMut::F64(z)) => {
                g.float_blocks(x, y, z, coefs, base, around)?
            }
            (TSlice::I32(x), TSlice::I32(y), z @ TSliceMut::I32(_)) => whole(z, &mut |z| {
                if let TSliceMut::I32(z) = z {
                    g.naive(x, y, z, 0, |c, a, b| c.wadd(a.wmul(b)))
                }
            })?,
            (TSlice::I64(x), TSlice::I64(y), z @ TSliceMut::I64(_)) => whole(z, &mut |z| {
                if let TSliceMut::I64(z) = z {
                    g.naive(x, y, z, 0, |c, a, b| c.wadd(a.wmul(b)))
                }
            })?,
            (TSlice::Bool(x), TSlice::Bool(y), z @ TSliceMut::Bool(_)) => whole(z, &mut |z| {
                if let TSliceMut::Bool(z) = z {
                    g.naive(x, y, z, false, |c, a, b| c || (a && b))
                }
            })?,
            (x, y, z) => unreachable!(
                "matmul of {} and {} into {}",
                x.dtype(),
                y.dtype(),
                z.dtype()
            ),
        }
        // Next batch index (odometer).
        for ax in (0..nb).rev() {
            bi[ax] += 1;
            aoff += a.strides[ax];
            boff += b.strides[ax];
            if bi[ax] < d.batch[ax] {
                break;
            }
            aoff -= a.strides[ax] * d.batch[ax] as isize;
            boff -= b.strides[ax] * d.batch[ax] as isize;
            bi[ax] = 0;
        }
    }
    Ok(())
}

/// The float types of the GEMM paths: `matrixmultiply`'s packed product and [`gemm`].
trait GemmFloat: Copy + Send + Sync + 'static {
    /// `c = α·a@b + β·L` (`L` is `sc.add` or `c`) for a product too large for
    /// [`gemm`]'s small forms: its blocked form where [`Gemm::blocked`], else
    /// `matrixmultiply` (over `c` first filled from `sc.add`, if given).
    fn packed(g: &Gemm, a: &[Self], b: &[Self], c: &mut [Self], sc: Scale<'_, Self>);
    /// `c = α·a@b + β·L` through [`gemm`] (`k > 0`; `L` read only when `β != 0`).
    fn small(g: &Gemm, a: &[Self], b: &[Self], c: &mut [Self], sc: Scale<'_, Self>);
    fn typed(c: &mut [Self]) -> TSliceMut<'_>;
    /// The data, if of this type.
    fn slice(d: TSlice<'_>) -> Option<&[Self]>;
    /// `f64` coefficients in this type.
    fn coef(x: f64) -> Self;
}

/// `c`'s rows (`n` long) filled from the addend, for the products that read their `β·L`
/// from `c` (`matrixmultiply`'s contract).
fn fill_from<T: Copy>(c: &mut [T], n: usize, add: gemm::Addend<'_, T>) {
    for (i, row) in c.chunks_exact_mut(n).enumerate() {
        let s = (add.off + i as isize * add.rs) as usize;
        row.copy_from_slice(&add.data[s..s + n]);
    }
}

macro_rules! gemm_float {
    ($t:ty, $size:literal, $small:path, $large:path, $mm:ident, $variant:ident, $coef:expr) => {
        impl GemmFloat for $t {
            fn packed(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
                if g.blocked($size, (f64::from(sc.alpha), f64::from(sc.beta))) {
                    g.check(a.len(), b.len(), c.len());
                    return $large(g, a, b, c, sc);
                }
                if let Some(add) = sc.add.filter(|_| sc.beta != 0.0) {
                    fill_from(c, g.n, add);
                }
                g.$mm(a, b, c, sc.alpha, sc.beta)
            }
            fn small(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
                // The small forms index through bounds-checked slices (`source::build`
                // checked the views): the full check only in debug builds.
                debug_assert!(
                    g.in_bounds(a.len(), b.len(), c.len()),
                    "matmul operand views out of bounds"
                );
                $small(g, a, b, c, sc)
            }
            fn typed(c: &mut [$t]) -> TSliceMut<'_> {
                TSliceMut::$variant(c)
            }
            fn slice(d: TSlice<'_>) -> Option<&[$t]> {
                match d {
                    TSlice::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn coef(x: f64) -> $t {
                let f: fn(f64) -> $t = $coef;
                f(x)
            }
        }
    };
}

gemm_float!(
    f32,
    4,
    gemm::sgemm,
    gemm::sgemm_large,
    packed_sgemm_into,
    F32,
    |x| x as f32
);
gemm_float!(
    f64,
    8,
    gemm::dgemm,
    gemm::dgemm_large,
    packed_dgemm_into,
    F64,
    |x| x
);

impl Gemm {
    /// The float product into `c` (position `base` of the output onwards), with `around`'s
    /// work on each block of rows: [`gemm`] in one block for small products, else
    /// `matrixmultiply` over blocks of rows ([`Self::split_rows`]).
    fn float_blocks<T: GemmFloat>(
        &self,
        a: &[T],
        b: &[T],
        c: &mut [T],
        coefs: Option<Coefs>,
        base: usize,
        around: &Around<'_>,
    ) -> Result<()> {
        let small = self.small(std::mem::size_of::<T>()) && self.k > 0;
        let (alpha, beta) = coefs.map_or((1.0, 0.0), |f| (f.alpha, f.beta));
        let addend = around
            .addend
            .and_then(|r| T::slice(r.data).map(|data| (data, r)));
        let block = |g: &Gemm, row: usize, c: &mut [T]| -> Result<()> {
            let start = base + row * self.n;
            if let Some(before) = around.before {
                before(start, T::typed(c));
            }
            let sc = Scale {
                alpha: T::coef(alpha),
                beta: T::coef(beta),
                add: addend.map(|(data, r)| gemm::Addend {
                    data,
                    off: r.off + (start / self.n) as isize * r.rs,
                    rs: r.rs,
                }),
            };
            if small {
                T::small(g, a, b, c, sc)
            } else {
                T::packed(g, a, b, c, sc)
            }
            match around.after {
                Some(after) => after(start, T::typed(c)),
                None => Ok(()),
            }
        };
        self.split_rows(c, self.parallel(small), block)
    }

    /// Runs `f` on blocks of rows of the product (a sub-`Gemm`, its first row and its rows
    /// of `c`) across the thread team when `parallel` (see [`Self::parallel`]) and there are
    /// rows enough, else on the whole; returns the first block's error. Each block is an
    /// independent single-thread product (`matrixmultiply` is built without its own
    /// threads), so one team serves GEMMs and every other kernel, and nested parallel work
    /// (a decoder's sentences) composes instead of oversubscribing the cores.
    fn split_rows<T: Send>(
        &self,
        c: &mut [T],
        parallel: bool,
        f: impl Fn(&Gemm, usize, &mut [T]) -> Result<()> + Sync,
    ) -> Result<()> {
        let tasks = if !parallel || self.n == 0 {
            1
        } else {
            crate::Team::current_threads().min(self.m / PAR_GEMM_ROWS)
        };
        if tasks <= 1 {
            return f(self, 0, c);
        }
        let rows = self.m.div_ceil(tasks).next_multiple_of(8);
        let blocks: Vec<&mut [T]> = c.chunks_mut(rows * self.n).collect();
        let results = crate::par::map_init(
            blocks,
            || (),
            |_, i, block| {
                let g = Gemm {
                    m: block.len() / self.n,
                    aoff: self.aoff + (i * rows) as isize * self.rsa,
                    ..*self
                };
                f(&g, i * rows, block)
            },
        );
        results.into_iter().collect()
    }

    /// `c = alpha·a@b + beta·c` through `matrixmultiply` (`beta == 0`: `c` is only written).
    fn packed_sgemm_into(&self, a: &[f32], b: &[f32], c: &mut [f32], alpha: f32, beta: f32) {
        if self.k == 0 {
            if beta == 0.0 {
                c.fill(0.0);
            } else {
                c.iter_mut().for_each(|x| *x *= beta);
            }
            return;
        }
        self.check(a.len(), b.len(), c.len());
        // SAFETY: the assertion in `check` above (and `source::build` before it) establishes that every
        // element `aoff + i*rsa + p*csa` (i < m, p < k) is an index into `a`, every
        // `boff + p*rsb + j*csb` (p < k, j < n) an index into `b`, and that `c` has exactly
        // m*n elements written with row stride n and column stride 1 (no two alias). So the
        // base pointers are in bounds (m, k, n > 0 here) and sgemm reads and writes only
        // inside the three slices (reading `c` too when `beta != 0`: its m*n elements are
        // initialised). `c` is a unique borrow, disjoint from `a` and `b`.
        unsafe {
            matrixmultiply::sgemm(
                self.m,
                self.k,
                self.n,
                alpha,
                a.as_ptr().offset(self.aoff),
                self.rsa,
                self.csa,
                b.as_ptr().offset(self.boff),
                self.rsb,
                self.csb,
                beta,
                c.as_mut_ptr(),
                self.n as isize,
                1,
            );
        }
    }

    /// [`Self::packed_sgemm_into`] for `f64`.
    fn packed_dgemm_into(&self, a: &[f64], b: &[f64], c: &mut [f64], alpha: f64, beta: f64) {
        if self.k == 0 {
            if beta == 0.0 {
                c.fill(0.0);
            } else {
                c.iter_mut().for_each(|x| *x *= beta);
            }
            return;
        }
        self.check(a.len(), b.len(), c.len());
        // SAFETY: as in `sgemm` above.
        unsafe {
            matrixmultiply::dgemm(
                self.m,
                self.k,
                self.n,
                alpha,
                a.as_ptr().offset(self.aoff),
                self.rsa,
                self.csa,
                b.as_ptr().offset(self.boff),
                self.rsb,
                self.csb,
                beta,
                c.as_mut_ptr(),
                self.n as isize,
                1,
            );
        }
    }

    /// A plain loop (`i, p, j` order: rows of `b` and `c` are walked contiguously).
    fn naive<T: Copy>(&self, a: &[T], b: &[T], c: &mut [T], zero: T, madd: impl Fn(T, T, T) -> T) {
        let n = self.n;
        c.fill(zero);
        for i in 0..self.m {
            let crow = &mut c[i * n..(i + 1) * n];
            for p in 0..self.k {
                let av = a[(self.aoff + i as isize * self.rsa + p as isize * self.csa) as usize];
                let base = self.boff + p as isize * self.rsb;
                if self.csb == 1 {
                    let brow = &b[base as usize..base as usize + n];
                    for (cj, &bj) in crow.iter_mut().zip(brow) {
                        *cj = madd(*cj, av, bj);
                    }
                } else {
                    for (j, cj) in crow.iter_mut().enumerate() {
                        *cj = madd(*cj, av, b[(base + j as isize * self.csb) as usize]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
pub(in crate::kernels) mod tests {
    //! Small enough for Miri, which checks the `unsafe` calls into `matrixmultiply` for
    //! out-of-bounds access and aliasing:
    //! `MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-ignore-leaks" cargo +nightly miri test -p kiln-cpu --lib matmul`
    //! (`num_cpus` reads `/proc`; the gemm thread pool outlives the test).
    use super::*;

    /// `C = A·B` of a GEMM description by the definition, in `f64` (also the small-GEMM
    /// tests' reference).
    pub(in crate::kernels) fn naive(g: &Gemm, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; g.m * g.n];
        for i in 0..g.m {
            for j in 0..g.n {
                for p in 0..g.k {
                    let x = a[(g.aoff + i as isize * g.rsa + p as isize * g.csa) as usize];
                    let y = b[(g.boff + p as isize * g.rsb + j as isize * g.csb) as usize];
                    c[i * g.n + j] += x * y;
                }
            }
        }
        c
    }

    #[test]
    fn gemm_with_positive_negative_and_zero_strides() {
        let a: Vec<f64> = (0..12).map(|x| x as f64 * 0.5 - 2.0).collect();
        let b: Vec<f64> = (0..12).map(|x| 1.0 - x as f64 * 0.25).collect();
        let cases = [
            // a 3×4 row-major, b 4×3 row-major
            Gemm {
                m: 3,
                k: 4,
                n: 3,
                aoff: 0,
                rsa: 4,
                csa: 1,
                boff: 0,
                rsb: 3,
                csb: 1,
            },
            // a transposed (4×3 storage), b with reversed rows
            Gemm {
                m: 3,
                k: 4,
                n: 3,
                aoff: 0,
                rsa: 1,
                csa: 3,
                boff: 9,
                rsb: -3,
                csb: 1,
            },
            // a broadcast along rows (row stride 0), b reversed columns
            Gemm {
                m: 5,
                k: 4,
                n: 2,
                aoff: 4,
                rsa: 0,
                csa: 1,
                boff: 11,
                rsb: -3,
                csb: -1,
            },
            // a single column
            Gemm {
                m: 2,
                k: 1,
                n: 3,
                aoff: 11,
                rsa: -6,
                csa: 1,
                boff: 0,
                rsb: 3,
                csb: 1,
            },
        ];
        for g in cases {
            let want = naive(&g, &a, &b);
            let mut c = vec![f64::NAN; g.m * g.n];
            g.float_blocks(&a, &b, &mut c, None, 0, &Around::default())
                .expect("no epilogue");
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-12, "{x} vs {y}");
            }
            // These shapes take `gemm`; `matrixmultiply` directly too.
            assert!(g.small(8));
            let mut c = vec![f64::NAN; g.m * g.n];
            g.packed_dgemm_into(&a, &b, &mut c, 1.0, 0.0);
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-12, "{x} vs {y}");
            }
            let (a32, b32): (Vec<f32>, Vec<f32>) = (
                a.iter().map(|&x| x as f32).collect(),
                b.iter().map(|&x| x as f32).collect(),
            );
            let mut c32 = vec![f32::NAN; g.m * g.n];
            g.float_blocks(&a32, &b32, &mut c32, None, 0, &Around::default())
                .expect("no epilogue");
            for (x, y) in c32.iter().zip(&want) {
                assert!((*x as f64 - y).abs() < 1e-5, "{x} vs {y}");
            }
            let mut c32 = vec![f32::NAN; g.m * g.n];
            g.packed_sgemm_into(&a32, &b32, &mut c32, 1.0, 0.0);
            for (x, y) in c32.iter().zip(&want) {
                assert!((*x as f64 - y).abs() < 1e-5, "{x} vs {y}");
            }
        }
    }

    #[test]
    // The small forms' slices refuse it (release builds: "range end index 5 out of range"),
    // or the debug check first ("matmul operand views out of bounds"): never a read outside.
    #[should_panic(expected = "out of")]
    fn gemm_refuses_views_outside_the_operands() {
        let a = vec![1.0f32; 4];
        let g = Gemm {
            m: 2,
            k: 2,
            n: 1,
            aoff: 1,
            rsa: 2,
            csa: 1,
            boff: 0,
            rsb: 1,
            csb: 1,
        };
        let _ = g.float_blocks(&a, &[1.0, 1.0], &mut [0.0; 2], None, 0, &Around::default());
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn packed_gemm_refuses_views_outside_the_operands() {
        let a = vec![1.0f64; 4];
        let g = Gemm {
            m: 2,
            k: 2,
            n: 1,
            aoff: 1,
            rsa: 2,
            csa: 1,
            boff: 0,
            rsb: 1,
            csb: 1,
        };
        g.packed_dgemm_into(&a, &[1.0, 1.0], &mut [0.0; 2], 1.0, 0.0);
    }
}

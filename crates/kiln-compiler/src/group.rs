//! Row groups: runs of consecutive kernels that a backend may execute block of rows by block
//! of rows (all kernels of the group over rows `r0..r1`, then the next block) instead of
//! kernel by kernel, so that what one kernel writes is still in the core's cache when the
//! next one reads it — a row softmax or layer norm then streams its input from memory once.
//!
//! The compiler only marks groups ([`RowGroup`]); executing kernel by kernel stays correct.
//! The memory plan ([`crate::memory`]) keeps every buffer a group touches out of reuse until
//! the group ends. Depends on [`crate::plan`] and `kiln-ir`.

use crate::plan::{Kernel, KernelKind, Plan, Source, View, ViewOp};
use kiln_ir::Dim;

/// Kernels `start..end` of a plan form a row group over `rows` (their common leading space
/// dimension). Invariants (checked by [`crate::Plan::verify`]):
/// - every kernel of the group is `Elementwise` or `Reduce`, its space has rank ≥ 2 and
///   leading dimension `rows`, and a reduction does not reduce axis 0;
/// - every input that reads a slot written inside the group is [`row_aligned`]: row `r` of
///   the kernel's space reads only row `r` of that slot;
/// - the memory plan reuses no buffer inside the group, and a kernel of the group writes in
///   place only over a slot that every kernel of the group reads row-aligned.
///
/// So the rows of a group are independent: a backend may run the group's kernels over any
/// partition of the rows, in any order or in parallel, with the same results.
///
/// ```
/// use kiln_compiler::{compile_for, Target};
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, ReduceOp, Shape};
/// // x - max(x, axis=1): a row reduction, then a pass reading its result per row
/// let x = build::data(HostData::from(vec![1.0f32; 8]), Shape::from([2, 4])).unwrap();
/// let m = build::reduce(ReduceOp::Max, &x, Some(&[1]), true).unwrap();
/// let m = build::broadcast_to(&m, &Shape::from([2, 4])).unwrap();
/// let y = build::binary(BinaryOp::Sub, &x, &m).unwrap();
/// let t = Target { row_groups: true, ..Target::default() };
/// let c = compile_for(&LazyExpr::from_roots(&[&y]), t).unwrap();
/// let g = &c.plan.groups[0];
/// assert_eq!((g.start, g.end), (0, 2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// The first kernel.
    pub start: usize,
    /// One past the last kernel.
    pub end: usize,
    /// The leading dimension every kernel's space shares.
    pub rows: Dim,
}

/// Whether a view over a kernel's space reads, at row `r` of the space, only row `r` of its
/// contiguous source: the source's leading dimension is `rows` and the view only reshapes
/// and broadcasts without touching that dimension (so the row stride is the source's).
///
/// ```
/// use kiln_compiler::{group::row_aligned, View, ViewOp};
/// use kiln_ir::Dim;
/// let m = View::identity([Dim::Sym(0), Dim::Const(1)].into_iter().collect());
/// let mut b = m.clone();
/// b.ops.push(ViewOp::Broadcast([Dim::Sym(0), Dim::Sym(1)].into_iter().collect()));
/// assert!(row_aligned(&b, Dim::Sym(0)));
/// b.ops.push(ViewOp::Permute([1, 0].into_iter().collect()));
/// assert!(!row_aligned(&b, Dim::Sym(0)));
/// ```
pub fn row_aligned(view: &View, rows: Dim) -> bool {
    matches!(rows, Dim::Sym(_))
        && view.base.first() == Some(&rows)
        && view.ops.iter().all(|op| match op {
            ViewOp::Reshape(s) | ViewOp::Broadcast(s) => s.first() == Some(&rows),
            ViewOp::Permute(_) | ViewOp::Slice { .. } => false,
        })
}

/// The leading dimension of a kernel that may join a row group.
fn kernel_rows(k: &Kernel) -> Option<Dim> {
    let rows = *k.space.first()?;
    let ok = k.space.len() >= 2
        && matches!(rows, Dim::Sym(_))
        && match &k.kind {
            KernelKind::Elementwise { .. } => true,
            KernelKind::Reduce { axes, .. } => !axes.contains(&0),
            _ => false,
        };
    ok.then_some(rows)
}

/// The row groups of a plan: maximal runs of consecutive kernels with a common leading
/// dimension whose reads of slots written inside the run are all [`row_aligned`], trimmed
/// to the kernels from the first that writes a slot read later in the run to the last that
/// reads one (only there does something stay in cache between kernels); runs without such
/// a slot form no group.
///
/// ```
/// use kiln_compiler::{compile, group::row_groups};
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, ReduceOp, Shape};
/// let x = build::data(HostData::from(vec![1.0f32; 8]), Shape::from([2, 4])).unwrap();
/// let s = build::reduce(ReduceOp::Sum, &x, Some(&[1]), true).unwrap();
/// let s = build::broadcast_to(&s, &Shape::from([2, 4])).unwrap();
/// let y = build::binary(BinaryOp::Div, &x, &s).unwrap();
/// let c = compile(&LazyExpr::from_roots(&[&y])).unwrap(); // a target without row groups
/// assert!(c.plan.groups.is_empty());
/// assert_eq!(row_groups(&c.plan).len(), 1);
/// ```
pub fn row_groups(plan: &Plan) -> Vec<RowGroup> {
    let mut groups = Vec::new();
    let mut k = 0;
    while k < plan.kernels.len() {
        let Some(rows) = kernel_rows(&plan.kernels[k]) else {
            k += 1;
            continue;
        };
        // (slot, kernel writing it) for the run so far
        let mut written: Vec<(u32, usize)> =
            plan.kernels[k].outputs.iter().map(|&s| (s, k)).collect();
        // the first producer and the last consumer of a slot passed inside the run
        let mut span: Option<(usize, usize)> = None;
        let mut end = k + 1;
        while let Some(next) = plan.kernels.get(end) {
            if kernel_rows(next) != Some(rows) {
                break;
            }
            let producer = |s: &Source| match s {
                Source::Slot(t) => written.iter().find(|(w, _)| w == t).map(|&(_, k)| k),
                _ => None,
            };
            let inner: Vec<(usize, &View)> = next
                .inputs
                .iter()
                .filter_map(|i| Some((producer(&i.source)?, &i.view)))
                .collect();
            if !inner.iter().all(|(_, v)| row_aligned(v, rows)) {
                break;
            }
            if let Some(first) = inner.iter().map(|&(p, _)| p).min() {
                span = Some(span.map_or((first, end), |(f, _)| (f.min(first), end)));
            }
            written.extend(next.outputs.iter().map(|&s| (s, end)));
            end += 1;
        }
        if let Some((first, last)) = span {
            groups.push(RowGroup {
                start: first,
                end: last + 1,
                rows,
            });
        }
        k = end;
    }
    groups
}

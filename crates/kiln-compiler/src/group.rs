//! Row groups: runs of consecutive kernels that a backend may execute block of rows by block
//! of rows (all kernels of the group over rows `r0..r1`, then the next block) instead of
//! kernel by kernel, so that what one kernel writes is still in the core's cache when the
//! next one reads it — a row softmax or layer norm then streams its input from memory once.
//!
//! The compiler only marks groups ([`RowGroup`], which the plan holds and so defines, with
//! [`row_aligned`]); executing kernel by kernel stays correct.
//! The memory plan ([`crate::memory`]) keeps every buffer a group touches out of reuse until
//! the group ends. Depends on [`crate::plan`] and `kiln-ir`.

pub use crate::plan::{row_aligned, RowGroup};
use crate::plan::{Kernel, KernelId, KernelKind, Plan, SlotId, Source, View};
use kiln_ir::{Dim, Id};

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
    let mut k = KernelId::new(0);
    while let Some(kernel) = plan.kernels.get(k) {
        let Some(rows) = kernel_rows(kernel) else {
            k = KernelId::new(k.index() + 1);
            continue;
        };
        // (slot, kernel writing it) for the run so far
        let mut written: Vec<(SlotId, KernelId)> = kernel.outputs.iter().map(|&s| (s, k)).collect();
        // the first producer and the last consumer of a slot passed inside the run
        let mut span: Option<(KernelId, KernelId)> = None;
        let mut end = KernelId::new(k.index() + 1);
        while let Some(next) = plan.kernels.get(end) {
            if kernel_rows(next) != Some(rows) {
                break;
            }
            let producer = |s: &Source| match s {
                Source::Slot(t) => written.iter().find(|(w, _)| w == t).map(|&(_, k)| k),
                _ => None,
            };
            let inner: Vec<(KernelId, &View)> = next
                .inputs
                .values()
                .filter_map(|i| Some((producer(&i.source)?, &i.view)))
                .collect();
            if !inner.iter().all(|(_, v)| row_aligned(v, rows)) {
                break;
            }
            if let Some(first) = inner.iter().map(|&(p, _)| p).min() {
                span = Some(span.map_or((first, end), |(f, _)| (f.min(first), end)));
            }
            written.extend(next.outputs.iter().map(|&s| (s, end)));
            end = KernelId::new(end.index() + 1);
        }
        if let Some((first, last)) = span {
            groups.push(RowGroup {
                start: first,
                end: KernelId::new(last.index() + 1),
                rows,
            });
        }
        k = end;
    }
    groups
}

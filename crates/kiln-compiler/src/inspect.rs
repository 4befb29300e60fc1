//! The inspector: what a compiled plan will do for given sizes — kernels and what each fused,
//! allocations, peak bytes, bytes read and written — so tests can assert "this expression is
//! one kernel and one allocation". Depends on [`mod@crate::compile`], [`crate::plan`],
//! [`crate::memory`].

use crate::compile::Compiled;
use crate::memory::peak_bytes;
use crate::plan::Source;
use kiln_ir::{resolve_shape, Bindings, IdVec};

/// One kernel of a plan, as the inspector sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelReport {
    /// `"elementwise"`, `"reduce"`, `"argreduce"`, `"matmul"`, `"matmul+epilogue"`, `"take"`,
    /// `"scatter_add"`, `"top_k"` or `"concat"`.
    pub kind: &'static str,
    /// Graph nodes computed by this kernel (movement ops folded into views not counted).
    pub fused_nodes: usize,
    /// Inputs read (buffers and virtual sources).
    pub inputs: usize,
    /// Bytes read from buffers (each distinct element once; broadcast reads count the source).
    pub bytes_read: usize,
    /// Bytes written.
    pub bytes_written: usize,
    /// The row group ([`crate::group::RowGroup`]) the kernel belongs to: its index in the
    /// plan's list of groups.
    pub row_group: Option<usize>,
}

/// What a plan does for one binding.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The kernels, in order.
    pub kernels: Vec<KernelReport>,
    /// Buffers the plan allocates (outputs included, inputs not).
    pub allocations: usize,
    /// Peak bytes of those buffers live at once.
    pub peak_bytes: usize,
    /// Total bytes read by all kernels.
    pub bytes_read: usize,
    /// Total bytes written by all kernels.
    pub bytes_written: usize,
}

/// Reports on `compiled` for the sizes in `bindings`.
///
/// ```
/// use kiln_ir::{build, trace, BinaryOp, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 1000]), Shape::from([1000])).unwrap();
/// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
/// let t = trace(&[&y], true);
/// let b = t.bindings.clone();
/// let c = kiln_compiler::compile(&LazyExpr::from_trace(t)).unwrap();
/// let r = kiln_compiler::inspect::report(&c, &b);
/// assert_eq!((r.kernels.len(), r.allocations, r.bytes_read, r.bytes_written), (1, 1, 4000, 4000));
/// ```
pub fn report(compiled: &Compiled, bindings: &Bindings) -> Report {
    let plan = &compiled.plan;
    let dims = &bindings.dims;
    // per kernel: its fused nodes and its row group (one pass each: plans may be long)
    let mut fused = IdVec::filled(0usize, plan.kernels.len());
    for &k in compiled.cluster.values().flatten() {
        if let Some(n) = fused.get_mut(k) {
            *n += 1;
        }
    }
    let mut group_of = IdVec::filled(None, plan.kernels.len());
    for (gi, g) in plan.groups.iter().enumerate() {
        for k in g.kernels() {
            if let Some(x) = group_of.get_mut(k) {
                *x = Some(gi);
            }
        }
    }
    let mut kernels = Vec::new();
    for (k, kernel) in plan.kernels.iter() {
        let kind = kernel.kind.name();
        let bytes_read = kernel
            .inputs
            .values()
            .filter(|i| matches!(i.source, Source::Param(_) | Source::Slot(_)))
            .map(|i| {
                let v = i.view.resolve(dims);
                let distinct: usize = v
                    .shape
                    .dims()
                    .iter()
                    .zip(&v.strides)
                    .map(|(&d, &s)| if s == 0 { 1 } else { d })
                    .product();
                let distinct = if v.shape.numel() == 0 { 0 } else { distinct };
                distinct * i.dtype.size_bytes()
            })
            .sum();
        let bytes_written = kernel
            .outputs
            .iter()
            .map(|&s| {
                resolve_shape(&plan.slots[s].shape, dims).numel() * plan.slots[s].dtype.size_bytes()
            })
            .sum();
        kernels.push(KernelReport {
            kind,
            fused_nodes: fused[k],
            inputs: kernel.inputs.len(),
            bytes_read,
            bytes_written,
            row_group: group_of[k],
        });
    }
    Report {
        allocations: plan.buffers.len(),
        peak_bytes: peak_bytes(plan, dims),
        bytes_read: kernels.iter().map(|k| k.bytes_read).sum(),
        bytes_written: kernels.iter().map(|k| k.bytes_written).sum(),
        kernels,
    }
}

//! The memory plan: liveness intervals of slots, assignment of slots to buffers (reuse and
//! merging of dead buffers, in-place writes), and peak-memory accounting.
//!
//! **Aliasing rules.** A kernel writes in place over an input slot only if the kernel is
//! elementwise, that slot dies at this kernel (no later kernel reads it), it is not a plan
//! output, every read of it in this kernel uses the output's own contiguous layout, and the
//! dtypes match. Parameters (user data) are never written by the plan itself. Identity decides, never shape:
//! slots are compared by number. Output buffers are never reused.
//!
//! **Row groups** ([`crate::group::RowGroup`]): a buffer whose slots die inside a group is
//! free only after the group's last kernel (a backend may run the group's rows in any
//! order), and a kernel of a group writes in place only over a slot that every kernel of the
//! group reads row-aligned.
//!
//! **Donations** ([`crate::plan::Donation`]): the same rules mark where a parameter could be
//! written over, if a run is handed its storage; the plan itself never writes a parameter. Depends on [`crate::plan`], [`crate::group`] and `kiln-ir`.

use crate::plan::row_aligned;
use crate::plan::{
    BufferDesc, BufferId, Donation, InputId, InstOp, Kernel, KernelId, KernelKind, OutputRef, Plan,
    SlotId, Source, ViewOp,
};
use kiln_ir::{resolve_shape, DType, Dim, Id, IdVec, ParamId};
use smallvec::SmallVec;
use std::collections::BTreeSet;

fn identity_view(k: &Kernel, input: InputId) -> bool {
    let v = &k.inputs[input].view;
    let non1 = |s: &[Dim]| {
        s.iter()
            .copied()
            .filter(|d| *d != Dim::Const(1))
            .collect::<Vec<_>>()
    };
    v.ops.iter().all(|o| matches!(o, ViewOp::Reshape(_)))
        && v.shape() == k.space
        && non1(&v.base) == non1(&k.space)
}

/// A free buffer: its capacity, when it was freed (a sequence number), its id.
type FreeEntry = (usize, u64, BufferId);

/// The free buffers of each dtype, ordered by capacity, then by the order they were freed.
#[derive(Default)]
struct FreeList {
    by_dtype: Vec<(DType, BTreeSet<FreeEntry>)>,
    freed: u64,
}

impl FreeList {
    fn put(&mut self, dtype: DType, capacity: usize, b: BufferId) {
        self.freed += 1;
        let seq = self.freed;
        self.set(dtype).insert((capacity, seq, b));
    }

    fn set(&mut self, dtype: DType) -> &mut BTreeSet<FreeEntry> {
        let i = match self.by_dtype.iter().position(|(d, _)| *d == dtype) {
            Some(i) => i,
            None => {
                self.by_dtype.push((dtype, BTreeSet::new()));
                self.by_dtype.len() - 1
            }
        };
        &mut self.by_dtype[i].1
    }

    /// Takes the smallest buffer holding `want` elements, else the largest one (it grows);
    /// among equal capacities the one freed first.
    fn take_best(&mut self, dtype: DType, want: usize) -> Option<BufferId> {
        let set = self.set(dtype);
        let lowest = BufferId::new(0);
        let key = match set.range((want, 0, lowest)..).next() {
            Some(&k) => k,
            None => {
                let &(cap, _, _) = set.iter().next_back()?;
                *set.range((cap, 0, lowest)..).next()?
            }
        };
        set.remove(&key);
        Some(key.2)
    }
}

/// Compacts slots to those kernels write, then assigns buffers. `hint` gives the symbol
/// values seen at compile time, used only to pick the best-fitting free buffer.
pub fn plan_memory(plan: &mut Plan, hint: &[usize], donate: bool) {
    // Compact: slot numbers in kernel-write order.
    let mut remap: IdVec<SlotId, Option<SlotId>> = IdVec::filled(None, plan.slots.len());
    let mut slots = IdVec::new();
    for k in plan.kernels.values() {
        for &s in &k.outputs {
            remap[s] = Some(slots.push(plan.slots[s].clone()));
        }
    }
    let remap = |s: &mut SlotId| *s = remap[*s].expect("every slot read is written");
    for k in plan.kernels.values_mut() {
        k.outputs.iter_mut().for_each(remap);
        for i in k.inputs.values_mut() {
            if let Source::Slot(s) = &mut i.source {
                remap(s);
            }
        }
    }
    for o in plan.outputs.iter_mut() {
        if let OutputRef::Slot(s) = o {
            remap(s);
        }
    }
    plan.slots = slots;

    // Kernel positions: `n_k` stands for "after the last kernel" (an output's last use).
    let n_k = plan.kernels.len();
    let mut last: IdVec<SlotId, usize> = IdVec::filled(0, plan.slots.len());
    let mut is_output = IdVec::filled(false, plan.slots.len());
    for (k, kernel) in plan.kernels.values().enumerate() {
        for &s in &kernel.outputs {
            last[s] = last[s].max(k);
        }
        for i in kernel.inputs.values() {
            if let Source::Slot(s) = i.source {
                last[s] = last[s].max(k);
            }
        }
    }
    for o in &plan.outputs {
        if let OutputRef::Slot(s) = o {
            is_output[*s] = true;
        }
    }
    // `last[s] == k` here: no kernel after `k` reads `s`.
    plan.unread_outputs = plan
        .kernels
        .values()
        .enumerate()
        .map(|(k, kernel)| kernel.outputs.iter().all(|&s| is_output[s] && last[s] == k))
        .collect();
    for (s, out) in is_output.iter() {
        if *out {
            last[s] = n_k;
        }
    }
    let size = |plan: &Plan, s: SlotId| resolve_shape(&plan.slots[s].shape, hint).numel();
    // The row group of each kernel, if any.
    let groups = plan.groups.clone();
    let mut group_index: Vec<Option<usize>> = vec![None; n_k];
    for (gi, g) in groups.iter().enumerate() {
        let end = g.end.index().min(n_k);
        group_index[g.start.index().min(end)..end].fill(Some(gi));
    }
    let group_of = |k: usize| group_index[k].map(|gi| &groups[gi]);
    // Inside a group, in place only over a slot the whole group reads row by row.
    let rowwise = |plan: &Plan, k: usize, t: SlotId| {
        group_of(k).is_none_or(|g| {
            g.kernels().all(|kernel| {
                plan.kernels[kernel]
                    .inputs
                    .values()
                    .all(|i| i.source != Source::Slot(t) || row_aligned(&i.view, g.rows))
            })
        })
    };
    // The slots whose last reader is kernel `k` (outputs live to the end: never listed).
    let mut dying_at: Vec<Vec<SlotId>> = vec![Vec::new(); n_k];
    for (s, &l) in last.iter() {
        if l < n_k {
            dying_at[l].push(s);
        }
    }
    // Outputs a donated parameter could become get a buffer of their own (not one written in
    // place over a dying slot, whose storage the run could not swap).
    let sites = if donate {
        donation_sites(plan, &group_index)
    } else {
        Vec::new()
    };
    // Every list below is per buffer and kept current as slots are assigned, so the plan is
    // linear in the number of kernels (a user's graph may have millions).
    let mut buffers: IdVec<BufferId, BufferDesc> = IdVec::new();
    let mut capacity: IdVec<BufferId, usize> = IdVec::new(); // its largest slot at `hint`
    let mut last_use: IdVec<BufferId, usize> = IdVec::new(); // its slots' last reader
    let mut is_free: IdVec<BufferId, bool> = IdVec::new();
    let mut free = FreeList::default();
    let mut donations: Vec<Donation> = Vec::new();
    for k in 0..n_k {
        let kernel = plan.kernels[KernelId::new(k)].clone();
        let mut taken: Vec<BufferId> = Vec::new();
        for &s in &kernel.outputs {
            let dtype = plan.slots[s].dtype;
            // in place over a dying input?
            let mut chosen = None;
            let site = sites
                .iter()
                .find(|&&(sk, j, _)| sk == k && kernel.outputs[j] == s)
                .map(|&(_, _, p)| p);
            if site.is_none() && matches!(kernel.kind, KernelKind::Elementwise { .. }) {
                for (x, input) in kernel.inputs.iter() {
                    let Source::Slot(t) = input.source else {
                        continue;
                    };
                    let b = plan.slots[t].buffer;
                    let all_identity = kernel
                        .inputs
                        .iter()
                        .filter(|(_, i)| i.source == Source::Slot(t))
                        .all(|(y, _)| identity_view(&kernel, y));
                    if last[t] == k
                        && !is_output[t]
                        && plan.slots[t].dtype == dtype
                        && identity_view(&kernel, x)
                        && all_identity
                        && !taken.contains(&b)
                        && !buffers[b].output
                        && rowwise(plan, k, t)
                    {
                        chosen = Some(b);
                        break;
                    }
                }
            }
            let want = size(plan, s);
            if chosen.is_none() && !is_output[s] && site.is_none() {
                // best fit among free buffers of this dtype
                if let Some(b) = free.take_best(dtype, want) {
                    is_free[b] = false;
                    chosen = Some(b);
                }
            }
            let b = match chosen {
                Some(b) => b,
                None => {
                    capacity.push(0);
                    last_use.push(0);
                    is_free.push(false);
                    buffers.push(BufferDesc {
                        dtype,
                        slots: Vec::new(),
                        output: false,
                        last_use: KernelId::new(0),
                    })
                }
            };
            buffers[b].slots.push(s);
            buffers[b].output |= is_output[s];
            capacity[b] = capacity[b].max(want);
            last_use[b] = last_use[b].max(last[s]);
            plan.slots[s].buffer = b;
            taken.push(b);
            if let Some(p) = site {
                donations.push(Donation {
                    param: p,
                    kernel: KernelId::new(k),
                    buffer: b,
                    output: kernel.outputs.iter().position(|&o| o == s).unwrap_or(0),
                });
            }
        }
        // Buffers whose slots are all dead after this kernel (after this group, inside one)
        // become free: those holding a slot that died in that span and none that lives on.
        let died = match group_of(k) {
            Some(g) if k + 1 < g.end.index() => continue,
            Some(g) => g.start.index()..=k,
            None => k..=k,
        };
        for j in died {
            for &s in &dying_at[j] {
                let b = plan.slots[s].buffer;
                if !buffers[b].output && last_use[b] <= k && !is_free[b] {
                    is_free[b] = true;
                    free.put(buffers[b].dtype, capacity[b], b);
                }
            }
        }
    }
    for desc in buffers.values_mut() {
        let l = desc.slots.iter().map(|&s| last[s]).max().unwrap_or(0);
        desc.last_use = KernelId::new(l);
    }
    plan.releases = IdVec::filled(SmallVec::new(), n_k);
    for (b, desc) in buffers.iter() {
        if !desc.output && desc.last_use.index() < n_k {
            plan.releases[desc.last_use].push(b);
        }
    }
    plan.buffers = buffers;
    plan.settle = !donations.is_empty() && last_fallible(plan).is_some();
    plan.donations = donations;
}

/// The last fallible kernel of a plan, if any: gathers, scatter-adds, and kernels whose
/// programs hold an integer `//`, `%` or power ([`kiln_ir::BinaryOp::can_fail`]). Donations
/// come only after it (a value error reported after a parameter was written over could not
/// leave it as it was), and a run settles the errors before the first.
fn last_fallible(plan: &Plan) -> Option<usize> {
    plan.kernels.values().rposition(|k| match &k.kind {
        KernelKind::Take { .. } | KernelKind::ScatterAdd { .. } => true,
        KernelKind::Elementwise { program, .. }
        | KernelKind::Reduce { program, .. }
        | KernelKind::ArgReduce { program, .. }
        | KernelKind::MatMul {
            epilogue: Some(program),
            ..
        } => program.insts.values().any(|i| match i.op {
            InstOp::Binary(op, ..) => op.can_fail(i.dtype),
            _ => false,
        }),
        KernelKind::MatMul { epilogue: None, .. }
        | KernelKind::TopK { .. }
        | KernelKind::Concat { .. } => false,
    })
}

/// The parameters kernel `k` reads only at its outputs' own positions: every read through an
/// identity view, by an elementwise kernel or a matmul's epilogue (never a matmul operand: a
/// square operand's view can look like the output's layout).
fn aligned_params(kernel: &Kernel) -> SmallVec<[ParamId; 2]> {
    let first_read = match kernel.kind {
        KernelKind::Elementwise { .. } => 0,
        KernelKind::MatMul {
            epilogue: Some(_), ..
        } => 2,
        _ => return SmallVec::new(),
    };
    let mut out: SmallVec<[ParamId; 2]> = SmallVec::new();
    for input in kernel.inputs.values() {
        let Source::Param(p) = input.source else {
            continue;
        };
        if out.contains(&p) {
            continue;
        }
        let aligned = kernel
            .inputs
            .iter()
            .filter(|(_, i)| i.source == Source::Param(p))
            .all(|(y, _)| y.index() >= first_read && identity_view(kernel, y));
        if aligned {
            out.push(p);
        }
    }
    out
}

/// For a backend that takes donations: moves each kernel that reads a parameter at its
/// outputs' own positions to just after that parameter's last other reader (a loss computed
/// after the update reads the old value), when no kernel in between reads its outputs and
/// no kernel it reads from moves. The result is checked to stay in dependency order; if it
/// would not, nothing moves. Returns, per new position, the kernel's old index.
pub fn sink_updates(plan: &mut Plan) -> Vec<usize> {
    let n = plan.kernels.len();
    let identity: Vec<usize> = (0..n).collect();
    if !plan.groups.is_empty() {
        return identity;
    }
    let mut last_reader: Vec<usize> = Vec::new();
    let mut producer: IdVec<SlotId, usize> = IdVec::filled(usize::MAX, plan.slots.len());
    let mut readers: IdVec<SlotId, SmallVec<[usize; 2]>> =
        IdVec::filled(SmallVec::new(), plan.slots.len());
    for (k, kernel) in plan.kernels.values().enumerate() {
        for &s in &kernel.outputs {
            producer[s] = k;
        }
        for i in kernel.inputs.values() {
            match i.source {
                Source::Param(p) => {
                    let p = p.index();
                    if last_reader.len() <= p {
                        last_reader.resize(p + 1, 0);
                    }
                    last_reader[p] = k;
                }
                Source::Slot(s) => readers[s].push(k),
                _ => {}
            }
        }
    }
    // Where each kernel goes: twice its index, or twice the reader it follows, plus one.
    let mut key: Vec<usize> = (0..n).map(|k| 2 * k).collect();
    let mut moved = vec![false; n];
    for (k, kernel) in plan.kernels.values().enumerate() {
        let Some(to) = aligned_params(kernel)
            .iter()
            .map(|&p| last_reader[p.index()])
            .max()
            .filter(|&l| l > k)
        else {
            continue;
        };
        let outputs_free = kernel
            .outputs
            .iter()
            .all(|&s| readers[s].iter().all(|&r| r <= k || r > to));
        let inputs_fixed = kernel.inputs.values().all(|i| match i.source {
            Source::Slot(s) => !moved[producer[s]],
            _ => true,
        });
        if outputs_free && inputs_fixed {
            key[k] = 2 * to + 1;
            moved[k] = true;
        }
    }
    if !moved.iter().any(|&m| m) {
        return identity;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&k| (key[k], k));
    let mut position = vec![0usize; n];
    for (new, &old) in order.iter().enumerate() {
        position[old] = new;
    }
    let in_order = plan.kernels.values().enumerate().all(|(k, kernel)| {
        kernel.inputs.values().all(|i| match i.source {
            Source::Slot(s) => position[producer[s]] < position[k],
            _ => true,
        })
    });
    if !in_order {
        return identity;
    }
    let mut old: Vec<Option<Kernel>> = std::mem::take(&mut plan.kernels)
        .into_vec()
        .into_iter()
        .map(Some)
        .collect();
    plan.kernels = order
        .iter()
        .map(|&k| old[k].take().expect("each kernel once"))
        .collect();
    order
}

/// The kernels that could write over a donated parameter (see [`Donation`]), before row
/// groups are marked: a group holding one is dropped, so the donation can happen.
pub fn donation_kernels(plan: &Plan) -> Vec<KernelId> {
    let none = vec![None; plan.kernels.len()];
    let mut ks: Vec<KernelId> = donation_sites(plan, &none)
        .into_iter()
        .map(|(k, _, _)| KernelId::new(k))
        .collect();
    ks.dedup();
    ks
}

/// The outputs `(kernel, output, parameter)` that a donated parameter could become: see
/// [`Donation`]; one output per parameter, the parameter read by nothing after, and never a
/// parameter the plan returns.
fn donation_sites(plan: &Plan, group_index: &[Option<usize>]) -> Vec<(usize, usize, ParamId)> {
    let first = last_fallible(plan).map_or(0, |k| k + 1);
    let mut last_reader: Vec<Option<usize>> = Vec::new();
    for (k, kernel) in plan.kernels.values().enumerate() {
        for i in kernel.inputs.values() {
            if let Source::Param(p) = i.source {
                let p = p.index();
                if last_reader.len() <= p {
                    last_reader.resize(p + 1, None);
                }
                last_reader[p] = Some(k);
            }
        }
    }
    let returned: Vec<ParamId> = plan
        .outputs
        .iter()
        .filter_map(|o| match o {
            OutputRef::Param(p) => Some(*p),
            OutputRef::Slot(_) => None,
        })
        .collect();
    let mut out: Vec<(usize, usize, ParamId)> = Vec::new();
    for (k, kernel) in plan.kernels.values().enumerate() {
        if group_index[k].is_some() || k < first {
            continue;
        }
        let mut params = aligned_params(kernel)
            .into_iter()
            .filter(|&p| last_reader[p.index()] == Some(k) && !returned.contains(&p));
        for j in 0..kernel.outputs.len() {
            match params.next() {
                Some(p) => out.push((k, j, p)),
                None => break,
            }
        }
    }
    out
}

/// Peak bytes of plan buffers live at once for the symbol values `dims` (a buffer is live
/// from the first kernel writing it to its last use; outputs to the end). Inputs are not
/// counted.
///
/// ```
/// let p = kiln_compiler::Plan::default();
/// assert_eq!(kiln_compiler::memory::peak_bytes(&p, &[]), 0);
/// ```
pub fn peak_bytes(plan: &Plan, dims: &[usize]) -> usize {
    let n_k = plan.kernels.len();
    let mut first = IdVec::filled(usize::MAX, plan.buffers.len());
    for (k, kernel) in plan.kernels.values().enumerate() {
        for &s in &kernel.outputs {
            let b = plan.slots[s].buffer;
            first[b] = first[b].min(k);
        }
    }
    let bytes: IdVec<BufferId, usize> = plan
        .buffers
        .values()
        .map(|d| {
            d.slots
                .iter()
                .map(|&s| resolve_shape(&plan.slots[s].shape, dims).numel())
                .max()
                .unwrap_or(0)
                * d.dtype.size_bytes()
        })
        .collect();
    // live from its first write to its last use (outputs: to the end), summed by a sweep
    if n_k == 0 {
        return 0;
    }
    let mut delta = vec![0i128; n_k + 1];
    for (b, d) in plan.buffers.iter() {
        let end = if d.output {
            n_k - 1
        } else {
            d.last_use.index().min(n_k - 1)
        };
        if first[b] <= end {
            delta[first[b]] += bytes[b] as i128;
            delta[end + 1] -= bytes[b] as i128;
        }
    }
    let mut live = 0i128;
    let mut peak = 0i128;
    for d in &delta[..n_k] {
        live += d;
        peak = peak.max(live);
    }
    peak as usize
}

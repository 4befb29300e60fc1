//! The memory plan: liveness intervals of slots, assignment of slots to buffers (reuse and
//! merging of dead buffers, in-place writes), and peak-memory accounting.
//!
//! **Aliasing rules.** A kernel writes in place over an input slot only if the kernel is
//! elementwise, that slot dies at this kernel (no later kernel reads it), it is not a plan
//! output, every read of it in this kernel uses the output's own contiguous layout, and the
//! dtypes match. Parameters (user data) are never written. Identity decides, never shape:
//! slots are compared by number. Output buffers are never reused.
//!
//! **Row groups** ([`crate::group::RowGroup`]): a buffer whose slots die inside a group is
//! free only after the group's last kernel (a backend may run the group's rows in any
//! order), and a kernel of a group writes in place only over a slot that every kernel of the
//! group reads row-aligned. Depends on [`crate::plan`], [`crate::group`] and `kiln-ir`.

use crate::group::row_aligned;
use crate::plan::{BufferDesc, Kernel, KernelKind, OutputRef, Plan, Source, ViewOp};
use kiln_ir::{resolve_shape, Dim};

fn identity_view(k: &Kernel, input: usize) -> bool {
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

/// Compacts slots to those kernels write, then assigns buffers. `hint` gives the symbol
/// values seen at compile time, used only to pick the best-fitting free buffer.
pub fn plan_memory(plan: &mut Plan, hint: &[usize]) {
    // Compact: slot numbers in kernel-write order.
    let mut remap = vec![u32::MAX; plan.slots.len()];
    let mut slots = Vec::new();
    for k in &plan.kernels {
        for &s in &k.outputs {
            remap[s as usize] = slots.len() as u32;
            slots.push(plan.slots[s as usize].clone());
        }
    }
    for k in plan.kernels.iter_mut() {
        for s in k.outputs.iter_mut() {
            *s = remap[*s as usize];
        }
        for i in k.inputs.iter_mut() {
            if let Source::Slot(s) = &mut i.source {
                *s = remap[*s as usize];
            }
        }
    }
    for o in plan.outputs.iter_mut() {
        if let OutputRef::Slot(s) = o {
            *s = remap[*s as usize];
        }
    }
    plan.slots = slots;

    let n_k = plan.kernels.len();
    let mut last = vec![0usize; plan.slots.len()];
    let mut def = vec![0usize; plan.slots.len()];
    let mut is_output = vec![false; plan.slots.len()];
    for (k, kernel) in plan.kernels.iter().enumerate() {
        for &s in &kernel.outputs {
            def[s as usize] = k;
            last[s as usize] = last[s as usize].max(k);
        }
        for i in &kernel.inputs {
            if let Source::Slot(s) = i.source {
                last[s as usize] = last[s as usize].max(k);
            }
        }
    }
    for o in &plan.outputs {
        if let OutputRef::Slot(s) = o {
            is_output[*s as usize] = true;
        }
    }
    // `last[s] == k` here: no kernel after `k` reads `s`.
    plan.unread_outputs = plan
        .kernels
        .iter()
        .enumerate()
        .map(|(k, kernel)| {
            kernel
                .outputs
                .iter()
                .all(|&s| is_output[s as usize] && last[s as usize] == k)
        })
        .collect();
    for (s, out) in is_output.iter().enumerate() {
        if *out {
            last[s] = n_k;
        }
    }
    let size = |plan: &Plan, s: u32| resolve_shape(&plan.slots[s as usize].shape, hint).numel();
    // The row group of kernel `k`, if any.
    let groups = plan.groups.clone();
    let group_of = |k: usize| groups.iter().find(|g| (g.start..g.end).contains(&k));
    // Inside a group, in place only over a slot the whole group reads row by row.
    let rowwise = |plan: &Plan, k: usize, t: u32| {
        group_of(k).is_none_or(|g| {
            plan.kernels[g.start..g.end].iter().all(|kernel| {
                kernel
                    .inputs
                    .iter()
                    .all(|i| i.source != Source::Slot(t) || row_aligned(&i.view, g.rows))
            })
        })
    };
    let mut buffers: Vec<BufferDesc> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    for k in 0..n_k {
        let kernel = plan.kernels[k].clone();
        let mut taken: Vec<u32> = Vec::new();
        for &s in &kernel.outputs {
            let dtype = plan.slots[s as usize].dtype;
            // in place over a dying input?
            let mut chosen = None;
            if matches!(kernel.kind, KernelKind::Elementwise { .. }) {
                for (x, input) in kernel.inputs.iter().enumerate() {
                    let Source::Slot(t) = input.source else {
                        continue;
                    };
                    let b = plan.slots[t as usize].buffer;
                    let all_identity = kernel
                        .inputs
                        .iter()
                        .enumerate()
                        .filter(|(_, i)| i.source == Source::Slot(t))
                        .all(|(y, _)| identity_view(&kernel, y));
                    if last[t as usize] == k
                        && !is_output[t as usize]
                        && plan.slots[t as usize].dtype == dtype
                        && identity_view(&kernel, x)
                        && all_identity
                        && !taken.contains(&b)
                        && !buffers[b as usize].output
                        && rowwise(plan, k, t)
                    {
                        chosen = Some(b);
                        break;
                    }
                }
            }
            if chosen.is_none() && !is_output[s as usize] {
                // best fit among free buffers of this dtype
                let want = size(plan, s);
                let best = free
                    .iter()
                    .copied()
                    .filter(|&b| buffers[b as usize].dtype == dtype && !taken.contains(&b))
                    .min_by_key(|&b| {
                        let have = buffers[b as usize]
                            .slots
                            .iter()
                            .map(|&x| size(plan, x))
                            .max()
                            .unwrap_or(0);
                        if have >= want {
                            (0, have - want)
                        } else {
                            (1, want - have)
                        }
                    });
                if let Some(b) = best {
                    free.retain(|&f| f != b);
                    chosen = Some(b);
                }
            }
            let b = match chosen {
                Some(b) => b,
                None => {
                    buffers.push(BufferDesc {
                        dtype,
                        slots: Vec::new(),
                        output: false,
                        last_use: 0,
                    });
                    buffers.len() as u32 - 1
                }
            };
            buffers[b as usize].slots.push(s);
            buffers[b as usize].output |= is_output[s as usize];
            plan.slots[s as usize].buffer = b;
            taken.push(b);
        }
        // Buffers whose slots are all dead after this kernel (after this group, inside one)
        // become free.
        let died = match group_of(k) {
            Some(g) if k + 1 < g.end => continue,
            Some(g) => g.start..=k,
            None => k..=k,
        };
        for (b, desc) in buffers.iter().enumerate() {
            let dead = !desc.output && desc.slots.iter().all(|&s| last[s as usize] <= k);
            if dead
                && !free.contains(&(b as u32))
                && desc.slots.iter().any(|&s| died.contains(&last[s as usize]))
            {
                free.push(b as u32);
            }
        }
    }
    for desc in buffers.iter_mut() {
        desc.last_use = desc
            .slots
            .iter()
            .map(|&s| last[s as usize])
            .max()
            .unwrap_or(0);
        let _ = &def;
    }
    plan.buffers = buffers;
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
    let mut first = vec![usize::MAX; plan.buffers.len()];
    for (k, kernel) in plan.kernels.iter().enumerate() {
        for &s in &kernel.outputs {
            let b = plan.slots[s as usize].buffer as usize;
            first[b] = first[b].min(k);
        }
    }
    let bytes: Vec<usize> = plan
        .buffers
        .iter()
        .map(|d| {
            d.slots
                .iter()
                .map(|&s| resolve_shape(&plan.slots[s as usize].shape, dims).numel())
                .max()
                .unwrap_or(0)
                * d.dtype.size_bytes()
        })
        .collect();
    (0..n_k)
        .map(|k| {
            (0..plan.buffers.len())
                .filter(|&b| {
                    first[b] <= k && (plan.buffers[b].output || plan.buffers[b].last_use >= k)
                })
                .map(|b| bytes[b])
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

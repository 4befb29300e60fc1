//! Donation: which evaluated values an evaluation may overwrite in place.
//!
//! [`donatable`] proves, from the reference counts of the front-end graph, that no live
//! array can read a donor's value after the evaluation of some roots: the donor's node and
//! every node that reads it on the way to the roots are held only by the graph itself, by
//! the roots (which store their values and drop their operands), or by the donating handles.
//! Depends on [`crate::node`] only.

use crate::node::{Node, NodeRef};
use smallvec::SmallVec;
use std::sync::Arc;

/// For each of `donors`, whether evaluating `roots` may write over its resident storage.
///
/// A donor qualifies when it is evaluated and resident on a device, nothing else shares that
/// storage, the graph of `roots` reads it, and after the evaluation no array could read it:
/// its node is held only by the handles in `donors` (each distinct handle counted once) and by
/// the operand lists of the graph, and every unevaluated node on a path from it to the roots
/// is held only by the graph, unless it is itself one of `roots` (an evaluated root keeps
/// its value and drops its operands).
///
/// ```
/// use kiln_ir::{build, donatable, BinaryOp, HostData, Shape};
/// let w = build::data(HostData::from(vec![1.0f32]), Shape::from([1])).unwrap();
/// let y = build::binary(BinaryOp::Add, &w, &w).unwrap();
/// // a host value: nothing to write over on a device
/// assert_eq!(donatable(&[&y], &[&w]), vec![false]);
/// ```
pub fn donatable(roots: &[&NodeRef], donors: &[&NodeRef]) -> Vec<bool> {
    let mut result = vec![false; donors.len()];
    let candidate =
        |d: &NodeRef| d.is_evaluated() && d.resident().is_some_and(|r| r.handles() == 1);
    if !donors.iter().any(|d| candidate(d)) {
        return result; // nothing resident: no walk
    }
    // The graph, each node held once here (so every count below is one above the world's).
    let mut index: hashbrown::HashMap<*const Node, usize> = hashbrown::HashMap::new();
    let mut nodes: Vec<NodeRef> = Vec::new();
    let mut edges_in: Vec<usize> = Vec::new();
    let mut parents: Vec<SmallVec<[u32; 2]>> = Vec::new();
    let mut is_root: Vec<bool> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut visit = |n: &NodeRef,
                     nodes: &mut Vec<NodeRef>,
                     edges_in: &mut Vec<usize>,
                     parents: &mut Vec<SmallVec<[u32; 2]>>,
                     is_root: &mut Vec<bool>|
     -> (usize, bool) {
        let key = Arc::as_ptr(n);
        if let Some(&i) = index.get(&key) {
            return (i, false);
        }
        let i = nodes.len();
        index.insert(key, i);
        nodes.push(n.clone());
        edges_in.push(0);
        parents.push(SmallVec::new());
        is_root.push(false);
        (i, true)
    };
    for r in roots {
        let (i, new) = visit(r, &mut nodes, &mut edges_in, &mut parents, &mut is_root);
        is_root[i] = true;
        if new && !r.is_evaluated() {
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        let node = nodes[i].clone();
        node.with_inputs(|children| {
            for c in children {
                let (j, new) = visit(c, &mut nodes, &mut edges_in, &mut parents, &mut is_root);
                edges_in[j] += 1;
                parents[j].push(i as u32);
                if new && !c.is_evaluated() {
                    stack.push(j);
                }
            }
        });
    }
    let held_outside = |i: usize, allowed: usize| {
        // `nodes` holds one handle of its own.
        Arc::strong_count(&nodes[i]) - 1 != edges_in[i] + allowed
    };
    for (k, d) in donors.iter().enumerate() {
        if !candidate(d) {
            continue;
        }
        let Some(&di) = index.get(&Arc::as_ptr(d)) else {
            continue; // not read by this evaluation
        };
        if is_root[di] || edges_in[di] == 0 {
            continue;
        }
        // Distinct donating handles on this node.
        let mut handles: SmallVec<[*const NodeRef; 2]> = SmallVec::new();
        for h in donors {
            if Arc::ptr_eq(h, d) && !handles.contains(&(*h as *const NodeRef)) {
                handles.push(*h as *const NodeRef);
            }
        }
        if held_outside(di, handles.len()) {
            continue;
        }
        // Every reader on the way up is the graph's alone, or a root.
        let mut seen = vec![false; nodes.len()];
        let mut up: Vec<usize> = parents[di].iter().map(|&p| p as usize).collect();
        let mut ok = true;
        while let Some(n) = up.pop() {
            if std::mem::replace(&mut seen[n], true) {
                continue;
            }
            if is_root[n] {
                continue;
            }
            if held_outside(n, 0) {
                ok = false;
                break;
            }
            up.extend(parents[n].iter().map(|&p| p as usize));
        }
        result[k] = ok;
    }
    result
}

//! Evaluation: lowering the arrays that need values to one [`LazyExpr`], running it on the
//! backend, and storing each result in its node.
//!
//! Depends on `kiln-ir`, `kiln-compiler` (the `Executor` interface) and `kiln-cpu`.

use crate::Array;
use kiln_compiler::Executor;
use kiln_ir::{LazyExpr, NodeRef, Result};

fn executor() -> &'static dyn Executor {
    static CPU: kiln_cpu::CpuBackend = kiln_cpu::CpuBackend;
    &CPU
}

/// Evaluates several arrays in one pass, so work they share is done once.
///
/// On error nothing is stored: every array stays as it was and can be evaluated again.
///
/// ```
/// use kiln::Array;
/// let x = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
/// let e = x.exp();
/// let (s, m) = (e.sum(None, false), e.max(None, false));
/// kiln::eval(&[&s, &m])?; // exp(x) computed once for both
/// assert!(s.is_evaluated() && m.is_evaluated());
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn eval(arrays: &[&Array]) -> Result<()> {
    let pending: Vec<&NodeRef> = arrays
        .iter()
        .map(|a| &a.node)
        .filter(|n| n.value().is_none())
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    let expr = LazyExpr::from_roots(&pending);
    let values = executor().execute(&expr)?;
    for (node, value) in pending.into_iter().zip(values) {
        node.set_value(value);
    }
    Ok(())
}

/// The lowered graph of `arrays` (for inspection: DOT dumps, hashes).
///
/// ```
/// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
/// let y = (&a * &a).exp();
/// let g = kiln::lower(&[&y]);
/// assert!(g.to_dot().contains("exp"));
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn lower(arrays: &[&Array]) -> LazyExpr {
    let nodes: Vec<&NodeRef> = arrays.iter().map(|a| &a.node).collect();
    LazyExpr::from_roots(&nodes)
}

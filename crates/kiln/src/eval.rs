//! Evaluation: the arrays that need values are traced together, their compiled plan is
//! taken from the graph cache of the current device's engine (or compiled), run on that
//! device, and each result is stored in its node. Also the cache controls and the inspector.
//!
//! `KILN_CACHE_CAPACITY=n` sets the initial cache bound; `KILN_LOG_COMPILES=1` logs each
//! compile with its reason (a `tracing` event at target `kiln::compile`, on stderr where no
//! subscriber records it); `KILN_DUMP_DIR=dir` writes DOT files of each compiled graph.
//! Depends on `kiln-ir`, `kiln-compiler`, `kiln-cpu`, [`crate::engines`] and
//! [`crate::device`].

use crate::device::{default_device, Device};
use crate::engines::cpu_engine;
#[cfg(feature = "wgpu")]
use crate::engines::wgpu_engine;
pub use crate::engines::DEFAULT_CACHE_CAPACITY;
use crate::Array;
use kiln_compiler::{Backend, CacheStats, Compiled, Engine, Report, RunOptions};
use kiln_ir::{DeviceData, LazyExpr, NodeRef, Result, Value};
use std::sync::Arc;

/// Runs `f` with the engine of `device`.
macro_rules! with_engine {
    ($device:expr, |$e:ident| $body:expr) => {
        match $device {
            Device::Cpu => {
                let $e = cpu_engine();
                $body
            }
            #[cfg(feature = "wgpu")]
            Device::Wgpu => {
                let $e = wgpu_engine()?;
                $body
            }
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => Err(crate::engines::unavailable(
                "kiln was built without its `wgpu` feature".into(),
            )),
        }
    };
}

fn evaluate_on<B: Backend>(
    e: &Engine<B>,
    nodes: &[&NodeRef],
    donate: &[&DeviceData],
) -> Result<Vec<Value>> {
    // Results stay where they were computed (a GPU keeps them; the CPU's are host data);
    // an input resident elsewhere is moved, or refused under strict placement.
    e.evaluate_with(
        nodes,
        RunOptions {
            keep: true,
            strict: crate::device::strict_placement(),
            donate,
        },
    )
}

fn inspect_on<B: Backend>(e: &Engine<B>, nodes: &[&NodeRef]) -> Result<(Report, Arc<Compiled>)> {
    e.inspect(nodes)
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
    eval_with(default_device(), arrays)
}

pub(crate) fn eval_with(device: Device, arrays: &[&Array]) -> Result<()> {
    eval_donating_with(device, arrays, &[])
}

/// Evaluates `arrays` as [`eval`] does, letting the evaluation write its results over the
/// device storage of `donated` arrays instead of allocating, where that is safe: the
/// **in-place update** of a training step (`w = w - lr * g` on the GPU).
///
/// A donated array's storage is written over only when kiln proves that nothing can read it
/// afterwards: it is resident on the evaluating device; no other array shares its storage;
/// its only handles are the ones passed in `donated`; every unevaluated array that reads it
/// on the way to `arrays` is held by nothing but the graph (or is itself in `arrays`); every
/// fallible kernel of the evaluation (a gather, a scatter, an integer `//`, `%` or power)
/// runs before the write, and the evaluation confirms they raised no error before it writes
/// (one wait for the device); and a result is computed from it elementwise, as its last
/// reader, with its dtype and size.
/// Otherwise it is left alone and the evaluation allocates, as [`eval`] does.
/// On the CPU, nothing is donated.
///
/// After a donation the donated array's handles read as an error (a host copy made before
/// still reads): drop them, or replace them with the results, as an optimizer does.
/// An evaluation that fails after it wrote over a donor (a device error such as running out
/// of memory; value errors are excluded above) leaves that donor unreadable the same way.
/// [`Device::memory`]'s `donated` counts the results written over donated storage.
///
/// ```
/// use kiln::Array;
/// let w = Array::from_vec(vec![1.0f32, 2.0], &[2])?;
/// let g = Array::from_vec(vec![0.5f32, 0.5], &[2])?;
/// let next = &w - &(&g * 0.1);
/// kiln::eval_donating(&[&next], &[&w])?; // on the CPU: evaluated as by `eval`
/// assert_eq!(next.to_vec::<f32>()?, vec![0.95, 1.95]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn eval_donating(arrays: &[&Array], donated: &[&Array]) -> Result<()> {
    eval_donating_with(default_device(), arrays, donated)
}

pub(crate) fn eval_donating_with(
    device: Device,
    arrays: &[&Array],
    donated: &[&Array],
) -> Result<()> {
    let pending: Vec<&NodeRef> = arrays
        .iter()
        .map(|a| &a.node)
        .filter(|n| !n.is_evaluated())
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    let donors: Vec<&NodeRef> = donated.iter().map(|a| &a.node).collect();
    let donate: Vec<&DeviceData> = if donors.is_empty() {
        Vec::new()
    } else {
        kiln_ir::donatable(&pending, &donors)
            .into_iter()
            .zip(&donors)
            .filter_map(|(ok, n)| if ok { n.resident() } else { None })
            .collect()
    };
    let values = with_engine!(device, |e| evaluate_on(e, &pending, &donate))?;
    for (node, value) in pending.into_iter().zip(values) {
        node.set_evaluated(value);
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

/// The graph cache's counters: hits, misses, evictions, compile time, and the reason of each
/// recent miss.
///
/// ```
/// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
/// let before = kiln::cache_stats();
/// (&a * 2.0).eval()?;
/// (&a * 3.0).eval()?; // same structure, new scalar: a hit
/// let after = kiln::cache_stats();
/// assert!(after.hits + after.misses >= before.hits + before.misses + 2);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn cache_stats() -> CacheStats {
    let stats =
        || -> Result<CacheStats> { with_engine!(default_device(), |e| Ok(e.cache().stats())) };
    stats().unwrap_or_default()
}

/// Sets the graph cache's bound (plans), evicting the least recently used if needed.
///
/// ```
/// kiln::set_cache_capacity(128);
/// assert_eq!(kiln::cache_stats().capacity, 128);
/// kiln::set_cache_capacity(kiln::DEFAULT_CACHE_CAPACITY);
/// ```
pub fn set_cache_capacity(capacity: usize) {
    let set = || -> Result<()> {
        with_engine!(default_device(), |e| {
            e.cache().set_capacity(capacity);
            Ok(())
        })
    };
    let _ = set();
}

/// Empties the graph cache and resets its counters.
///
/// ```
/// kiln::clear_cache();
/// ```
pub fn clear_cache() {
    let clear = || -> Result<()> {
        with_engine!(default_device(), |e| {
            e.cache().clear();
            Ok(())
        })
    };
    let _ = clear();
}

/// What evaluating `arrays` together would do, without running it: the kernels and what each
/// fused, the allocations, peak bytes, bytes read and written, DOT graphs before and after
/// the compiler's passes (fused groups drawn as clusters), and the plan in the compiler's
/// text form (`kiln_compiler::text`: every kernel with its inputs and fused program, the
/// slots, buffers and row groups).
#[derive(Clone, Debug)]
pub struct Inspection {
    /// Kernel-level figures for the arrays' current sizes.
    pub report: Report,
    /// DOT of the graph before the passes.
    pub dot_before: String,
    /// DOT of the graph after the passes.
    pub dot_after: String,
    /// The plan, one line per kernel, input, instruction, slot and buffer.
    pub plan: String,
}

/// Inspects the plan for `arrays` (compiling it if needed; evaluating nothing).
///
/// ```
/// use kiln::Array;
/// let n = 1 << 10;
/// let v = |x: f32| Array::from_vec(vec![x; n], &[n]).unwrap();
/// let (a, b, c, d) = (v(1.0), v(2.0), v(3.0), v(4.0));
/// let y = (&a * &b + &c) * &d - &a;
/// let i = kiln::inspect(&[&y])?;
/// assert_eq!(i.report.kernels.len(), 1);  // one fused pass
/// assert_eq!(i.report.allocations, 1);    // the output
/// assert!(i.plan.starts_with("k0 elementwise"), "{}", i.plan);
/// assert!(!y.is_evaluated());
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn inspect(arrays: &[&Array]) -> Result<Inspection> {
    let nodes: Vec<&NodeRef> = arrays.iter().map(|a| &a.node).collect();
    let (report, c) = with_engine!(default_device(), |e| inspect_on(e, &nodes))?;
    Ok(Inspection {
        report,
        dot_before: c.dot_before(),
        dot_after: c.dot_after(),
        plan: c.plan.to_string(),
    })
}

/// Evaluates `arrays` together on `device` (whatever the default): one upload of their
/// inputs, one download of their values.
///
/// ```
/// use kiln::{Array, Device};
/// let x = Array::from_vec(vec![1.0f32, 4.0, 9.0], &[3])?;
/// let y = x.sqrt();
/// kiln::eval_on(Device::Cpu, &[&y])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn eval_on(device: Device, arrays: &[&Array]) -> Result<()> {
    eval_with(device, arrays)
}

/// Evaluates `arrays` on `device` as [`crate::eval_donating`] does: results may be written
/// over the storage of `donated` arrays where nothing can read them afterwards.
///
/// ```
/// use kiln::{Array, Device};
/// let w = Array::from_vec(vec![1.0f32, 2.0], &[2])?;
/// let next = &w * 0.5;
/// kiln::eval_donating_on(Device::Cpu, &[&next], &[&w])?;
/// assert_eq!(next.to_vec::<f32>()?, vec![0.5, 1.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn eval_donating_on(device: Device, arrays: &[&Array], donated: &[&Array]) -> Result<()> {
    eval_donating_with(device, arrays, donated)
}

//! [`Engine`]: the evaluation entry point: trace → graph-cache lookup → (on a miss) compile →
//! run on a backend. Also the inspection entry point. `KILN_DUMP_DIR=dir` writes the DOT of
//! each newly compiled graph, before and after the passes, to `dir`.
//!
//! Depends on [`crate::cache`], [`mod@crate::compile`], [`crate::backend`], [`crate::inspect`].

use crate::backend::{run, run_with, Backend, RunOptions};
use crate::cache::GraphCache;
use crate::compile::{compile_for, Compiled};
use crate::inspect::{report, Report};
use crate::target::Target;
use kiln_ir::{trace, Bindings, HostData, LazyExpr, NodeRef, Result, Value};
use std::sync::Arc;

/// Default number of cached plans.
pub const DEFAULT_CAPACITY: usize = 512;

/// A backend with its graph cache.
///
/// kiln's front end holds one `Engine<kiln_cpu::CpuBackend>` (see `kiln::eval`).
///
/// ```
/// use kiln_compiler::{Arg, Backend, Kernel, Launch};
/// use kiln_ir::{DType, HostData, Result};
/// // A host "device" that only passes data through (it runs no kernels).
/// struct Host;
/// impl Backend for Host {
///     type Buffer = HostData;
///     fn name(&self) -> &'static str { "host" }
///     fn allocate(&self, dtype: DType, _: usize) -> Result<HostData> {
///         Err(kiln_ir::Error::InvalidArgument { op: "allocate", message: format!("no {dtype} buffers"), hint: "use a real backend".into() })
///     }
///     fn release(&self, _: HostData) {}
///     fn upload(&self, d: &HostData) -> Result<HostData> { Ok(d.clone()) }
///     fn download(&self, b: HostData, _: DType, _: usize) -> Result<HostData> { Ok(b) }
///     fn launch(&self, _: &Kernel, _: &Launch<'_>, _: &[Arg<'_, HostData>], _: &mut [HostData]) -> Result<()> {
///         Err(kiln_ir::Error::InvalidArgument { op: "launch", message: "no kernels".into(), hint: "use a real backend".into() })
///     }
/// }
/// let engine = kiln_compiler::Engine::new(Host, 16);
/// let a = kiln_ir::build::data(HostData::from(vec![3i32; 4]), kiln_ir::Shape::from([4])).unwrap();
/// assert_eq!(engine.evaluate(&[&a]).unwrap()[0].len(), 4);
/// assert_eq!(engine.cache().stats().misses, 1);
/// ```
pub struct Engine<B: Backend> {
    backend: B,
    cache: GraphCache,
    dump_dir: Option<std::path::PathBuf>,
}

impl<B: Backend> Engine<B> {
    /// An engine over `backend` with a cache of `capacity` plans.
    pub fn new(backend: B, capacity: usize) -> Self {
        Engine {
            backend,
            cache: GraphCache::new(capacity),
            dump_dir: std::env::var_os("KILN_DUMP_DIR")
                .filter(|v| !v.is_empty())
                .map(Into::into),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The graph cache.
    pub fn cache(&self) -> &GraphCache {
        &self.cache
    }

    /// The compiled plan for `roots` (from the cache or compiled now) and the bindings to run
    /// it with.
    pub fn prepare(&self, roots: &[&NodeRef]) -> Result<(Arc<Compiled>, Bindings)> {
        loop {
            let t = trace(roots, false);
            if let Some(c) = self.cache.get(&t.key) {
                return Ok((c, t.bindings));
            }
            let full = trace(roots, true);
            if full.key != t.key {
                continue; // another thread evaluated part of the graph in between
            }
            let bindings = full.bindings.clone();
            let key = full.key.clone();
            let hash = key.hash();
            let dump = self.dump_dir.clone();
            let target = Target {
                max_kernel_inputs: self.backend.max_kernel_inputs(),
                reduce_side_outputs: self.backend.reduce_side_outputs(),
                row_groups: self.backend.row_groups(),
                donations: self.backend.donates(),
            };
            let c = self.cache.get_or_compile(&key, move || {
                let c = compile_for(&LazyExpr::from_trace(full), target)?;
                if let Some(dir) = dump {
                    let _ = std::fs::create_dir_all(&dir);
                    let _ =
                        std::fs::write(dir.join(format!("{hash:016x}-before.dot")), c.dot_before());
                    let _ =
                        std::fs::write(dir.join(format!("{hash:016x}-after.dot")), c.dot_after());
                }
                Ok(c)
            })?;
            return Ok((c, bindings));
        }
    }

    /// Evaluates `roots`: one value per root, in order.
    pub fn evaluate(&self, roots: &[&NodeRef]) -> Result<Vec<HostData>> {
        let (c, b) = self.prepare(roots)?;
        run(&self.backend, &c.plan, &b)
    }

    /// Evaluates `roots` placing values as `options` say (results left on the device with
    /// [`RunOptions::keep`], see [`run_with`]).
    pub fn evaluate_with(&self, roots: &[&NodeRef], options: RunOptions) -> Result<Vec<Value>> {
        let (c, b) = self.prepare(roots)?;
        run_with(&self.backend, &c.plan, &b, options)
    }

    /// What evaluating `roots` would do (compiles if needed, runs nothing).
    pub fn inspect(&self, roots: &[&NodeRef]) -> Result<(Report, Arc<Compiled>)> {
        let (c, b) = self.prepare(roots)?;
        Ok((report(&c, &b), c))
    }
}

//! [`Target`]: what a backend's kernels can do, as far as the compiler's choices depend on
//! it. Read by the passes ([`crate::fuse`], [`crate::group`], [`crate::memory`]) and set by
//! [`crate::compile_for`]'s callers from the [`crate::Backend`] they compile for.
//!
//! Depends on nothing else in the crate.

/// What a backend's kernels can do, as far as the compiler's choices depend on it.
///
/// ```
/// let t = kiln_compiler::Target::default();
/// assert_eq!(t.max_kernel_inputs, usize::MAX);
/// assert!(!t.reduce_side_outputs && !t.row_groups);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The most arrays one kernel may read ([`crate::Backend::max_kernel_inputs`]); fused
    /// groups that would read more are split.
    pub max_kernel_inputs: usize,
    /// Whether `KernelKind::Reduce` kernels may store prologue results besides the reduced
    /// one ([`crate::Backend::reduce_side_outputs`]): an expensive value that a reduction
    /// reads and later kernels also need is then written by the reduction instead of being
    /// computed twice (softmax's `exp(x - max)`).
    pub reduce_side_outputs: bool,
    /// Whether the backend executes row groups ([`crate::Backend::row_groups`]): the
    /// compiler then marks them ([`crate::group::row_groups`]) and plans memory so that
    /// their rows are independent.
    pub row_groups: bool,
    /// Whether the backend takes donated storage ([`crate::Backend::donates`]): the compiler
    /// then moves parameter updates after the parameter's other readers and leaves them a
    /// buffer of their own, outside row groups, so that a run handed the old storage writes
    /// over it ([`crate::Donation`]).
    pub donations: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            max_kernel_inputs: usize::MAX,
            reduce_side_outputs: false,
            row_groups: false,
            donations: false,
        }
    }
}

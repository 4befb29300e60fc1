//! [`ComputeSessionPool`]: a thread-safe pool of [`ComputeSession`]s over one master spec
//! (DRAGNN's `ComputeSessionPool`), behind one mutex, and [`PooledSession`], a guard that
//! returns its session to the pool when dropped.
//!
//! New sessions get the number of sessions created before them as their id; returned
//! sessions are reused last-in first-out, and reset when they are taken again (not when
//! they are returned).
//!
//! Depends on [`crate::session`], [`crate::spec`] and [`crate::term_map`].

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::session::{default_component_builder, ComponentBuilder, ComputeSession};
use crate::spec::{GridPoint, MasterSpec};
use crate::term_map::TermMaps;

/// Builds a session: `(id, spec, grid point)` (the pool's test seam).
pub type SessionBuilder =
    dyn Fn(usize, &MasterSpec, &GridPoint) -> crate::Result<ComputeSession> + Send + Sync;

#[derive(Default)]
struct PoolState {
    free: Vec<ComputeSession>,
    next_id: usize,
    unique: usize,
}

/// A thread-safe pool of compute sessions over one master spec and grid point.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::pool::ComputeSessionPool;
/// use kiln_dragnn::spec::{GridPoint, MasterSpec};
/// use kiln_dragnn::term_map::TermMaps;
///
/// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
/// let pool = ComputeSessionPool::new(spec, GridPoint::default(), Arc::new(TermMaps::default()));
/// let s = pool.get_session()?;
/// assert_eq!((s.id(), pool.num_outstanding_sessions()), (0, 1));
/// pool.return_session(s);
/// assert_eq!(pool.num_outstanding_sessions(), 0);
/// assert_eq!(pool.get_session()?.id(), 0); // reused
/// assert_eq!(pool.num_unique_sessions(), 1);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub struct ComputeSessionPool {
    spec: MasterSpec,
    grid_point: GridPoint,
    builder: Arc<SessionBuilder>,
    state: Mutex<PoolState>,
}

impl std::fmt::Debug for ComputeSessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeSessionPool")
            .field("unique", &self.num_unique_sessions())
            .field("outstanding", &self.num_outstanding_sessions())
            .finish()
    }
}

impl ComputeSessionPool {
    /// A pool whose sessions build their components with
    /// [`default_component_builder`]`(maps)`. The spec is not validated here: an ill-formed
    /// one fails in [`get_session`](Self::get_session).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// assert_eq!(pool.num_unique_sessions(), 0);
    /// ```
    pub fn new(spec: MasterSpec, grid_point: GridPoint, maps: Arc<TermMaps>) -> ComputeSessionPool {
        ComputeSessionPool::with_component_builder(
            spec,
            grid_point,
            default_component_builder(maps),
        )
    }

    /// A pool whose sessions build their components with `builder`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::component::{Component, StatelessComponent};
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}};
    /// let spec = MasterSpec::from_text("component { name: 'a' }")?;
    /// let pool = ComputeSessionPool::with_component_builder(spec, GridPoint::default(), Arc::new(|c: &_| {
    ///     Ok(Box::new(StatelessComponent::new(c)) as Box<dyn Component>)
    /// }));
    /// assert_eq!(pool.get_session()?.description("a")?, "a");
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn with_component_builder(
        spec: MasterSpec,
        grid_point: GridPoint,
        builder: Arc<ComponentBuilder>,
    ) -> ComputeSessionPool {
        ComputeSessionPool::with_session_builder(
            spec,
            grid_point,
            Arc::new(move |id, spec: &MasterSpec, grid: &GridPoint| {
                ComputeSession::with_builder(id, spec, grid, &*builder)
            }),
        )
    }

    /// A pool whose sessions `builder` builds from `(id, spec, grid point)`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::with_session_builder(MasterSpec::default(), GridPoint::default(),
    ///     Arc::new(|id, spec: &MasterSpec, grid: &GridPoint| {
    ///         ComputeSession::new(id + 100, spec, grid, Arc::new(TermMaps::default()))
    ///     }));
    /// assert_eq!(pool.get_session()?.id(), 100);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn with_session_builder(
        spec: MasterSpec,
        grid_point: GridPoint,
        builder: Arc<SessionBuilder>,
    ) -> ComputeSessionPool {
        ComputeSessionPool {
            spec,
            grid_point,
            builder,
            state: Mutex::new(PoolState::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A session: the last returned one, reset, or else a new one with id = the number of
    /// sessions created before it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// let (a, b) = (pool.get_session()?, pool.get_session()?);
    /// assert_eq!((a.id(), b.id()), (0, 1));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_session(&self) -> crate::Result<ComputeSession> {
        let id = {
            let mut state = self.lock();
            if let Some(mut session) = state.free.pop() {
                drop(state);
                session.reset_session();
                return Ok(session);
            }
            let id = state.next_id;
            state.next_id += 1;
            state.unique += 1;
            id
        };
        match (self.builder)(id, &self.spec, &self.grid_point) {
            Ok(session) => Ok(session),
            Err(e) => {
                self.lock().unique -= 1;
                Err(e)
            }
        }
    }

    /// [`get_session`](Self::get_session), wrapped in a guard that returns the session
    /// when dropped.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// {
    ///     let s = pool.session()?;
    ///     assert_eq!((s.id(), pool.num_outstanding_sessions()), (0, 1));
    /// }
    /// assert_eq!(pool.num_outstanding_sessions(), 0);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn session(&self) -> crate::Result<PooledSession<'_>> {
        Ok(PooledSession {
            pool: self,
            session: Some(self.get_session()?),
        })
    }

    /// Gives a session back for reuse.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// pool.return_session(pool.get_session()?);
    /// assert_eq!((pool.num_unique_sessions(), pool.num_outstanding_sessions()), (1, 0));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn return_session(&self, session: ComputeSession) {
        self.lock().free.push(session);
    }

    /// Sessions created and not returned.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// let _s = pool.get_session()?;
    /// assert_eq!(pool.num_outstanding_sessions(), 1);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn num_outstanding_sessions(&self) -> usize {
        let state = self.lock();
        state.unique - state.free.len()
    }

    /// Sessions created.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// assert_eq!(pool.num_unique_sessions(), 0);
    /// ```
    pub fn num_unique_sessions(&self) -> usize {
        self.lock().unique
    }

    /// The master spec.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
    /// assert_eq!(pool.spec(), &MasterSpec::default());
    /// ```
    pub fn spec(&self) -> &MasterSpec {
        &self.spec
    }
}

/// A session taken from a [`ComputeSessionPool`], returned to it on drop; it dereferences
/// to the [`ComputeSession`].
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{pool::ComputeSessionPool, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
/// let pool = ComputeSessionPool::new(MasterSpec::default(), GridPoint::default(), Arc::new(TermMaps::default()));
/// let mut s = pool.session()?;
/// s.set_tracing(true);
/// drop(s);
/// assert_eq!(pool.num_outstanding_sessions(), 0);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug)]
pub struct PooledSession<'a> {
    pool: &'a ComputeSessionPool,
    session: Option<ComputeSession>,
}

impl Deref for PooledSession<'_> {
    type Target = ComputeSession;
    fn deref(&self) -> &ComputeSession {
        self.session.as_ref().expect("held until drop")
    }
}

impl DerefMut for PooledSession<'_> {
    fn deref_mut(&mut self) -> &mut ComputeSession {
        self.session.as_mut().expect("held until drop")
    }
}

impl Drop for PooledSession<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            self.pool.return_session(s);
        }
    }
}

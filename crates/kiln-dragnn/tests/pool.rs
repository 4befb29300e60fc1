//! Contract checks of DRAGNN's `compute_session_pool_test` (reference section (f)) on
//! [`ComputeSessionPool`]: builder calls, init with the spec and grid point, LIFO reuse with
//! reset, outstanding and unique counts, and 100 threads taking sessions at once.
//!
//! Depends on kiln-dragnn's pool, session, component and spec modules.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kiln_dragnn::component::{Component, StatelessComponent};
use kiln_dragnn::pool::ComputeSessionPool;
use kiln_dragnn::session::ComputeSession;
use kiln_dragnn::spec::{ComponentSpec, GridPoint, MasterSpec};
use kiln_dragnn::term_map::TermMaps;
use kiln_dragnn::Result;

fn spec() -> MasterSpec {
    MasterSpec::from_text(
        r#"component { name: "A" transition_system { registered_name: "shift-only" }
                       backend { registered_name: "SyntaxNetComponent" } }
           component { name: "B" backend { registered_name: "StatelessComponent" } }"#,
    )
    .unwrap()
}

fn pool() -> ComputeSessionPool {
    ComputeSessionPool::new(spec(), GridPoint::default(), Arc::new(TermMaps::default()))
}

#[test]
fn a_default_spec_works() -> Result<()> {
    let pool = ComputeSessionPool::new(
        MasterSpec::default(),
        GridPoint::default(),
        Arc::new(TermMaps::default()),
    );
    let s = pool.get_session()?;
    assert_eq!(s.id(), 0);
    Ok(())
}

#[test]
fn the_builder_gets_component_and_backend_names() -> Result<()> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let pool = ComputeSessionPool::with_component_builder(
        spec(),
        GridPoint::default(),
        Arc::new(move |c: &ComponentSpec| {
            log.lock()
                .unwrap()
                .push((c.name().to_string(), c.backend_name().to_string()));
            Ok(Box::new(StatelessComponent::new(c)) as Box<dyn Component>)
        }),
    );
    pool.get_session()?;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("A".to_string(), "SyntaxNetComponent".to_string()),
            ("B".to_string(), "StatelessComponent".to_string())
        ]
    );
    Ok(())
}

#[test]
fn new_sessions_are_initialized_with_the_spec_and_grid_point() -> Result<()> {
    let grid = GridPoint::from_text("learning_rate: 0.5")?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let pool = ComputeSessionPool::with_session_builder(
        spec(),
        grid.clone(),
        Arc::new(move |id, spec: &MasterSpec, grid: &GridPoint| {
            log.lock().unwrap().push(id);
            ComputeSession::new(id, spec, grid, Arc::new(TermMaps::default()))
        }),
    );
    let s = pool.get_session()?;
    assert_eq!((s.master_spec(), s.grid_point()), (&spec(), &grid));
    assert_eq!(pool.spec(), &spec());
    assert_eq!(*seen.lock().unwrap(), [0]);
    Ok(())
}

#[test]
fn returned_sessions_are_reset_and_reused_last_in_first_out() -> Result<()> {
    let pool = pool();
    let mut s = pool.get_session()?;
    assert_eq!(pool.num_outstanding_sessions(), 1);
    s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    s.initialize_component_data("A", 1)?;
    assert_eq!(s.batch_size("A")?, 1);
    let id = s.id();
    pool.return_session(s);
    assert_eq!(pool.num_outstanding_sessions(), 0);
    let mut again = pool.get_session()?;
    assert_eq!(again.id(), id, "the same session is reused");
    assert!(again.batch_size("A").is_err(), "reset on reuse");
    assert!(again.input_batch_cache().is_none());
    assert_eq!(pool.num_outstanding_sessions(), 1);
    let other = pool.get_session()?;
    assert_eq!(pool.num_outstanding_sessions(), 2);
    assert_ne!(other.id(), again.id());
    // LIFO: the last returned comes back first.
    let (a_id, b_id) = (again.id(), other.id());
    pool.return_session(again);
    pool.return_session(other);
    assert_eq!(pool.get_session()?.id(), b_id);
    assert_eq!(pool.get_session()?.id(), a_id);
    assert_eq!(pool.num_unique_sessions(), 2);
    Ok(())
}

#[test]
fn ids_are_unique() -> Result<()> {
    let pool = pool();
    let ids: Vec<usize> = (0..5)
        .map(|_| pool.get_session().map(|s| s.id()))
        .collect::<Result<_>>()?;
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    Ok(())
}

#[test]
fn the_guard_returns_its_session() -> Result<()> {
    let pool = pool();
    {
        let g = pool.session()?;
        assert_eq!((g.id(), pool.num_outstanding_sessions()), (0, 1));
    }
    assert_eq!(pool.num_outstanding_sessions(), 0);
    assert_eq!(pool.session()?.id(), 0);
    Ok(())
}

#[test]
fn a_failing_build_is_not_counted() {
    let spec =
        MasterSpec::from_text(r#"component { name: "A" backend { registered_name: "Nope" } }"#)
            .unwrap();
    let pool = ComputeSessionPool::new(spec, GridPoint::default(), Arc::new(TermMaps::default()));
    assert!(pool.get_session().is_err());
    assert_eq!(
        (pool.num_unique_sessions(), pool.num_outstanding_sessions()),
        (0, 0)
    );
}

#[test]
fn a_hundred_threads_take_sessions_at_once() -> Result<()> {
    let pool = Arc::new(pool());
    let barrier = Arc::new(std::sync::Barrier::new(100));
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                pool.get_session()
            })
        })
        .collect();
    let sessions: Vec<ComputeSession> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect::<Result<_>>()?;
    assert_eq!(pool.num_outstanding_sessions(), 100);
    assert_eq!(pool.num_unique_sessions(), 100);
    let ids: HashSet<usize> = sessions.iter().map(ComputeSession::id).collect();
    assert_eq!(ids.len(), 100);
    assert_eq!(ids, (0..100).collect());
    for s in sessions {
        pool.return_session(s);
    }
    assert_eq!(pool.num_outstanding_sessions(), 0);
    Ok(())
}

#[test]
fn const_session_methods_run_from_several_threads() -> Result<()> {
    let pool = pool();
    let mut s = pool.get_session()?;
    s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into(); 4]);
    s.initialize_component_data("A", 2)?;
    let s = &s;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(move || {
                assert_eq!(s.emit_oracle_labels("A").unwrap(), vec![vec![0]; 4]);
                assert_eq!(s.batch_size("A").unwrap(), 4);
            });
        }
    });
    Ok(())
}

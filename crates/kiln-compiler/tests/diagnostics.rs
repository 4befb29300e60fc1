//! The graph cache's compile records are `tracing` events at target `kiln::compile`: DEBUG
//! normally, INFO with `KILN_LOG_COMPILES=1`, with the key, reason, time and kernel count.
//! (One test in this binary: it sets the environment variable.)

use kiln_compiler::{compile, GraphCache};
use kiln_ir::{build, trace, HostData, LazyExpr, Shape, UnaryOp};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One recorded event: target, level, and its fields as `name=value` (Debug) text.
type Seen = (String, Level, Vec<String>);

/// A subscriber that records every event at `max` or more severe.
struct Recorder {
    max: Level,
    seen: Arc<Mutex<Vec<Seen>>>,
}

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= self.max
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = Fields(Vec::new());
        e.record(&mut f);
        let m = e.metadata();
        self.seen
            .lock()
            .unwrap()
            .push((m.target().to_string(), *m.level(), f.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Compiles one fresh graph through a new cache under a recorder at `max`.
fn compile_once(max: Level) -> Vec<Seen> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        max,
        seen: seen.clone(),
    };
    tracing::subscriber::with_default(recorder, || {
        let x = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
        let y = build::unary(UnaryOp::Exp, &x).unwrap();
        let cache = GraphCache::new(4);
        let key = trace(&[&y], false).key;
        cache
            .get_or_compile(&key, || compile(&LazyExpr::from_roots(&[&y])))
            .unwrap();
        // a hit records nothing
        cache
            .get_or_compile(&key, || panic!("a hit compiles nothing"))
            .unwrap();
    });
    let v = seen.lock().unwrap().clone();
    v.into_iter()
        .filter(|(t, ..)| t == "kiln::compile")
        .collect()
}

#[test]
fn compiles_are_tracing_events_raised_by_kiln_log_compiles() {
    std::env::remove_var("KILN_LOG_COMPILES");
    let seen = compile_once(Level::TRACE);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (_, level, fields) = &seen[0];
    assert_eq!(*level, Level::DEBUG);
    for name in ["message", "key", "reason", "ms", "kernels"] {
        assert!(
            fields.iter().any(|f| f.starts_with(&format!("{name}="))),
            "{name} in {fields:?}"
        );
    }
    assert!(
        fields.contains(&"reason=NewStructure".to_string()),
        "{fields:?}"
    );
    // DEBUG is off under an INFO subscriber
    assert!(compile_once(Level::INFO).is_empty());

    std::env::set_var("KILN_LOG_COMPILES", "1");
    let seen = compile_once(Level::INFO);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1, Level::INFO);
    // a subscriber that filters it out gets nothing (the line goes to stderr instead)
    assert!(compile_once(Level::WARN).is_empty());
    std::env::remove_var("KILN_LOG_COMPILES");
}

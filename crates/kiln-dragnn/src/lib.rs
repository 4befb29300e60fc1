//! # kiln-dragnn
//!
//! DRAGNN — Dynamic Recurrent Acyclic Graphical Neural Networks, the framework behind
//! SyntaxNet — on kiln, written against kiln's public API as an outside user would.
//! A computation is a chain of *components*; each is a transition system over a batch of
//! *transition states* kept in [`beam::Beam`]s, and components read each other's
//! activations through *linked features* whose indices are translated from one component's
//! steps to another's.
//!
//! Modules, in the order a computation uses them:
//! - [`spec`]: `MasterSpec` and the other spec messages, from protobuf text format or JSON,
//!   validated with errors naming the component and field.
//! - [`document`]: CoNLL-U sentences, the serialized input of a batch (read and written
//!   byte for byte).
//! - [`input`]: the batch of serialized input items, converted once to sentences.
//! - [`term_map`]: word, tag, label and character vocabularies built from training data.
//! - [`transition`]: the parser state and the transition systems (shift-only, tagger,
//!   arc-standard, once).
//! - [`features`]: the feature language: fixed and linked feature channels.
//! - [`beam`]: the beam of transition states, with the reference's ordering, tie-breaking,
//!   history and gold tracking.
//! - [`translator`]: index translators, from a linked feature's value to a step and beam
//!   slot of the source component.
//! - [`component`]: components (a transition system over a batch of beams):
//!   `SyntaxNetComponent` and `StatelessComponent`.
//! - [`session`]: the compute session that drives a master spec's components.
//! - [`pool`]: a thread-safe pool of compute sessions.
//! - [`network`]: parameters, fixed and linked embeddings and the network units
//!   (feed-forward, LSTMs), as kiln graph builders.
//! - [`model`]: a master spec's model; training by oracle (one kiln evaluation per
//!   training step), training runs, inference, saving and loading.
//! - [`scorer`]: UPOS/XPOS/UAS/LAS against gold sentences.
//!
//! The binaries `kiln-dragnn-train` and `kiln-parse` train a model and parse with it;
//! `models/turkish` holds a trained Turkish tagger → parser.
//!
//! The behaviour follows the original C++ API as `../shared/dragnn-reference.md` describes
//! it, with `Result` errors where the original CHECK-failed.
//!
//! Depends on kiln's and kiln-optim's public APIs, `thiserror`, `serde`, `serde_json`,
//! `fastrand` (seeded shuffles), `clap` and `indicatif` (the binaries), and for specs `prost`,
//! `prost-reflect` and `miette` (the spec types are generated at build time by `prost-build`
//! from `proto/spec.proto`, compiled by `protox`: no `protoc` needed).

pub mod beam;
pub mod component;
pub mod document;
mod error;
pub mod features;
pub mod input;
pub mod model;
pub mod network;
pub mod pool;
pub mod scorer;
pub mod session;
pub mod spec;
pub mod term_map;
pub mod transition;
pub mod translator;

pub use error::{Error, Result};

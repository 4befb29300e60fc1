//! # kiln-train
//!
//! Estimator-style training on kiln, written against kiln's public API only: what
//! TensorFlow's `Estimator`, `MirroredStrategy`, `StagingArea` and `tf.data` give a TF user.
//!
//! - A [`Model`] is a model function: from a batch's features and labels, a [`Mode`] and
//!   a [`Context`] (variables by name, the global step, seeds) to a [`Spec`] (loss,
//!   predictions, metrics, the optimizer).
//! - An [`Estimator`] trains it ([`Until::Steps`] / [`Until::MaxSteps`], with [`Hook`]s),
//!   evaluates it and streams predictions; a [`RunConfig`] says where checkpoints go.
//! - Checkpoints (`ckpt-{step}.safetensors`) hold parameters, optimizer state, the global
//!   step, the seed and the input cursor, are written atomically, and resume exactly.
//! - A [`Dataset`] is an input pipeline whose iterators can be saved and resumed; a
//!   [`StagingArea`] overlaps input preparation with the compiled step.
//! - [`Strategy::Mirrored`] runs replicas on threads and gives the same bytes for any
//!   number of them.
//!
//! ```
//! use kiln_train::{Context, Dataset, Estimator, Init, Mode, Model, RunConfig, Spec, Until};
//! use kiln::{Array, DType};
//!
//! /// y = x·w + b, trained by least squares.
//! struct Linear;
//! impl Model for Linear {
//!     type Features = Array;
//!     type Labels = Array;
//!     fn model_fn(&self, x: &Array, y: Option<&Array>, mode: Mode, cx: &mut Context<'_>)
//!         -> kiln_train::Result<Spec> {
//!         let w = cx.variable("w", &[2, 1], DType::F32, Init::GlorotUniform)?;
//!         let b = cx.variable("b", &[1], DType::F32, Init::Zeros)?;
//!         let pred = x.try_matmul(&w)? + &b;
//!         let mut spec = Spec::new().prediction("y", &pred);
//!         if let Some(y) = y {
//!             spec = spec.loss(&(&pred - y).square().mean(None, false));
//!         }
//!         if mode == Mode::Train {
//!             spec = spec.optimizer(kiln_optim::Adam::new(0.05));
//!         }
//!         Ok(spec)
//!     }
//! }
//!
//! // y = 2·x0 − x1 + 0.5 on a grid of points, in batches of 8
//! let points: Vec<(f32, f32)> = (0..32).map(|i| ((i % 8) as f32 / 4.0, (i / 8) as f32 / 2.0)).collect();
//! let input = Dataset::from_slices(points)
//!     .shuffle(1)
//!     .batch(8)?
//!     .map(|b| {
//!         let x: Vec<f32> = b.iter().flat_map(|&(a, c)| [a, c]).collect();
//!         let y: Vec<f32> = b.iter().map(|&(a, c)| 2.0 * a - c + 0.5).collect();
//!         (Array::from_vec(x, &[b.len(), 2]).unwrap(), Array::from_vec(y, &[b.len(), 1]).unwrap())
//!     })
//!     .repeat(None);
//! let mut est = Estimator::new(Linear, RunConfig::new().seed(3).progress(false))?;
//! est.train(&input, Until::Steps(300), &mut [])?;
//! let metrics = est.evaluate(&input, Some(4), None)?;
//! assert!(metrics["loss"] < 1e-3, "{metrics:?}");
//! # Ok::<(), kiln_train::Error>(())
//! ```
//!
//! Depends on kiln, kiln-optim (parameters, optimizers, their state), kiln-io (safetensors
//! bytes), serde_json, indicatif and thiserror.
#![warn(missing_docs)]

mod batch;
mod checkpoint;
mod dataset;
pub mod demo;
mod error;
mod estimator;
mod hooks;
mod model;
#[cfg(feature = "mpi")]
pub mod multiprocess;
mod session;
mod spec;
mod staging;
mod strategy;

pub use batch::{micro_batch_lens, Batch};
pub use checkpoint::{
    checkpoint_path, latest_checkpoint, list_checkpoints, read_checkpoint, Checkpoint,
};
pub use dataset::{Cursor, Dataset, DatasetIter};
pub use error::{Error, Result};
pub use estimator::{
    Estimator, Metrics, Prediction, Predictions, RunConfig, Snapshot, TrainReport, Until, WarmStart,
};
pub use hooks::{
    CheckpointListener, CheckpointSaver, EarlyStopping, Goal, Hook, KeepBest, Monitor, NanGuard,
    ReduceLrOnPlateau, RunContext, StepInfo, StepLog, StopAtStep,
};
pub use model::{Context, Init, Model, Variables};
pub use spec::{Metric, Mode, Spec};
pub use staging::{Closed, Got, StagingArea, StagingStats};
pub use strategy::{tree_sum, tree_sum_slices, Mirrored, PerReplica, ReduceOp, Strategy};

//! A small, complete model and data set for examples, tests and benchmarks: [`Mlp`], a
//! multi-layer perceptron classifier (ReLU hidden layers, optional dropout, softmax
//! cross-entropy, Adam with an exponentially decaying learning rate), and
//! [`synthetic_classification`], a seeded data set of Gaussian clusters, with
//! [`training_input`] to batch it.
//!
//! Depends on kiln and kiln-optim's public APIs and the crate's `Model`, `Spec`, `Dataset`.

use crate::{Context, Dataset, Init, Metric, Mode, Model, Result, Spec};
use kiln::{Array, DType};

/// A multi-layer perceptron classifier: `sizes[0]` inputs, hidden ReLU layers, `sizes.last()`
/// classes. Features are `[batch, sizes[0]]` f32, labels `[batch]` i64.
///
/// ```
/// let mlp = kiln_train::demo::Mlp::new(&[4, 8, 3]);
/// assert_eq!(mlp.sizes, vec![4, 8, 3]);
/// ```
#[derive(Clone, Debug)]
pub struct Mlp {
    /// Layer widths, input first, classes last.
    pub sizes: Vec<usize>,
    /// The probability of dropping a hidden unit while training (0: no dropout).
    pub dropout: f64,
    /// Adam's initial learning rate.
    pub learning_rate: f64,
    /// The rate is multiplied by this every `decay_steps` steps.
    pub decay: f64,
    /// See `decay`.
    pub decay_steps: u64,
}

impl Mlp {
    /// Layers of these widths; Adam at 1e-3, no decay, no dropout.
    ///
    /// ```
    /// let mlp = kiln_train::demo::Mlp::new(&[4, 16, 3]);
    /// assert_eq!((mlp.learning_rate, mlp.dropout, mlp.decay), (1e-3, 0.0, 1.0));
    /// ```
    pub fn new(sizes: &[usize]) -> Mlp {
        Mlp {
            sizes: sizes.to_vec(),
            dropout: 0.0,
            learning_rate: 1e-3,
            decay: 1.0,
            decay_steps: 1,
        }
    }

    /// The logits of a batch.
    fn logits(&self, x: &Array, cx: &mut Context<'_>) -> Result<Array> {
        let mut h = x.clone();
        let layers = self.sizes.len().saturating_sub(1);
        for i in 0..layers {
            let w = cx.variable(
                &format!("dense_{i}/w"),
                &[self.sizes[i], self.sizes[i + 1]],
                DType::F32,
                Init::GlorotUniform,
            )?;
            let b = cx.variable(
                &format!("dense_{i}/b"),
                &[self.sizes[i + 1]],
                DType::F32,
                Init::Zeros,
            )?;
            h = h.try_matmul(&w)?.try_add(&b)?;
            if i + 1 < layers {
                h = h.try_relu()?;
                if self.dropout > 0.0 && cx.is_training() {
                    let keep = 1.0 - self.dropout;
                    let u = Array::uniform(
                        h.shape(),
                        0.0,
                        1.0,
                        cx.seed(&format!("dropout_{i}")),
                        DType::F32,
                    )?;
                    h = kiln::where_(&u.try_lt(keep)?, &h.try_div(keep)?, 0.0)?;
                }
            }
        }
        Ok(h)
    }
}

impl Model for Mlp {
    type Features = Array;
    type Labels = Array;

    fn model_fn(
        &self,
        x: &Array,
        labels: Option<&Array>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> Result<Spec> {
        let logits = self.logits(x, cx)?;
        let classes = *self.sizes.last().unwrap_or(&1);
        let predicted = logits.try_argmax(Some(-1), false)?;
        let mut spec = Spec::new()
            .prediction("logits", &logits)
            .prediction("class", &predicted);
        if let Some(y) = labels {
            let ids = Array::arange(0.0, classes as f64, 1.0, DType::I64)?;
            let onehot = y.try_expand_dims(-1)?.try_eq(&ids)?.cast(DType::F32);
            let nll = onehot
                .try_mul(&logits.try_log_softmax(-1)?)?
                .try_sum(Some(&[-1]), false)?
                .try_neg()?;
            spec = spec
                .loss(&nll.try_mean(None, false)?)
                .metric("accuracy", Metric::accuracy(y, &predicted)?);
        }
        if mode == Mode::Train {
            let decays = (cx.global_step() / self.decay_steps.max(1)) as f64;
            let lr = self.learning_rate * self.decay.powf(decays);
            spec = spec.optimizer(kiln_optim::Adam::new(lr));
        }
        Ok(spec)
    }
}

/// `n` examples of `dims` features in `classes` Gaussian clusters (centres drawn with
/// `seed`, spread `spread`), labelled by cluster, example `i` in cluster `i % classes`.
///
/// ```
/// let data = kiln_train::demo::synthetic_classification(10, 3, 2, 0.5, 1)?;
/// assert_eq!(data.len(), 10);
/// assert_eq!((data[3].0.len(), data[3].1), (3, 1));
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn synthetic_classification(
    n: usize,
    dims: usize,
    classes: usize,
    spread: f64,
    seed: u64,
) -> Result<Vec<(Vec<f32>, i64)>> {
    let classes = classes.max(1);
    let centres = Array::normal(&[classes, dims], 0.0, 1.0, seed, DType::F32)?.to_vec::<f32>()?;
    let noise = Array::normal(&[n, dims], 0.0, spread, seed.wrapping_add(1), DType::F32)?
        .to_vec::<f32>()?;
    Ok((0..n)
        .map(|i| {
            let c = i % classes;
            let x = (0..dims)
                .map(|d| centres[c * dims + d] + noise[i * dims + d])
                .collect();
            (x, c as i64)
        })
        .collect())
}

/// Batches of `batch` examples (`[batch, dims]` features, `[batch]` labels), shuffled with
/// `seed` every epoch, endlessly; a short last batch of an epoch is dropped.
///
/// ```
/// let data = kiln_train::demo::synthetic_classification(8, 2, 2, 0.1, 0)?;
/// let input = kiln_train::demo::training_input(data, 4, 9)?;
/// let (x, y) = input.iter().next().unwrap()?;
/// assert_eq!((x.shape(), y.shape()), (&[4, 2][..], &[4][..]));
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn training_input(
    examples: Vec<(Vec<f32>, i64)>,
    batch: usize,
    seed: u64,
) -> Result<Dataset<(Array, Array)>> {
    Ok(Dataset::from_slices(examples)
        .shuffle(seed)
        .batch_exact(batch)?
        .try_map(collate)
        .repeat(None))
}

/// One batch of examples as `[n, dims]` features and `[n]` labels; examples of different
/// lengths are an error.
///
/// ```
/// let (x, y) = kiln_train::demo::collate(vec![(vec![1.0, 2.0], 1)])?;
/// assert_eq!((x.shape(), y.to_vec::<i64>()?), (&[1, 2][..], vec![1]));
/// assert!(kiln_train::demo::collate(vec![(vec![1.0], 0), (vec![1.0, 2.0], 1)]).is_err());
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn collate(batch: Vec<(Vec<f32>, i64)>) -> Result<(Array, Array)> {
    let n = batch.len();
    let dims = batch.first().map_or(0, |e| e.0.len());
    let mut x = Vec::with_capacity(n * dims);
    let mut y = Vec::with_capacity(n);
    for (i, (f, l)) in batch.into_iter().enumerate() {
        if f.len() != dims {
            return Err(crate::Error::invalid(
                "demo::collate",
                format!(
                    "example {i} of the batch has {} features and example 0 has {dims}: \
                     every example needs the same number",
                    f.len()
                ),
            ));
        }
        x.extend(f);
        y.push(l);
    }
    Ok((Array::from_vec(x, &[n, dims])?, Array::from_vec(y, &[n])?))
}

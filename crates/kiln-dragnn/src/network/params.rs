//! [`ParamStore`]: a model's named parameters ([`kiln_optim::Parameter`]s), created on first
//! use with the reference's initialisers from one seed, saved and loaded as safetensors.
//!
//! Every parameter's initial value depends only on the store's seed and the parameter's
//! name (the name is hashed into the seed of kiln's counter-based generator), so a model
//! built twice with one seed starts from the same values whatever order it creates them in.
//!
//! Depends on kiln's and kiln-optim's public APIs and on [`super::NetworkError`].

use std::collections::BTreeMap;
use std::path::Path;

use kiln::{Array, DType};
use kiln_optim::Parameter;

use super::NetworkError;

/// How a parameter starts.
///
/// ```
/// use kiln_dragnn::network::Init;
/// assert_ne!(Init::Normal(1e-4), Init::Constant(0.2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
    /// Every element this value.
    Constant(f64),
}

/// One stored parameter.
#[derive(Debug)]
struct Entry {
    param: Parameter,
    /// Whether the L2 regulariser covers it.
    regularized: bool,
}

/// A model's parameters by name, in one float dtype.
///
/// ```
/// use kiln_dragnn::network::{Init, ParamStore};
/// let mut store = ParamStore::new(7, kiln::DType::F32);
/// let w = store.get_or_create("tagger/weights_0", &[3, 2], Init::Normal(1.0), true)?;
/// let again = store.get_or_create("tagger/weights_0", &[3, 2], Init::Normal(1.0), true)?;
/// assert_eq!(w.to_vec::<f32>()?, again.to_vec::<f32>()?);
/// // the same name and seed give the same values in another store
/// let mut other = ParamStore::new(7, kiln::DType::F32);
/// let w2 = other.get_or_create("tagger/weights_0", &[3, 2], Init::Normal(1.0), true)?;
/// assert_eq!(w.to_vec::<f32>()?, w2.to_vec::<f32>()?);
/// assert!(store.get_or_create("tagger/weights_0", &[2, 2], Init::Normal(1.0), true).is_err());
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug)]
pub struct ParamStore {
    seed: u64,
    dtype: DType,
    params: BTreeMap<String, Entry>,
    /// Leave new parameters' initial values lazy (they are about to be loaded).
    deferred: bool,
}

/// FNV-1a of `name`, mixed with `seed`: the seed of a parameter's initial values.
fn name_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl ParamStore {
    /// An empty store whose parameters will start from `seed`, of float `dtype`
    /// (`F32` for models, `F64` for gradient checks).
    ///
    /// ```
    /// let store = kiln_dragnn::network::ParamStore::new(0, kiln::DType::F64);
    /// assert!(store.is_empty() && store.dtype() == kiln::DType::F64);
    /// ```
    pub fn new(seed: u64, dtype: DType) -> ParamStore {
        ParamStore {
            seed,
            dtype,
            params: BTreeMap::new(),
            deferred: false,
        }
    }

    /// The parameters' dtype.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::ParamStore::new(0, kiln::DType::F32).dtype(), kiln::DType::F32);
    /// ```
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of parameters.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::ParamStore::new(0, kiln::DType::F32).len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether the store holds no parameter.
    ///
    /// ```
    /// assert!(kiln_dragnn::network::ParamStore::new(0, kiln::DType::F32).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The parameter `name`'s current value, creating it with `init` if the store does not
    /// hold it; an existing parameter of another shape is an error.
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// let b = store.get_or_create("b", &[2], Init::Constant(0.2), false)?;
    /// assert_eq!(b.to_vec::<f32>()?, vec![0.2, 0.2]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_or_create(
        &mut self,
        name: &str,
        shape: &[usize],
        init: Init,
        regularized: bool,
    ) -> Result<Array, NetworkError> {
        if let Some(e) = self.params.get(name) {
            if e.param.shape() != shape {
                return Err(NetworkError::ParameterShape {
                    name: name.to_string(),
                    expected: shape.to_vec(),
                    found: e.param.shape().to_vec(),
                });
            }
            return Ok(e.param.value());
        }
        let value = match init {
            Init::Normal(std) => {
                Array::normal(shape, 0.0, std, name_seed(self.seed, name), self.dtype)?
            }
            Init::Constant(c) => Array::try_full(shape, c, self.dtype)?,
        };
        // A store about to be loaded never needs the initial values: left lazy, they are
        // never computed (drawing them was an eighth of a parse run's start-up).
        if !self.deferred {
            value.eval()?;
        }
        let param = Parameter::new(name, value.clone());
        self.params
            .insert(name.to_string(), Entry { param, regularized });
        Ok(value)
    }

    /// The current value of parameter `name`.
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// store.get_or_create("b", &[1], Init::Constant(1.0), false)?;
    /// assert!(store.value("b").is_ok());
    /// assert!(store.value("c").unwrap_err().to_string().contains("no parameter"));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn value(&self, name: &str) -> Result<Array, NetworkError> {
        self.params
            .get(name)
            .map(|e| e.param.value())
            .ok_or_else(|| NetworkError::MissingParameter {
                name: name.to_string(),
                known: self.names_hint(),
            })
    }

    fn names_hint(&self) -> String {
        let names: Vec<&str> = self.params.keys().map(String::as_str).take(8).collect();
        if self.params.len() > 8 {
            format!("{}, ... ({} in all)", names.join(", "), self.params.len())
        } else {
            names.join(", ")
        }
    }

    /// Every parameter, by name.
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// store.get_or_create("b", &[1], Init::Constant(1.0), false)?;
    /// store.get_or_create("a", &[1], Init::Constant(1.0), true)?;
    /// let names: Vec<_> = store.parameters().map(|p| p.name().to_string()).collect();
    /// assert_eq!(names, ["a", "b"]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn parameters(&self) -> impl Iterator<Item = &Parameter> + '_ {
        self.params.values().map(|e| &e.param)
    }

    /// The parameter `name`, if the store holds it.
    ///
    /// ```
    /// let store = kiln_dragnn::network::ParamStore::new(0, kiln::DType::F32);
    /// assert!(store.parameter("w").is_none());
    /// ```
    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.params.get(name).map(|e| &e.param)
    }

    /// Whether the L2 regulariser covers parameter `name`.
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// store.get_or_create("w", &[1], Init::Normal(1.0), true)?;
    /// assert!(store.is_regularized("w") && !store.is_regularized("x"));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn is_regularized(&self, name: &str) -> bool {
        self.params.get(name).is_some_and(|e| e.regularized)
    }

    /// Saves every parameter to a safetensors file (written atomically).
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let path = std::env::temp_dir().join(format!("kiln-dragnn-params-{}.safetensors", std::process::id()));
    /// let mut store = ParamStore::new(3, kiln::DType::F32);
    /// let w = store.get_or_create("w", &[2], Init::Normal(1.0), true)?;
    /// store.save(&path)?;
    /// let mut fresh = ParamStore::new(4, kiln::DType::F32);
    /// fresh.get_or_create("w", &[2], Init::Normal(1.0), true)?;
    /// fresh.load(&path)?;
    /// assert_eq!(fresh.value("w")?.to_vec::<f32>()?, w.to_vec::<f32>()?);
    /// std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), NetworkError> {
        let params: Vec<&Parameter> = self.parameters().collect();
        kiln_optim::save_safetensors(path, &params)?;
        Ok(())
    }

    /// Leaves the initial values of parameters created from now on lazy: for a store whose
    /// values are about to be [`ParamStore::load`]ed.
    pub(crate) fn defer_initial_values(&mut self) {
        self.deferred = true;
    }

    /// Loads every parameter of the store from a safetensors file written by
    /// [`ParamStore::save`]: nothing is assigned unless all are found with their shapes.
    ///
    /// ```
    /// use kiln_dragnn::network::{Init, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// store.get_or_create("w", &[2], Init::Normal(1.0), true)?;
    /// assert!(store.load("/nonexistent/params.safetensors").is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<(), NetworkError> {
        let params: Vec<&Parameter> = self.parameters().collect();
        kiln_optim::load_safetensors(path, &params)?;
        Ok(())
    }
}

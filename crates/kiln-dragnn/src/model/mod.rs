//! Models: a master spec's components with their embeddings, network units and
//! parameters ([`MasterModel`], [`ComponentModel`]), trained by oracle ([`train`]; a whole
//! run with schedule, dev evaluation and best checkpoint in [`run`]) and run for inference
//! ([`infer`]), saved and loaded as a directory.
//!
//! A component's input is, as in DRAGNN's `get_input_tensor`, its fixed channels in spec
//! order (each `[rows, size * dim]`) then its linked channels in spec order, concatenated.
//! Fixed channel `i` embeds through `{component}/fixed_embedding_matrix_{i}`
//! (`[vocabulary + 1, dim]`), linked channel `i` projects through
//! `{component}/linked_embedding_matrix_{i}` (`[source_dim + 1, dim]`); both start normal
//! with std `1/sqrt(dim)`.
//!
//! A model directory holds `master_spec.textproto`, `grid_point.textproto`,
//! `params.safetensors`, the term maps (`word-map`, `tag-map`, `label-map`, `char-map`)
//! and `model.json` (the parameters' dtype and the tag column the maps were built from).
//!
//! Depends on [`crate::network`], [`crate::spec`], [`crate::term_map`],
//! [`crate::features`] and [`crate::transition`].

pub mod infer;
pub mod run;
pub mod train;

use std::path::Path;
use std::sync::Arc;

use kiln::{Array, DType};

use crate::features::{fixed_channel_with_actions, link_channel};
use crate::network::{
    embed_fixed, embed_links, DropoutSeeds, FixedBatch, Init, Layers, LstmState, NetworkError,
    NetworkUnit, ParamStore,
};
use crate::spec::{ComponentSpec, GridPoint, MasterSpec};
use crate::term_map::{TagColumn, TermMapOptions, TermMaps};
use crate::transition::create;

/// A fixed channel's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedInput {
    /// The channel's name.
    pub name: String,
    /// Slots per step.
    pub size: usize,
    /// The number of distinct ids.
    pub vocabulary: usize,
    /// The embedding width (`None`: ids pass through, `embedding_dim: -1`).
    pub dim: Option<usize>,
    /// Feature-id dropout in training (`dropout_id`, `dropout_keep_probability`), if on.
    pub dropout: Option<IdDropout>,
}

/// A fixed channel's feature-id dropout, as DRAGNN's `dropout_id` and
/// `dropout_keep_probability`: in training, each extracted id below `limit` is kept with
/// its keep probability and otherwise replaced by `id` (its weight unchanged).
/// Inference never drops.
///
/// A spec's `dropout_id: -2` ([`UNKNOWN_DROPOUT_ID`]) is kiln's name for the channel's
/// unknown term ([`crate::features::FixedFeatures::unknown_id`]; a hand-written spec cannot
/// know it, since the training data decides the vocabulary): dropped words then train the
/// embedding unseen words get at parse time, and the special values after the unknown
/// (`<OUTSIDE>`, `<ROOT>`) are never dropped.
/// Any other id drops every id of the channel, as in DRAGNN.
///
/// ```
/// let d = kiln_dragnn::model::IdDropout { id: 9, keep: vec![1.0, 0.5], limit: 9 };
/// assert_eq!((d.keep_of(0), d.keep_of(1), d.keep_of(7), d.keep_of(10)), (1.0, 0.5, 0.5, 1.0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct IdDropout {
    /// The id a dropped feature becomes.
    pub id: i64,
    /// Keep probabilities by feature id; the last one holds for every later id.
    pub keep: Vec<f32>,
    /// Ids at or above this are always kept.
    pub limit: i64,
}

impl IdDropout {
    /// Resolves a validated channel spec's fields against the channel built from it (`None`
    /// when dropout is off).
    fn from_spec(
        component: &str,
        spec: &crate::spec::FixedFeatureChannel,
        channel: &dyn crate::features::FixedFeatures,
    ) -> Result<Option<IdDropout>, NetworkError> {
        let bad = |message: String| NetworkError::BadUnit {
            component: component.to_string(),
            unit: format!("fixed feature '{}'", spec.name()),
            message,
        };
        let vocabulary = channel.vocabulary_size() as i64;
        let (id, limit) = match spec.dropout_id() {
            -1 => return Ok(None),
            UNKNOWN_DROPOUT_ID => {
                let unknown = channel.unknown_id().ok_or_else(|| {
                    bad(format!(
                        "dropout_id -2 names the unknown term, but the templates of {:?} \
                         have no unknown term in common (shapes, actions and mixed value \
                         types have none); give an id below {vocabulary}, or split the channel",
                        spec.fml()
                    ))
                })? as i64;
                (unknown, unknown)
            }
            id => (id, vocabulary),
        };
        if !(0..vocabulary).contains(&id) {
            return Err(bad(format!(
                "dropout_id {id} lies outside the channel's {vocabulary} ids; use an id \
                 below {vocabulary}, or -2 for the unknown term"
            )));
        }
        // An empty or out-of-range keep list never gets here: the spec's validation, which
        // every model build runs first, refuses it.
        Ok(Some(IdDropout {
            id,
            keep: spec.dropout_keep_probability.clone(),
            limit,
        }))
    }

    /// The keep probability of feature `id`.
    pub fn keep_of(&self, id: i64) -> f32 {
        if id >= self.limit {
            return 1.0;
        }
        let last = self.keep.len().saturating_sub(1);
        let i = usize::try_from(id).map_or(0, |i| i.min(last));
        self.keep.get(i).copied().unwrap_or(1.0)
    }
}

/// The `dropout_id` that names a channel's unknown term ([`IdDropout`]).
pub const UNKNOWN_DROPOUT_ID: i64 = -2;

/// A linked channel's shape and source.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkedInput {
    /// The channel's name.
    pub name: String,
    /// Slots per step.
    pub size: usize,
    /// The source component's index.
    pub source: usize,
    /// The source layer.
    pub layer: String,
    /// The source layer's width.
    pub source_dim: usize,
    /// The projection width (`None`: the raw activations, `embedding_dim: -1`).
    pub dim: Option<usize>,
    /// Whether the channel reads its own component.
    pub recurrent: bool,
}

/// One component of a [`MasterModel`]: its inputs, network unit and number of actions.
#[derive(Debug, Clone)]
pub struct ComponentModel {
    /// The component's name (the parameters' prefix).
    pub name: String,
    /// Its index in the master spec.
    pub index: usize,
    /// The fixed channels.
    pub fixed: Vec<FixedInput>,
    /// The linked channels.
    pub linked: Vec<LinkedInput>,
    /// The network unit.
    pub unit: NetworkUnit,
    /// The transition system's number of actions.
    pub num_actions: usize,
    /// The input width.
    pub input_dim: usize,
}

impl ComponentModel {
    /// Builds a component's model from its spec; `previous` are the components before it
    /// (linked features may read them, or this component itself).
    fn new(
        spec: &ComponentSpec,
        index: usize,
        previous: &[ComponentModel],
        all: &MasterSpec,
        grid: &GridPoint,
        maps: &TermMaps,
    ) -> crate::Result<ComponentModel> {
        let name = spec.name().to_string();
        let system = spec
            .transition_system
            .as_ref()
            .map(|s| create(s.registered_name(), s.parameters.iter()))
            .transpose()?;
        let num_actions = system.as_ref().map_or(1, |s| s.num_actions(maps));
        let mut fixed = Vec::new();
        let mut input_dim = 0;
        for c in &spec.fixed_feature {
            let channel = fixed_channel_with_actions(c, maps, num_actions)?;
            let dim = usize::try_from(c.embedding_dim()).ok().filter(|&d| d > 0);
            let size = channel.size();
            input_dim += size * dim.unwrap_or(1);
            let vocabulary = channel.vocabulary_size();
            fixed.push(FixedInput {
                name: c.name().to_string(),
                size,
                vocabulary,
                dim,
                dropout: IdDropout::from_spec(&name, c, channel.as_ref())?,
            });
        }
        let mut pending = Vec::new();
        for c in &spec.linked_feature {
            let source =
                all.component_index(c.source_component())
                    .ok_or_else(|| NetworkError::BadUnit {
                        component: name.clone(),
                        unit: "linked feature".into(),
                        message: format!(
                        "channel '{}' reads component '{}', which the master spec does not have",
                        c.name(),
                        c.source_component()
                    ),
                    })?;
            let size = link_channel(c)?.size();
            let dim = usize::try_from(c.embedding_dim()).ok().filter(|&d| d > 0);
            pending.push((c, source, size, dim));
        }
        // Source widths: earlier components are built; a recurrent channel reads this
        // component's own unit, whose layer widths do not depend on its input width
        // (IdentityNetwork, whose only layer is its input, cannot be recurrent).
        let unit_probe = NetworkUnit::from_spec(spec, 0, num_actions, grid)?;
        let mut linked = Vec::new();
        for (c, source, size, dim) in pending {
            let recurrent = source == index;
            let source_unit = if recurrent {
                if matches!(unit_probe, NetworkUnit::Identity { .. }) {
                    return Err(NetworkError::BadUnit {
                        component: name.clone(),
                        unit: "IdentityNetwork".into(),
                        message: format!(
                            "linked channel '{}' reads the component itself, which an \
                             IdentityNetwork cannot do (its only layer is its input)",
                            c.name()
                        ),
                    }
                    .into());
                }
                &unit_probe
            } else if source < index {
                &previous[source].unit
            } else {
                return Err(NetworkError::BadUnit {
                    component: name.clone(),
                    unit: "linked feature".into(),
                    message: format!(
                        "channel '{}' reads '{}', which comes after it in the master spec",
                        c.name(),
                        c.source_component()
                    ),
                }
                .into());
            };
            let layer = c.source_layer().to_string();
            let source_dim = source_unit.layer_dim(&layer).ok_or_else(|| {
                let known: Vec<String> = source_unit.layers().into_iter().map(|(n, _)| n).collect();
                NetworkError::BadUnit {
                    component: name.clone(),
                    unit: "linked feature".into(),
                    message: format!(
                        "channel '{}' reads layer '{layer}' of '{}', which has no such layer \
                         (its layers: {})",
                        c.name(),
                        c.source_component(),
                        known.join(", ")
                    ),
                }
            })?;
            input_dim += size * dim.unwrap_or(source_dim);
            linked.push(LinkedInput {
                name: c.name().to_string(),
                size,
                source,
                layer,
                source_dim,
                dim,
                recurrent,
            });
        }
        let unit = NetworkUnit::from_spec(spec, input_dim, num_actions, grid)?;
        Ok(ComponentModel {
            name,
            index,
            fixed,
            linked,
            unit,
            num_actions,
            input_dim,
        })
    }

    fn create_params(&self, store: &mut ParamStore) -> Result<(), NetworkError> {
        for (i, f) in self.fixed.iter().enumerate() {
            if let Some(d) = f.dim {
                store.get_or_create(
                    &format!("{}/fixed_embedding_matrix_{i}", self.name),
                    &[f.vocabulary + 1, d],
                    Init::Normal(1.0 / (d as f64).sqrt()),
                    false,
                )?;
            }
        }
        for (i, l) in self.linked.iter().enumerate() {
            if let Some(d) = l.dim {
                store.get_or_create(
                    &format!("{}/linked_embedding_matrix_{i}", self.name),
                    &[l.source_dim + 1, d],
                    Init::Normal(1.0 / (d as f64).sqrt()),
                    false,
                )?;
            }
        }
        self.unit.create_params(store, &self.name)
    }

    /// The widths of the input's parts (fixed channels then linked channels, in spec
    /// order), which sum to the input width.
    pub fn part_widths(&self) -> Vec<usize> {
        let fixed = self.fixed.iter().map(|f| f.size * f.dim.unwrap_or(1));
        let linked = self
            .linked
            .iter()
            .map(|l| l.size * l.dim.unwrap_or(l.source_dim));
        fixed.chain(linked).collect()
    }

    /// Whether any linked channel reads this component itself.
    pub fn has_recurrent_links(&self) -> bool {
        self.linked.iter().any(|l| l.recurrent)
    }

    /// The embedded fixed channel `i` of `batch`.
    pub fn embed_fixed(
        &self,
        store: &ParamStore,
        i: usize,
        batch: &FixedBatch,
    ) -> Result<Array, NetworkError> {
        let m = match self.fixed[i].dim {
            Some(_) => Some(store.value(&format!("{}/fixed_embedding_matrix_{i}", self.name))?),
            None => None,
        };
        embed_fixed(m.as_ref(), batch, store.dtype())
    }

    /// The embedded linked channel `i` from gathered rows and their out-of-range
    /// indicator (see [`crate::network::gather_links`]), for `rows` output rows.
    pub fn embed_linked(
        &self,
        store: &ParamStore,
        i: usize,
        gathered: &Array,
        oob: &Array,
        rows: usize,
    ) -> Result<Array, NetworkError> {
        let p = match self.linked[i].dim {
            Some(_) => Some(store.value(&format!("{}/linked_embedding_matrix_{i}", self.name))?),
            None => None,
        };
        embed_links(gathered, oob, p.as_ref(), rows, self.linked[i].size)
    }

    /// One step (or all steps at once, for a unit without state) of the unit on the
    /// embedded channels `parts` (fixed then linked, in spec order).
    pub fn run(
        &self,
        store: &ParamStore,
        parts: &[Array],
        state: Option<&LstmState>,
        mut dropout: Option<&mut DropoutSeeds>,
    ) -> Result<(Layers, Option<LstmState>), NetworkError> {
        let x = match parts {
            [one] => one.clone(),
            _ => Array::try_concat(&parts.iter().collect::<Vec<_>>(), 1)?,
        };
        let z = self
            .unit
            .project_input(store, &self.name, &x, dropout.as_deref_mut())?;
        self.unit.forward(store, &self.name, &z, state, dropout)
    }
}

/// A master spec's model: the components' models and every parameter.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{model::MasterModel, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
/// let spec = MasterSpec::from_text(r#"
///   component { name: "tagger" transition_system { registered_name: "tagger" }
///     fixed_feature { name: "words" fml: "input.word input(1).word" embedding_dim: 8 }
///     network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "16" } }
///     backend { registered_name: "SyntaxNetComponent" } }"#)?;
/// let model = MasterModel::new(spec, GridPoint::default(), Arc::new(TermMaps::default()), kiln::DType::F32)?;
/// assert_eq!(model.components()[0].input_dim, 16);
/// assert!(model.params().parameter("tagger/fixed_embedding_matrix_0").is_some());
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug)]
pub struct MasterModel {
    spec: MasterSpec,
    grid: GridPoint,
    maps: Arc<TermMaps>,
    components: Vec<ComponentModel>,
    params: ParamStore,
}

impl MasterModel {
    /// Builds the model of `spec` with fresh parameters (seeded by `grid.seed`) of float
    /// `dtype`. The spec is validated first.
    pub fn new(
        spec: MasterSpec,
        grid: GridPoint,
        maps: Arc<TermMaps>,
        dtype: DType,
    ) -> crate::Result<MasterModel> {
        MasterModel::build(spec, grid, maps, dtype, false)
    }

    /// [`MasterModel::new`], with the parameters' initial values left lazy when `loading`.
    fn build(
        spec: MasterSpec,
        grid: GridPoint,
        maps: Arc<TermMaps>,
        dtype: DType,
        loading: bool,
    ) -> crate::Result<MasterModel> {
        spec.validate()?;
        let mut components: Vec<ComponentModel> = Vec::new();
        for (i, c) in spec.component.iter().enumerate() {
            let m = ComponentModel::new(c, i, &components, &spec, &grid, &maps)?;
            components.push(m);
        }
        let mut params = ParamStore::new(grid.seed() as u64, dtype);
        if loading {
            params.defer_initial_values();
        }
        for c in &components {
            c.create_params(&mut params)?;
        }
        Ok(MasterModel {
            spec,
            grid,
            maps,
            components,
            params,
        })
    }

    /// The master spec.
    pub fn spec(&self) -> &MasterSpec {
        &self.spec
    }

    /// The grid point (hyperparameters).
    pub fn grid(&self) -> &GridPoint {
        &self.grid
    }

    /// The term maps.
    pub fn maps(&self) -> &Arc<TermMaps> {
        &self.maps
    }

    /// The components' models, in spec order.
    pub fn components(&self) -> &[ComponentModel] {
        &self.components
    }

    /// The parameters.
    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    /// The parameters, for loading.
    pub fn params_mut(&mut self) -> &mut ParamStore {
        &mut self.params
    }

    /// Saves the model to directory `dir` (created if needed): spec, grid point, term maps
    /// and parameters.
    pub fn save(&self, dir: impl AsRef<Path>) -> crate::Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        write(&dir.join("master_spec.textproto"), &self.spec.to_text())?;
        write(&dir.join("grid_point.textproto"), &self.grid.to_text()?)?;
        self.maps
            .save(dir)
            .map_err(crate::transition::TransitionError::from)?;
        self.params.save(dir.join("params.safetensors"))?;
        let manifest = Manifest {
            dtype: dtype_name(self.params.dtype()).to_string(),
            tag_column: match self.maps.tag_column {
                TagColumn::Upos => "upos".into(),
                TagColumn::Xpos => "xpos".into(),
            },
        };
        let json = serde_json::to_string_pretty(&manifest).unwrap_or_default();
        write(&dir.join("model.json"), &format!("{json}\n"))?;
        Ok(())
    }

    /// Loads a model saved by [`MasterModel::save`].
    pub fn load(dir: impl AsRef<Path>) -> crate::Result<MasterModel> {
        let dir = dir.as_ref();
        let spec = MasterSpec::from_file(dir.join("master_spec.textproto"))?;
        let grid_text = std::fs::read_to_string(dir.join("grid_point.textproto"))
            .map_err(|e| io_error(&dir.join("grid_point.textproto"), e))?;
        let grid = GridPoint::from_text(&grid_text)?;
        let manifest_path = dir.join("model.json");
        let manifest: Manifest = match std::fs::read_to_string(&manifest_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                crate::Error::from(NetworkError::Io {
                    path: manifest_path.display().to_string(),
                    message: e.to_string(),
                })
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
            Err(e) => return Err(io_error(&manifest_path, e)),
        };
        let bad = |what: &str, value: &str| {
            crate::Error::from(NetworkError::Io {
                path: manifest_path.display().to_string(),
                message: format!("{what} {value:?} is not one of the known values"),
            })
        };
        let dtype = match manifest.dtype.as_str() {
            "f32" => DType::F32,
            "f64" => DType::F64,
            other => return Err(bad("dtype", other)),
        };
        let tag_column = match manifest.tag_column.as_str() {
            "upos" => TagColumn::Upos,
            "xpos" => TagColumn::Xpos,
            other => return Err(bad("tag_column", other)),
        };
        let options = TermMapOptions {
            tag_column,
            ..TermMapOptions::default()
        };
        let maps =
            TermMaps::load(dir, &options).map_err(crate::transition::TransitionError::from)?;
        let mut model = MasterModel::build(spec, grid, Arc::new(maps), dtype, true)?;
        model.params.load(dir.join("params.safetensors"))?;
        Ok(model)
    }
}

/// `model.json`: what the other files of a model directory do not say.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Manifest {
    /// `f32` or `f64`.
    dtype: String,
    /// `upos` or `xpos`.
    tag_column: String,
}

impl Default for Manifest {
    fn default() -> Manifest {
        Manifest {
            dtype: "f32".into(),
            tag_column: "upos".into(),
        }
    }
}

fn dtype_name(d: DType) -> &'static str {
    if d == DType::F64 {
        "f64"
    } else {
        "f32"
    }
}

fn io_error(path: &Path, e: std::io::Error) -> crate::Error {
    crate::Error::from(NetworkError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

fn write(path: &Path, text: &str) -> crate::Result<()> {
    std::fs::write(path, text).map_err(|e| io_error(path, e))
}

//! An attention encoder-decoder in the dl4mt/Nematus style, trained with kiln's autodiff:
//! a bidirectional GRU encoder, a conditional GRU decoder (GRU over the previous word,
//! additive attention over the source annotations, GRU over the context) and a deep output
//! layer. [`AttentionModel`] holds the parameters (as `kiln_optim::Parameter`s, saved and loaded
//! as safetensors) and builds the training loss; [`AttentionScorer`] decodes with it and reports
//! the attention of every step, so the beam search can print alignments.
//!
//! The same functions build the training graph and the decoding step, so what is trained is
//! what is decoded. Depends on kiln's public API, kiln-optim, and the crate's [`Scorer`].

use crate::g2p::{rows_of_sentences, Gru};
use crate::scorer::{Scorer, Step};
use crate::{Error, Result};
use kiln::{Array, DType};
use kiln_optim::Parameter;

/// The sizes of an [`AttentionModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionConfig {
    /// Source vocabulary size (id 0 is padding).
    pub src_vocab: usize,
    /// Target vocabulary size.
    pub tgt_vocab: usize,
    /// Embedding size (source and target).
    pub emb: usize,
    /// Encoder GRU size per direction (annotations are twice this).
    pub enc_hidden: usize,
    /// Decoder GRU size.
    pub dec_hidden: usize,
    /// Attention MLP size.
    pub att_hidden: usize,
    /// Deep-output layer size.
    pub out_hidden: usize,
}

impl AttentionConfig {
    /// Every parameter's name and shape, in the model's order.
    ///
    /// ```
    /// let c = kiln_beam::AttentionConfig { src_vocab: 5, tgt_vocab: 6, emb: 4, enc_hidden: 3,
    ///     dec_hidden: 2, att_hidden: 2, out_hidden: 2 };
    /// let spec = c.spec();
    /// assert_eq!(spec[0], ("src_emb".to_string(), vec![5, 4]));
    /// ```
    pub fn spec(&self) -> Vec<(String, Vec<usize>)> {
        let (e, h, d, a, o) = (
            self.emb,
            self.enc_hidden,
            self.dec_hidden,
            self.att_hidden,
            self.out_hidden,
        );
        let c = 2 * h;
        let mut v: Vec<(String, Vec<usize>)> = vec![
            ("src_emb".into(), vec![self.src_vocab, e]),
            ("tgt_emb".into(), vec![self.tgt_vocab, e]),
        ];
        let mut gru = |p: &str, input: usize, hidden: usize| {
            v.push((format!("{p}.w_ih"), vec![input, 3 * hidden]));
            v.push((format!("{p}.w_hh"), vec![hidden, 3 * hidden]));
            v.push((format!("{p}.b_ih"), vec![3 * hidden]));
            v.push((format!("{p}.b_hh"), vec![3 * hidden]));
        };
        gru("enc_fwd", e, h);
        gru("enc_bwd", e, h);
        gru("dec1", e, d);
        gru("dec2", c, d);
        v.extend([
            ("init.w".into(), vec![c, d]),
            ("init.b".into(), vec![d]),
            ("att.w_c".into(), vec![c, a]),
            ("att.w_s".into(), vec![d, a]),
            ("att.b".into(), vec![a]),
            ("att.v".into(), vec![a, 1]),
            ("out.w_s".into(), vec![d, o]),
            ("out.w_y".into(), vec![e, o]),
            ("out.w_c".into(), vec![c, o]),
            ("out.b".into(), vec![o]),
            ("out.w".into(), vec![o, self.tgt_vocab]),
            ("out.b_o".into(), vec![self.tgt_vocab]),
        ]);
        v
    }
}

/// The weights as arrays, taken from the parameters once per graph.
struct Weights {
    src_emb: Array,
    tgt_emb: Array,
    enc_fwd: Gru,
    enc_bwd: Gru,
    dec1: Gru,
    dec2: Gru,
    init_w: Array,
    init_b: Array,
    att_w_c: Array,
    att_w_s: Array,
    att_b: Array,
    att_v: Array,
    out_w_s: Array,
    out_w_y: Array,
    out_w_c: Array,
    out_b: Array,
    out_w: Array,
    out_b_o: Array,
}

/// The encoded source of a batch: annotations `[n, T, 2H]`, their attention projection
/// `[n, T, A]`, a mask bias `[n, T]` (0 on tokens, −10⁴ on padding) and the decoder's
/// initial state `[n, D]`.
#[derive(Clone)]
struct Encoded {
    ctx: Array,
    ctx_proj: Array,
    mask_bias: Array,
    init: Array,
}

/// What one decoder step produces.
struct DecOut {
    state: Array,
    hidden: Array,
    attention: Array,
}

/// The dl4mt/Nematus-style attention encoder-decoder: parameters and the graphs built from
/// them.
///
/// ```
/// use kiln_beam::{AttentionConfig, AttentionModel};
/// let cfg = AttentionConfig { src_vocab: 6, tgt_vocab: 5, emb: 4, enc_hidden: 3,
///     dec_hidden: 4, att_hidden: 3, out_hidden: 3 };
/// let m = AttentionModel::init(cfg, 7, kiln::DType::F64)?;
/// let loss = m.loss(&[vec![3, 4, 2]], &[vec![4, 3]], 2)?;
/// assert!(loss.item::<f64>()? > 0.0);
/// # Ok::<(), kiln_beam::Error>(())
/// ```
pub struct AttentionModel {
    config: AttentionConfig,
    params: Vec<Parameter>,
}

impl AttentionModel {
    /// A model with fresh weights: uniform in `±1/√fan_in` (biases 0), from `seed`.
    pub fn init(config: AttentionConfig, seed: u64, dtype: DType) -> Result<AttentionModel> {
        let params = config
            .spec()
            .into_iter()
            .enumerate()
            .map(|(i, (name, shape))| {
                let v = if shape.len() == 1 {
                    Array::zeros(&shape, dtype)
                } else {
                    let bound = 1.0 / (shape[0] as f64).sqrt();
                    Array::uniform(&shape, -bound, bound, seed.wrapping_add(i as u64), dtype)?
                };
                v.eval()?;
                Ok(Parameter::new(name, v))
            })
            .collect::<Result<_>>()?;
        Ok(AttentionModel { config, params })
    }

    /// Loads a model saved with [`AttentionModel::save`]; the sizes come from the tensors'
    /// shapes. A missing tensor or one of the wrong shape is an error naming it, the expected
    /// and the found shape.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<AttentionModel> {
        let shown = path.as_ref().display().to_string();
        let tensors = kiln_optim::read_safetensors(path.as_ref())?;
        let find = |name: &str| -> Result<&Array> {
            tensors
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, a)| a)
                .ok_or_else(|| Error::Invalid {
                    op: "AttentionModel::load",
                    message: format!("{shown}: no tensor named {name}"),
                })
        };
        let dim = |name: &str, axis: usize| -> Result<usize> {
            find(name)?
                .shape()
                .get(axis)
                .copied()
                .ok_or_else(|| Error::Invalid {
                    op: "AttentionModel::load",
                    message: format!(
                        "{shown}: tensor {name} should have at least {} axes but is {:?}",
                        axis + 1,
                        find(name).map(|a| a.shape().to_vec()).unwrap_or_default()
                    ),
                })
        };
        let config = AttentionConfig {
            src_vocab: dim("src_emb", 0)?,
            tgt_vocab: dim("tgt_emb", 0)?,
            emb: dim("src_emb", 1)?,
            enc_hidden: dim("enc_fwd.w_hh", 0)?,
            dec_hidden: dim("dec1.w_hh", 0)?,
            att_hidden: dim("att.w_c", 1)?,
            out_hidden: dim("out.w", 0)?,
        };
        let dtype = find("src_emb")?.dtype();
        let mut params = Vec::new();
        for (name, shape) in config.spec() {
            let a = find(&name)?;
            if a.shape() != shape.as_slice() || a.dtype() != dtype {
                return Err(Error::Invalid {
                    op: "AttentionModel::load",
                    message: format!(
                        "{shown}: tensor {name} should be {dtype} {shape:?} but is {} {:?}",
                        a.dtype(),
                        a.shape()
                    ),
                });
            }
            params.push(Parameter::new(name, a.clone()));
        }
        Ok(AttentionModel { config, params })
    }

    /// Saves the parameters as safetensors (tensor names from [`AttentionConfig::spec`]);
    /// [`AttentionModel::load`] reads them back, sizes included.
    ///
    /// ```
    /// use kiln_beam::{AttentionConfig, AttentionModel};
    /// let cfg = AttentionConfig { src_vocab: 6, tgt_vocab: 5, emb: 4, enc_hidden: 3,
    ///     dec_hidden: 4, att_hidden: 3, out_hidden: 3 };
    /// let m = AttentionModel::init(cfg, 1, kiln::DType::F32)?;
    /// let path = std::env::temp_dir().join(format!("kiln-att-doc-{}.safetensors", std::process::id()));
    /// m.save(&path)?;
    /// let back = AttentionModel::load(&path)?;
    /// assert_eq!(back.config(), cfg);
    /// assert_eq!(back.dtype(), kiln::DType::F32);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let refs: Vec<&Parameter> = self.params.iter().collect();
        Ok(kiln_optim::save_safetensors(path, &refs)?)
    }

    /// The sizes.
    pub fn config(&self) -> AttentionConfig {
        self.config
    }

    /// The parameters, in [`AttentionConfig::spec`] order (for an optimizer). One training
    /// step:
    ///
    /// ```
    /// use kiln_beam::{AttentionConfig, AttentionModel};
    /// use kiln_optim::{Adam, Optimizer, Parameter};
    /// let cfg = AttentionConfig { src_vocab: 6, tgt_vocab: 5, emb: 4, enc_hidden: 3,
    ///     dec_hidden: 4, att_hidden: 3, out_hidden: 3 };
    /// let m = AttentionModel::init(cfg, 1, kiln::DType::F32)?;
    /// let params: Vec<&Parameter> = m.parameters().iter().collect();
    /// let loss = m.loss(&[vec![3, 4, 2]], &[vec![4, 3]], 2)?;
    /// let values: Vec<kiln::Array> = params.iter().map(|p| p.value()).collect();
    /// let grads = kiln::grad(&loss, &values.iter().collect::<Vec<_>>())?;
    /// Adam::new(1e-3).step(&params, &grads, &[&loss])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parameters(&self) -> &[Parameter] {
        &self.params
    }

    /// The parameters' dtype.
    pub fn dtype(&self) -> DType {
        self.params[0].dtype()
    }

    fn weights(&self) -> Weights {
        let mut it = self.params.iter().map(Parameter::value);
        let mut next = || it.next().expect("spec order");
        let (src_emb, tgt_emb) = (next(), next());
        let mut gru = |hidden: usize| Gru {
            w_ih_t: next(),
            w_hh_t: next(),
            b_ih: next(),
            b_hh: next(),
            hidden,
        };
        let (h, d) = (self.config.enc_hidden, self.config.dec_hidden);
        let (enc_fwd, enc_bwd, dec1, dec2) = (gru(h), gru(h), gru(d), gru(d));
        Weights {
            src_emb,
            tgt_emb,
            enc_fwd,
            enc_bwd,
            dec1,
            dec2,
            init_w: next(),
            init_b: next(),
            att_w_c: next(),
            att_w_s: next(),
            att_b: next(),
            att_v: next(),
            out_w_s: next(),
            out_w_y: next(),
            out_w_c: next(),
            out_b: next(),
            out_w: next(),
            out_b_o: next(),
        }
    }
}

fn check_ids(op: &'static str, seqs: &[Vec<usize>], vocab: usize) -> Result<()> {
    for (i, s) in seqs.iter().enumerate() {
        if let Some(&bad) = s.iter().find(|&&t| t >= vocab) {
            return Err(Error::Invalid {
                op,
                message: format!("sequence {i} holds id {bad}, outside the vocabulary of {vocab}"),
            });
        }
    }
    Ok(())
}

/// Encodes a padded batch (time-major gathers; each direction masks the padding so a
/// sentence's annotations do not depend on the batch it is in).
fn encode(w: &Weights, dtype: DType, src: &[Vec<usize>]) -> Result<Encoded> {
    let n = src.len();
    let t_max = src.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let h = w.enc_fwd.hidden;
    // One small id and mask array per position: each step gathers its own rows of the gate
    // tables (whose gradient is a scatter-add into the small table) instead of slicing a
    // [T, n, …] tensor, whose gradient would be a full-size tensor per step.
    let mut ids = Vec::with_capacity(t_max);
    let mut masks = Vec::with_capacity(t_max);
    for t in 0..t_max {
        let id: Vec<i64> = src
            .iter()
            .map(|s| s.get(t).copied().unwrap_or(0) as i64)
            .collect();
        let m: Vec<f32> = src
            .iter()
            .map(|s| if t < s.len() { 1.0 } else { 0.0 })
            .collect();
        ids.push(Array::from_vec(id, &[n])?);
        masks.push(Array::from_vec(m, &[n, 1])?.cast(dtype));
    }
    let mask_nt: Vec<f32> = src
        .iter()
        .flat_map(|s| (0..t_max).map(move |t| if t < s.len() { 1.0 } else { 0.0 }))
        .collect();
    let mask_nt = Array::from_vec(mask_nt, &[n, t_max])?.cast(dtype);
    let (table_f, table_b) = (
        w.enc_fwd.input_gates_table(&w.src_emb)?,
        w.enc_bwd.input_gates_table(&w.src_emb)?,
    );
    let zero = Array::zeros(&[n, h], dtype);
    let (mut hf, mut hb) = (zero.clone(), zero);
    let mut fwd = Vec::with_capacity(t_max);
    let mut bwd = vec![None; t_max];
    for t in 0..t_max {
        let new = w
            .enc_fwd
            .cell_from_input_gates(&table_f.try_take(&ids[t], 0)?, &hf)?;
        hf = hf.try_add(&masks[t].try_mul(&new.try_sub(&hf)?)?)?;
        fwd.push(hf.clone());
    }
    for t in (0..t_max).rev() {
        let new = w
            .enc_bwd
            .cell_from_input_gates(&table_b.try_take(&ids[t], 0)?, &hb)?;
        hb = hb.try_add(&masks[t].try_mul(&new.try_sub(&hb)?)?)?;
        bwd[t] = Some(hb.clone());
    }
    let steps: Vec<Array> = fwd
        .iter()
        .zip(&bwd)
        .map(|(f, b)| Array::try_concat(&[f, b.as_ref().expect("filled")], 1))
        .collect::<kiln::Result<_>>()?;
    let refs: Vec<&Array> = steps.iter().collect();
    let ctx = Array::try_stack(&refs, 1)?; // [n, T, 2H]
    let len = mask_nt.sum(Some(&[1]), true);
    let mean = ctx
        .try_mul(&mask_nt.try_expand_dims(2)?)?
        .sum(Some(&[1]), false)
        .try_div(&len)?;
    let init = mean.try_matmul(&w.init_w)?.try_add(&w.init_b)?.try_tanh()?;
    let ctx_proj = ctx.try_matmul(&w.att_w_c)?.try_add(&w.att_b)?;
    let mask_bias = mask_nt.try_sub(1.0)?.try_mul(1e4)?;
    Ok(Encoded {
        ctx,
        ctx_proj,
        mask_bias,
        init,
    })
}

/// One conditional-GRU step for `rows` rows whose source is `enc` (already one source per
/// row): `y_gi` are the previous words' gate pre-activations for `dec1`, `y_emb` their
/// embeddings.
fn dec_step(
    w: &Weights,
    enc: &Encoded,
    y_gi: &Array,
    y_emb: &Array,
    state: &Array,
) -> kiln::Result<DecOut> {
    let rows = state.shape()[0] as isize;
    let s1 = w.dec1.cell_from_input_gates(y_gi, state)?;
    // e_j = v · tanh(W_c c_j + b + W_s s1)
    let q = s1.try_matmul(&w.att_w_s)?.try_expand_dims(1)?; // [r, 1, A]
    let e = enc
        .ctx_proj
        .try_add(&q)?
        .try_tanh()?
        .try_matmul(&w.att_v)? // [r, T, 1]
        .try_reshape(&[rows, -1])?
        .try_add(&enc.mask_bias)?;
    let alpha = e.try_softmax(-1)?; // [r, T]
    let c = alpha
        .try_expand_dims(1)?
        .try_matmul(&enc.ctx)? // [r, 1, 2H]
        .try_reshape(&[rows, -1])?;
    let s2 = w.dec2.cell(&c, &s1)?;
    let hidden = s2
        .try_matmul(&w.out_w_s)?
        .try_add(&y_emb.try_matmul(&w.out_w_y)?)?
        .try_add(&c.try_matmul(&w.out_w_c)?)?
        .try_add(&w.out_b)?
        .try_tanh()?;
    Ok(DecOut {
        state: s2,
        hidden,
        attention: alpha,
    })
}

impl AttentionModel {
    /// The mean cross-entropy per target token (`tgt` sentences without `<s>`, each followed
    /// by `eos` in the loss) under teacher forcing, as a lazy scalar: differentiate it with
    /// `kiln::grad` with respect to [`AttentionModel::parameters`]' values.
    pub fn loss(&self, src: &[Vec<usize>], tgt: &[Vec<usize>], eos: usize) -> Result<Array> {
        self.loss_with_bos(src, tgt, eos, eos)
    }

    /// [`AttentionModel::loss`] with a separate start symbol `bos` (the first decoder input).
    pub fn loss_with_bos(
        &self,
        src: &[Vec<usize>],
        tgt: &[Vec<usize>],
        bos: usize,
        eos: usize,
    ) -> Result<Array> {
        let cfg = self.config;
        if src.len() != tgt.len() || src.is_empty() {
            return Err(Error::Invalid {
                op: "AttentionModel::loss",
                message: format!(
                    "{} source and {} target sentences: give one target per source, at least one",
                    src.len(),
                    tgt.len()
                ),
            });
        }
        check_ids("AttentionModel::loss", src, cfg.src_vocab)?;
        check_ids("AttentionModel::loss", tgt, cfg.tgt_vocab)?;
        if bos >= cfg.tgt_vocab || eos >= cfg.tgt_vocab {
            return Err(Error::Invalid {
                op: "AttentionModel::loss",
                message: format!(
                    "bos {bos} / eos {eos} outside the target vocabulary of {}",
                    cfg.tgt_vocab
                ),
            });
        }
        let w = self.weights();
        let enc = encode(&w, self.dtype(), src)?;
        let n = src.len();
        let t_max = tgt.iter().map(Vec::len).max().unwrap_or(0) + 1;
        let dtype = self.dtype();
        let (mut gold, mut tmask) = (Vec::new(), Vec::new());
        let mut inputs = Vec::with_capacity(t_max);
        for t in 0..t_max {
            let input: Vec<i64> = tgt
                .iter()
                .map(|y| match t {
                    0 => bos,
                    _ => y.get(t - 1).copied().unwrap_or(eos),
                } as i64)
                .collect();
            inputs.push(Array::from_vec(input, &[n])?);
            for y in tgt {
                gold.push(y.get(t).copied().unwrap_or(eos) as i64);
                tmask.push(if t <= y.len() { 1.0f32 } else { 0.0 });
            }
        }
        let gold = Array::from_vec(gold, &[t_max * n])?;
        let tmask = Array::from_vec(tmask, &[t_max * n])?.cast(dtype);
        let table = w.dec1.input_gates_table(&w.tgt_emb)?;
        let mut state = enc.init.clone();
        let mut hidden = Vec::with_capacity(t_max);
        for input in &inputs {
            let y_gi = table.try_take(input, 0)?;
            let y_emb = w.tgt_emb.try_take(input, 0)?;
            let out = dec_step(&w, &enc, &y_gi, &y_emb, &state)?;
            state = out.state;
            hidden.push(out.hidden);
        }
        let refs: Vec<&Array> = hidden.iter().collect();
        let logp = Array::try_concat(&refs, 0)?
            .try_matmul(&w.out_w)?
            .try_add(&w.out_b_o)?
            .try_log_softmax(-1)?; // [T·n, V]
        let nll = logp
            .try_mul(&gold.try_one_hot(cfg.tgt_vocab, dtype)?)?
            .sum(Some(&[1]), false)
            .try_neg()?;
        Ok(nll
            .try_mul(&tmask)?
            .sum(None, false)
            .try_div(tmask.sum(None, false))?)
    }

    /// A scorer decoding with this model's current weights (a snapshot: later training does
    /// not change it); every step reports its attention, so hypotheses carry alignments.
    ///
    /// ```
    /// use kiln_beam::{AlignmentKind, AttentionConfig, AttentionModel, BeamSearch, SearchConfig};
    /// let cfg = AttentionConfig { src_vocab: 6, tgt_vocab: 5, emb: 4, enc_hidden: 3,
    ///     dec_hidden: 4, att_hidden: 3, out_hidden: 3 };
    /// let m = AttentionModel::init(cfg, 1, kiln::DType::F32)?;
    /// let config = SearchConfig { beam: 2, bos: 1, eos: 2, unk: None, ..Default::default() };
    /// let mut search = BeamSearch::new(vec![Box::new(m.scorer()?)], config);
    /// let out = search.decode(&[vec![3, 4, 2]])?;
    /// let best = &out[0].best().unwrap().hyp;
    /// assert_eq!(best.attentions()[0].len(), 3); // one weight per source token
    /// let hard = best.alignment(AlignmentKind::Hard, 3, 2);
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn scorer(&self) -> Result<AttentionScorer> {
        AttentionScorer::new(self)
    }
}

/// Decodes with an [`AttentionModel`]; every step reports its attention over the source
/// (`[rows, source positions]`), from which the search keeps each hypothesis' alignment.
pub struct AttentionScorer {
    weights: Weights,
    config: AttentionConfig,
    dtype: DType,
    dec1_table: Array,
    encoded: Option<Encoded>,
    rows: Option<Encoded>,
    name: String,
    weight: f64,
}

impl AttentionScorer {
    fn new(model: &AttentionModel) -> Result<AttentionScorer> {
        let weights = model.weights();
        let dec1_table = weights.dec1.input_gates_table(&weights.tgt_emb)?;
        dec1_table.eval()?;
        Ok(AttentionScorer {
            weights,
            config: model.config,
            dtype: model.dtype(),
            dec1_table,
            encoded: None,
            rows: None,
            name: "attention".into(),
            weight: 1.0,
        })
    }

    /// Sets the name and ensemble weight.
    ///
    /// ```
    /// use kiln_beam::{AttentionConfig, AttentionModel, Scorer};
    /// let cfg = AttentionConfig { src_vocab: 4, tgt_vocab: 4, emb: 2, enc_hidden: 2,
    ///     dec_hidden: 2, att_hidden: 2, out_hidden: 2 };
    /// let s = AttentionModel::init(cfg, 1, kiln::DType::F32)?.scorer()?.named("att", 0.5);
    /// assert_eq!((s.name(), s.weight()), ("att", 0.5));
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn named(mut self, name: &str, weight: f64) -> AttentionScorer {
        self.name = name.into();
        self.weight = weight;
        self
    }
}

impl Scorer for AttentionScorer {
    fn name(&self) -> &str {
        &self.name
    }

    fn weight(&self) -> f64 {
        self.weight
    }

    fn vocab_size(&self) -> usize {
        self.config.tgt_vocab
    }

    fn encode(&mut self, batch: &[Vec<usize>]) -> Result<()> {
        check_ids("AttentionScorer::encode", batch, self.config.src_vocab)?;
        let enc = encode(&self.weights, self.dtype, batch)?;
        kiln::eval(&[&enc.ctx, &enc.ctx_proj, &enc.mask_bias, &enc.init])?;
        self.encoded = Some(enc);
        self.rows = None;
        Ok(())
    }
    fn begin_state(&mut self, rows: usize, rows_per_sentence: usize) -> Result<Array> {
        let enc = self.encoded.as_ref().ok_or(Error::Invalid {
            op: "AttentionScorer::begin_state",
            message: "encode first".into(),
        })?;
        let op = "AttentionScorer::begin_state";
        let r = Encoded {
            ctx: rows_of_sentences(Some(&enc.ctx), op, rows, rows_per_sentence)?,
            ctx_proj: rows_of_sentences(Some(&enc.ctx_proj), op, rows, rows_per_sentence)?,
            mask_bias: rows_of_sentences(Some(&enc.mask_bias), op, rows, rows_per_sentence)?,
            init: rows_of_sentences(Some(&enc.init), op, rows, rows_per_sentence)?,
        };
        kiln::eval(&[&r.ctx, &r.ctx_proj, &r.mask_bias, &r.init])?;
        let init = r.init.clone();
        self.rows = Some(r);
        Ok(init)
    }

    fn step(&mut self, state: &Array, prev: &Array, _rows_per_sentence: usize) -> Result<Step> {
        let enc = self.rows.as_ref().ok_or(Error::Invalid {
            op: "AttentionScorer::step",
            message: "call begin_state before step".into(),
        })?;
        let w = &self.weights;
        let y_gi = self.dec1_table.try_take(prev, 0)?;
        let y_emb = w.tgt_emb.try_take(prev, 0)?;
        let out = dec_step(w, enc, &y_gi, &y_emb, state)?;
        let logits = out.hidden.try_matmul(&w.out_w)?.try_add(&w.out_b_o)?;
        Ok(Step {
            log_probs: logits.try_log_softmax(-1)?,
            next_state: out.state,
            attention: Some(out.attention),
        })
    }
}

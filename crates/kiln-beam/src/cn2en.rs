//! The cn2en Chinese→English model (`cn2en==0.0.118`, MIT): a GRU encoder-decoder without
//! attention, read from its PyTorch checkpoint `model.pth` (with [`kiln_io::read_pth`]) and
//! its pickled vocabularies `input_lang.pkl` / `output_lang.pkl` (with [`kiln_io::pickle`]),
//! and run with kiln as a [`Scorer`].
//!
//! What the package's `cn2en/model.py` does, and this module follows:
//! - **Tokens**: the sentence is lower-cased and stripped; every character other than `a`–`z`,
//!   `'`, `"` and space becomes a token of its own (so Chinese is read character by
//!   character, no segmenter), runs of those ASCII letters stay words; tokens missing from the
//!   input vocabulary are *dropped* (the model has no UNK), and `EOS` (1) is appended.
//! - **Encoder**: `Embedding(3277, 256)` → one-layer `GRU(256, 256)` over the tokens from a zero
//!   state; its final state starts the decoder.
//! - **Decoder**: `Embedding(5820, 256)` → ReLU → `GRU(256, 256)` → `Linear(256, 5820)` →
//!   log-softmax, starting from `SOS` (0) and ending at `EOS` (1); `model.py` decodes
//!   greedily, which is beam 1 here. PyTorch gate order r, z, n.
//! - **Output**: the words of the output vocabulary joined with spaces.
//!
//! Depends on `kiln` (public API), kiln-io's readers and this crate's search types.

use crate::g2p::{rows_of_sentences, Gru};
use crate::scorer::{Scorer, Step};
use crate::{BeamSearch, Error, Result, SearchConfig};
use kiln::{Array, DType};
use kiln_io::pickle::{self, Value};
use kiln_io::{read_pth, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// The cn2en model as a scorer. Cloning shares the weights and vocabularies.
///
/// ```
/// use kiln_beam::Cn2En;
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
/// if std::path::Path::new(dir).exists() {
///     let model = Cn2En::load(dir)?;
///     assert_eq!(model.translate(&["我不知道。"], 1)?, ["i don't know ."]);
/// }
/// # Ok::<(), kiln_beam::Error>(())
/// ```
#[derive(Clone)]
pub struct Cn2En {
    enc_emb: Array,
    enc: Gru,
    /// `relu(decoder embedding)`: the ReLU acts on each embedding row, so it is applied once.
    dec_emb_relu: Array,
    dec: Gru,
    out_w_t: Array,
    out_b: Array,
    input: Arc<HashMap<String, usize>>,
    output: Arc<Vec<String>>,
    encoded: Option<Array>,
}

/// Takes the tensor `name` out of the checkpoint, checking its dtype and shape.
fn take(
    t: &mut BTreeMap<String, Tensor>,
    shown: &str,
    name: &str,
    want: &[usize],
) -> Result<Array> {
    let bad = |m: String| Error::Invalid {
        op: "Cn2En::load",
        message: format!("{shown}: tensor {name} {m}"),
    };
    let x = t
        .remove(name)
        .ok_or_else(|| bad("is missing from the checkpoint".into()))?;
    if x.shape != want || x.dtype() != DType::F32 {
        return Err(bad(format!(
            "should be float32 {want:?} but is {} {:?}",
            x.torch_dtype, x.shape
        )));
    }
    Ok(Array::try_from(x)?)
}

/// Reads a pickled `Lang` (word2index, index2word, n_words).
fn read_lang(path: &Path) -> Result<Value> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| Error::Invalid {
        op: "Cn2En::load",
        message: format!("{shown}: {e}"),
    })?;
    pickle::loads(&bytes).map_err(|source| {
        kiln_io::Error::Pickle {
            path: shown,
            source,
        }
        .into()
    })
}

fn lang_error(path: &Path, m: impl std::fmt::Display) -> Error {
    Error::Invalid {
        op: "Cn2En::load",
        message: format!("{}: {m}", path.display()),
    }
}

fn n_words(path: &Path, lang: &Value) -> Result<usize> {
    lang.get("n_words")
        .and_then(Value::as_int)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| lang_error(path, "no integer n_words: not a cn2en Lang pickle"))
}

impl Cn2En {
    /// Sentence start (`SOS`), the decoder's first input.
    ///
    /// ```
    /// assert_eq!(kiln_beam::Cn2En::config(1).bos, kiln_beam::Cn2En::SOS);
    /// ```
    pub const SOS: usize = 0;
    /// Sentence end (`EOS`): ends every source sentence and every translation.
    ///
    /// ```
    /// assert_eq!(kiln_beam::Cn2En::config(1).eos, kiln_beam::Cn2En::EOS);
    /// ```
    pub const EOS: usize = 1;

    /// Loads `model.pth`, `input_lang.pkl` and `output_lang.pkl` from `dir`, checking every
    /// tensor against the vocabulary sizes and the hidden size (the encoder embedding's
    /// width); a mismatch names the tensor, the expected and the found shape.
    ///
    /// ```
    /// let e = kiln_beam::Cn2En::load("/nonexistent").err().unwrap().to_string();
    /// assert!(e.contains("/nonexistent/input_lang.pkl"), "{e}");
    /// ```
    pub fn load(dir: impl AsRef<Path>) -> Result<Cn2En> {
        let dir = dir.as_ref();
        let (in_path, out_path) = (dir.join("input_lang.pkl"), dir.join("output_lang.pkl"));
        let input_lang = read_lang(&in_path)?;
        let output_lang = read_lang(&out_path)?;
        let (n_in, n_out) = (
            n_words(&in_path, &input_lang)?,
            n_words(&out_path, &output_lang)?,
        );
        let mut input = HashMap::new();
        let w2i = input_lang
            .get("word2index")
            .and_then(Value::entries)
            .ok_or_else(|| lang_error(&in_path, "no word2index dict"))?;
        for (w, i) in w2i {
            let (Some(w), Some(i)) = (w.as_str(), i.as_int()) else {
                return Err(lang_error(&in_path, format!("word2index has {w:?}: {i:?}")));
            };
            match usize::try_from(i) {
                Ok(i) if i < n_in => input.insert(w.to_string(), i),
                _ => {
                    return Err(lang_error(
                        &in_path,
                        format!("word2index[{w:?}] = {i} is outside n_words = {n_in}"),
                    ))
                }
            };
        }
        let mut output = vec![None; n_out];
        let i2w = output_lang
            .get("index2word")
            .and_then(Value::entries)
            .ok_or_else(|| lang_error(&out_path, "no index2word dict"))?;
        for (i, w) in i2w {
            let (Some(i), Some(w)) = (i.as_int(), w.as_str()) else {
                return Err(lang_error(
                    &out_path,
                    format!("index2word has {i:?}: {w:?}"),
                ));
            };
            let slot = usize::try_from(i)
                .ok()
                .and_then(|i| output.get_mut(i))
                .ok_or_else(|| {
                    lang_error(
                        &out_path,
                        format!("index2word[{i}] is outside n_words = {n_out}"),
                    )
                })?;
            *slot = Some(w.to_string());
        }
        let output = output
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                w.ok_or_else(|| lang_error(&out_path, format!("index2word has no word {i}")))
            })
            .collect::<Result<Vec<_>>>()?;

        let pth = dir.join("model.pth");
        let shown = pth.display().to_string();
        let mut t = read_pth(&pth)?;
        let h = t
            .get("encoder.embedding.weight")
            .and_then(|x| x.shape.get(1).copied())
            .ok_or_else(|| Error::Invalid {
                op: "Cn2En::load",
                message: format!(
                    "{shown}: tensor encoder.embedding.weight is missing or not 2-D (expected [{n_in}, hidden])"
                ),
            })?;
        let enc_emb = take(&mut t, &shown, "encoder.embedding.weight", &[n_in, h])?;
        let mut gru = |p: &str| -> Result<Gru> {
            let g = Gru {
                w_ih_t: take(
                    &mut t,
                    &shown,
                    &format!("{p}.gru.weight_ih_l0"),
                    &[3 * h, h],
                )?
                .transpose(),
                w_hh_t: take(
                    &mut t,
                    &shown,
                    &format!("{p}.gru.weight_hh_l0"),
                    &[3 * h, h],
                )?
                .transpose(),
                b_ih: take(&mut t, &shown, &format!("{p}.gru.bias_ih_l0"), &[3 * h])?,
                b_hh: take(&mut t, &shown, &format!("{p}.gru.bias_hh_l0"), &[3 * h])?,
                hidden: h,
            };
            kiln::eval(&[&g.w_ih_t, &g.w_hh_t])?; // contiguous transposes, once
            Ok(g)
        };
        let enc = gru("encoder")?;
        let dec = gru("decoder")?;
        let dec_emb_relu =
            take(&mut t, &shown, "decoder.embedding.weight", &[n_out, h])?.try_maximum(0.0)?;
        let out_w_t = take(&mut t, &shown, "decoder.out.weight", &[n_out, h])?.transpose();
        let out_b = take(&mut t, &shown, "decoder.out.bias", &[n_out])?;
        kiln::eval(&[&dec_emb_relu, &out_w_t])?;
        Ok(Cn2En {
            enc_emb,
            enc,
            dec_emb_relu,
            dec,
            out_w_t,
            out_b,
            input: Arc::new(input),
            output: Arc::new(output),
            encoded: None,
        })
    }

    /// The tokens of a sentence as `model.py`'s `normalize` makes them: lower-cased and
    /// stripped; every character other than `a`–`z`, `'`, `"` and space is a token of its own,
    /// runs of those ASCII letters (and quotes) are words.
    ///
    /// ```
    /// assert_eq!(kiln_beam::Cn2En::tokenize("Tom是我的朋友。"), ["tom", "是", "我", "的", "朋", "友", "。"]);
    /// ```
    pub fn tokenize(sentence: &str) -> Vec<String> {
        let keep = |c: char| c.is_ascii_lowercase() || c == '\'' || c == '"' || c == ' ';
        let mut spaced = String::new();
        for c in sentence.to_lowercase().trim().chars() {
            if keep(c) {
                spaced.push(c);
            } else {
                spaced.push(' ');
                spaced.push(c);
                spaced.push(' ');
            }
        }
        spaced
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The source ids of a sentence: its known tokens (unknown ones are dropped, as in
    /// `model.py`: the vocabulary has no UNK) followed by `EOS`.
    ///
    /// ```
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
    /// if std::path::Path::new(dir).exists() {
    ///     let model = kiln_beam::Cn2En::load(dir)?;
    ///     let ids = model.encode_sentence("我不知道。");
    ///     assert_eq!((ids.len(), ids.last()), (6, Some(&kiln_beam::Cn2En::EOS)));
    ///     assert_eq!(model.encode_sentence("🦀"), [kiln_beam::Cn2En::EOS]);
    /// }
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn encode_sentence(&self, sentence: &str) -> Vec<usize> {
        let mut ids: Vec<usize> = Self::tokenize(sentence)
            .iter()
            .filter_map(|w| self.input.get(w).copied())
            .collect();
        ids.push(Self::EOS);
        ids
    }

    /// The English word of an output id (`SOS`, `EOS` for 0 and 1; `<unk>` past the
    /// vocabulary).
    ///
    /// ```
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
    /// if std::path::Path::new(dir).exists() {
    ///     let model = kiln_beam::Cn2En::load(dir)?;
    ///     assert_eq!(model.word(kiln_beam::Cn2En::EOS), "EOS");
    /// }
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn word(&self, id: usize) -> &str {
        self.output.get(id).map_or("<unk>", String::as_str)
    }

    /// The sentence of output ids: their words joined with spaces, `EOS` left out.
    ///
    /// ```
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
    /// if std::path::Path::new(dir).exists() {
    ///     let model = kiln_beam::Cn2En::load(dir)?;
    ///     assert_eq!(model.detokenize(&[kiln_beam::Cn2En::EOS]), "");
    /// }
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn detokenize(&self, ids: &[usize]) -> String {
        ids.iter()
            .filter(|&&w| w != Self::EOS)
            .map(|&w| self.word(w))
            .collect::<Vec<_>>()
            .join(" ")
            .trim()
            .to_string()
    }

    /// The search settings for this model: `SOS`/`EOS`, no UNK, beam `beam`, and a maximum
    /// of 3 × the source length (`model.py` stops at 1,000 words).
    ///
    /// ```
    /// let c = kiln_beam::Cn2En::config(4);
    /// assert_eq!((c.beam, c.bos, c.eos, c.unk), (4, 0, 1, None));
    /// ```
    pub fn config(beam: usize) -> SearchConfig {
        SearchConfig {
            beam,
            bos: Self::SOS,
            eos: Self::EOS,
            unk: None,
            ..Default::default()
        }
    }

    /// Translates sentences with a beam search of width `beam` (1: `model.py`'s greedy
    /// decoding), all in one batch.
    ///
    /// ```
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
    /// if std::path::Path::new(dir).exists() {
    ///     let model = kiln_beam::Cn2En::load(dir)?;
    ///     assert_eq!(model.translate(&["他是我的朋友。"], 1)?, ["he's my friend ."]);
    /// }
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn translate(&self, sentences: &[&str], beam: usize) -> Result<Vec<String>> {
        let src: Vec<Vec<usize>> = sentences.iter().map(|s| self.encode_sentence(s)).collect();
        let mut search = BeamSearch::new(vec![Box::new(self.clone())], Self::config(beam));
        Ok(search
            .decode(&src)?
            .iter()
            .map(|h| {
                h.best()
                    .map(|b| self.detokenize(&b.hyp.words()))
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Whether two models share the same vocabularies (so they can form an ensemble).
    ///
    /// ```
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cn2en");
    /// if std::path::Path::new(dir).exists() {
    ///     let model = kiln_beam::Cn2En::load(dir)?;
    ///     assert!(model.same_vocabularies(&model.clone()));
    /// }
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn same_vocabularies(&self, other: &Cn2En) -> bool {
        self.input == other.input && self.output == other.output
    }
}

impl Scorer for Cn2En {
    fn name(&self) -> &str {
        "cn2en"
    }

    fn vocab_size(&self) -> usize {
        self.output.len()
    }

    fn encode(&mut self, batch: &[Vec<usize>]) -> Result<()> {
        // Padded batch; each sentence keeps the state after its own last token (its EOS).
        let vocab = self.enc_emb.shape()[0];
        if let Some(&bad) = batch.iter().flatten().find(|&&w| w >= vocab) {
            return Err(Error::Invalid {
                op: "Cn2En::encode",
                message: format!("source id {bad} is outside the input vocabulary of {vocab}"),
            });
        }
        self.encoded = Some(self.enc.encode_padded(&self.enc_emb, batch)?);
        Ok(())
    }

    fn begin_state(&mut self, rows: usize, rows_per_sentence: usize) -> Result<Array> {
        rows_of_sentences(
            self.encoded.as_ref(),
            "Cn2En::begin_state",
            rows,
            rows_per_sentence,
        )
    }

    fn step(&mut self, state: &Array, prev: &Array, _rows_per_sentence: usize) -> Result<Step> {
        // No precomputed input-gates table here (as g2p has, `Gru::input_gates_table`): with
        // 5,820 output and 3,277 input words it would cost 3.6 GFLOP and 28 MB at load, the
        // work of ~9,000 GRU row-steps, and would save only the input projection, ~10 % of a
        // step's arithmetic next to the `[rows, 256] @ [256, 5820]` output projection (top-k
        // over the vocabulary and that projection dominate a cn2en run, measured).
        let x = self.dec_emb_relu.try_take(prev, 0)?;
        let h = self.dec.cell(&x, state)?;
        let logits = h.try_matmul(&self.out_w_t)?.try_add(&self.out_b)?;
        Ok(Step {
            log_probs: logits.try_log_softmax(-1)?,
            next_state: h,
            attention: None,
        })
    }
}

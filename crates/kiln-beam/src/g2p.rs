//! The g2p-en grapheme-to-phoneme model (`g2p-en==2.1.0`, Apache-2.0): a GRU encoder over
//! letters and a GRU decoder over phonemes (embeddings and hidden state of 256 in the shipped
//! checkpoint, although the package's `g2p.py` comments say 128; PyTorch gate order r, z, n),
//! read from its `checkpoint20.npz` and run with kiln as a [`Scorer`].
//!
//! Also the GRU layer shared with the cn2en and attention models ([`Gru`]). For speed
//! (docs/performance-log.md, 2026-11-21, kiln-beam): g2p's input projections are precomputed per letter and
//! phoneme at load, so a step gathers rows instead of multiplying, and the hidden GEMM of few
//! rows runs with the weight on the left (small packing buffers).
//!
//! Depends on `kiln_io::read_npz`, `crate::scorer` and kiln's public API.

use crate::scorer::{Scorer, Step};
use crate::{Error, Result};
use kiln::{s, Array, DType};
use kiln_io::read_npz;

const GRAPHEMES: &str = "abcdefghijklmnopqrstuvwxyz";
const PHONEMES: [&str; 70] = [
    "AA0", "AA1", "AA2", "AE0", "AE1", "AE2", "AH0", "AH1", "AH2", "AO0", "AO1", "AO2", "AW0",
    "AW1", "AW2", "AY0", "AY1", "AY2", "B", "CH", "D", "DH", "EH0", "EH1", "EH2", "ER0", "ER1",
    "ER2", "EY0", "EY1", "EY2", "F", "G", "HH", "IH0", "IH1", "IH2", "IY0", "IY1", "IY2", "JH",
    "K", "L", "M", "N", "NG", "OW0", "OW1", "OW2", "OY0", "OY1", "OY2", "P", "R", "S", "SH", "T",
    "TH", "UH0", "UH1", "UH2", "UW", "UW0", "UW1", "UW2", "V", "W", "Y", "Z", "ZH",
];

/// The decoder's initial state: row `r` gets the encoder state of sentence
/// `r / rows_per_sentence` (`op` names the caller in the error when nothing was encoded).
pub(crate) fn rows_of_sentences(
    encoded: Option<&Array>,
    op: &'static str,
    rows: usize,
    rows_per_sentence: usize,
) -> Result<Array> {
    let enc = encoded.ok_or(Error::Invalid {
        op,
        message: "encode first".into(),
    })?;
    let sentence = Array::arange(0.0, rows as f64, 1.0, DType::I64)?
        .try_floor_div(rows_per_sentence as i64)?;
    Ok(enc.try_take(&sentence, 0)?)
}

/// A GRU layer's weights, transposed for `x @ W`; shared with the cn2en model.
#[derive(Clone)]
pub(crate) struct Gru {
    pub(crate) w_ih_t: Array, // [E, 3H]
    pub(crate) w_hh_t: Array, // [H, 3H]
    pub(crate) b_ih: Array,
    pub(crate) b_hh: Array,
    pub(crate) hidden: usize,
}

impl Gru {
    /// The same cell with its weights on `device` (see `kiln::Array::to_device`).
    pub(crate) fn placed(&self, device: kiln::Device) -> kiln::Result<Gru> {
        Ok(Gru {
            w_ih_t: self.w_ih_t.to_device(device)?,
            w_hh_t: self.w_hh_t.to_device(device)?,
            b_ih: self.b_ih.to_device(device)?,
            b_hh: self.b_hh.to_device(device)?,
            hidden: self.hidden,
        })
    }

    /// The input gates of every embedding row, `emb @ W_ihᵀ + b_ih` (`[vocab, 3H]`), lazy.
    /// The input projection depends only on the token, so a model whose vocabulary is small
    /// next to the tokens it runs (g2p: 29 letters, 74 phonemes) computes it once at load and
    /// each step gathers rows of it ([`Gru::cell_from_input_gates`]) instead of multiplying:
    /// one GEMM of the cell's two.
    pub(crate) fn input_gates_table(&self, emb: &Array) -> kiln::Result<Array> {
        emb.try_matmul(&self.w_ih_t)?.try_add(&self.b_ih)
    }

    /// Runs the GRU over a padded batch of id sequences (embedded with `emb`) from a zero
    /// state; each sentence keeps the state after its own last id. One small plan per step,
    /// the same every step.
    pub(crate) fn encode_padded(&self, emb: &Array, batch: &[Vec<usize>]) -> kiln::Result<Array> {
        self.encode_padded_with(batch, |ids| self.cell_input(&emb.try_take(ids, 0)?))
    }

    /// [`Gru::encode_padded`] with the input gates gathered from a table made by
    /// [`Gru::input_gates_table`] (rows indexed by id).
    pub(crate) fn encode_padded_table(
        &self,
        table: &Array,
        batch: &[Vec<usize>],
    ) -> kiln::Result<Array> {
        self.encode_padded_with(batch, |ids| table.try_take(ids, 0))
    }

    /// The padded encoder loop; `gates(ids)` gives the input gates `[n, 3H]` of one step's
    /// ids (`[n]`, 0 past a sentence's end: those rows keep their state).
    fn encode_padded_with(
        &self,
        batch: &[Vec<usize>],
        gates: impl Fn(&Array) -> kiln::Result<Array>,
    ) -> kiln::Result<Array> {
        let n = batch.len();
        let t_max = batch.iter().map(Vec::len).max().unwrap_or(0);
        let mut h = Array::zeros(&[n, self.hidden], DType::F32);
        h.eval()?;
        for t in 0..t_max {
            let ids: Vec<i64> = batch
                .iter()
                .map(|s| s.get(t).copied().unwrap_or(0) as i64)
                .collect();
            let live: Vec<bool> = batch.iter().map(|s| t < s.len()).collect();
            let gi = gates(&Array::from_vec(ids, &[n])?)?;
            let h_new = self.cell_from_input_gates(&gi, &h)?;
            h = Array::try_where(&Array::from_vec(live, &[n, 1])?, &h_new, &h)?;
            h.eval()?;
        }
        Ok(h)
    }

    /// The input gates `x @ W_ihᵀ + b_ih` of inputs `x` (`[rows, E]`).
    fn cell_input(&self, x: &Array) -> kiln::Result<Array> {
        x.try_matmul(&self.w_ih_t)?.try_add(&self.b_ih)
    }

    /// One GRU step, PyTorch gate order (r, z, n).
    pub(crate) fn cell(&self, x: &Array, h: &Array) -> kiln::Result<Array> {
        self.cell_from_input_gates(&self.cell_input(x)?, h)
    }

    /// One GRU step from precomputed input gates `gi = x @ W_ihᵀ + b_ih` (`[rows, 3H]`, e.g.
    /// rows of [`Gru::input_gates_table`]).
    pub(crate) fn cell_from_input_gates(&self, gi: &Array, h: &Array) -> kiln::Result<Array> {
        let hs = self.hidden as isize;
        let gh = self.hidden_gates(h)?;
        // r and z are both sigmoid(gi + gh) over the first 2H columns: one slice pair and
        // one sigmoid for both, split afterwards (fewer nodes to trace every step).
        let rz = gi
            .try_slice(s![.., ..2 * hs])?
            .try_add(&gh.try_slice(s![.., ..2 * hs])?)?
            .try_sigmoid()?;
        let r = rz.try_slice(s![.., ..hs])?;
        let z = rz.try_slice(s![.., hs..])?;
        let n = gi
            .try_slice(s![.., 2 * hs..])?
            .try_add(&r.try_mul(&gh.try_slice(s![.., 2 * hs..])?)?)?
            .try_tanh()?;
        // h' = (1 - z) * n + z * h
        n.try_sub(&z.try_mul(&n)?)?.try_add(&z.try_mul(h)?)
    }

    /// The hidden gates `h @ W_hhᵀ + b_hh` (`[rows, 3H]`). Up to
    /// [`WEIGHT_LEFT_MAX_ROWS`] rows they are computed as the transposed product
    /// `(W_hh @ hᵀ + b_hh)ᵀ`. Why: `matrixmultiply` packs its right operand whole (`k × n`,
    /// up to 1,024 columns) into a buffer it allocates on every call; with the weight on the
    /// right that buffer is `256 × 768` floats (800 KB) and keeps landing on fresh pages (page
    /// faults were 30–40 % of a g2p run's samples), while with it on the left both packing
    /// buffers are `64 × 256` and `256 × rows` floats and stay resident. The price is that the
    /// gate kernel reads the product through a transposed view (a strided gather, and the
    /// small operand `hᵀ` is packed element by element), which grows with the rows. g2p on
    /// one core, measured: at 16 and 64 rows (beam 1 and 4 × 16 words) the transposed form
    /// decoded 10–20 % and ~8 % more words/s (and had no page-fault storms), at 128 and 192
    /// rows 7–13 % fewer. Same arithmetic per element, bit-identical n-best lists.
    fn hidden_gates(&self, h: &Array) -> kiln::Result<Array> {
        if h.shape()
            .first()
            .is_some_and(|&rows| rows <= WEIGHT_LEFT_MAX_ROWS)
        {
            Ok(self
                .w_hh_t
                .transpose()
                .try_matmul(&h.transpose())?
                .try_add(&self.b_hh.try_reshape(&[-1, 1])?)?
                .transpose())
        } else {
            h.try_matmul(&self.w_hh_t)?.try_add(&self.b_hh)
        }
    }
}

/// The most rows for which [`Gru::hidden_gates`] puts the weight on the left of its GEMM.
const WEIGHT_LEFT_MAX_ROWS: usize = 64;

/// Takes a named tensor out of the checkpoint, checking its shape.
type Take<'a> = dyn FnMut(&str, Option<&[usize]>) -> Result<Array> + 'a;

/// The g2p-en model as a scorer.
/// Clones share the weights (kiln arrays are reference-counted), so decoding threads clone one loaded model.
#[derive(Clone)]
pub struct G2p {
    /// The encoder's input gates of every letter, `enc_emb @ W_ihᵀ + b_ih` (`[29, 3H]`).
    enc_gates: Array,
    /// The decoder's input gates of every phoneme, `dec_emb @ W_ihᵀ + b_ih` (`[74, 3H]`).
    dec_gates: Array,
    enc: Gru,
    dec: Gru,
    fc_w_t: Array,
    fc_b: Array,
    encoded: Option<Array>,
}

impl G2p {
    /// Sentence start (`<s>`).
    pub const BOS: usize = 2;
    /// Sentence end (`</s>`).
    pub const EOS: usize = 3;
    /// Unknown phoneme (`<unk>`).
    pub const UNK: usize = 1;

    /// Loads `checkpoint20.npz`, checking every tensor's shape; a mismatch names the tensor,
    /// the expected and the found shape.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<G2p> {
        let mut t = read_npz(path.as_ref())?;
        let shown = path.as_ref().display().to_string();
        let mut take = |name: &str, want: Option<&[usize]>| -> Result<Array> {
            let a = t.remove(name).ok_or_else(|| Error::Invalid {
                op: "G2p::load",
                message: format!("{shown}: no tensor named {name}"),
            })?;
            if let Some(w) = want {
                if a.shape() != w || a.dtype() != DType::F32 {
                    return Err(Error::Invalid {
                        op: "G2p::load",
                        message: format!(
                            "{shown}: tensor {name} should be float32 {w:?} but is {} {:?}",
                            a.dtype(),
                            a.shape()
                        ),
                    });
                }
            }
            Ok(a)
        };
        let enc_w_hh = take("enc_w_hh", None)?;
        if enc_w_hh.ndim() != 2 || enc_w_hh.shape()[0] != 3 * enc_w_hh.shape()[1] {
            return Err(Error::Invalid {
                op: "G2p::load",
                message: format!(
                    "{shown}: tensor enc_w_hh should be [3H, H] but is {:?}",
                    enc_w_hh.shape()
                ),
            });
        }
        let h = enc_w_hh.shape()[1];
        let enc_emb = take("enc_emb", None)?;
        let e = enc_emb.shape().get(1).copied().unwrap_or(0);
        let (ng, np) = (GRAPHEMES.len() + 3, PHONEMES.len() + 4);
        let enc_emb = check(&shown, "enc_emb", enc_emb, &[ng, e])?;
        let gru = |take: &mut Take<'_>, p: &str, w_hh: Option<Array>| -> Result<Gru> {
            let w_ih = take(&format!("{p}_w_ih"), Some(&[3 * h, e]))?;
            let w_hh = match w_hh {
                Some(w) => w,
                None => take(&format!("{p}_w_hh"), Some(&[3 * h, h]))?,
            };
            let g = Gru {
                w_ih_t: w_ih.transpose(),
                w_hh_t: w_hh.transpose(),
                b_ih: take(&format!("{p}_b_ih"), Some(&[3 * h]))?,
                b_hh: take(&format!("{p}_b_hh"), Some(&[3 * h]))?,
                hidden: h,
            };
            kiln::eval(&[&g.w_ih_t, &g.w_hh_t])?; // contiguous transposes, once
            Ok(g)
        };
        let enc = gru(&mut take, "enc", Some(enc_w_hh))?;
        let dec = gru(&mut take, "dec", None)?;
        let dec_emb = take("dec_emb", Some(&[np, e]))?;
        let fc_w_t = take("fc_w", Some(&[np, h]))?.transpose();
        let fc_b = take("fc_b", Some(&[np]))?;
        // The input projections depend only on the id, and the vocabularies are tiny: one
        // GEMM at load instead of one per step (measured in docs/performance-log.md, 2026-11-21, kiln-beam).
        let enc_gates = enc.input_gates_table(&enc_emb)?;
        let dec_gates = dec.input_gates_table(&dec_emb)?;
        kiln::eval(&[&fc_w_t, &enc_gates, &dec_gates])?;
        // Everything a step reads lives where steps run: on a GPU (`KILN_DEVICE=wgpu`) the
        // evaluated tables above are resident already, and the biases read from the file are
        // uploaded once here instead of at every step.
        let device = kiln::default_device();
        let (enc, dec) = (enc.placed(device)?, dec.placed(device)?);
        Ok(G2p {
            enc_gates: enc_gates.to_device(device)?,
            dec_gates: dec_gates.to_device(device)?,
            enc,
            dec,
            fc_w_t: fc_w_t.to_device(device)?,
            fc_b: fc_b.to_device(device)?,
            encoded: None,
        })
    }

    /// Letter ids of a word followed by `</s>`; letters outside a-z become `<unk>`.
    ///
    /// ```
    /// assert_eq!(kiln_beam::G2p::encode_word("ab?"), vec![3, 4, 1, 2]);
    /// ```
    pub fn encode_word(word: &str) -> Vec<usize> {
        let mut ids: Vec<usize> = word
            .chars()
            .flat_map(|c| c.to_lowercase())
            .map(|c| GRAPHEMES.find(c).map_or(1, |i| i + 3))
            .collect();
        ids.push(2);
        ids
    }

    /// The phoneme of an output id (`<pad>`, `<unk>`, `<s>`, `</s>` for 0..4).
    ///
    /// ```
    /// assert_eq!(kiln_beam::G2p::phoneme(4), "AA0");
    /// ```
    pub fn phoneme(id: usize) -> &'static str {
        match id {
            0 => "<pad>",
            1 => "<unk>",
            2 => "<s>",
            3 => "</s>",
            i => PHONEMES.get(i - 4).copied().unwrap_or("<unk>"),
        }
    }
}

fn check(shown: &str, name: &str, a: Array, want: &[usize]) -> Result<Array> {
    if a.shape() != want || a.dtype() != DType::F32 {
        return Err(Error::Invalid {
            op: "G2p::load",
            message: format!(
                "{shown}: tensor {name} should be float32 {want:?} but is {} {:?}",
                a.dtype(),
                a.shape()
            ),
        });
    }
    Ok(a)
}

impl Scorer for G2p {
    fn name(&self) -> &str {
        "g2p"
    }

    fn vocab_size(&self) -> usize {
        PHONEMES.len() + 4
    }

    fn encode(&mut self, batch: &[Vec<usize>]) -> Result<()> {
        // Padded batch; each sentence keeps the state of its own last letter (its `</s>`).
        let letters = self.enc_gates.shape()[0];
        if let Some(&bad) = batch.iter().flatten().find(|&&w| w >= letters) {
            return Err(Error::Invalid {
                op: "G2p::encode",
                message: format!("source id {bad} is outside the {letters} letter ids"),
            });
        }
        self.encoded = Some(self.enc.encode_padded_table(&self.enc_gates, batch)?);
        Ok(())
    }

    fn begin_state(&mut self, rows: usize, rows_per_sentence: usize) -> Result<Array> {
        rows_of_sentences(
            self.encoded.as_ref(),
            "G2p::begin_state",
            rows,
            rows_per_sentence,
        )
    }

    fn step(&mut self, state: &Array, prev: &Array, _rows_per_sentence: usize) -> Result<Step> {
        let gi = self.dec_gates.try_take(prev, 0)?;
        let h = self.dec.cell_from_input_gates(&gi, state)?;
        let logits = h.try_matmul(&self.fc_w_t)?.try_add(&self.fc_b)?;
        Ok(Step {
            log_probs: logits.try_log_softmax(-1)?,
            next_state: h,
            attention: None,
        })
    }
}

//! Feature extraction: [`FixedChannel`] (ids of the channel's vocabulary, one slot per
//! template) and [`LinkChannel`] (token indices for translators), built from a spec's
//! channel and the term maps, and extracted from a [`ParserState`].
//!
//! The id conventions, per value type, are SyntaxNet's (see the [module doc of
//! `features`](super) for the table); a channel's `vocabulary_size` is the largest domain of
//! its templates, as SyntaxNet's `GenericFeatureExtractor::GetDomainSize` computes it.
//!
//! Depends on [`super::template`] (typed templates), [`super::parse`], [`super::lexical`],
//! [`crate::term_map`] (the vocabularies), [`crate::spec`] (the channels) and
//! [`crate::transition::ParserState`].

use std::fmt;
use std::sync::Arc;

use super::lexical::is_break_char;
use super::parse::{parse_templates, Template};
use super::template::{compile, Feature, Path, TokenValue};
use super::{FeatureError, FixedFeature, FixedFeatures, LinkFeatures};
use crate::spec::{FixedFeatureChannel, LinkedFeatureChannel};
use crate::term_map::{char_ngrams, AffixMap, NgramOptions, NgramTable, TermMap, TermMaps};
use crate::transition::ParserState;

/// The nominal number of values of the numeric features `focus` and `gold-head` (SyntaxNet's
/// `NumericFeatureType(name, 100)`); their ids are token indices and may exceed it, so a
/// channel using them passes ids through (`embedding_dim: -1`).
///
/// ```
/// assert_eq!(kiln_dragnn::features::NUMERIC_DOMAIN, 100);
/// ```
pub const NUMERIC_DOMAIN: usize = 100;

/// The number of actions `last-action` allows for when the caller does not say: the most
/// any registered transition system has with these maps (`arc-standard`'s `1 + 2 *
/// labels`, the tagger's `tags`, 1 for the others).
///
/// ```
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::features::default_num_actions;
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// assert_eq!(default_num_actions(&maps), 5); // 1 + 2 * 2 labels > 2 tags
/// ```
pub fn default_num_actions(maps: &TermMaps) -> usize {
    (1 + 2 * maps.labels.len()).max(maps.tags.len()).max(1)
}

/// The vocabulary a slot reads.
#[derive(Debug, Clone)]
enum Lookup {
    None,
    Terms(Arc<TermMap>),
    Affix {
        table: Arc<AffixMap>,
        length: u32,
        prefix: bool,
    },
    Ngrams {
        table: Arc<NgramTable>,
        options: NgramOptions,
        words: Arc<TermMap>,
    },
}

/// One template of a fixed channel, ready to extract.
#[derive(Debug, Clone)]
struct Slot {
    text: String,
    feature: Feature,
    /// The number of base values (terms, tags, labels, affixes, categories): the unknown
    /// value where there is one, and the first special value.
    base: usize,
    /// The number of values the slot's ids take.
    domain: usize,
    /// The unknown term's id, for value types that have one.
    unknown: Option<usize>,
    lookup: Lookup,
}

impl Slot {
    /// Appends the slot's features for `state`: one (or none) from [`Slot::value`], or for
    /// `char-ngram` at a word, one per n-gram of its form the table holds (the unknown id
    /// when it holds none).
    fn extract_into(&self, state: &ParserState, slot: usize, out: &mut Vec<FixedFeature>) {
        if let (
            Feature::Token { path, token, .. },
            Lookup::Ngrams {
                table,
                options,
                words,
            },
        ) = (&self.feature, &self.lookup)
        {
            let focus = path.locate(state);
            let at = i64::from(focus) + token.unwrap_or(0);
            if (0..state.num_tokens() as i64).contains(&at) {
                let before = out.len();
                let known = state
                    .word_id(words, at as usize)
                    .and_then(|w| table.of_term(w));
                if let Some(ids) = known {
                    // a word of the map: its n-grams' ids were found when the table was built
                    out.extend(ids.iter().map(|&id| FixedFeature {
                        slot,
                        id: i64::from(id),
                        weight: 1.0,
                    }));
                } else {
                    char_ngrams(state.sentence().form(at as usize), *options, |g| {
                        if let Some(id) = table.id(g) {
                            out.push(FixedFeature {
                                slot,
                                id: id as i64,
                                weight: 1.0,
                            });
                        }
                    });
                }
                if out.len() == before {
                    out.push(FixedFeature {
                        slot,
                        id: self.base as i64,
                        weight: 1.0,
                    });
                }
                return;
            }
        }
        if let Some(id) = self.value(state) {
            out.push(FixedFeature {
                slot,
                id,
                weight: 1.0,
            });
        }
    }

    fn value(&self, state: &ParserState) -> Option<i64> {
        match &self.feature {
            Feature::LastAction(k) => Some(if *k == 0 {
                i64::from(state.last_action()) + 1
            } else {
                0
            }),
            Feature::Token { path, token, value } => {
                let focus = path.locate(state);
                match token {
                    None => self.parser_value(state, focus, *value),
                    Some(offset) => self.sentence_value(state, focus as i64 + offset, *value),
                }
            }
        }
    }

    /// The base value of an in-range token (a term id, unknown = `base`).
    fn lookup(&self, state: &ParserState, focus: usize, value: TokenValue) -> Option<i64> {
        let b = self.base as i64;
        let sentence = state.sentence();
        Some(match value {
            TokenValue::Lemma => match &self.lookup {
                Lookup::Terms(map) => state.lemma_id(map, focus).map_or(b, |id| id as i64),
                _ => b,
            },
            TokenValue::Word | TokenValue::KnownWord => {
                let id = match &self.lookup {
                    Lookup::Terms(map) => state.word_id(map, focus),
                    _ => None,
                };
                match (id, value) {
                    (Some(id), _) => id as i64,
                    (None, TokenValue::KnownWord) => return None,
                    (None, _) => b,
                }
            }
            TokenValue::Char => {
                let form = sentence.form(focus);
                if is_break_char(form) {
                    b
                } else {
                    match &self.lookup {
                        Lookup::Terms(map) => map.lookup(form).map_or(b + 1, |id| id as i64),
                        _ => b + 1,
                    }
                }
            }
            TokenValue::Tag => {
                let t = state.gold_tag(focus as i32);
                if t >= 0 {
                    i64::from(t)
                } else {
                    b
                }
            }
            TokenValue::Label => {
                let l = state.gold_label(focus as i32);
                if l >= 0 {
                    i64::from(l)
                } else {
                    b
                }
            }
            TokenValue::Shape(c) => c.value(sentence, focus) as i64,
            TokenValue::Prefix(_) | TokenValue::Suffix(_) => match &self.lookup {
                Lookup::Affix {
                    table,
                    length,
                    prefix,
                } => AffixMap::affix(sentence.form(focus), *length, *prefix)
                    .and_then(|a| table.id(a))
                    .map_or(b, |id| id as i64),
                _ => b,
            },
            // the first n-gram the table holds (`FixedChannel::extract` gives them all)
            TokenValue::CharNgram(_) => match &self.lookup {
                Lookup::Ngrams { table, options, .. } => {
                    let mut first = None;
                    char_ngrams(sentence.form(focus), *options, |g| {
                        first = first.or_else(|| table.id(g));
                    });
                    first.map_or(b, |id| id as i64)
                }
                _ => b,
            },
            TokenValue::PredTag | TokenValue::Focus | TokenValue::GoldHead => return None,
        })
    }

    /// A parser feature: `<ROOT>` for the root, `<OUTSIDE>` for no token.
    fn parser_value(&self, state: &ParserState, focus: i32, value: TokenValue) -> Option<i64> {
        let n = state.num_tokens() as i32;
        let inside = (0..n).contains(&focus);
        let b = self.base as i64;
        match value {
            TokenValue::Focus => (focus >= 0).then_some(i64::from(focus)),
            TokenValue::GoldHead => {
                let head = if (-1..n).contains(&focus) {
                    state.gold_head(focus)
                } else {
                    focus
                };
                (head >= 0).then_some(i64::from(head))
            }
            TokenValue::PredTag => {
                let t = if inside { state.tag(focus) } else { -1 };
                (t >= 0).then_some(i64::from(t))
            }
            TokenValue::KnownWord => match focus {
                -1 => Some(b),
                _ if inside => self.lookup(state, focus as usize, value),
                _ => None,
            },
            TokenValue::Label => Some(match focus {
                -1 => b + 2,
                _ if !inside => b + 1,
                _ => match state.label(focus) {
                    -1 => b + 2,
                    l if (0..b).contains(&i64::from(l)) => i64::from(l),
                    _ => b,
                },
            }),
            TokenValue::Shape(_) => Some(match focus {
                -1 => b + 1,
                _ if !inside => b,
                _ => self.lookup(state, focus as usize, value)?,
            }),
            TokenValue::Char => Some(match focus {
                -1 => b + 3,
                _ if !inside => b + 2,
                _ => self.lookup(state, focus as usize, value)?,
            }),
            TokenValue::Word
            | TokenValue::Lemma
            | TokenValue::Tag
            | TokenValue::Prefix(_)
            | TokenValue::Suffix(_)
            | TokenValue::CharNgram(_) => Some(match focus {
                -1 => b + 2,
                _ if !inside => b + 1,
                _ => self.lookup(state, focus as usize, value)?,
            }),
        }
    }

    /// A sentence feature (inside `token`): `<OUTSIDE>` for the root and no token.
    fn sentence_value(&self, state: &ParserState, focus: i64, value: TokenValue) -> Option<i64> {
        let inside = (0..state.num_tokens() as i64).contains(&focus);
        let b = self.base as i64;
        if inside {
            return self.lookup(state, focus as usize, value);
        }
        match value {
            TokenValue::KnownWord => None,
            TokenValue::Shape(_) => Some(b),
            TokenValue::Char => Some(b + 2),
            _ => Some(b + 1),
        }
    }
}

/// A fixed-feature channel: one slot per template of the channel's `fml`, each giving at most
/// one id per state (none where SyntaxNet extracts none: `known-word` of an unknown or absent
/// word, `pred-tag` of an untagged token, `focus`/`gold-head` of no token), except
/// `char-ngram`, which gives one id per n-gram of a word's form.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::features::{FixedChannel, FixedFeatures};
/// use kiln_dragnn::spec::FixedFeatureChannel;
/// use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default()); // words a = 0, b = 1
/// let spec = FixedFeatureChannel {
///     name: Some("words".into()),
///     fml: Some("input.word stack.word input(1).word".into()),
///     ..Default::default()
/// };
/// let channel = FixedChannel::new(&spec, &maps).unwrap();
/// assert_eq!(channel.vocabulary_size(), 2 + 3); // 2 words, <UNKNOWN>, <OUTSIDE>, <ROOT>
/// let sys = create("arc-standard", NO_PARAMS).unwrap();
/// let s = sys.initial_state(Arc::new(doc[0].clone()), &maps);
/// let mut out = Vec::new();
/// channel.extract(&s, &mut out);
/// let ids: Vec<i64> = out.iter().map(|f| f.id).collect();
/// assert_eq!(ids, [0, 4, 1]); // a, <ROOT> (the root on the stack), b
/// ```
#[derive(Clone)]
pub struct FixedChannel {
    name: String,
    slots: Vec<Slot>,
    vocabulary_size: usize,
}

impl FixedChannel {
    /// Builds the channel `spec` describes over `maps`, with `last-action` sized by
    /// [`default_num_actions`].
    ///
    /// ```
    /// use kiln_dragnn::{features::FixedChannel, spec::FixedFeatureChannel, term_map::TermMaps};
    /// let spec = FixedFeatureChannel { name: Some("x".into()), fml: Some("stack.wrod".into()), ..Default::default() };
    /// assert!(FixedChannel::new(&spec, &TermMaps::default()).is_err());
    /// ```
    pub fn new(spec: &FixedFeatureChannel, maps: &TermMaps) -> Result<FixedChannel, FeatureError> {
        FixedChannel::with_num_actions(spec, maps, default_num_actions(maps))
    }

    /// Builds the channel `spec` describes over `maps`, for a transition system with
    /// `num_actions` actions (`last-action` then takes `num_actions + 1` values).
    ///
    /// ```
    /// use kiln_dragnn::features::{FixedChannel, FixedFeatures};
    /// use kiln_dragnn::{spec::FixedFeatureChannel, term_map::TermMaps};
    /// let spec = FixedFeatureChannel { name: Some("action".into()), fml: Some("last-action".into()), ..Default::default() };
    /// let channel = FixedChannel::with_num_actions(&spec, &TermMaps::default(), 93).unwrap();
    /// assert_eq!(channel.vocabulary_size(), 94);
    /// ```
    pub fn with_num_actions(
        spec: &FixedFeatureChannel,
        maps: &TermMaps,
        num_actions: usize,
    ) -> Result<FixedChannel, FeatureError> {
        let name = spec.name().to_owned();
        let templates = parse_channel(&name, spec.fml(), spec.size)?;
        let mut words: Option<Arc<TermMap>> = None;
        let mut chars: Option<Arc<TermMap>> = None;
        let mut slots = Vec::with_capacity(templates.len());
        for t in &templates {
            let feature = compile(&name, t)?;
            let (base, extra, lookup) = match &feature {
                Feature::LastAction(_) => (num_actions + 1, 0, Lookup::None),
                Feature::Token { token, value, .. } => {
                    let parser = token.is_none();
                    // Specials after the base values: <OUTSIDE> (and <ROOT> for parser
                    // features), plus what the value type reserves itself.
                    let specials = 1 + usize::from(parser);
                    match value {
                        TokenValue::Word | TokenValue::KnownWord => {
                            let map = words
                                .get_or_insert_with(|| Arc::new(maps.words.clone()))
                                .clone();
                            let extra = if *value == TokenValue::KnownWord {
                                usize::from(parser) // <ROOT> only; no unknown, no outside
                            } else {
                                1 + specials
                            };
                            (map.len(), extra, Lookup::Terms(map))
                        }
                        TokenValue::Lemma => {
                            let map = Arc::new(maps.lemmas.clone());
                            (map.len(), 1 + specials, Lookup::Terms(map))
                        }
                        TokenValue::Char => {
                            let map = chars
                                .get_or_insert_with(|| Arc::new(maps.chars.clone()))
                                .clone();
                            // <BREAK_CHAR> and <UNKNOWN>, then the specials
                            (map.len(), 2 + specials, Lookup::Terms(map))
                        }
                        TokenValue::Tag | TokenValue::PredTag => {
                            (maps.tags.len(), 1 + specials, Lookup::None)
                        }
                        TokenValue::Label => (maps.labels.len(), 1 + specials, Lookup::None),
                        TokenValue::Shape(c) => (c.cardinality(), specials, Lookup::None),
                        TokenValue::Prefix(n) | TokenValue::Suffix(n) => {
                            let prefix = matches!(value, TokenValue::Prefix(_));
                            let table = maps.words.affixes(*n, prefix);
                            let size = table.len();
                            let lookup = Lookup::Affix {
                                table,
                                length: *n,
                                prefix,
                            };
                            (size, 1 + specials, lookup)
                        }
                        TokenValue::CharNgram(options) => {
                            let table = maps.words.char_ngrams(*options);
                            let size = table.len();
                            let words = words
                                .get_or_insert_with(|| Arc::new(maps.words.clone()))
                                .clone();
                            let lookup = Lookup::Ngrams {
                                table,
                                options: *options,
                                words,
                            };
                            (size, 1 + specials, lookup)
                        }
                        TokenValue::Focus | TokenValue::GoldHead => {
                            (NUMERIC_DOMAIN, 0, Lookup::None)
                        }
                    }
                }
            };
            let unknown = match &feature {
                Feature::Token { value, .. } => match value {
                    TokenValue::Word
                    | TokenValue::Lemma
                    | TokenValue::Tag
                    | TokenValue::Label
                    | TokenValue::Prefix(_)
                    | TokenValue::Suffix(_)
                    | TokenValue::CharNgram(_) => Some(base),
                    // after <BREAK_CHAR>
                    TokenValue::Char => Some(base + 1),
                    _ => None,
                },
                Feature::LastAction(_) => None,
            };
            slots.push(Slot {
                text: t.to_string(),
                feature,
                base,
                domain: base + extra,
                unknown,
                lookup,
            });
        }
        let vocabulary_size = slots.iter().map(|s| s.domain).max().unwrap_or(0);
        Ok(FixedChannel {
            name,
            slots,
            vocabulary_size,
        })
    }

    /// The templates, one per slot, in canonical FML.
    ///
    /// ```
    /// use kiln_dragnn::{features::FixedChannel, spec::FixedFeatureChannel, term_map::TermMaps};
    /// let spec = FixedFeatureChannel { name: Some("o".into()), fml: Some("input.token {digit quote}".into()), ..Default::default() };
    /// let channel = FixedChannel::new(&spec, &TermMaps::default()).unwrap();
    /// assert_eq!(channel.templates().collect::<Vec<_>>(), ["input.token.digit", "input.token.quote"]);
    /// ```
    pub fn templates(&self) -> impl Iterator<Item = &str> + '_ {
        self.slots.iter().map(|s| s.text.as_str())
    }

    /// The typed template of each slot.
    ///
    /// ```
    /// use kiln_dragnn::features::{FixedChannel, template::Feature};
    /// use kiln_dragnn::{spec::FixedFeatureChannel, term_map::TermMaps};
    /// let spec = FixedFeatureChannel { name: Some("a".into()), fml: Some("last-action".into()), ..Default::default() };
    /// let channel = FixedChannel::new(&spec, &TermMaps::default()).unwrap();
    /// assert_eq!(channel.features().collect::<Vec<_>>(), [&Feature::LastAction(0)]);
    /// ```
    pub fn features(&self) -> impl Iterator<Item = &Feature> + '_ {
        self.slots.iter().map(|s| &s.feature)
    }

    /// The number of values slot `slot`'s ids take (the channel's `vocabulary_size` is the
    /// largest); `None` past the last slot.
    ///
    /// ```
    /// use kiln_dragnn::features::{FixedChannel, FixedFeatures};
    /// use kiln_dragnn::{spec::FixedFeatureChannel, term_map::TermMaps};
    /// let spec = FixedFeatureChannel { name: Some("o".into()), fml: Some("input.token {digit quote}".into()), ..Default::default() };
    /// let channel = FixedChannel::new(&spec, &TermMaps::default()).unwrap();
    /// assert_eq!((channel.domain_size(0), channel.domain_size(1)), (Some(4), Some(5)));
    /// assert_eq!(channel.vocabulary_size(), 5);
    /// ```
    pub fn domain_size(&self, slot: usize) -> Option<usize> {
        self.slots.get(slot).map(|s| s.domain)
    }

    /// The id of every slot for `state` (`None` where the slot gives no feature; for
    /// `char-ngram` at a word, the first of its ids).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// use kiln_dragnn::{features::FixedChannel, spec::FixedFeatureChannel};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let spec = FixedFeatureChannel { name: Some("f".into()), fml: Some("input.focus stack.focus".into()), ..Default::default() };
    /// let channel = FixedChannel::new(&spec, &TermMaps::default()).unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// assert_eq!(channel.slot_ids(&s), [Some(0), None]);
    /// ```
    pub fn slot_ids(&self, state: &ParserState) -> Vec<Option<i64>> {
        self.slots.iter().map(|s| s.value(state)).collect()
    }
}

impl fmt::Debug for FixedChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedChannel")
            .field("name", &self.name)
            .field("templates", &self.templates().collect::<Vec<_>>())
            .field("vocabulary_size", &self.vocabulary_size)
            .finish()
    }
}

impl FixedFeatures for FixedChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> usize {
        self.slots.len()
    }

    fn vocabulary_size(&self) -> usize {
        self.vocabulary_size
    }

    fn unknown_id(&self) -> Option<usize> {
        let first = self.slots.first()?.unknown?;
        self.slots
            .iter()
            .all(|s| s.unknown == Some(first))
            .then_some(first)
    }

    fn extract(&self, state: &ParserState, out: &mut Vec<FixedFeature>) {
        for (slot, s) in self.slots.iter().enumerate() {
            s.extract_into(state, slot, out);
        }
    }
}

/// A linked-feature channel: each template is a path ending in `focus`, and gives the
/// located token's index, or -1 where the path locates no token (the root, a position past
/// either end of the input or the stack, a missing child or sibling).
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps};
/// use kiln_dragnn::features::{LinkChannel, LinkFeatures};
/// use kiln_dragnn::spec::LinkedFeatureChannel;
/// use kiln_dragnn::transition::{create, TransitionSystem, NO_PARAMS};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_").unwrap();
/// let spec = LinkedFeatureChannel {
///     name: Some("tagger".into()),
///     fml: Some("input.focus stack.focus stack(1).focus".into()),
///     ..Default::default()
/// };
/// let channel = LinkChannel::new(&spec).unwrap();
/// let sys = create("arc-standard", NO_PARAMS).unwrap();
/// let mut s = sys.initial_state(Arc::new(doc[0].clone()), &TermMaps::default());
/// assert_eq!(channel.extract(&s), [0, -1, -1]);
/// sys.perform(&mut s, 0).unwrap(); // SHIFT
/// assert_eq!(channel.extract(&s), [1, 0, -1]);
/// ```
#[derive(Debug, Clone)]
pub struct LinkChannel {
    name: String,
    templates: Vec<(String, Path)>,
}

impl LinkChannel {
    /// Builds the channel `spec` describes.
    ///
    /// ```
    /// use kiln_dragnn::{features::LinkChannel, spec::LinkedFeatureChannel};
    /// let spec = LinkedFeatureChannel { name: Some("l".into()), fml: Some("input.word".into()), ..Default::default() };
    /// assert!(LinkChannel::new(&spec).is_err()); // a link ends in `focus`
    /// ```
    pub fn new(spec: &LinkedFeatureChannel) -> Result<LinkChannel, FeatureError> {
        let name = spec.name().to_owned();
        let parsed = parse_channel(&name, spec.fml(), spec.size)?;
        let mut templates = Vec::with_capacity(parsed.len());
        for t in &parsed {
            let text = t.to_string();
            match compile(&name, t) {
                Ok(Feature::Token {
                    path,
                    token: None,
                    value: TokenValue::Focus,
                }) => templates.push((text, path)),
                Ok(_) => {
                    let last = t.chain.last().map_or("", |c| c.kind.as_str());
                    return Err(FeatureError::UnknownFeature {
                        channel: name,
                        template: text,
                        feature: last.to_owned(),
                        expected: "a linked feature ends in `focus` (its value is a token index)"
                            .to_owned(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(LinkChannel { name, templates })
    }

    /// The templates, in canonical FML.
    ///
    /// ```
    /// use kiln_dragnn::{features::LinkChannel, spec::LinkedFeatureChannel};
    /// let spec = LinkedFeatureChannel { name: Some("r".into()), fml: Some("stack(0).focus stack(1).focus".into()), ..Default::default() };
    /// assert_eq!(LinkChannel::new(&spec).unwrap().templates().collect::<Vec<_>>(), ["stack(0).focus", "stack(1).focus"]);
    /// ```
    pub fn templates(&self) -> impl Iterator<Item = &str> + '_ {
        self.templates.iter().map(|(t, _)| t.as_str())
    }
}

impl LinkFeatures for LinkChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> usize {
        self.templates.len()
    }

    fn extract(&self, state: &ParserState) -> Vec<i32> {
        let n = state.num_tokens() as i32;
        self.templates
            .iter()
            .map(|(_, path)| {
                let focus = path.locate(state);
                if (0..n).contains(&focus) {
                    focus
                } else {
                    -1
                }
            })
            .collect()
    }
}

/// Parses a channel's `fml` into templates and checks them against the channel's `size`.
fn parse_channel(
    channel: &str,
    fml: &str,
    size: Option<i32>,
) -> Result<Vec<Template>, FeatureError> {
    let templates = parse_templates(fml).map_err(|e| FeatureError::Parse {
        channel: channel.to_owned(),
        template: fml.to_owned(),
        message: e.to_string(),
    })?;
    if let Some(size) = size {
        if usize::try_from(size).ok() != Some(templates.len()) {
            return Err(FeatureError::SizeMismatch {
                channel: channel.to_owned(),
                fml: fml.to_owned(),
                size,
                templates: templates.len(),
            });
        }
    }
    Ok(templates)
}

//! [`InputBatchCache`]: a batch of serialized input items (one string each, as DRAGNN's
//! sessions receive them), converted once to a typed form that components share and update,
//! and serialized again for the caller (`GetSerializedPredictions`).
//!
//! The typed form is any [`BatchData`]; [`Sentences`] (one CoNLL-U sentence per item) is the
//! one the parser components use.
//!
//! Depends on [`crate::document`].

use crate::document::{read_conllu, write_conllu, DocumentError, Sentence};
use std::any::Any;

/// Errors of the input batch, with the reference's messages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The batch was already converted to another type.
    #[error(
        "Attempted to convert to two object types! (converted to {first}, asked for {second})"
    )]
    TwoTypes {
        /// The type it was converted to.
        first: &'static str,
        /// The type asked for now.
        second: &'static str,
    },
    /// Data added after the batch was converted.
    #[error("You may not add data to an InputBatchCache after calling GetAs()")]
    AddAfterConversion,
    /// Serialized data asked for before the batch was converted.
    #[error("Cannot return batch without data. (convert it with get_as first)")]
    NotConverted,
    /// An item that does not convert.
    #[error("input item {index}: {source}")]
    Item {
        /// The item's position in the batch.
        index: usize,
        /// Why it does not convert.
        source: DocumentError,
    },
    /// An item that holds no sentence, or more than one.
    #[error("input item {index} holds {count} sentences; each item is one sentence")]
    NotOneSentence {
        /// The item's position in the batch.
        index: usize,
        /// How many it holds.
        count: usize,
    },
}

/// A typed form of a batch of serialized items.
pub trait BatchData: Any + Send + Sized {
    /// Converts the serialized items.
    fn deserialize(items: &[String]) -> Result<Self, InputError>;
    /// The items, serialized again (with whatever the components wrote into them).
    fn serialize(&self) -> Vec<String>;
}

/// The batch's sentences, one CoNLL-U sentence per serialized item.
///
/// ```
/// use kiln_dragnn::input::{BatchData, Sentences};
/// let item = "1\tEv\tev\tNOUN\tNoun\t_\t0\tROOT\t_\t_\n".to_string();
/// let s = Sentences::deserialize(&[item.clone()]).unwrap();
/// assert_eq!(s.0[0].form(0), "Ev");
/// assert_eq!(s.serialize(), vec![item]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Sentences(pub Vec<Sentence>);

impl BatchData for Sentences {
    fn deserialize(items: &[String]) -> Result<Sentences, InputError> {
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let mut parsed =
                read_conllu(item).map_err(|source| InputError::Item { index, source })?;
            if parsed.len() != 1 {
                return Err(InputError::NotOneSentence {
                    index,
                    count: parsed.len(),
                });
            }
            out.push(parsed.remove(0));
        }
        Ok(Sentences(out))
    }

    fn serialize(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|s| write_conllu(std::slice::from_ref(s)))
            .collect()
    }
}

/// A batch of serialized input items and, once asked for, their typed form.
///
/// ```
/// use kiln_dragnn::input::{InputBatchCache, Sentences};
/// let mut batch = InputBatchCache::new(vec!["1\tEv\tev\tNOUN\tNoun\t_\t0\tROOT\t_\t_\n".into()]);
/// assert!(batch.serialized_data().is_err()); // not converted yet
/// let sentences = batch.get_as::<Sentences>()?;
/// assert_eq!(sentences.0.len(), 1);
/// assert!(batch.add_data("more".into()).is_err()); // converted: the batch is fixed
/// assert_eq!(batch.serialized_data()?.len(), 1);
/// # Ok::<(), kiln_dragnn::input::InputError>(())
/// ```
#[derive(Default)]
pub struct InputBatchCache {
    items: Vec<String>,
    converted: Option<Converted>,
}

/// The typed form, its type's name, and how to serialize it again.
type Converted = (
    Box<dyn Any + Send>,
    &'static str,
    fn(&dyn Any) -> Vec<String>,
);

impl std::fmt::Debug for InputBatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputBatchCache")
            .field("items", &self.items.len())
            .field("converted_to", &self.converted.as_ref().map(|c| c.1))
            .finish()
    }
}

impl InputBatchCache {
    /// A batch of serialized items.
    pub fn new(items: Vec<String>) -> InputBatchCache {
        InputBatchCache {
            items,
            converted: None,
        }
    }

    /// Adds an item; an error once the batch has been converted.
    pub fn add_data(&mut self, item: String) -> Result<(), InputError> {
        if self.converted.is_some() {
            return Err(InputError::AddAfterConversion);
        }
        self.items.push(item);
        Ok(())
    }

    /// The number of items.
    pub fn size(&self) -> usize {
        self.items.len()
    }

    /// The typed form, converted on the first call and cached; asking for a second type is
    /// an error.
    pub fn get_as<T: BatchData>(&mut self) -> Result<&mut T, InputError> {
        if self.converted.is_none() {
            let data = T::deserialize(&self.items)?;
            fn ser<T: BatchData>(a: &dyn Any) -> Vec<String> {
                a.downcast_ref::<T>().map(T::serialize).unwrap_or_default()
            }
            self.converted = Some((Box::new(data), std::any::type_name::<T>(), ser::<T>));
        }
        let (data, first, _) = self.converted.as_mut().expect("converted above");
        let first = *first;
        data.downcast_mut::<T>().ok_or(InputError::TwoTypes {
            first,
            second: std::any::type_name::<T>(),
        })
    }

    /// The items serialized again from the typed form (with what components wrote into it);
    /// an error before conversion.
    pub fn serialized_data(&self) -> Result<Vec<String>, InputError> {
        let (data, _, ser) = self.converted.as_ref().ok_or(InputError::NotConverted)?;
        Ok(ser(data.as_ref()))
    }
}

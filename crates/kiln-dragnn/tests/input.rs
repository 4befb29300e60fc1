//! The input batch against the reference's `input_batch_cache` contract: conversion happens
//! once, a second type is refused, adding after conversion is refused, serialized data needs a
//! conversion first; and sentences written by components come back out.
//!
//! Depends on `kiln_dragnn::input` and `kiln_dragnn::document`.

use kiln_dragnn::document::Column;
use kiln_dragnn::input::{BatchData, InputBatchCache, InputError, Sentences};
use std::sync::atomic::{AtomicUsize, Ordering};

static CONVERSIONS: AtomicUsize = AtomicUsize::new(0);

/// A typed form that counts its conversions and upper-cases the items.
#[derive(Debug)]
struct Upper(Vec<String>);

impl BatchData for Upper {
    fn deserialize(items: &[String]) -> Result<Upper, InputError> {
        CONVERSIONS.fetch_add(1, Ordering::SeqCst);
        Ok(Upper(items.iter().map(|s| s.to_uppercase()).collect()))
    }
    fn serialize(&self) -> Vec<String> {
        self.0.clone()
    }
}

/// Another typed form.
#[derive(Debug)]
struct Lengths;

impl BatchData for Lengths {
    fn deserialize(_: &[String]) -> Result<Lengths, InputError> {
        Ok(Lengths)
    }
    fn serialize(&self) -> Vec<String> {
        Vec::new()
    }
}

#[test]
fn converts_once_and_refuses_a_second_type_and_late_data() {
    let mut batch = InputBatchCache::new(vec!["a".into(), "b".into()]);
    batch.add_data("c".into()).unwrap();
    assert!(matches!(
        batch.serialized_data(),
        Err(InputError::NotConverted)
    ));
    let before = CONVERSIONS.load(Ordering::SeqCst);
    assert_eq!(batch.get_as::<Upper>().unwrap().0, ["A", "B", "C"]);
    batch.get_as::<Upper>().unwrap().0[1] = "changed".into();
    assert_eq!(batch.get_as::<Upper>().unwrap().0[1], "changed"); // the cached form
    assert_eq!(CONVERSIONS.load(Ordering::SeqCst), before + 1);
    let e = batch.get_as::<Lengths>().unwrap_err();
    assert!(
        e.to_string()
            .contains("Attempted to convert to two object types"),
        "{e}"
    );
    let e = batch.add_data("d".into()).unwrap_err();
    assert!(e.to_string().contains("You may not add data"), "{e}");
    assert_eq!(batch.serialized_data().unwrap(), ["A", "changed", "C"]);
    assert_eq!(batch.size(), 3);
}

#[test]
fn sentences_written_by_components_come_back_serialized() {
    let item = "# sent_id = 1\n1\tEv\tev\tNOUN\tNoun\t_\t2\tOBJ\t_\t_\n2\tgördüm\tgör\tVERB\tVerb\t_\t0\tROOT\t_\t_\n";
    let mut batch = InputBatchCache::new(vec![item.into()]);
    let s = batch.get_as::<Sentences>().unwrap();
    s.0[0].set_field(0, Column::Deprel, "SUBJ").unwrap();
    let out = batch.serialized_data().unwrap();
    assert_eq!(out, [item.replace("OBJ", "SUBJ")]);
}

#[test]
fn a_bad_item_is_an_error_naming_it() {
    let mut batch = InputBatchCache::new(vec![
        "1\tEv\tev\tNOUN\tNoun\t_\t0\tROOT\t_\t_\n".into(),
        "not conllu".into(),
    ]);
    let e = batch.get_as::<Sentences>().unwrap_err();
    assert!(e.to_string().starts_with("input item 1"), "{e}");
    // Nothing was cached: the batch can still be converted to another type.
    assert!(batch.get_as::<Upper>().is_ok());
}

//! `save_safetensors` writes a whole checkpoint or nothing: duplicate, empty and reserved
//! names, values that fail to evaluate, missing directories and paths that name no file are
//! errors (never panics) that name the operation, the parameter or file and a fix.
//! They leave no file and no temporary file behind, and an existing checkpoint at the path
//! stays as it was.
//! Also: a read error names the function the caller called.

mod common;

use common::{entries, scratch};
use kiln::{Array, DType};
use kiln_optim::{load_safetensors, read_safetensors, save_safetensors, Error, Parameter};

fn weights() -> Parameter {
    Parameter::new("w", Array::from_vec(vec![1.5f32, -2.0], &[2]).unwrap())
}

fn bias() -> Parameter {
    Parameter::new("b", Array::from_vec(vec![7i64], &[1]).unwrap())
}

/// A parameter whose value fails to evaluate (a `take` out of range).
fn failing(name: &str) -> Parameter {
    let table = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let idx = Array::from_vec(vec![0i64, 9], &[2]).unwrap();
    Parameter::new(name, table.take(&idx, 0))
}

#[test]
fn duplicate_names_are_an_error_and_write_nothing() {
    let dir = scratch("duplicates");
    let path = dir.join("model.safetensors");
    let (w, b) = (weights(), bias());
    let twin = Parameter::new("w", Array::zeros(&[2], DType::F32));
    let e = save_safetensors(&path, &[&w, &b, &twin]).unwrap_err();
    let message = e.to_string();
    assert!(
        matches!(&e, Error::Duplicate { name, first: 0, second: 2, .. } if name == "w"),
        "{e:?}"
    );
    assert!(
        message.starts_with("save_safetensors")
            && message.contains("\"w\"")
            && message.contains(&path.display().to_string())
            && message.contains("distinct name"),
        "{message}"
    );
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    // the same parameter twice is a duplicate too
    assert!(matches!(
        save_safetensors(&path, &[&w, &w]),
        Err(Error::Duplicate { .. })
    ));
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_failed_save_leaves_an_existing_checkpoint_intact() {
    let dir = scratch("intact");
    let path = dir.join("model.safetensors");
    let (w, b) = (weights(), bias());
    save_safetensors(&path, &[&w, &b]).unwrap();
    let saved = std::fs::read(&path).unwrap();
    let twin = Parameter::new("b", Array::zeros(&[1], DType::I64));
    let empty = Parameter::new("", Array::zeros(&[1], DType::F32));
    let reserved = Parameter::new("__metadata__", Array::zeros(&[1], DType::F32));
    let bad = failing("layer.broken");
    let attempts: [(&[&Parameter], &[&str]); 4] = [
        (&[&w, &b, &twin], &["\"b\"", "#1 and #2"]),
        (&[&w, &empty], &["parameter #1", "\"\"", "rename it"]),
        (
            &[&reserved, &w],
            &["parameter #0", "\"__metadata__\"", "reserves it"],
        ),
        (
            &[&w, &bad],
            &["value of parameter \"layer.broken\"", "nothing was written"],
        ),
    ];
    for (params, says) in attempts {
        let e = save_safetensors(&path, params).unwrap_err().to_string();
        assert!(e.starts_with("save_safetensors: "), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        for s in says {
            assert!(e.contains(s), "{e:?} lacks {s:?}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), saved, "{e}");
        assert_eq!(entries(&dir), vec!["model.safetensors"], "{e}");
    }
    // and a good save replaces it whole, leaving no temporary file
    let w2 = Parameter::new("w", Array::from_vec(vec![0.25f32, 8.0], &[2]).unwrap());
    save_safetensors(&path, &[&w2, &b]).unwrap();
    assert_eq!(entries(&dir), vec!["model.safetensors"]);
    let fresh = weights();
    load_safetensors(&path, &[&fresh]).unwrap();
    assert_eq!(fresh.value().to_vec::<f32>().unwrap(), vec![0.25, 8.0]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn paths_that_cannot_be_written_are_io_errors_not_panics() {
    let dir = scratch("paths");
    let w = weights();
    // a directory that does not exist: an error naming the path, and nothing is created
    let missing = dir.join("no").join("such").join("model.safetensors");
    let e = save_safetensors(&missing, &[&w]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with("save_safetensors: ")
            && e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    // a path that is a directory: the temporary file is removed again
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let e = save_safetensors(&sub, &[&w]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_eq!(entries(&dir), vec!["sub"]);
    assert!(entries(&sub).is_empty());
    // a path that names no file
    let e = save_safetensors(sub.join(".."), &[&w]).unwrap_err();
    assert!(e.to_string().contains("names no file"), "{e}");
    assert_eq!(entries(&dir), vec!["sub"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_parameters_save_an_empty_checkpoint() {
    let dir = scratch("empty");
    let path = dir.join("none.safetensors");
    save_safetensors(&path, &[]).unwrap();
    assert!(read_safetensors(&path).unwrap().is_empty());
    assert_eq!(entries(&dir), vec!["none.safetensors"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn read_errors_name_the_function_called() {
    let dir = scratch("read");
    let path = dir.join("junk.safetensors");
    std::fs::write(&path, b"not a checkpoint").unwrap();
    let e = read_safetensors(&path).unwrap_err().to_string();
    assert!(e.starts_with("read_safetensors: "), "{e}");
    let p = weights();
    let e = load_safetensors(&path, &[&p]).unwrap_err().to_string();
    assert!(e.starts_with("load_safetensors: "), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

//! What kiln-beam's command-line programs share: the error of reading their options, the YAML config file (`-c FILE.yml`), and the merge of the command line over that file with the range checks of every value.
//!
//! Each program parses its command line with `clap` into a struct whose every value is optional, reads the config file into a struct of the same shape with `serde`, and then asks a [`Merge`] for each value: the command line's if given, else the file's, checked, with the file named in the error when the value came from it.
//! The YAML reader is `serde_norway`, a maintained fork of the deprecated `serde_yaml` 0.9 with the same API (the choice is argued in `kiln-translate`'s module doc).
//!
//! Depends on `clap`, `serde` and `serde_norway` only.

// each program uses part of what the two share
#![allow(dead_code)]

use serde::de::{
    self, Deserialize, DeserializeOwned, Deserializer, IntoDeserializer, SeqAccess, Visitor,
};
use std::fmt::Display;
use std::marker::PhantomData;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Why a program's options cannot be used; each one is a usage error (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    /// The config file cannot be read.
    #[error("--config {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The config file is not YAML of the program's options (an unknown key, a value of the wrong type).
    #[error("--config {}: {source}", .path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the key and the line.
        source: serde_norway::Error,
    },
    /// A value out of its range, or options that do not go together.
    #[error("{option}: {message}{}", .file.as_ref().map(|f| format!(" (set by {})", f.display())).unwrap_or_default())]
    Invalid {
        /// The option, as written on the command line (`--beam-size`).
        option: &'static str,
        /// What is wrong and what is allowed.
        message: String,
        /// The config file that gave the value, if the command line did not.
        file: Option<PathBuf>,
    },
}

impl OptionError {
    /// An error of `option` that no single source is to blame for.
    pub fn invalid(option: &'static str, message: impl Into<String>) -> OptionError {
        OptionError::Invalid {
            option,
            message: message.into(),
            file: None,
        }
    }
}

/// Prints `e` as clap prints its own usage errors (with the usage line of `command`) and exits with status 2.
pub fn exit_usage(mut command: clap::Command, e: &OptionError) -> ! {
    command
        .error(clap::error::ErrorKind::ValueValidation, e)
        .exit()
}

/// Reads the config file at `path` into `T`; an empty file (or one of comments only) sets nothing.
pub fn read_config<T: DeserializeOwned + Default>(path: &Path) -> Result<T, OptionError> {
    let text = std::fs::read_to_string(path).map_err(|source| OptionError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_config(path, &text)
}

/// Parses config-file text (`path` names it in errors).
pub fn parse_config<T: DeserializeOwned + Default>(
    path: &Path,
    text: &str,
) -> Result<T, OptionError> {
    let blank = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---");
    if blank {
        return Ok(T::default());
    }
    serde_norway::from_str(text).map_err(|source| OptionError::Yaml {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the config file at `config`, if any, and hands the command line over it to
/// `options`, which applies the defaults and checks every value (what both binaries'
/// `-c FILE.yml` does).
pub fn resolve<R: DeserializeOwned + Default, O>(
    cli: &R,
    config: Option<&Path>,
    options: impl FnOnce(&Merge<'_, R>) -> Result<O, OptionError>,
) -> Result<O, OptionError> {
    let file = match config {
        Some(p) => read_config(p)?,
        None => R::default(),
    };
    options(&Merge {
        cli,
        file: &file,
        path: config,
    })
}

/// The command line's options over the config file's, each value checked as it is taken.
pub struct Merge<'a, R> {
    /// The command line.
    pub cli: &'a R,
    /// The config file's options (all unset without a file).
    pub file: &'a R,
    /// The config file, if there is one.
    pub path: Option<&'a Path>,
}

impl<'a, R> Merge<'a, R> {
    /// The value `get` finds, the command line's first, with the file to blame when it came from there.
    pub fn pick<T>(&self, get: impl Fn(&'a R) -> Option<T>) -> Option<(T, Option<PathBuf>)> {
        match get(self.cli) {
            Some(v) => Some((v, None)),
            None => get(self.file).map(|v| (v, self.path.map(Path::to_path_buf))),
        }
    }

    /// A flag: set on the command line or in the file.
    pub fn flag(&self, get: impl Fn(&'a R) -> bool) -> bool {
        get(self.cli) || get(self.file)
    }

    /// A value that needs no check beyond its type.
    pub fn any<T>(&self, get: impl Fn(&'a R) -> Option<T>) -> Option<T> {
        self.pick(get).map(|(v, _)| v)
    }

    /// A value checked by `check`, which says what is wrong with a bad one.
    pub fn checked<T>(
        &self,
        option: &'static str,
        get: impl Fn(&'a R) -> Option<T>,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<Option<T>, OptionError> {
        match self.pick(get) {
            None => Ok(None),
            Some((v, file)) => match check(&v) {
                Ok(()) => Ok(Some(v)),
                Err(message) => Err(OptionError::Invalid {
                    option,
                    message,
                    file,
                }),
            },
        }
    }

    /// A whole number within `range`.
    pub fn count(
        &self,
        option: &'static str,
        get: impl Fn(&'a R) -> Option<usize>,
        range: RangeInclusive<usize>,
    ) -> Result<Option<usize>, OptionError> {
        self.checked(option, get, |&v| in_range(v, &range))
    }

    /// A finite number for which `ok` holds (`need` says what `ok` asks, e.g. "above 0").
    pub fn real(
        &self,
        option: &'static str,
        get: impl Fn(&'a R) -> Option<f64>,
        ok: impl Fn(f64) -> bool,
        need: &str,
    ) -> Result<Option<f64>, OptionError> {
        self.checked(option, get, |&v| real(v, &ok, need))
    }
}

/// Checks that `v` lies in `range`.
pub fn in_range(v: usize, range: &RangeInclusive<usize>) -> Result<(), String> {
    if range.contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{v} is out of range: give a whole number from {} to {}",
            range.start(),
            range.end()
        ))
    }
}

/// Checks that `v` is finite and that `ok` holds (`need` says what `ok` asks).
pub fn real(v: f64, ok: impl Fn(f64) -> bool, need: &str) -> Result<(), String> {
    if v.is_finite() && ok(v) {
        Ok(())
    } else {
        let need = if need.is_empty() {
            String::new()
        } else {
            format!(" {need}")
        };
        Err(format!("{v} is not allowed: give a finite number{need}"))
    }
}

/// clap's parser of whole numbers, with a message that says so (`2.7`, `inf` and `-1` are refused).
pub fn whole<T: FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| "expected a whole number (such as 4)".to_string())
}

/// Reads a list of the config file: a YAML sequence, or one value (for numbers also comma-separated text, as on the command line).
struct ListVisitor<T> {
    /// What one element is, for error messages.
    what: &'static str,
    /// Whether text is split at commas into numbers (else it is one element).
    split: bool,
    element: PhantomData<T>,
}

impl<'de, T> Visitor<'de> for ListVisitor<T>
where
    T: Deserialize<'de> + FromStr,
    T::Err: Display,
{
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a {0} or a list of them", self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(v)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<T>, E> {
        if !self.split {
            return Ok(vec![T::deserialize(s.into_deserializer())?]);
        }
        s.split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .map_err(|e| E::custom(format!("{p:?} is not a {}: {e}", self.what)))
            })
            .collect()
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<T>, E> {
        Ok(vec![T::deserialize(v.into_deserializer())?])
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<T>, E> {
        Ok(vec![T::deserialize(v.into_deserializer())?])
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<T>, E> {
        Ok(vec![T::deserialize(v.into_deserializer())?])
    }
}

/// Deserializes a list of names: a sequence or one string.
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_any(ListVisitor {
        what: "name",
        split: false,
        element: PhantomData,
    })
}

/// Deserializes a list of numbers: a sequence, one number, or comma-separated text.
pub fn numbers<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + FromStr,
    T::Err: Display,
{
    d.deserialize_any(ListVisitor {
        what: "number",
        split: true,
        element: PhantomData,
    })
    .map(Some)
}

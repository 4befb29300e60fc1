//! numpy-like printing of arrays (`Display` evaluates). Follows numpy's defaults: bools as
//! `True`/`False`, floats with at most 8 significant fractional digits and trailing zeros
//! removed (`1.`, `0.25`), scientific notation for very large/small ranges, right-aligned
//! columns, nested brackets, 75-column wrapping and `...` summaries above 1000 elements.
//! A summarised array is cut to its edges (3 items at each end of every long axis) *before*
//! it is evaluated, so printing a 16M-element array evaluates and formats 36 elements, as
//! numpy formats only what it shows.
//!
//! Depends on [`crate::Array`] (its slicing and `concat`) and `kiln-ir`'s data types.

use crate::Array;
use kiln_ir::{DType, HostData};
use std::fmt;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;
const LINE_WIDTH: usize = 75;

fn trim_fraction(s: &str) -> String {
    // "1.500" -> "1.5", "2.000" -> "2."
    if let Some(dot) = s.find('.') {
        let t = s.trim_end_matches('0');
        if t.len() <= dot + 1 {
            return s[..=dot].to_string();
        }
        return t.to_string();
    }
    format!("{s}.")
}

fn shortest(x: f64, dtype: DType) -> String {
    let s = if dtype == DType::F32 {
        format!("{}", x as f32)
    } else {
        format!("{x}")
    };
    // Cap at 8 fractional digits like numpy's default precision.
    match s.find('.') {
        Some(dot) if s.len() - dot - 1 > 8 => trim_fraction(&format!("{x:.8}")),
        _ => trim_fraction(&s),
    }
}

fn special(x: f64) -> Option<String> {
    if x.is_nan() {
        Some("nan".into())
    } else if x.is_infinite() {
        Some(if x > 0.0 { "inf".into() } else { "-inf".into() })
    } else {
        None
    }
}

/// Formats all float values consistently, as numpy's `FloatingFormat` does.
fn format_floats(vals: &[f64], dtype: DType) -> Vec<String> {
    let finite: Vec<f64> = vals.iter().copied().filter(|x| x.is_finite()).collect();
    let max = finite.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let min_nz = finite
        .iter()
        .filter(|x| **x != 0.0)
        .fold(f64::INFINITY, |m, x| m.min(x.abs()));
    let sci = max >= 1e8 || (min_nz < 1e-4) || (min_nz.is_finite() && max / min_nz > 1e3);
    if sci {
        // mantissa digits: the most any value needs, up to 8
        let mant = |x: f64, p: usize| format!("{x:.p$e}");
        let digits = finite
            .iter()
            .map(|&x| {
                (0..=8)
                    .find(|&p| {
                        let s = mant(x, p);
                        let back: f64 = s.parse().unwrap_or(x);
                        if dtype == DType::F32 {
                            back as f32 == x as f32
                        } else {
                            back == x
                        }
                    })
                    .unwrap_or(8)
            })
            .max()
            .unwrap_or(0);
        return vals
            .iter()
            .map(|&x| {
                special(x).unwrap_or_else(|| {
                    let s = mant(x, digits);
                    let (m, e) = s.split_once('e').expect("exponent");
                    let m = if m.contains('.') {
                        m.to_string()
                    } else {
                        format!("{m}.")
                    };
                    let e: i32 = e.parse().expect("exponent digits");
                    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
                })
            })
            .collect();
    }
    let strs: Vec<String> = vals
        .iter()
        .map(|&x| special(x).unwrap_or_else(|| shortest(x, dtype)))
        .collect();
    // Pad the fractional parts on the right to a common width (numpy's "maxprec" mode).
    let frac = |s: &str| s.find('.').map(|d| s.len() - d - 1);
    let width = strs.iter().filter_map(|s| frac(s)).max().unwrap_or(0);
    strs.into_iter()
        .map(|s| match frac(&s) {
            Some(f) => format!("{s}{}", " ".repeat(width - f)),
            None => s,
        })
        .collect()
}

fn format_all(data: &HostData) -> Vec<String> {
    let n = data.len();
    match data.dtype() {
        DType::Bool => (0..n)
            .map(|i| {
                if data.get(i).as_bool() {
                    "True".into()
                } else {
                    "False".into()
                }
            })
            .collect(),
        DType::I32 | DType::I64 => (0..n).map(|i| data.get(i).as_i64().to_string()).collect(),
        d => {
            let vals: Vec<f64> = (0..n).map(|i| data.get(i).as_f64()).collect();
            format_floats(&vals, d)
        }
    }
}

/// Writes the nested-bracket layout of `cells` (already padded) for an array of `shape`.
/// With `summarize`, a long axis (more than `2 * EDGE` items) shows its first and last
/// `EDGE` items around `...`, and `cells` holds only those (`strides` are the cells'), as
/// [`edges`] leaves them.
fn layout(
    out: &mut String,
    cells: &[String],
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    depth: usize,
    summarize: bool,
) {
    let rank = shape.len();
    if rank == 0 {
        out.push_str(&cells[offset]);
        return;
    }
    let n = shape[0];
    // (position among the cells along this axis) for each item shown, None for "..."
    let shown: Vec<Option<usize>> = if summarize && n > 2 * EDGE {
        (0..EDGE)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((EDGE..2 * EDGE).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    if rank == 1 {
        let indent = depth + 1;
        let mut line_len = indent;
        for (j, item) in shown.iter().enumerate() {
            let s = match item {
                Some(i) => cells[offset + i * strides[0]].as_str(),
                None => "...",
            };
            if j > 0 {
                if line_len + 1 + s.len() + 1 > LINE_WIDTH {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent));
                    line_len = indent;
                } else {
                    out.push(' ');
                    line_len += 1;
                }
            }
            out.push_str(s);
            line_len += s.len();
        }
    } else {
        for (j, item) in shown.iter().enumerate() {
            if j > 0 {
                out.push_str(&"\n".repeat(rank - 1));
                out.push_str(&" ".repeat(depth + 1));
            }
            match item {
                Some(i) => layout(
                    out,
                    cells,
                    &shape[1..],
                    &strides[1..],
                    offset + i * strides[0],
                    depth + 1,
                    summarize,
                ),
                None => out.push_str("..."),
            }
        }
    }
    out.push(']');
}

/// The part of `a` a summary shows: every axis longer than `2 * EDGE` cut to its first and
/// last `EDGE` items (lazy: nothing else is evaluated). Each corner block is one slice of
/// `a` cut on every long axis at once, and only those small blocks are concatenated, so no
/// intermediate holds more than the summary.
fn edges(a: &Array) -> kiln_ir::Result<Array> {
    let long: Vec<usize> = (0..a.ndim())
        .filter(|&ax| a.shape()[ax] > 2 * EDGE)
        .collect();
    let all = vec![crate::SliceArg::range(None, None, 1); a.ndim()];
    corners(a, &long, all)
}

/// The blocks of `a` at the ends of the long axes `long` (within the cuts `args` made so
/// far), joined along them. Recursion depth: the number of long axes, at most the rank.
fn corners(a: &Array, long: &[usize], args: Vec<crate::SliceArg>) -> kiln_ir::Result<Array> {
    let Some((&ax, rest)) = long.split_first() else {
        return a.try_slice(&args);
    };
    let (mut head, mut tail) = (args.clone(), args);
    head[ax] = crate::SliceArg::range(None, Some(EDGE as isize), 1);
    tail[ax] = crate::SliceArg::range(Some(-(EDGE as isize)), None, 1);
    Array::try_concat(
        &[&corners(a, rest, head)?, &corners(a, rest, tail)?],
        ax as isize,
    )
}

/// Renders `data`, the values shown of an array of `shape` (all of them, or for an array
/// of more than `THRESHOLD` elements its [`edges`]), the way numpy's `str()` does.
pub(crate) fn render(data: &HostData, shape: &[usize]) -> String {
    let summarize = shape.iter().product::<usize>() > THRESHOLD;
    let mut cells = format_all(data);
    let width = cells.iter().map(|s| s.len()).max().unwrap_or(0);
    for c in &mut cells {
        *c = format!("{c:>width$}");
    }
    // strides of the cells: each axis holds all its items, or 2 * EDGE when summarised
    let held: Vec<usize> = shape
        .iter()
        .map(|&n| {
            if summarize && n > 2 * EDGE {
                2 * EDGE
            } else {
                n
            }
        })
        .collect();
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * held[i + 1];
    }
    if data.is_empty() {
        return "[]".into();
    }
    let mut out = String::new();
    layout(&mut out, &cells, shape, &strides, 0, 0, summarize);
    out
}

/// Prints like numpy's `str(array)`; evaluates the array (a summarised one only where it
/// is shown). An evaluation error is printed in place of the values.
///
/// ```
/// let a = kiln::Array::from_vec(vec![1.0f32, 2.5, -3.0, 4.0], &[2, 2])?;
/// assert_eq!(a.to_string(), "[[ 1.   2.5]\n [-3.   4. ]]");
/// let b = kiln::Array::from_vec(vec![true, false], &[2])?;
/// assert_eq!(b.to_string(), "[ True False]");
/// # Ok::<(), kiln::Error>(())
/// ```
impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.size() > THRESHOLD {
            edges(self).and_then(|e| e.data())
        } else {
            self.data()
        };
        match shown {
            Ok(d) => f.write_str(&render(&d, self.shape())),
            Err(e) => write!(f, "<evaluation failed: {e}>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(v: Vec<f64>, shape: &[usize]) -> String {
        render(&HostData::from(v), shape)
    }

    #[test]
    fn matches_numpy_str() {
        // Expected strings are numpy 2.x's `str(np.array(...))`.
        assert_eq!(f64s(vec![1.0, 2.0, 3.0], &[3]), "[1. 2. 3.]");
        assert_eq!(f64s(vec![0.1, 0.25], &[2]), "[0.1  0.25]");
        assert_eq!(
            f64s(vec![f64::NAN, 1.0, f64::NEG_INFINITY], &[3]),
            "[ nan   1. -inf]"
        );
        assert_eq!(f64s(vec![1e-5, 1.0], &[2]), "[1.e-05 1.e+00]");
        assert_eq!(f64s(vec![1.5], &[]), "1.5");
        assert_eq!(
            render(&HostData::from(vec![1i64, -20, 3]), &[3]),
            "[  1 -20   3]"
        );
        assert_eq!(
            f64s(vec![0.0; 8], &[2, 2, 2]),
            "[[[0. 0.]\n  [0. 0.]]\n\n [[0. 0.]\n  [0. 0.]]]"
        );
        assert_eq!(f64s(vec![], &[0]), "[]");
        assert_eq!(f64s(vec![], &[2, 0]), "[]");
        let long: Vec<f64> = [0.0, 1.0, 2.0, 1997.0, 1998.0, 1999.0].to_vec();
        assert_eq!(
            f64s(long, &[2000]),
            "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]"
        );
    }
}

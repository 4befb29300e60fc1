//! Hostile input for the in-memory readers [`kiln_io::npy_from_bytes`],
//! [`kiln_io::npz_from_bytes`] and [`kiln_io::safetensors_from_bytes`]: they must never
//! panic, abort or allocate what the input only declares; every failure is an `Err`, and
//! every array they return evaluates.
//!
//! - proptest on random bytes, and on valid files (written by kiln, and numpy's fixtures in
//!   `tests/fixtures/io`) mutated by flipping, overwriting, inserting, deleting and
//!   truncating bytes, and by splicing in tokens of the formats' headers;
//! - targeted cases: npy shapes past the address space, negative and zero-with-huge dims,
//!   a 4 GiB header length, deeply nested brackets (also hidden from a bracket counter by a
//!   `\N{...}` escape), non-ASCII type strings; safetensors header lengths of `u64::MAX`,
//!   offsets past `usize`, shape products that overflow, names given twice; zip members
//!   declaring a terabyte, central directories declaring 2^62 entries, a member inflating
//!   past its declared size.
//!
//! Each targeted case runs in a child process (this test binary re-run on that one case),
//! so a stack overflow, an abort or a hang (killed after 10 s) is reported as that case's
//! failure instead of taking the whole suite down. This binary's global allocator records
//! the largest single allocation of every read and refuses any past 1 GiB: a reader may
//! not reserve more than its input can encode (1032 bytes per input byte, plus 4 MiB).
//! The property tests use a fixed seed; `PROPTEST_RNG_SEED=N` explores others.
//!
//! Depends on `kiln_io`, kiln's public API and `proptest`.

use kiln::{Array, DType};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

// ------------------------------------------------------------------ allocation guard

/// The global allocator of this test binary: records the largest single request of each
/// thread, and refuses (returns null for) any request past [`REFUSED_ABOVE`], so a reader
/// that sizes a buffer from what its input only declares is caught (by [`consume`]'s check
/// of the largest request) instead of reserving gigabytes of address space.
struct Guard;

/// Requests larger than this are refused outright.
const REFUSED_ABOVE: usize = 1 << 30;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded to `System` unchanged, except requests past
// REFUSED_ABOVE, which return null as an out-of-memory allocator may.
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > REFUSED_ABOVE {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > REFUSED_ABOVE {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > REFUSED_ABOVE {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GUARD: Guard = Guard;

/// The most a reader may allocate at once for an input of `len` bytes: what deflate can
/// expand it to (1032:1), or 4 bytes per input byte widened to 8, plus 4 MiB of slack.
fn allocation_bound(len: usize) -> usize {
    len.saturating_mul(1032).saturating_add(4 << 20)
}

// ------------------------------------------------------------------ consuming results

/// Evaluates what a reader returned: `Ok(read)` when it failed cleanly (`false`) or every
/// array evaluates and holds no more than `most` elements (`true`: a reader never
/// amplifies its input past what the format can encode).
fn consume(most: usize, arrays: kiln_io::Result<Vec<Array>>) -> Result<bool, String> {
    let arrays = match arrays {
        Ok(a) => a,
        Err(e) => {
            // Every error displays, and names the operation.
            let msg = e.to_string();
            if !msg.contains("_from_bytes") {
                return Err(format!("the error does not name the operation: {msg}"));
            }
            return Ok(false);
        }
    };
    for a in arrays {
        if a.size() > most {
            return Err(format!(
                "{} elements of shape {:?}, past the {most} the input can encode",
                a.size(),
                a.shape()
            ));
        }
        a.eval().map_err(|e| {
            format!(
                "a returned array (shape {:?}) does not evaluate: {e}",
                a.shape()
            )
        })?;
        if a.size() > 0 {
            // Reading the values back must work too.
            match a.dtype() {
                DType::Bool => drop(a.to_vec::<bool>().map_err(|e| e.to_string())?),
                DType::I32 => drop(a.to_vec::<i32>().map_err(|e| e.to_string())?),
                DType::I64 => drop(a.to_vec::<i64>().map_err(|e| e.to_string())?),
                DType::F32 => drop(a.to_vec::<f32>().map_err(|e| e.to_string())?),
                DType::F64 => drop(a.to_vec::<f64>().map_err(|e| e.to_string())?),
            }
        }
    }
    Ok(true)
}

/// Runs a reader on `input`: its result, or a failure if any single allocation it made was
/// larger than [`allocation_bound`] allows for the input's length.
fn guarded<T>(input: &[u8], read: impl FnOnce(&[u8]) -> T) -> Result<T, String> {
    LARGEST.with(|l| l.set(0));
    let result = read(input);
    let largest = LARGEST.with(|l| l.replace(0));
    if largest > allocation_bound(input.len()) {
        return Err(format!(
            "allocated {largest} bytes at once for a {}-byte input",
            input.len()
        ));
    }
    Ok(result)
}

fn try_npy(bytes: &[u8]) -> Result<bool, String> {
    let read = guarded(bytes, kiln_io::npy_from_bytes)?;
    consume(bytes.len(), read.map(|a| vec![a]))
}

fn try_npz(bytes: &[u8]) -> Result<bool, String> {
    let read = guarded(bytes, kiln_io::npz_from_bytes)?;
    // Deflate encodes up to 1032 bytes in one.
    consume(
        bytes.len().saturating_mul(1032),
        read.map(|m| m.into_values().collect()),
    )
}

fn try_safetensors(bytes: &[u8]) -> Result<bool, String> {
    let read = guarded(bytes, kiln_io::safetensors_from_bytes)?;
    consume(
        bytes.len(),
        read.map(|st| st.into_tensors().into_iter().map(|(_, a)| a).collect()),
    )
}

fn npy(bytes: &[u8]) -> Result<(), String> {
    try_npy(bytes).map(drop)
}

fn npz(bytes: &[u8]) -> Result<(), String> {
    try_npz(bytes).map(drop)
}

fn safetensors(bytes: &[u8]) -> Result<(), String> {
    try_safetensors(bytes).map(drop)
}

/// Like the readers above, but the read must fail, and its message contain `what`.
fn refused(result: Result<String, String>, what: &str) -> Result<(), String> {
    match result {
        Ok(msg) if msg.contains(what) => Ok(()),
        Ok(msg) => Err(format!(
            "refused, but the message does not contain {what:?}: {msg}"
        )),
        Err(e) => Err(e),
    }
}

fn npy_err(bytes: &[u8]) -> Result<String, String> {
    match guarded(bytes, kiln_io::npy_from_bytes)? {
        Ok(a) => Err(format!(
            "read an array of shape {:?}; expected an error",
            a.shape()
        )),
        Err(e) => Ok(e.to_string()),
    }
}

fn st_err(bytes: &[u8]) -> Result<String, String> {
    match guarded(bytes, kiln_io::safetensors_from_bytes)? {
        Ok(st) => Err(format!("read {} tensors; expected an error", st.len())),
        Err(e) => Ok(e.to_string()),
    }
}

fn npz_err(bytes: &[u8]) -> Result<String, String> {
    match guarded(bytes, kiln_io::npz_from_bytes)? {
        Ok(m) => Err(format!("read {} arrays; expected an error", m.len())),
        Err(e) => Ok(e.to_string()),
    }
}

// ------------------------------------------------------------------ building inputs

/// A `.npy` file of format `major.0` with `header` (newline added, no padding) and `data`.
fn npy_file(major: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.push(b'\n');
    let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', major, 0];
    if major == 1 {
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

fn npy_header(descr: &str, fortran: bool, shape: &str) -> String {
    let f = if fortran { "True" } else { "False" };
    format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape}, }}")
}

/// A safetensors file of the JSON `header` (padded to 8 bytes) and `data`.
fn st_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One member of a hand-built zip: its bytes as stored, and what the headers declare.
struct Member<'a> {
    name: &'a str,
    stored: Vec<u8>,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
}

impl<'a> Member<'a> {
    /// A truthful stored member.
    fn stored(name: &'a str, data: &[u8]) -> Member<'a> {
        let n = data.len() as u64;
        Member {
            name,
            stored: data.to_vec(),
            method: 0,
            crc: crc32(data),
            compressed: n,
            size: n,
        }
    }

    /// A deflated member made of one stored deflate block (valid deflate, no compressor
    /// needed), declaring `size` uncompressed bytes.
    fn deflated(name: &'a str, data: &[u8], size: u64) -> Member<'a> {
        let mut block = vec![1u8]; // final block, stored
        block.extend_from_slice(&(data.len() as u16).to_le_bytes());
        block.extend_from_slice(&(!(data.len() as u16)).to_le_bytes());
        block.extend_from_slice(data);
        let c = block.len() as u64;
        Member {
            name,
            stored: block,
            method: 8,
            crc: crc32(data),
            compressed: c,
            size,
        }
    }
}

/// A zip archive of `members`, using zip64 extra fields where a declared size needs them.
fn zip_raw(members: &[Member<'_>]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for m in members {
        let offset = out.len() as u32;
        let zip64 = m.size >= u32::MAX as u64 || m.compressed >= u32::MAX as u64;
        let mut extra = Vec::new();
        if zip64 {
            extra.extend_from_slice(&1u16.to_le_bytes());
            extra.extend_from_slice(&16u16.to_le_bytes());
            extra.extend_from_slice(&m.size.to_le_bytes());
            extra.extend_from_slice(&m.compressed.to_le_bytes());
        }
        let small = |x: u64| if zip64 { u32::MAX } else { x as u32 };
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&(if zip64 { 45u16 } else { 20 }).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes());
            v.extend_from_slice(&m.method.to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
            v.extend_from_slice(&m.crc.to_le_bytes());
            v.extend_from_slice(&small(m.compressed).to_le_bytes());
            v.extend_from_slice(&small(m.size).to_le_bytes());
            v.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            v.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        };
        out.extend_from_slice(b"PK\x03\x04");
        common(&mut out);
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(&m.stored);
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&45u16.to_le_bytes());
        common(&mut central);
        central.extend_from_slice(&[0; 10]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(m.name.as_bytes());
        central.extend_from_slice(&extra);
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// A valid `.npy` member's bytes.
fn small_npy() -> Vec<u8> {
    kiln_io::npy_to_bytes(&Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap()).unwrap()
}

// ------------------------------------------------------------------ targeted cases

type Case = (&'static str, fn() -> Result<(), String>);

/// Runs `f` and fails if it takes longer than `limit` (a reader must not spend seconds on
/// a small input).
fn timed(limit: Duration, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let t = Instant::now();
    f()?;
    let took = t.elapsed();
    if took > limit {
        return Err(format!("took {took:?} (more than {limit:?})"));
    }
    Ok(())
}

const NPY_CASES: &[Case] = &[
    ("npy_shape_2e40_squared", || {
        refused(
            npy_err(&npy_file(
                1,
                &npy_header("<f4", false, "(1099511627776, 1099511627776)"),
                &[],
            )),
            "more elements",
        )
    }),
    ("npy_shape_bytes_overflow", || {
        // 2^61 elements fit usize; their 8-byte size does not.
        refused(
            npy_err(&npy_file(
                1,
                &npy_header("<f8", false, "(2305843009213693952,)"),
                &[],
            )),
            "elements",
        )
    }),
    ("npy_shape_larger_than_data", || {
        refused(
            npy_err(&npy_file(
                1,
                &npy_header("<f8", false, "(1000000, 1000)"),
                &[0; 64],
            )),
            "data bytes",
        )
    }),
    ("npy_negative_dims", || {
        refused(
            npy_err(&npy_file(1, &npy_header("<f4", false, "(-1, 3)"), &[])),
            "negative",
        )
    }),
    ("npy_dim_past_u64", || {
        refused(
            npy_err(&npy_file(
                1,
                &npy_header("<f4", false, "(18446744073709551616,)"),
                &[],
            )),
            "too large",
        )
    }),
    ("npy_zero_then_huge_dims", || {
        npy(&npy_file(
            1,
            &npy_header(
                "<f4",
                false,
                "(0, 9223372036854775808, 9223372036854775808)",
            ),
            &[],
        ))
    }),
    ("npy_huge_then_zero_dims", || {
        npy(&npy_file(
            1,
            &npy_header(
                "<f4",
                false,
                "(9223372036854775808, 9223372036854775808, 0)",
            ),
            &[],
        ))
    }),
    ("npy_zero_and_huge_dims_fortran", || {
        npy(&npy_file(
            1,
            &npy_header("<i8", true, "(0, 9223372036854775808, 9223372036854775808)"),
            &[],
        ))
    }),
    ("npy_huge_and_zero_dims_fortran", || {
        npy(&npy_file(
            1,
            &npy_header("<i8", true, "(9223372036854775808, 9223372036854775808, 0)"),
            &[],
        ))
    }),
    ("npy_many_dims_fortran", || {
        let shape = format!("({})", vec!["1"; 64].join(", "));
        npy(&npy_file(1, &npy_header("<f4", true, &shape), &[0; 4]))
    }),
    ("npy_header_length_4gib", || {
        let mut b = b"\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr'".to_vec();
        b.extend_from_slice(&[b' '; 64]);
        timed(Duration::from_secs(1), || refused(npy_err(&b), "header of"))
    }),
    ("npy_header_length_past_file", || {
        let b = b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f4'}".to_vec();
        refused(npy_err(&b), "truncated header")
    }),
    ("npy_header_max_size_of_spaces", || {
        let h = format!(
            "{}{}",
            npy_header("<f4", false, "(1,)"),
            " ".repeat(kiln_io::npy::MAX_HEADER - 80)
        );
        timed(Duration::from_secs(5), || npy(&npy_file(2, &h, &[0; 4])))
    }),
    ("npy_header_longer_than_the_limit", || {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        refused(
            npy_err(&npy_file(2, &npy_header("<f4", false, &deep), &[])),
            "at most",
        )
    }),
    ("npy_deeply_nested_brackets", || {
        // Under the header-length limit, so the nesting check is what refuses it.
        let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
        refused(
            npy_err(&npy_file(2, &npy_header("<f4", false, &deep), &[])),
            "nested",
        )
    }),
    ("npy_deeply_nested_in_a_key", || {
        let h = format!("{{{}1{}: 1}}", "(".repeat(20_000), ")".repeat(20_000));
        refused(npy_err(&npy_file(2, &h, &[])), "nested")
    }),
    ("npy_nesting_hidden_by_a_name_escape", || {
        // The bracket counter takes `'\N{'` for a whole string and the next `'` for the
        // start of another, so it sees no bracket after it; the literal parser reads `\N{'}`
        // as one escape inside the first string and then parses the list. 40 levels are
        // refused (nesting) or parsed, in well under a second.
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let h = format!(
            "{{'\\N{{'}}': {deep}, 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}}"
        );
        timed(Duration::from_secs(2), || {
            npy_err(&npy_file(1, &h, &[0; 4])).map(drop)
        })
    }),
    ("npy_wide_nesting_at_the_limit", || {
        // Nesting within the limit of 8, repeated to fill an eighth of the largest header
        // accepted (128 KiB; numpy itself refuses headers over 10,000 bytes).
        let item = format!("{}0{}, ", "[".repeat(6), "]".repeat(6));
        let n = kiln_io::npy::MAX_HEADER / 8 / item.len();
        let h = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': [{}]}}",
            item.repeat(n)
        );
        timed(Duration::from_secs(1), || npy(&npy_file(2, &h, &[0; 4])))
    }),
    ("npy_non_ascii_descr_v1", || {
        let h = npy_header("é", false, "(1,)");
        refused(npy_err(&npy_file(1, &h, &[0; 4])), "ASCII")
    }),
    ("npy_non_ascii_descr_v3", || {
        let h = npy_header("é", false, "(1,)");
        refused(npy_err(&npy_file(3, &h, &[0; 4])), "type string")
    }),
    ("npy_invalid_utf8_v3", || {
        let mut b = npy_file(3, &npy_header("<f4", false, "(1,)"), &[0; 4]);
        b[15] = 0xFF;
        refused(npy_err(&b), "UTF-8")
    }),
    ("npy_long_descr", || {
        let d = format!("<f{}", "4".repeat(100));
        refused(
            npy_err(&npy_file(1, &npy_header(&d, false, "(1,)"), &[0; 4])),
            "type string",
        )
    }),
    ("npy_descr_size_overflow", || {
        refused(
            npy_err(&npy_file(
                1,
                &npy_header("<f99999999999999999999", false, "(1,)"),
                &[0; 4],
            )),
            "type string",
        )
    }),
    ("npy_zero_size_types", || {
        for d in ["|V0", "<U0", "|S0", "|O", "<m8[ns]", "|V8"] {
            npy_err(&npy_file(1, &npy_header(d, false, "(2,)"), &[0; 16]))?;
        }
        Ok(())
    }),
    ("npy_nul_and_control_bytes", || {
        let h = "{'descr': '<f4\0', 'fortran_order': False, 'shape': (1,)}\u{7}";
        npy_err(&npy_file(1, h, &[0; 4])).map(drop)
    }),
    ("npy_long_integer_literal", || {
        // A 200,000-digit dimension: refused, quickly.
        let shape = format!("({},)", "9".repeat(200_000));
        timed(Duration::from_secs(5), || {
            npy_err(&npy_file(2, &npy_header("<f4", false, &shape), &[])).map(drop)
        })
    }),
    ("npy_long_arithmetic_literal", || {
        let shape = format!("({},)", vec!["1"; 100_000].join("+"));
        timed(Duration::from_secs(5), || {
            npy(&npy_file(2, &npy_header("<f4", false, &shape), &[]))
        })
    }),
    ("npy_every_prefix_of_a_valid_file", || {
        let good =
            kiln_io::npy_to_bytes(&Array::from_vec(vec![1i64, 2, 3], &[3]).unwrap()).unwrap();
        for n in 0..good.len() {
            npy_err(&good[..n])?;
        }
        Ok(())
    }),
];

const ST_CASES: &[Case] = &[
    ("st_header_length_u64_max", || {
        let mut b = u64::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        refused(st_err(&b), "header of")
    }),
    ("st_header_length_past_limit", || {
        let mut b = (kiln_io::safetensors::MAX_HEADER as u64 + 1)
            .to_le_bytes()
            .to_vec();
        b.extend_from_slice(b"{}");
        refused(st_err(&b), "header of")
    }),
    ("st_header_length_past_file", || {
        let mut b = 1000u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}      ");
        refused(st_err(&b), "truncated")
    }),
    ("st_offsets_past_usize", || {
        let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}}"#;
        refused(st_err(&st_file(h, &[0; 4])), "a")
    }),
    ("st_offsets_at_usize_max", || {
        let h = r#"{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}}"#;
        refused(st_err(&st_file(h, &[0; 4])), "a")
    }),
    ("st_offsets_reversed_at_max", || {
        let h = r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,0]}}"#;
        refused(st_err(&st_file(h, &[])), "a")
    }),
    ("st_offsets_float_and_negative", || {
        for o in [
            "[0,1e30]",
            "[-4,0]",
            "[0.5,4.5]",
            "[0]",
            "[0,4,8]",
            "\"0,4\"",
        ] {
            let h = format!(r#"{{"a":{{"dtype":"F32","shape":[1],"data_offsets":{o}}}}}"#);
            refused(st_err(&st_file(&h, &[0; 4])), "a")?;
        }
        Ok(())
    }),
    ("st_shape_product_overflow", || {
        let h =
            r#"{"big":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}}"#;
        refused(st_err(&st_file(h, &[])), "big")
    }),
    ("st_shape_bytes_overflow", || {
        let h = r#"{"big":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}"#;
        refused(st_err(&st_file(h, &[])), "big")
    }),
    ("st_terabyte_tensor", || {
        let h = r#"{"tb":{"dtype":"F32","shape":[274877906944],"data_offsets":[0,1099511627776]}}"#;
        refused(st_err(&st_file(h, &[0; 64])), "tb")
    }),
    ("st_zero_then_huge_dims", || {
        let h = r#"{"z":{"dtype":"F32","shape":[0,9223372036854775808,9223372036854775808],"data_offsets":[0,0]}}"#;
        safetensors(&st_file(h, &[]))
    }),
    ("st_huge_then_zero_dims", || {
        let h = r#"{"z":{"dtype":"I64","shape":[9223372036854775808,9223372036854775808,0],"data_offsets":[0,0]}}"#;
        safetensors(&st_file(h, &[]))
    }),
    ("st_duplicate_names", || {
        let h = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        refused(st_err(&st_file(h, &[0; 8])), "a: named twice")
    }),
    ("st_duplicate_metadata", || {
        let h = r#"{"__metadata__":{},"__metadata__":{"a":"b"}}"#;
        refused(st_err(&st_file(h, &[])), "twice")
    }),
    ("st_deep_json", || {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        refused(st_err(&st_file(&format!(r#"{{"a":{deep}}}"#), &[])), "a")?;
        refused(
            st_err(&st_file(&format!(r#"{{"__metadata__":{deep}}}"#), &[])),
            "JSON",
        )?;
        refused(st_err(&st_file(&deep, &[])), "JSON")
    }),
    ("st_header_not_utf8", || {
        refused(st_err(&st_file("{\"\u{0}\":\u{ff}}", &[])), "JSON")
    }),
    ("st_many_empty_tensors", || {
        let entries: Vec<String> = (0..20_000)
            .map(|i| format!(r#""t{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#))
            .collect();
        timed(Duration::from_secs(5), || {
            safetensors(&st_file(&format!("{{{}}}", entries.join(",")), &[]))
        })
    }),
    ("st_every_prefix_of_a_valid_file", || {
        let a = Array::from_vec(vec![1.5f64, 2.5], &[2]).unwrap();
        let good = kiln_io::safetensors_to_bytes(&[("a", &a)], &[("k", "v")]).unwrap();
        for n in 0..good.len() {
            st_err(&good[..n])?;
        }
        Ok(())
    }),
];

const ZIP_CASES: &[Case] = &[
    ("zip_member_declares_a_terabyte_deflated", || {
        let z = zip_raw(&[Member::deflated("x.npy", &small_npy(), 1 << 40)]);
        refused(npz_err(&z), "x.npy")
    }),
    ("zip_member_declares_a_terabyte_stored", || {
        let mut m = Member::stored("x.npy", &small_npy());
        (m.size, m.compressed) = (1 << 40, 1 << 40);
        timed(Duration::from_secs(2), || {
            refused(npz_err(&zip_raw(&[m])), "x.npy")
        })
    }),
    ("zip_stored_member_declares_4gib_in_a_tiny_archive", || {
        // Stored, declaring 4 GiB - 2 bytes both compressed and uncompressed (no zip64
        // needed): the archive holds a few hundred bytes, so no member can hold more, and
        // nothing near 4 GiB may be reserved for it.
        let mut m = Member::stored("x.npy", &small_npy());
        (m.size, m.compressed) = (u32::MAX as u64 - 1, u32::MAX as u64 - 1);
        refused(npz_err(&zip_raw(&[m])), "x.npy")
    }),
    ("zip_deflated_member_declares_past_its_archive", || {
        // Deflated, declaring a compressed size of 1 MiB (the archive has 300 bytes) and
        // 1 GiB uncompressed (within 1032 times the declared compressed size).
        let mut m = Member::deflated("x.npy", &small_npy(), 1 << 30);
        m.compressed = 1 << 20;
        refused(npz_err(&zip_raw(&[m])), "x.npy")
    }),
    ("zip_member_declares_more_than_stored", || {
        let mut m = Member::stored("x.npy", &small_npy());
        m.size += 1000;
        refused(npz_err(&zip_raw(&[m])), "x.npy")
    }),
    ("zip_member_declares_less_than_it_inflates_to", || {
        let data = small_npy();
        let z = zip_raw(&[Member::deflated("x.npy", &data, 20)]);
        refused(npz_err(&z), "x.npy")
    }),
    ("zip_truthful_deflated_member_reads", || {
        let data = small_npy();
        let z = zip_raw(&[Member::deflated("x.npy", &data, data.len() as u64)]);
        let arrays = kiln_io::npz_from_bytes(&z).map_err(|e| e.to_string())?;
        match arrays["x"].to_vec::<f32>() {
            Ok(v) if v == [1.0, 2.0, 3.0] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    }),
    ("zip_member_with_a_wrong_crc", || {
        let mut m = Member::stored("x.npy", &small_npy());
        m.crc ^= 1;
        refused(npz_err(&zip_raw(&[m])), "x.npy")
    }),
    ("zip_unknown_compression_method", || {
        let mut m = Member::stored("x.npy", &small_npy());
        m.method = 14; // LZMA
        npz_err(&zip_raw(&[m])).map(drop)
    }),
    ("zip_eocd_declares_65535_entries", || {
        let mut z = zip_raw(&[Member::stored("x.npy", &small_npy())]);
        let n = z.len();
        z[n - 14..n - 10].copy_from_slice(&[0xFF; 4]);
        npz_err(&z).map(drop)
    }),
    ("zip64_eocd_declares_2e62_entries", || {
        let mut z = zip_raw(&[Member::stored("x.npy", &small_npy())]);
        let eocd = z.len() - 22;
        let cd_size = u32::from_le_bytes(z[eocd + 12..eocd + 16].try_into().unwrap()) as u64;
        let cd_offset = u32::from_le_bytes(z[eocd + 16..eocd + 20].try_into().unwrap()) as u64;
        z.truncate(eocd);
        let z64 = z.len() as u64;
        z.extend_from_slice(b"PK\x06\x06");
        z.extend_from_slice(&44u64.to_le_bytes());
        z.extend_from_slice(&45u16.to_le_bytes());
        z.extend_from_slice(&45u16.to_le_bytes());
        z.extend_from_slice(&[0; 8]);
        z.extend_from_slice(&(1u64 << 62).to_le_bytes());
        z.extend_from_slice(&(1u64 << 62).to_le_bytes());
        z.extend_from_slice(&cd_size.to_le_bytes());
        z.extend_from_slice(&cd_offset.to_le_bytes());
        z.extend_from_slice(b"PK\x06\x07\0\0\0\0");
        z.extend_from_slice(&z64.to_le_bytes());
        z.extend_from_slice(&1u32.to_le_bytes());
        z.extend_from_slice(
            b"PK\x05\x06\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\0\0",
        );
        timed(Duration::from_secs(2), || npz_err(&z).map(drop))
    }),
    ("zip_central_directory_past_the_file", || {
        let mut z = zip_raw(&[Member::stored("x.npy", &small_npy())]);
        let n = z.len();
        z[n - 6..n - 2].copy_from_slice(&0x7FFF_FFF0u32.to_le_bytes());
        npz_err(&z).map(drop)
    }),
    ("zip_duplicate_member_names", || {
        // Refused, or read as numpy reads it: the last member of the name.
        let last = kiln_io::npy_to_bytes(&Array::from_vec(vec![9i32], &[1]).unwrap()).unwrap();
        let z = zip_raw(&[
            Member::stored("x.npy", &small_npy()),
            Member::stored("x.npy", &last),
        ]);
        match kiln_io::npz_from_bytes(&z) {
            Err(_) => Ok(()),
            Ok(m) if m.len() == 1 && m["x"].to_vec::<i32>().ok() == Some(vec![9]) => Ok(()),
            Ok(m) => Err(format!(
                "read {:?}, not the last member",
                m.keys().collect::<Vec<_>>()
            )),
        }
    }),
    ("zip_member_is_not_npy", || {
        refused(
            npz_err(&zip_raw(&[Member::stored("x.npy", b"PK\x03\x04")])),
            "x.npy",
        )
    }),
    ("zip_nested_zip_member", || {
        let inner = zip_raw(&[Member::stored("y.npy", &small_npy())]);
        refused(
            npz_err(&zip_raw(&[Member::stored("x.npy", &inner)])),
            "x.npy",
        )
    }),
    ("zip_every_prefix_of_a_valid_archive", || {
        let z = zip_raw(&[
            Member::stored("a.npy", &small_npy()),
            Member::deflated("b.npy", &small_npy(), small_npy().len() as u64),
        ]);
        kiln_io::npz_from_bytes(&z).map_err(|e| format!("the whole archive: {e}"))?;
        for n in 0..z.len() {
            npz(&z[..n])?;
        }
        Ok(())
    }),
];

const CHILD_VAR: &str = "KILN_IO_HOSTILE_CASE";

/// The child side: runs the one case named by the environment (and nothing otherwise).
#[test]
fn hostile_case_child() {
    let Ok(name) = std::env::var(CHILD_VAR) else {
        return;
    };
    let all = NPY_CASES.iter().chain(ST_CASES).chain(ZIP_CASES);
    let (_, case) = all
        .clone()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    if let Err(e) = case() {
        panic!("{name}: {e}");
    }
}

/// The longest a case may run before its child is killed (a hang is a failure).
const CASE_DEADLINE: Duration = Duration::from_secs(10);

/// Runs each case in a child process; panics listing every case that failed, panicked,
/// crashed or hung.
fn run_isolated(cases: &[Case]) {
    use std::io::Read;
    let exe = std::env::current_exe().unwrap();
    let mut failures = Vec::new();
    for (name, _) in cases {
        let t = Instant::now();
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "hostile_case_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, name)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("re-running the test binary");
        let mut stderr_pipe = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr_pipe.read_to_string(&mut s);
            s
        });
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if t.elapsed() > CASE_DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stderr = reader.join().unwrap();
        let Some(status) = status else {
            failures.push(format!(
                "{name}: still running after {CASE_DEADLINE:?}, killed"
            ));
            continue;
        };
        if !status.success() {
            let why: Vec<&str> = stderr
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty()
                        && !l.starts_with(|c: char| c.is_ascii_digit())
                        && !l.starts_with("at ")
                        && !l.starts_with("stack backtrace")
                        && !l.starts_with("note:")
                })
                .take(4)
                .collect();
            failures.push(format!(
                "{name} ({status}, {:.1?}):\n    {}",
                t.elapsed(),
                why.join("\n    ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn hostile_npy_headers() {
    run_isolated(NPY_CASES);
}

#[test]
fn hostile_safetensors_headers() {
    run_isolated(ST_CASES);
}

#[test]
fn hostile_zip_archives() {
    run_isolated(ZIP_CASES);
}

// ------------------------------------------------------------------ property tests

fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/io"))
}

/// Valid files of `ext`: numpy's fixtures, and files kiln writes.
fn seeds(ext: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .map(|p| std::fs::read(p).unwrap())
        .filter(|b| b.len() <= 8192)
        .collect();
    let arrays = [
        Array::from_vec(vec![1.5f32, -0.0, f32::NAN, 4.0, 5.0, 6.0], &[2, 3]).unwrap(),
        Array::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap(),
        Array::from_vec(vec![true, false], &[2, 1]).unwrap(),
        Array::from_vec(vec![7i32], &[]).unwrap(),
        Array::from_vec(Vec::<f64>::new(), &[3, 0, 2]).unwrap(),
    ];
    let named: Vec<(&str, &Array)> = ["a", "b", "c", "d", "e"].into_iter().zip(&arrays).collect();
    match ext {
        "npy" => out.extend(arrays.iter().map(|a| kiln_io::npy_to_bytes(a).unwrap())),
        "safetensors" => out.push(kiln_io::safetensors_to_bytes(&named, &[("k", "v")]).unwrap()),
        "npz" => {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            for (i, compressed) in [false, true].into_iter().enumerate() {
                let path = dir.join(format!("hostile-seed-{}-{i}.npz", std::process::id()));
                if compressed {
                    kiln_io::write_npz_compressed(&path, &named).unwrap();
                } else {
                    kiln_io::write_npz(&path, &named).unwrap();
                }
                out.push(std::fs::read(&path).unwrap());
                let _ = std::fs::remove_file(&path);
            }
        }
        _ => unreachable!(),
    }
    assert!(out.len() >= 3, "{ext}: {} seeds", out.len());
    out
}

/// Tokens of the formats' headers, spliced in to reach deeper than random bytes do.
const TOKENS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "'",
    "\"",
    "\\",
    "-",
    "0",
    "9",
    "True",
    "False",
    "None",
    "'<f8'",
    "'>i2'",
    "'|b1'",
    "'<f2'",
    "'descr'",
    "'shape'",
    "'fortran_order'",
    "4294967296",
    "18446744073709551615",
    "9223372036854775808",
    "1e309",
    "-1",
    "\"F32\"",
    "\"BF16\"",
    "\"BOOL\"",
    "\"U64\"",
    "\"shape\"",
    "\"data_offsets\"",
    "\"dtype\"",
    "\"__metadata__\"",
    "[0,0]",
    "\u{e9}",
    "\\N{",
    "PK\u{3}\u{4}",
    "PK\u{1}\u{2}",
    "PK\u{5}\u{6}",
    "\u{93}NUMPY",
];

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    /// Flips bits of a byte in the last quarter (the data, mostly: the file stays valid).
    FlipTail(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Token(usize, usize),
    Delete(usize, usize),
    Truncate(usize),
    /// Overwrites 4 or 8 bytes with a little-endian boundary value (a length, an offset).
    Word(usize, u64, bool),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (any::<usize>(), 1u8..=255).prop_map(|(i, b)| Mutation::FlipTail(i, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, v)| Mutation::Insert(i, v)),
        2 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Token(i, t)),
        1 => (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), prop_oneof![Just(0u64), Just(u32::MAX as u64), Just(u64::MAX), Just(1 << 40), Just(i64::MAX as u64), 0u64..4096], any::<bool>())
            .prop_map(|(i, v, wide)| Mutation::Word(i, v, wide)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match m {
        Mutation::Flip(i, b) if !bytes.is_empty() => {
            let i = at(*i, bytes.len());
            bytes[i] ^= b;
        }
        Mutation::FlipTail(i, b) if !bytes.is_empty() => {
            let quarter = bytes.len().div_ceil(4);
            let i = bytes.len() - 1 - at(*i, quarter);
            bytes[i] ^= b;
        }
        Mutation::Set(i, b) if !bytes.is_empty() => {
            let i = at(*i, bytes.len());
            bytes[i] = *b;
        }
        Mutation::Insert(i, v) => {
            let i = at(*i, bytes.len() + 1);
            bytes.splice(i..i, v.iter().copied());
        }
        Mutation::Token(i, t) => {
            let i = at(*i, bytes.len() + 1);
            bytes.splice(i..i, TOKENS[*t].bytes());
        }
        Mutation::Delete(i, n) if !bytes.is_empty() => {
            let i = at(*i, bytes.len());
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::Truncate(i) => {
            let n = at(*i, bytes.len() + 1);
            bytes.truncate(n);
        }
        Mutation::Word(i, v, wide) => {
            let w = if *wide { 8 } else { 4 };
            if bytes.len() >= w {
                let i = at(*i, bytes.len() - w + 1);
                bytes[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
        }
        _ => {}
    }
}

fn mutated(ext: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds(ext);
    (0..seeds.len(), proptest::collection::vec(mutation(), 1..4)).prop_map(move |(s, ms)| {
        let mut b = seeds[s].clone();
        for m in &ms {
            apply(&mut b, m);
        }
        b
    })
}

/// Random bytes, and random bytes behind each format's magic (so the parser gets past its
/// first check).
fn random_input(prefix: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..512),
    )
        .prop_map(move |(with_prefix, mut v)| {
            if with_prefix {
                v.splice(0..0, prefix.iter().copied());
            }
            v
        })
}

/// Runs `reader` on `cases` inputs drawn from `strategy` (proptest shrinks a failure to a
/// small input); returns how many were read successfully. The inputs are the same on every
/// run (a fixed seed, so the suite never fails by chance) unless `PROPTEST_RNG_SEED` names
/// another seed: `PROPTEST_RNG_SEED=$RANDOM cargo test -p kiln-io --test hostile_bytes`
/// explores further.
fn fuzz(
    what: &str,
    cases: u32,
    strategy: impl Strategy<Value = Vec<u8>>,
    reader: fn(&[u8]) -> Result<bool, String>,
) -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    let read = AtomicU32::new(0);
    let mut config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = proptest::test_runner::RngSeed::Fixed(0x6b69_6c6e);
    }
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |b| {
        match reader(&b) {
            Ok(true) => drop(read.fetch_add(1, Ordering::Relaxed)),
            Ok(false) => {}
            Err(e) => return Err(TestCaseError::fail(e)),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
    let read = read.into_inner();
    eprintln!("{what}: {read} of {cases} inputs read successfully (shrinking may add more runs)");
    read
}

#[test]
fn random_bytes() {
    fuzz(
        "npy",
        3000,
        random_input(b"\x93NUMPY\x01\x00\x76\x00{'descr': '"),
        try_npy,
    );
    fuzz(
        "npz",
        3000,
        random_input(b"PK\x03\x04\x14\x00\x00\x00\x00\x00"),
        try_npz,
    );
    fuzz(
        "safetensors",
        3000,
        random_input(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":\""),
        try_safetensors,
    );
}

/// Mutated valid files: a fair share must still read (else the mutations only ever test
/// the first check), and none may misbehave.
#[test]
fn mutated_npy() {
    let read = fuzz("mutated npy", 30_000, mutated("npy"), try_npy);
    assert!(read >= 1000, "only {read} mutated npy files read");
}

#[test]
fn mutated_npz() {
    let read = fuzz("mutated npz", 10_000, mutated("npz"), try_npz);
    assert!(read >= 200, "only {read} mutated npz files read");
}

#[test]
fn mutated_safetensors() {
    let read = fuzz(
        "mutated safetensors",
        30_000,
        mutated("safetensors"),
        try_safetensors,
    );
    assert!(read >= 500, "only {read} mutated safetensors files read");
}

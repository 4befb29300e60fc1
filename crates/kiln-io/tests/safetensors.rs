//! The safetensors reader and writer: the files the `safetensors` Python package wrote
//! (`tests/fixtures/io`, expected values bit for bit in `manifest.json`, from
//! `gen_io_fixtures.py`: every dtype it has, bfloat16, `__metadata__`) read through
//! [`kiln_io::read_safetensors`] (memory-mapped) and [`kiln_io::safetensors_from_bytes`];
//! kiln → file → kiln round trips with metadata; the layout kiln writes; the writer's
//! refusals; hand-built files whose tensors are misaligned (read through the copying path);
//! and errors that name the operation, the file and the tensor.
//!
//! Depends on `kiln_io`, kiln's public API, `serde_json` and the shared helpers in `common`.

mod common;

use common::bytes::st_file;
use common::fixtures::{bits, check_array, check_error, check_same_array, manifest};
use common::samples::{sample, DTYPES};
use common::{fixture_dir, temp_dir};
use kiln::{Array, DType};
use kiln_io::{Error, SafeTensors};
use serde_json::Value;
use std::collections::BTreeMap;

/// The tensor names of a safetensors file's header, in the order of their bytes.
fn names_by_offset(bytes: &[u8]) -> Vec<String> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: BTreeMap<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut v: Vec<(u64, u64, String)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, t)| {
            (
                t["data_offsets"][0].as_u64().unwrap(),
                t["data_offsets"][1].as_u64().unwrap(),
                k.clone(),
            )
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, _, k)| k).collect()
}

// ------------------------------------------------------------------ fixtures

#[test]
fn every_safetensors_fixture_reads_as_the_package_wrote_it() {
    let entries = manifest("safetensors");
    assert!(
        entries.len() >= 6,
        "only {} safetensors fixtures",
        entries.len()
    );
    for entry in &entries {
        let name = entry["file"].as_str().unwrap();
        let path = fixture_dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        let shown = path.display().to_string();
        let reads = [
            (
                "read_safetensors",
                shown.as_str(),
                kiln_io::read_safetensors(&path),
            ),
            (
                "safetensors_from_bytes",
                "<bytes>",
                kiln_io::safetensors_from_bytes(&bytes),
            ),
        ];
        for (op, file, read) in reads {
            let at = format!("{name} ({op})");
            if entry["error"].is_null() {
                let st = read.unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(
                    st.names().collect::<Vec<_>>(),
                    names_by_offset(&bytes),
                    "{at}: order"
                );
                let specs = entry["arrays"].as_array().unwrap();
                assert_eq!(st.len(), specs.len(), "{at}");
                for spec in specs {
                    let key = spec["name"].as_str().unwrap();
                    let a = st
                        .get(key)
                        .unwrap_or_else(|| panic!("{at}: no tensor {key}"));
                    check_array(&format!("{at}: {key}"), a, spec);
                }
                let want: BTreeMap<String, String> =
                    serde_json::from_value(entry["metadata"].clone()).unwrap();
                assert_eq!(st.metadata(), &want, "{at}: metadata");
            } else {
                let e = read
                    .err()
                    .unwrap_or_else(|| panic!("{at}: read, should fail"));
                check_error(&at, &e, entry, op, file);
            }
        }
    }
}

#[test]
fn every_dtype_of_the_package_is_covered() {
    let bytes = std::fs::read(fixture_dir().join("numpy_save_file.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: BTreeMap<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut dtypes: Vec<&str> = header
        .values()
        .filter_map(|t| t.get("dtype").and_then(Value::as_str))
        .collect();
    dtypes.sort_unstable();
    dtypes.dedup();
    assert_eq!(
        dtypes,
        ["BOOL", "F16", "F32", "F64", "I16", "I32", "I64", "I8", "U16", "U32", "U64", "U8"]
    );
    assert!(header.contains_key("__metadata__"));
    let bf16 = std::fs::read(fixture_dir().join("bf16.safetensors")).unwrap();
    assert!(String::from_utf8_lossy(&bf16).contains("\"BF16\""));
}

// ------------------------------------------------------------------ round trips

const SHAPES: &[&[usize]] = &[&[], &[0], &[3, 0, 2], &[5], &[2, 3], &[2, 3, 4]];

fn named_samples() -> Vec<(String, Array)> {
    let mut named = Vec::new();
    for (d, dtype) in DTYPES.into_iter().enumerate() {
        for (s, shape) in SHAPES.iter().enumerate() {
            named.push((
                format!("{dtype:?}.{s}"),
                sample(dtype, shape, (d * 10 + s) as u64),
            ));
        }
    }
    named.push((
        "model.layers.0.self_attn.q_proj.weight".into(),
        sample(DType::F32, &[4, 4], 7),
    ));
    named.push(("ünï".into(), sample(DType::Bool, &[3], 8)));
    named
}

fn check_same(at: &str, st: &SafeTensors, named: &[(String, Array)]) {
    assert_eq!(st.len(), named.len(), "{at}");
    for (name, a) in named {
        let b = st.get(name).unwrap_or_else(|| panic!("{at}: no {name}"));
        check_same_array(&format!("{at}: {name}"), b, a);
    }
}

#[test]
fn every_dtype_and_shape_round_trips_with_metadata() {
    let dir = temp_dir("round-trip");
    let named = named_samples();
    let refs: Vec<(&str, &Array)> = named.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let metadata = [
        ("format", "pt"),
        ("step", "40"),
        ("note", "ünïcode ✓ \"quoted\"\n"),
        ("empty", ""),
    ];
    let path = dir.join("all.safetensors");
    kiln_io::write_safetensors(&path, &refs, &metadata).unwrap();
    let bytes = kiln_io::safetensors_to_bytes(&refs, &metadata).unwrap();
    let want_meta: BTreeMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (how, st) in [
        (
            "read_safetensors",
            kiln_io::read_safetensors(&path).unwrap(),
        ),
        (
            "safetensors_from_bytes",
            kiln_io::safetensors_from_bytes(&bytes).unwrap(),
        ),
    ] {
        check_same(how, &st, &named);
        assert_eq!(st.metadata(), &want_meta, "{how}");
        assert_eq!(
            st.names().collect::<Vec<_>>(),
            names_by_offset(&bytes),
            "{how}"
        );
    }
    // No metadata: no __metadata__ key, and an empty map read back.
    let bytes = kiln_io::safetensors_to_bytes(&refs[..1], &[]).unwrap();
    assert!(!String::from_utf8_lossy(&bytes).contains("__metadata__"));
    assert!(kiln_io::safetensors_from_bytes(&bytes)
        .unwrap()
        .metadata()
        .is_empty());
    // No tensor at all.
    let bytes = kiln_io::safetensors_to_bytes(&[], &[("k", "v")]).unwrap();
    let st = kiln_io::safetensors_from_bytes(&bytes).unwrap();
    assert!(st.is_empty());
    assert_eq!(st.metadata()["k"], "v");
}

/// The layout the format's other readers expect: an 8-byte aligned data section (header
/// padded with spaces), tensors contiguous from offset 0 in descending alignment then name,
/// little-endian elements, bools as bytes 0 and 1.
#[test]
fn the_layout_kiln_writes() {
    let named = named_samples();
    let refs: Vec<(&str, &Array)> = named.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let bytes = kiln_io::safetensors_to_bytes(&refs, &[("a", "b")]).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!((8 + n) % 8, 0, "data section not 8-byte aligned");
    let text = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    assert!(
        text.trim_end_matches(' ').ends_with('}'),
        "padding other than spaces: {text:?}"
    );
    let header: BTreeMap<String, Value> = serde_json::from_str(text).unwrap();
    let size = |d: &str| match d {
        "BOOL" => 1,
        "I32" | "F32" => 4,
        "I64" | "F64" => 8,
        other => panic!("kiln wrote dtype {other}"),
    };
    let mut spans: Vec<(u64, u64, usize, String)> = Vec::new();
    for (name, t) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let (lo, hi) = (
            t["data_offsets"][0].as_u64().unwrap(),
            t["data_offsets"][1].as_u64().unwrap(),
        );
        let count: u64 = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .product();
        let sz = size(t["dtype"].as_str().unwrap());
        assert_eq!(hi - lo, count * sz as u64, "{name}");
        assert_eq!(
            lo % sz as u64,
            0,
            "{name} is not aligned in the data section"
        );
        spans.push((lo, hi, sz, name.clone()));
    }
    spans.sort();
    let mut end = 0;
    for (lo, hi, _, name) in &spans {
        assert_eq!(*lo, end, "{name}: a gap or overlap");
        end = *hi;
    }
    assert_eq!(end as usize, bytes.len() - 8 - n);
    // Descending alignment (what the `safetensors` crate does: descending dtype, then name).
    let sizes: Vec<usize> = spans.iter().map(|(_, _, s, _)| *s).collect();
    assert!(
        sizes.windows(2).all(|w| w[0] >= w[1]),
        "not in descending alignment: {spans:?}"
    );
    let dtype_of = |name: &str| header[name]["dtype"].as_str().unwrap().to_string();
    for w in spans.windows(2) {
        if dtype_of(&w[0].3) == dtype_of(&w[1].3) {
            assert!(
                w[0].3 < w[1].3,
                "{} before {} (same dtype: by name)",
                w[0].3,
                w[1].3
            );
        }
    }
    // Little-endian elements.
    let x = Array::from_vec(vec![0x0102_0304i32], &[1]).unwrap();
    let b = kiln_io::safetensors_to_bytes(&[("x", &x)], &[]).unwrap();
    assert_eq!(&b[b.len() - 4..], &[4, 3, 2, 1]);
}

/// The same tensors and metadata give the same bytes, every time and through either entry
/// point (a reproducible file: content hashes, caches and diffs depend on it).
///
/// Fails at the time of writing: `prepare` collects the metadata into a `HashMap`, whose
/// iteration order (and so the header's key order) is random per map.
#[test]
fn writing_is_deterministic() {
    let dir = temp_dir("deterministic");
    let a = sample(DType::F32, &[3], 0);
    let metadata = [
        ("format", "pt"),
        ("step", "40"),
        ("epoch", "2"),
        ("lr", "0.1"),
        ("seed", "7"),
    ];
    let first = kiln_io::safetensors_to_bytes(&[("a", &a)], &metadata).unwrap();
    for i in 0..8 {
        let again = kiln_io::safetensors_to_bytes(&[("a", &a)], &metadata).unwrap();
        assert!(
            again == first,
            "safetensors_to_bytes gave different headers:\n{}\n{}",
            String::from_utf8_lossy(&first[8..first.len() - 12]),
            String::from_utf8_lossy(&again[8..again.len() - 12])
        );
        let path = dir.join(format!("{i}.safetensors"));
        kiln_io::write_safetensors(&path, &[("a", &a)], &metadata).unwrap();
        assert!(
            std::fs::read(&path).unwrap() == first,
            "write_safetensors and safetensors_to_bytes differ"
        );
    }
}

/// Arrays read from a mapped file stay valid when the file is replaced by a rename (what
/// kiln's writer and the Python package do).
#[test]
fn mapped_arrays_survive_the_file_being_replaced() {
    let dir = temp_dir("replace");
    let path = dir.join("w.safetensors");
    let a = sample(DType::F32, &[64], 1);
    kiln_io::write_safetensors(&path, &[("w", &a)], &[]).unwrap();
    let st = kiln_io::read_safetensors(&path).unwrap();
    kiln_io::write_safetensors(&path, &[("w", &sample(DType::F32, &[64], 2))], &[]).unwrap();
    assert_eq!(bits(&st["w"]), bits(&a));
    let now = kiln_io::read_safetensors(&path).unwrap();
    assert_ne!(bits(&st["w"]), bits(&now["w"]));
    let entries = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(entries, 1, "a temporary file was left behind");
}

#[test]
fn the_writer_refuses_bad_names_and_metadata() {
    let dir = temp_dir("refuse");
    let a = sample(DType::F32, &[2], 0);
    let b = sample(DType::I64, &[2], 1);
    let meta: &[(&str, &str)] = &[];
    type Named<'a> = &'a [(&'a str, &'a Array)];
    type Metadata<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Named, Metadata, &str); 5] = [
        (&[("w", &a), ("w", &b)], meta, "w: a name given twice"),
        (&[("", &a)], meta, "an empty name"),
        (&[("__metadata__", &a)], meta, "__metadata__"),
        (&[("ok", &a), ("__metadata__", &b)], meta, "__metadata__"),
        (
            &[("ok", &a)],
            &[("k", "1"), ("k", "2")],
            "metadata key 'k' given twice",
        ),
    ];
    for (i, (tensors, metadata, what)) in cases.iter().enumerate() {
        let path = dir.join(format!("{i}.safetensors"));
        let e = kiln_io::write_safetensors(&path, tensors, metadata).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Unsupported { .. }), "{i}: {e:?}");
        assert!(msg.contains("write_safetensors"), "{i}: {msg}");
        assert!(msg.contains(&path.display().to_string()), "{i}: {msg}");
        assert!(msg.contains(what), "{i}: {msg} does not contain {what:?}");
        assert!(!path.exists(), "{i}: a refused write left a file");
        let e = kiln_io::safetensors_to_bytes(tensors, metadata)
            .unwrap_err()
            .to_string();
        assert!(e.contains("safetensors_to_bytes"), "{e}");
    }
}

// ------------------------------------------------------------------ hand-built files

/// Tensors at offsets that are not multiples of their element size: a 1-byte BOOL first,
/// then F32, I64, F64 and I32 at odd offsets. The zero-copy path cannot take them; the
/// copying path must give the right values.
#[test]
fn misaligned_tensors_read_correctly() {
    let mut data = vec![1u8]; // m: BOOL [1]
    let f: Vec<f32> = vec![1.5, -0.0, f32::from_bits(0x7FC1_2345)];
    let i: Vec<i64> = vec![i64::MIN, 3];
    let d: Vec<f64> = vec![f64::from_bits(0xFFFD_EADB_EEF0_0001), 2.25];
    let j: Vec<i32> = vec![-7];
    let start_f = data.len();
    f.iter()
        .for_each(|x| data.extend_from_slice(&x.to_le_bytes()));
    let start_i = data.len();
    i.iter()
        .for_each(|x| data.extend_from_slice(&x.to_le_bytes()));
    data.push(0); // m2: BOOL [1] to shift what follows by one more byte
    let start_d = data.len();
    d.iter()
        .for_each(|x| data.extend_from_slice(&x.to_le_bytes()));
    let start_j = data.len();
    j.iter()
        .for_each(|x| data.extend_from_slice(&x.to_le_bytes()));
    let header = format!(
        r#"{{"m":{{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}},
            "f":{{"dtype":"F32","shape":[3],"data_offsets":[{start_f},{start_i}]}},
            "i":{{"dtype":"I64","shape":[2],"data_offsets":[{start_i},{}]}},
            "m2":{{"dtype":"BOOL","shape":[],"data_offsets":[{},{start_d}]}},
            "d":{{"dtype":"F64","shape":[2,1],"data_offsets":[{start_d},{start_j}]}},
            "j":{{"dtype":"I32","shape":[1],"data_offsets":[{start_j},{}]}}}}"#,
        start_d - 1,
        start_d - 1,
        data.len()
    );
    let bytes = st_file(&header, &data);
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!((8 + n) % 8, 0);
    assert_ne!(start_f % 4, 0, "the test must misalign f");
    let dir = temp_dir("misaligned");
    let path = dir.join("m.safetensors");
    std::fs::write(&path, &bytes).unwrap();
    for (how, st) in [
        (
            "read_safetensors",
            kiln_io::read_safetensors(&path).unwrap(),
        ),
        (
            "safetensors_from_bytes",
            kiln_io::safetensors_from_bytes(&bytes).unwrap(),
        ),
    ] {
        assert_eq!(
            st.names().collect::<Vec<_>>(),
            ["m", "f", "i", "m2", "d", "j"],
            "{how}"
        );
        assert_eq!(st["m"].to_vec::<bool>().unwrap(), [true], "{how}");
        let fb: Vec<u32> = st["f"]
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(
            fb,
            f.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{how}"
        );
        assert_eq!(st["i"].to_vec::<i64>().unwrap(), i, "{how}");
        assert_eq!(st["m2"].shape(), &[] as &[usize]);
        assert_eq!(st["m2"].to_vec::<bool>().unwrap(), [false], "{how}");
        assert_eq!(st["d"].shape(), &[2, 1]);
        let db: Vec<u64> = st["d"]
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(
            db,
            d.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{how}"
        );
        assert_eq!(st["j"].to_vec::<i32>().unwrap(), j, "{how}");
        // Arithmetic on a copied tensor works as on any array.
        assert_eq!((&st["j"] * 2).to_vec::<i32>().unwrap(), [-14], "{how}");
    }
}

/// Broken files: each error names the operation, the file, and the tensor at fault.
#[test]
fn errors_name_the_operation_the_file_and_the_tensor() {
    let dir = temp_dir("errors");
    let t = |name: &str, dtype: &str, shape: &str, lo: u64, hi: u64| {
        format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{lo},{hi}]}}"#)
    };
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        (
            "truncated",
            st_file(
                &format!("{{{}}}", t("layer.weight", "F32", "[4]", 0, 16)),
                &[0; 8],
            ),
            Some("layer.weight"),
            "truncated",
        ),
        (
            "gap",
            st_file(
                &format!(
                    "{{{},{}}}",
                    t("a", "F32", "[1]", 0, 4),
                    t("b.bias", "F32", "[1]", 8, 12)
                ),
                &[0; 12],
            ),
            Some("b.bias"),
            "contiguous",
        ),
        (
            "overlap",
            st_file(
                &format!(
                    "{{{},{}}}",
                    t("a", "F32", "[2]", 0, 8),
                    t("emb", "F32", "[1]", 4, 8)
                ),
                &[0; 8],
            ),
            Some("emb"),
            "contiguous",
        ),
        (
            "wrong size",
            st_file(&format!("{{{}}}", t("w", "F64", "[2, 2]", 0, 16)), &[0; 16]),
            Some("w"),
            "needs 32 bytes",
        ),
        (
            "reversed range",
            st_file(&format!("{{{}}}", t("rev", "F32", "[1]", 4, 0)), &[0; 4]),
            Some("rev"),
            "rev",
        ),
        (
            "unknown dtype",
            st_file(
                r#"{"q":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            Some("q"),
            "not a tensor entry",
        ),
        (
            "duplicate name",
            st_file(
                &format!(
                    "{{{},{}}}",
                    t("a", "F32", "[1]", 0, 4),
                    t("a", "F32", "[1]", 4, 8)
                ),
                &[0; 8],
            ),
            Some("a"),
            "named twice",
        ),
        (
            "bad bool",
            st_file(
                &format!("{{{}}}", t("mask", "BOOL", "[3]", 0, 3)),
                &[0, 1, 2],
            ),
            Some("mask"),
            "not 0 or 1",
        ),
        (
            "trailing bytes",
            st_file(&format!("{{{}}}", t("x", "I32", "[1]", 0, 4)), &[0; 6]),
            None,
            "2 bytes after the last tensor",
        ),
        (
            "header past the file",
            [&64u64.to_le_bytes()[..], b"{}"].concat(),
            None,
            "truncated",
        ),
        ("header not JSON", st_file("{not json", &[]), None, "JSON"),
        ("header a list", st_file("[1, 2]", &[]), None, "JSON object"),
        (
            "metadata not strings",
            st_file(r#"{"__metadata__":{"a":1}}"#, &[]),
            None,
            "__metadata__",
        ),
        ("too short", vec![1, 0, 0], None, "8-byte"),
    ];
    for (what, bytes, tensor, message) in cases {
        let path = dir.join(format!("{}.safetensors", what.replace(' ', "_")));
        std::fs::write(&path, &bytes).unwrap();
        let e = kiln_io::read_safetensors(&path).unwrap_err();
        let msg = e.to_string();
        assert!(!matches!(e, Error::Kiln(_)), "{what}: {msg}");
        assert!(msg.contains("read_safetensors"), "{what}: {msg}");
        assert!(msg.contains(&path.display().to_string()), "{what}: {msg}");
        if let Some(tensor) = tensor {
            assert!(
                msg.contains(&format!(": {tensor}")),
                "{what}: the message does not name {tensor}: {msg}"
            );
        }
        assert!(msg.contains(message), "{what}: {msg}");
        let e = kiln_io::safetensors_from_bytes(&bytes)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("safetensors_from_bytes") && e.contains(message),
            "{what}: {e}"
        );
    }
    let e = kiln_io::read_safetensors(dir.join("missing.safetensors")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
}

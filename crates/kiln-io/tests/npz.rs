//! The `.npz` reader and writers: the archives `numpy.savez` and `numpy.savez_compressed`
//! wrote (`tests/fixtures/io`, expected values bit for bit in `manifest.json`, from
//! `gen_io_fixtures.py`) read through [`kiln_io::read_npz`] and [`kiln_io::npz_from_bytes`];
//! kiln → archive → kiln round trips of every dtype and shape with both writers; the
//! writers' refusals (empty and repeated names); and hand-built archives whose broken
//! member must be named in the error.
//!
//! Depends on `kiln_io`, kiln's public API and `serde_json`.

use kiln::{Array, DType};
use kiln_io::Error;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// ------------------------------------------------------------------ manifest

fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/io"))
}

fn manifest(format: &str) -> Vec<Value> {
    let path = fixture_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m: Value = serde_json::from_str(&text).unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["format"] == format)
        .cloned()
        .collect()
}

fn dtype_named(name: &str) -> DType {
    match name {
        "bool" => DType::Bool,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float32" => DType::F32,
        "float64" => DType::F64,
        other => panic!("manifest dtype {other}"),
    }
}

/// Every element as a bit pattern (bools 0/1), so NaN payloads and -0.0 compare exactly.
fn bits(a: &Array) -> Vec<u64> {
    match a.dtype() {
        DType::Bool => a
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect(),
        DType::I32 => a
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|x| x as u32 as u64)
            .collect(),
        DType::I64 => a
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::F32 => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F64 => a
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect(),
    }
}

/// The manifest's values of `spec` as the bit patterns [`bits`] gives.
fn spec_bits(spec: &Value) -> Vec<u64> {
    let dtype = dtype_named(spec["dtype"].as_str().unwrap());
    spec["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| match dtype {
            DType::Bool => u64::from(v.as_bool().unwrap()),
            DType::I32 => v.as_i64().unwrap() as i32 as u32 as u64,
            DType::I64 => v.as_i64().unwrap() as u64,
            DType::F32 | DType::F64 => {
                u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
            }
        })
        .collect()
}

fn check_array(at: &str, a: &Array, spec: &Value) {
    assert_eq!(
        a.dtype(),
        dtype_named(spec["dtype"].as_str().unwrap()),
        "{at}: dtype"
    );
    let shape: Vec<usize> = spec["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(a.shape(), &shape[..], "{at}: shape");
    let (got, want) = (bits(a), spec_bits(spec));
    assert_eq!(got.len(), want.len(), "{at}: element count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "{at}: element {i} (C order) has bits {g:#x}, numpy wrote {w:#x}"
        );
    }
}

fn variant(e: &Error) -> &'static str {
    match e {
        Error::Kiln(_) => "Kiln",
        Error::Io { .. } => "Io",
        Error::Format { .. } => "Format",
        Error::Unsupported { .. } => "Unsupported",
        Error::Pickle { .. } => "Pickle",
        _ => "other",
    }
}

// ------------------------------------------------------------------ fixtures

#[test]
fn every_npz_fixture_reads_as_numpy_wrote_it() {
    let entries = manifest("npz");
    assert!(entries.len() >= 6, "only {} npz fixtures", entries.len());
    for entry in &entries {
        let name = entry["file"].as_str().unwrap();
        let path = fixture_dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        let shown = path.display().to_string();
        let reads = [
            ("read_npz", shown.as_str(), kiln_io::read_npz(&path)),
            ("npz_from_bytes", "<bytes>", kiln_io::npz_from_bytes(&bytes)),
        ];
        for (op, file, read) in reads {
            let at = format!("{name} ({op})");
            if entry["error"].is_null() {
                let arrays = read.unwrap_or_else(|e| panic!("{at}: {e}"));
                let specs = entry["arrays"].as_array().unwrap();
                let mut want: Vec<&str> =
                    specs.iter().map(|s| s["name"].as_str().unwrap()).collect();
                want.sort_unstable();
                assert_eq!(arrays.keys().collect::<Vec<_>>(), want, "{at}: names");
                for spec in specs {
                    let key = spec["name"].as_str().unwrap();
                    check_array(&format!("{at}: {key}"), &arrays[key], spec);
                }
            } else {
                let e = read.expect_err(&at);
                let msg = e.to_string();
                assert_eq!(variant(&e), entry["error"].as_str().unwrap(), "{at}: {msg}");
                assert!(msg.contains(op) && msg.contains(file), "{at}: {msg}");
                for s in entry["contains"].as_array().unwrap() {
                    assert!(msg.contains(s.as_str().unwrap()), "{at}: no {s} in {msg}");
                }
            }
        }
    }
}

/// numpy's Fortran-order member reads as the same values as its C-order computation.
#[test]
fn a_fortran_member_reads_in_c_order() {
    for file in ["savez.npz", "savez_compressed.npz"] {
        let arrays = kiln_io::read_npz(fixture_dir().join(file)).unwrap();
        let f = &arrays["fortran_2x3x4"];
        assert_eq!(f.shape(), &[2, 3, 4]);
        let want: Vec<i32> = (0..24).map(|i| i - 12).collect();
        assert_eq!(f.to_vec::<i32>().unwrap(), want, "{file}");
    }
}

// ------------------------------------------------------------------ round trips

/// A deterministic array of `dtype` and `shape` starting with the dtype's extremes.
fn sample(dtype: DType, shape: &[usize], salt: u64) -> Array {
    let n: usize = shape.iter().product();
    let f32s = [
        0x8000_0000u32,
        0x7FC1_2345,
        0x7F80_0001,
        0xFF80_0000,
        0x0000_0001,
    ];
    let f64s = [
        0x8000_0000_0000_0000u64,
        0x7FF8_1234_5678_9ABC,
        0xFFF0_0000_0000_0000,
        1,
    ];
    let mix = |i: usize| (i as u64 + salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    match dtype {
        DType::Bool => {
            Array::from_vec((0..n).map(|i| mix(i) >> 63 == 1).collect::<Vec<_>>(), shape)
        }
        DType::I32 => Array::from_vec(
            (0..n)
                .map(|i| {
                    if i == 0 {
                        i32::MIN
                    } else {
                        (mix(i) >> 32) as i32
                    }
                })
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::I64 => Array::from_vec(
            (0..n)
                .map(|i| if i == 0 { i64::MAX } else { mix(i) as i64 })
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F32 => Array::from_vec(
            (0..n)
                .map(|i| f32::from_bits(f32s.get(i).copied().unwrap_or((mix(i) >> 32) as u32)))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F64 => Array::from_vec(
            (0..n)
                .map(|i| f64::from_bits(f64s.get(i).copied().unwrap_or(mix(i))))
                .collect::<Vec<_>>(),
            shape,
        ),
    }
    .unwrap()
}

const DTYPES: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];
const SHAPES: &[&[usize]] = &[&[], &[0], &[3, 0, 2], &[7], &[2, 3], &[2, 3, 4]];

fn temp_dir(tag: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("npz-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

type Writer = fn(&Path, &[(&str, &Array)]) -> kiln_io::Result<()>;

fn writers() -> [(&'static str, Writer); 2] {
    [
        ("write_npz", |p, a| kiln_io::write_npz(p, a)),
        ("write_npz_compressed", |p, a| {
            kiln_io::write_npz_compressed(p, a)
        }),
    ]
}

#[test]
fn every_dtype_and_shape_round_trips_with_both_writers() {
    let dir = temp_dir("round-trip");
    let mut named: Vec<(String, Array)> = Vec::new();
    for (d, dtype) in DTYPES.into_iter().enumerate() {
        for (s, shape) in SHAPES.iter().enumerate() {
            named.push((
                format!("{dtype:?}_{s}"),
                sample(dtype, shape, (d * 10 + s) as u64),
            ));
        }
    }
    // Names numpy allows as keyword arguments or dict keys: dots, slashes, non-ASCII.
    named.push(("layer.0.weight".into(), sample(DType::F32, &[2, 2], 99)));
    named.push(("enc/attn/q".into(), sample(DType::F64, &[3], 98)));
    named.push(("ünïcødé".into(), sample(DType::I64, &[1], 97)));
    named.push(("x.npy".into(), sample(DType::I32, &[2], 96))); // member "x.npy.npy"
    let refs: Vec<(&str, &Array)> = named.iter().map(|(n, a)| (n.as_str(), a)).collect();
    for (op, write) in writers() {
        let path = dir.join(format!("{op}.npz"));
        write(&path, &refs).unwrap_or_else(|e| panic!("{op}: {e}"));
        let bytes = std::fs::read(&path).unwrap();
        for (how, back) in [
            ("read_npz", kiln_io::read_npz(&path).unwrap()),
            ("npz_from_bytes", kiln_io::npz_from_bytes(&bytes).unwrap()),
        ] {
            assert_eq!(back.len(), named.len(), "{op} {how}");
            for (name, a) in &named {
                let b = back
                    .get(name)
                    .unwrap_or_else(|| panic!("{op} {how}: no {name}"));
                assert_eq!(
                    (b.dtype(), b.shape()),
                    (a.dtype(), a.shape()),
                    "{op} {how} {name}"
                );
                assert_eq!(bits(b), bits(a), "{op} {how} {name}");
            }
        }
    }
}

#[test]
fn an_empty_archive_round_trips() {
    let dir = temp_dir("empty");
    for (op, write) in writers() {
        let path = dir.join(format!("{op}.npz"));
        write(&path, &[]).unwrap();
        assert!(kiln_io::read_npz(&path).unwrap().is_empty(), "{op}");
    }
}

/// The stored writer stores, the compressed one deflates (zip method 0 and 8 in every local
/// header), and each member is the `.npy` file of its array.
#[test]
fn members_are_stored_or_deflated_npy_files() {
    let dir = temp_dir("methods");
    let z = Array::zeros(&[4096], DType::F64);
    let (stored, deflated) = (dir.join("s.npz"), dir.join("d.npz"));
    kiln_io::write_npz(&stored, &[("z", &z)]).unwrap();
    kiln_io::write_npz_compressed(&deflated, &[("z", &z)]).unwrap();
    let s = std::fs::read(&stored).unwrap();
    let d = std::fs::read(&deflated).unwrap();
    assert_eq!(&s[..4], b"PK\x03\x04");
    assert_eq!(u16::from_le_bytes([s[8], s[9]]), 0, "write_npz stores");
    assert_eq!(
        u16::from_le_bytes([d[8], d[9]]),
        8,
        "write_npz_compressed deflates"
    );
    assert!(
        d.len() * 10 < s.len(),
        "{} compressed bytes against {} stored",
        d.len(),
        s.len()
    );
    let name_len = u16::from_le_bytes([s[26], s[27]]) as usize;
    let extra_len = u16::from_le_bytes([s[28], s[29]]) as usize;
    assert_eq!(&s[30..30 + name_len], b"z.npy");
    let npy = kiln_io::npy_to_bytes(&z).unwrap();
    let start = 30 + name_len + extra_len;
    assert_eq!(&s[start..start + npy.len()], &npy[..]);
}

#[test]
fn writers_refuse_empty_and_repeated_names() {
    let dir = temp_dir("refuse");
    let a = sample(DType::F32, &[2], 0);
    let b = sample(DType::I32, &[2], 1);
    type Named<'a> = &'a [(&'a str, &'a Array)];
    let cases: [(Named, &str, &str); 3] = [
        (&[("w", &a), ("w", &b)], "w", "twice"),
        (&[("", &a)], "", "empty name"),
        (&[("ok", &a), ("", &b)], "", "empty name"),
    ];
    for (op, write) in writers() {
        for (i, (arrays, name, what)) in cases.iter().enumerate() {
            let path = dir.join(format!("{op}-{i}.npz"));
            let e = write(&path, arrays).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, Error::Unsupported { .. }), "{op} {i}: {e:?}");
            assert!(
                msg.contains(op) && msg.contains(&path.display().to_string()),
                "{msg}"
            );
            assert!(msg.contains(what) && msg.contains(name), "{op} {i}: {msg}");
            assert!(!path.exists(), "{op} {i}: a refused write left a file");
        }
    }
    // An existing archive is left intact by a refused write.
    let path = dir.join("kept.npz");
    kiln_io::write_npz(&path, &[("a", &a)]).unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(kiln_io::write_npz(&path, &[("a", &a), ("a", &a)]).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

// ------------------------------------------------------------------ hand-built archives

/// CRC-32 (IEEE), as zip stores it.
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

/// A zip archive of stored members (what `numpy.savez` writes), built by hand.
fn zip_stored(members: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for (name, data) in members {
        let offset = out.len() as u32;
        let (crc, len) = (crc32(data), data.len() as u32);
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes()); // version needed
            v.extend_from_slice(&0u16.to_le_bytes()); // flags
            v.extend_from_slice(&0u16.to_le_bytes()); // stored
            v.extend_from_slice(&0u32.to_le_bytes()); // time, date
            v.extend_from_slice(&crc.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra
        };
        out.extend_from_slice(b"PK\x03\x04");
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        common(&mut central);
        central.extend_from_slice(&[0; 10]); // comment length, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
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

#[test]
fn a_hand_built_archive_reads() {
    let a = kiln_io::npy_to_bytes(&sample(DType::F64, &[3], 5)).unwrap();
    let arrays = kiln_io::npz_from_bytes(&zip_stored(&[("a.npy", &a), ("b", &a)])).unwrap();
    assert_eq!(arrays.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(bits(&arrays["a"]), bits(&sample(DType::F64, &[3], 5)));
}

/// Each broken member is named, with the operation and the file.
#[test]
fn errors_name_the_member() {
    let dir = temp_dir("members");
    let good = kiln_io::npy_to_bytes(&sample(DType::F32, &[4], 0)).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "truncated",
            zip_stored(&[("ok.npy", &good), ("short.npy", &good[..good.len() - 2])]),
            "short.npy",
            "data bytes",
        ),
        (
            "not npy",
            zip_stored(&[("notes.txt", b"hello")]),
            "notes.txt",
            "npy",
        ),
        (
            "bad header",
            zip_stored(&[(
                "h.npy",
                &good[..10]
                    .iter()
                    .chain(b"{'descr': 1}\n")
                    .copied()
                    .collect::<Vec<_>>(),
            )]),
            "h.npy",
            "npy",
        ),
        (
            "same key twice",
            zip_stored(&[("a", &good), ("a.npy", &good)]),
            "a.npy",
            "a second array named 'a'",
        ),
    ];
    for (what, bytes, member, message) in cases {
        let path = dir.join(format!("{}.npz", what.replace(' ', "_")));
        std::fs::write(&path, &bytes).unwrap();
        let e = kiln_io::read_npz(&path).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("read_npz"), "{what}: {msg}");
        assert!(msg.contains(&path.display().to_string()), "{what}: {msg}");
        assert!(
            msg.contains(member),
            "{what}: the message does not name {member}: {msg}"
        );
        assert!(msg.contains(message), "{what}: {msg}");
        let e = kiln_io::npz_from_bytes(&bytes).unwrap_err().to_string();
        assert!(
            e.contains("npz_from_bytes") && e.contains(member),
            "{what}: {e}"
        );
    }
    // A corrupted byte inside a deflated member: its CRC or its inflate fails, naming it.
    let path = dir.join("c.npz");
    kiln_io::write_npz_compressed(&path, &[("first", &sample(DType::F64, &[64], 1))]).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let name_len = u16::from_le_bytes([bytes[26], bytes[27]]) as usize;
    let extra_len = u16::from_le_bytes([bytes[28], bytes[29]]) as usize;
    let data = 30 + name_len + extra_len;
    bytes[data + 40] ^= 0x55;
    let e = kiln_io::npz_from_bytes(&bytes).unwrap_err().to_string();
    assert!(e.contains("first.npy"), "{e}");
    // Not a zip at all.
    let e = kiln_io::npz_from_bytes(b"\x93NUMPY not a zip").unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
    let e = kiln_io::read_npz(dir.join("missing.npz")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
}

/// The keys are the member names without `.npy`, sorted (a BTreeMap).
#[test]
fn keys_are_member_names_without_the_suffix() {
    let a = kiln_io::npy_to_bytes(&sample(DType::Bool, &[2], 0)).unwrap();
    let arrays: BTreeMap<String, Array> = kiln_io::npz_from_bytes(&zip_stored(&[
        ("z.npy", &a),
        ("dir/y.npy", &a),
        ("x.npy.npy", &a),
    ]))
    .unwrap();
    assert_eq!(arrays.keys().collect::<Vec<_>>(), ["dir/y", "x.npy", "z"]);
}

//! The `.npz` reader and writers: the archives `numpy.savez` and `numpy.savez_compressed`
//! wrote (`tests/fixtures/io`, expected values bit for bit in `manifest.json`, from
//! `gen_io_fixtures.py`) read through [`kiln_io::read_npz`] and [`kiln_io::npz_from_bytes`];
//! kiln → archive → kiln round trips of every dtype and shape with both writers; the
//! writers' refusals (empty and repeated names); and hand-built archives whose broken
//! member must be named in the error.
//!
//! Depends on `kiln_io`, kiln's public API and the shared helpers in `common`.

mod common;

use common::bytes::{zip_raw, Member};
use common::fixtures::{bits, check_array, check_error, check_same_array, manifest};
use common::samples::{sample, DTYPES};
use common::{fixture_dir, temp_dir};
use kiln::{Array, DType};
use kiln_io::Error;
use std::collections::BTreeMap;
use std::path::Path;

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
                check_error(&at, &e, entry, op, file);
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

const SHAPES: &[&[usize]] = &[&[], &[0], &[3, 0, 2], &[7], &[2, 3], &[2, 3, 4]];

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
                check_same_array(&format!("{op} {how} {name}"), b, a);
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

/// A zip archive of stored members (what `numpy.savez` writes), built by hand.
fn zip_stored(members: &[(&str, &[u8])]) -> Vec<u8> {
    let members: Vec<Member> = members.iter().map(|(n, d)| Member::stored(n, d)).collect();
    zip_raw(&members)
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

//! The pickle reader on pickles written by Python's `pickle` module (protocols 2 to 5;
//! `tests/fixtures/gen_pickle_fixtures.py` writes them), on hand-assembled opcode sequences
//! for what Python's pickler rarely emits, and on truncated and corrupt input.

use kiln_io::pickle::{loads, loads_prefix, PickleError, Value};

fn fixture(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/tests/fixtures/pickle/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn s(x: &str) -> Value {
    Value::Str(x.into())
}

fn ints(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

/// `bytes` and `bytearray` as the protocol pickles them: protocol 2 has no bytes opcodes and
/// writes `_codecs.encode(text, "latin1")`; `bytearray` before protocol 5 is a call of
/// `builtins.bytearray` (protocol 2: of `bytearray(text, "latin-1")`).
fn bytes_of(v: &Value) -> Vec<u8> {
    match v {
        Value::Bytes(b) => b.clone(),
        Value::Object(o) => match (&o.callable, o.args.first()) {
            (Value::Global { name, .. }, Some(Value::Str(t)))
                if name == "encode" || name == "bytearray" =>
            {
                t.chars().map(|c| c as u32 as u8).collect()
            }
            (Value::Global { name, .. }, Some(inner)) if name == "bytearray" => bytes_of(inner),
            (Value::Global { name, .. }, None) if name == "bytes" || name == "bytearray" => vec![],
            _ => panic!("not bytes: {v:?}"),
        },
        _ => panic!("not bytes: {v:?}"),
    }
}

/// The elements of a set: `EMPTY_SET`/`ADDITEMS` (protocol 4+) or `builtins.set([…])`.
fn set_items(v: &Value) -> Vec<Value> {
    match v {
        Value::Set(x) | Value::FrozenSet(x) => x.clone(),
        Value::Object(o) => o.args[0].as_seq().unwrap().to_vec(),
        _ => panic!("not a set: {v:?}"),
    }
}

#[test]
fn values_of_every_protocol() {
    for proto in 2..=5 {
        let v = loads(&fixture(&format!("values_p{proto}.pkl")))
            .unwrap_or_else(|e| panic!("protocol {proto}: {e}"));
        let get = |k: &str| {
            v.get(k)
                .unwrap_or_else(|| panic!("protocol {proto}: no {k}"))
        };
        assert_eq!(get("none"), &Value::None);
        assert_eq!(get("true"), &Value::Bool(true));
        assert_eq!(get("false"), &Value::Bool(false));
        assert_eq!(
            get("ints"),
            &ints(&[
                0,
                1,
                255,
                256,
                65535,
                65536,
                -1,
                -(1 << 31),
                (1 << 31) - 1,
                1 << 31,
                i64::MAX,
                i64::MIN
            ]),
            "protocol {proto}"
        );
        // 2**64 and -(2**70), little-endian two's complement
        let mut two64 = vec![0u8; 8];
        two64.push(1);
        let mut minus_two70 = vec![0u8; 8];
        minus_two70.push(0xc0);
        assert_eq!(
            get("big"),
            &Value::List(vec![Value::BigInt(two64), Value::BigInt(minus_two70)])
        );
        let Value::List(f) = get("floats") else {
            panic!()
        };
        assert_eq!(f[0], Value::Float(1.5));
        assert!(matches!(f[1], Value::Float(z) if z == 0.0 && z.is_sign_negative()));
        assert_eq!(f[2], Value::Float(f64::INFINITY));
        assert_eq!(f[3], Value::Float(1e-300));
        assert_eq!(
            get("text"),
            &Value::List(vec![
                s(""),
                s("ascii"),
                s("我不知道。"),
                s(&"é".repeat(300))
            ])
        );
        let Value::List(b) = get("bytes") else {
            panic!()
        };
        let b: Vec<Vec<u8>> = b.iter().map(bytes_of).collect();
        assert_eq!(
            b,
            [vec![], vec![0, 255], vec![b'z'; 300]],
            "protocol {proto}"
        );
        assert_eq!(bytes_of(get("bytearray")), b"ab", "protocol {proto}");
        let tuples: Vec<usize> = get("tuples")
            .as_seq()
            .unwrap()
            .iter()
            .map(|t| t.as_seq().unwrap().len())
            .collect();
        assert_eq!(tuples, [0, 1, 2, 3, 4]);
        assert_eq!(
            get("tuples").as_seq().unwrap()[4],
            Value::Tuple((1..=4).map(Value::Int).collect())
        );
        let nested = get("nested").get("a").unwrap().as_seq().unwrap()[0]
            .get("b")
            .unwrap();
        assert_eq!(nested, &Value::Tuple(vec![Value::None]));
        assert_eq!(
            get("int_keys"),
            &Value::Dict(vec![
                (Value::Int(0), s("SOS")),
                (Value::Int(1), s("EOS")),
                (Value::Int(300), s("w")),
            ])
        );
        // one list referenced twice (BINPUT/BINGET or MEMOIZE/BINGET) comes out twice, filled
        let shared = Value::List(vec![s("x"), s("y")]);
        assert_eq!(get("shared"), &Value::List(vec![shared.clone(), shared]));
        assert_eq!(set_items(get("set")), [Value::Int(7)]);
        assert_eq!(set_items(get("frozenset")), [Value::Int(8)]);
        let Value::Object(od) = get("ordered") else {
            panic!()
        };
        assert!(od.callable.is_global("collections", "OrderedDict"));
        assert_eq!(
            od.entries,
            vec![(s("z"), Value::Int(1)), (s("a"), Value::Int(2))]
        );
    }
}

#[test]
fn a_vocabulary_object_with_newobj_and_build() {
    for proto in [2, 4] {
        let v = loads(&fixture(&format!("lang_p{proto}.pkl"))).unwrap();
        let Value::Object(o) = &v else {
            panic!("{v:?}")
        };
        assert!(o.callable.is_global("__main__", "Lang"), "{:?}", o.callable);
        assert_eq!(v.get("n_words"), Some(&Value::Int(8)));
        let w2i = v.get("word2index").unwrap().entries().unwrap();
        let words: Vec<(&str, i64)> = w2i
            .iter()
            .map(|(k, i)| (k.as_str().unwrap(), i.as_int().unwrap()))
            .collect();
        assert_eq!(
            words,
            [
                ("那", 2),
                ("是", 3),
                ("谁", 4),
                ("tom", 5),
                ("。", 6),
                ("", 7)
            ]
        );
        let i2w = v.get("index2word").unwrap().entries().unwrap();
        assert_eq!(i2w[0], (Value::Int(0), s("SOS")));
        assert_eq!(i2w[7], (Value::Int(7), s("")));
    }
}

#[test]
fn hand_assembled_opcodes() {
    // two frames, LONG_BINPUT/LONG_BINGET, BINUNICODE8, BINBYTES8, LONG4, BINPERSID,
    // NEWOBJ_EX, POP, DUP, POP_MARK, BININT, an empty DICT and LIST from marks
    let mut p = vec![0x80, 4];
    let body1: Vec<u8> = [
        &b"("[..],                                   // MARK
        b"\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi",   // BINUNICODE8 "hi"
        b"r\x05\x00\x00\x00",                        // LONG_BINPUT 5
        b"0",                                        // POP
        b"j\x05\x00\x00\x00",                        // LONG_BINGET 5
        b"2",                                        // DUP
        b"\x8e\x01\x00\x00\x00\x00\x00\x00\x00\x07", // BINBYTES8 b"\x07"
    ]
    .concat();
    p.push(0x95);
    p.extend((body1.len() as u64).to_le_bytes());
    p.extend(&body1);
    let body2: Vec<u8> = [
        &b"\x8b\x02\x00\x00\x00\xff\x7f"[..], // LONG4 0x7fff
        b"J\xfe\xff\xff\xff",                 // BININT -2
        b"(N1",                               // MARK NONE POP_MARK
        b"(d",                                // empty DICT
        b"(l",                                // empty LIST
        b"\x8c\x03key\x85Q",                  // ("key",) BINPERSID
        b"\x8c\x01m\x8c\x01C\x93",            // STACK_GLOBAL m.C
        b")}\x8c\x01kK\x01s\x92",             // NEWOBJ_EX(C, (), {"k": 1})
        b"l.",                                // LIST to the first mark, STOP
    ]
    .concat();
    p.push(0x95);
    p.extend((body2.len() as u64).to_le_bytes());
    p.extend(&body2);
    let v = loads(&p).unwrap();
    let Value::List(items) = v else {
        panic!("{v:?}")
    };
    assert_eq!(items[0], s("hi"));
    assert_eq!(items[1], s("hi"));
    assert_eq!(items[2], Value::Bytes(vec![7]));
    assert_eq!(items[3], Value::Int(0x7fff));
    assert_eq!(items[4], Value::Int(-2));
    assert_eq!(items[5], Value::Dict(vec![]));
    assert_eq!(items[6], Value::List(vec![]));
    assert_eq!(
        items[7],
        Value::PersistentId(Box::new(Value::Tuple(vec![s("key")])))
    );
    let Value::Object(o) = &items[8] else {
        panic!()
    };
    assert!(o.callable.is_global("m", "C"));
    assert_eq!(o.kwargs, vec![(s("k"), Value::Int(1))]);
    assert_eq!(items.len(), 9);
}

#[test]
fn a_stream_of_pickles() {
    let mut two = fixture("lang_p4.pkl");
    let first = two.len();
    two.extend(fixture("lang_p2.pkl"));
    let (a, used) = loads_prefix(&two).unwrap();
    assert_eq!(used, first);
    let (b, _) = loads_prefix(&two[used..]).unwrap();
    assert_eq!(a, b);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for name in [
        "values_p2.pkl",
        "values_p4.pkl",
        "values_p5.pkl",
        "lang_p4.pkl",
    ] {
        let b = fixture(name);
        for n in 0..b.len() {
            let e = loads(&b[..n]).expect_err("a cut pickle must not load");
            let msg = e.to_string();
            assert!(
                msg.contains("truncated") || msg.contains("offset"),
                "{name}[..{n}]: {msg}"
            );
        }
    }
    // protocol 2 has no frames: the program runs to the cut
    let b = fixture("values_p2.pkl");
    let e = loads(&b[..b.len() - 1]).unwrap_err();
    assert_eq!(
        e,
        PickleError::NoStop {
            offset: b.len() - 1
        }
    );
    // protocol 4 frames announce their length: a cut inside one is seen at the FRAME
    let b = fixture("values_p4.pkl");
    let e = loads(&b[..b.len() - 1]).unwrap_err();
    assert!(
        matches!(
            e,
            PickleError::Truncated {
                name: "FRAME",
                offset: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn corrupt_bytes_are_errors_naming_opcode_and_offset() {
    // an unknown opcode
    let mut b = fixture("lang_p2.pkl");
    b[2] = 0xff;
    let e = loads(&b).unwrap_err();
    assert_eq!(
        e,
        PickleError::UnknownOpcode {
            opcode: 0xff,
            offset: 2
        }
    );
    assert_eq!(e.to_string(), "pickle: unknown opcode 0xff at offset 2");
    // every single-byte corruption gives a value or an error, never a panic
    let orig = fixture("values_p4.pkl");
    for i in 0..orig.len() {
        for x in [0x00, 0x28, 0x2e, 0x71, 0x80, 0x94, 0xff] {
            let mut c = orig.clone();
            c[i] = x;
            let _ = loads(&c);
        }
    }
    // protocol 0 text opcodes are named as unsupported
    let e = loads(b"(lp0\nI1\na.").unwrap_err();
    assert!(
        matches!(
            e,
            PickleError::Unsupported {
                name: "PUT",
                offset: 2,
                ..
            }
        ),
        "{e}"
    );
    // a newer protocol
    assert_eq!(
        loads(b"\x80\x06N.").unwrap_err(),
        PickleError::Protocol {
            version: 6,
            offset: 0
        }
    );
    // a memo entry that was never stored
    let e = loads(b"\x80\x02h\x03.").unwrap_err();
    assert!(
        e.to_string().contains("BINGET at offset 2") && e.to_string().contains("memo entry 3"),
        "{e}"
    );
    // popping below a mark, appending to a tuple
    assert!(loads(b"\x80\x02N(R.").is_err());
    let e = loads(b"\x80\x02)Na.").unwrap_err();
    assert!(e.to_string().contains("cannot append to a tuple"), "{e}");
    // a string that is not UTF-8
    let e = loads(b"\x80\x04\x8c\x01\xff.").unwrap_err();
    assert!(e.to_string().contains("UTF-8"), "{e}");
    // a "billion laughs": 40 levels of tuples of two references to the level below
    let mut bomb = b"\x80\x02Nq\x00".to_vec();
    for k in 0..40u8 {
        bomb.extend([b'h', k, b'h', k, 0x86, b'q', k + 1]);
    }
    bomb.push(b'.');
    let e = loads(&bomb).unwrap_err();
    assert!(matches!(e, PickleError::Structure(_)), "{e}");
    // a list that contains itself
    let e = loads(b"\x80\x02]q\x00h\x00a.").unwrap_err();
    assert!(e.to_string().contains("itself"), "{e}");
}

//! The PyTorch checkpoint reader on `tests/fixtures/pth/views.pth`, written by `torch.save`
//! (`tests/fixtures/gen_pth_fixtures.py`; its expected values are in `views.json`): storage
//! offsets, non-contiguous and zero strides, every dtype, nested and ordered state dicts; and
//! on broken checkpoints.

use kiln_io::{read_pth, TensorData};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pth")).join(name)
}

fn values(d: &TensorData) -> Vec<f64> {
    match d {
        TensorData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::F64(v) => v.clone(),
        TensorData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        TensorData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
    }
}

#[test]
fn every_tensor_matches_torch() {
    let tensors = read_pth(fixture("views.pth")).unwrap();
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("views.json")).unwrap()).unwrap();
    let expected = expected.as_object().unwrap();
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut want: Vec<&String> = expected.keys().collect();
    want.sort();
    assert_eq!(
        names, want,
        "the tensors, by dotted name (non-tensors skipped)"
    );
    for (name, e) in expected {
        let t = &tensors[name];
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape, shape, "{name}");
        assert_eq!(t.torch_dtype, e["dtype"].as_str().unwrap(), "{name}");
        let want: Vec<f64> = e["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| match x {
                serde_json::Value::Bool(b) => f64::from(u8::from(*b)),
                x => x.as_f64().unwrap(),
            })
            .collect();
        // (serde_json's float parsing may be one ulp off; the values are exact in the file)
        let got = values(&t.data);
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs(),
                "{name}: {got:?} vs {want:?}"
            );
        }
        // and it converts to a kiln array of that shape
        let a = t.to_array().unwrap();
        assert_eq!(a.shape(), &shape[..], "{name}");
    }
}

#[test]
fn offsets_and_strides_are_honoured() {
    let t = read_pth(fixture("views.pth")).unwrap();
    // base = arange(24.).reshape(4, 6); strided = base[1:, 1::2].t(): offset 7, stride (2, 6)
    let strided = &t["model.strided"];
    assert_eq!(strided.shape, [3, 3]);
    assert_eq!(
        strided.data,
        TensorData::F32(vec![7., 13., 19., 9., 15., 21., 11., 17., 23.])
    );
    // base.view(-1)[5:9]: contiguous, offset 5 into the same storage
    assert_eq!(
        t["model.offset"].data,
        TensorData::F32(vec![5., 6., 7., 8.])
    );
    // base[:, 2:3]: offset 2, stride (6, 1)
    assert_eq!(
        t["model.column"].data,
        TensorData::F32(vec![2., 8., 14., 20.])
    );
    // arange(3.).expand(2, 3): stride (0, 1)
    assert_eq!(
        t["model.expanded"].data,
        TensorData::F32(vec![0., 1., 2., 0., 1., 2.])
    );
    // arange(-2, 3)[::2]: int64 with stride 2
    assert_eq!(t["model.int64"].data, TensorData::I64(vec![-2, 0, 2]));
    let a = t["model.strided"].to_array().unwrap();
    assert_eq!(a.dtype(), kiln::DType::F32);
    assert_eq!(a.sum(None, false).item::<f32>().unwrap(), 135.0);
}

#[test]
fn state_dicts_nest_with_dotted_names() {
    let t = read_pth(fixture("views.pth")).unwrap();
    // an nn.GRU(3, 2) state dict (an OrderedDict with _metadata) under "gru"
    assert_eq!(t["gru.weight_ih_l0"].shape, [6, 3]);
    assert_eq!(t["gru.weight_hh_l0"].shape, [6, 2]);
    assert_eq!(t["gru.bias_ih_l0"].shape, [6]);
    // lists index by position; scalars and empty tensors keep their shapes
    assert_eq!(t["list.1.inner"].data, TensorData::F32(vec![3.0]));
    assert!(t["model.scalar"].shape.is_empty());
    assert_eq!(
        t["model.scalar"].to_array().unwrap().item::<f32>().unwrap(),
        3.5
    );
    assert_eq!(t["model.empty"].shape, [0, 3]);
    assert!(t["model.empty"].data.is_empty());
    // a Parameter is its tensor
    assert_eq!(t["model.param"].data, TensorData::F32(vec![1.0; 4]));
    assert!(!t.contains_key("lr") && !t.contains_key("step"));
}

#[test]
fn broken_checkpoints_are_clear_errors() {
    // a storage too short for its tensor (hand-built in torch's layout)
    let e = read_pth(fixture("short_storage.pth"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("read_pth") && e.contains("short_storage.pth: w: ") && e.contains("holds 4"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("kiln-pth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = std::fs::read(fixture("views.pth")).unwrap();
    // cut anywhere: an error, never a panic
    for n in (0..bytes.len()).step_by(97) {
        let p = dir.join("cut.pth");
        std::fs::write(&p, &bytes[..n]).unwrap();
        let e = read_pth(&p).unwrap_err().to_string();
        assert!(e.contains("cut.pth"), "{e}");
    }
    // a flipped byte in a storage fails the zip's CRC-32 check, naming the member
    let mut flipped = bytes.clone();
    let seven = 7.0f32.to_le_bytes(); // an element of the arange(24.) storage
    let at = flipped.windows(4).position(|w| w == seven).unwrap();
    flipped[at + 3] ^= 0x01;
    let p = dir.join("flipped.pth");
    std::fs::write(&p, &flipped).unwrap();
    let e = read_pth(&p).unwrap_err().to_string();
    assert!(
        e.contains("flipped.pth") && e.contains("/data/") && e.to_lowercase().contains("checksum"),
        "{e}"
    );
    // not a checkpoint at all
    let p = dir.join("text.pth");
    std::fs::write(&p, b"hello").unwrap();
    let e = read_pth(&p).unwrap_err();
    assert!(
        matches!(e, kiln_io::Error::Format { .. }) && e.to_string().contains("not a readable zip"),
        "{e}"
    );
    // the legacy format
    std::fs::write(&p, b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.").unwrap();
    let e = read_pth(&p).unwrap_err();
    assert!(
        matches!(e, kiln_io::Error::Unsupported { .. }) && e.to_string().contains("legacy"),
        "{e}"
    );
    // a missing file is an I/O error naming it
    let e = read_pth(dir.join("missing.pth")).unwrap_err();
    assert!(
        matches!(e, kiln_io::Error::Io { op: "read_pth", .. })
            && e.to_string().contains("missing.pth"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

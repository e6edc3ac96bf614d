//! Loader and request validation: bad input gives an error naming the problem, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use infergate_engine::ir::Op;
use infergate_engine::onnx::proto::{NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto};
use infergate_engine::{DataType, Dim, ErrorKind, Model, Session, SessionOptions, Tensor};
use support::build::*;

fn err(bytes: &[u8]) -> infergate_engine::EngineError {
    Model::from_bytes(bytes, None).expect_err("should not load")
}

#[test]
fn empty_and_non_onnx_bytes_are_refused() {
    let e = err(&[]);
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("empty"), "{e}");
    for junk in [
        &b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..],
        b"hello world, not a model",
        &[0xff; 64],
    ] {
        let e = err(junk);
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("ONNX"), "{e}");
    }
}

#[test]
fn truncated_model_is_refused() {
    let b = bytes(&small_cnn());
    for cut in [1, 10, b.len() / 3, b.len() / 2, b.len() - 7] {
        let e = err(&b[..cut]);
        assert!(
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported),
            "{cut}: {e}"
        );
    }
}

#[test]
fn cycles_and_missing_tensors_name_the_node() {
    let cyc = model(
        vec![
            node("Add", &["x", "b"], &["a"], vec![]),
            node("Relu", &["a"], &["b"], vec![]),
        ],
        vec![vi("x", 1, &[2])],
        vec![vi("b", 1, &[2])],
        vec![],
        13,
    );
    let e = err(&bytes(&cyc));
    assert!(e.to_string().contains("cycle"), "{e}");
    assert!(e.to_string().contains("Add_a"), "{e}");
    let missing = model(
        vec![node("Relu", &["nope"], &["y"], vec![])],
        vec![vi("x", 1, &[2])],
        vec![vi("y", 1, &[2])],
        vec![],
        13,
    );
    let e = err(&bytes(&missing));
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("'nope'") && e.to_string().contains("Relu_y"),
        "{e}"
    );
}

#[test]
fn opset_too_new_or_other_domains_are_unsupported() {
    let m = model(
        vec![node("Relu", &["x"], &["y"], vec![])],
        vec![vi("x", 1, &[2])],
        vec![vi("y", 1, &[2])],
        vec![],
        99,
    );
    let e = err(&bytes(&m));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(
        e.to_string().contains("opset 99") && e.to_string().contains("7 to"),
        "{e}"
    );
    let mut ml = model(
        vec![NodeProto {
            domain: "ai.onnx.ml".into(),
            ..node("LinearClassifier", &["x"], &["y"], vec![])
        }],
        vec![vi("x", 1, &[2])],
        vec![vi("y", 1, &[2])],
        vec![],
        13,
    );
    ml.opset_import.push(OperatorSetIdProto {
        domain: "ai.onnx.ml".into(),
        version: 3,
    });
    let e = err(&bytes(&ml));
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.to_string().contains("ai.onnx.ml"), "{e}");
}

#[test]
fn every_unsupported_node_is_reported_at_once() {
    let m = model(
        vec![
            node("GridSample", &["x"], &["a"], vec![]),
            node("Relu", &["a"], &["b"], vec![]),
            node("Unique", &["b"], &["y"], vec![]),
        ],
        vec![vi("x", 1, &[1, 2, 3, 3])],
        vec![vi("y", 1, &[1, 2, 3, 3])],
        vec![],
        13,
    );
    let e = err(&bytes(&m)).to_string();
    assert!(e.contains("2 unsupported nodes"), "{e}");
    assert!(
        e.contains("GridSample_a") && e.contains("(GridSample)") && e.contains("Unique_y"),
        "{e}"
    );
}

#[test]
fn request_inputs_are_checked_against_the_signature() {
    let model = Arc::new(Model::from_bytes(&bytes(&small_cnn()), None).unwrap());
    let sig = model.signature();
    assert_eq!(
        sig.inputs[0].dims,
        vec![
            Dim::Dynamic(Some("batch".into())),
            Dim::Fixed(3),
            Dim::Fixed(8),
            Dim::Fixed(8)
        ]
    );
    assert_eq!(sig.outputs[0].dims[1], Dim::Fixed(4));
    assert!(matches!(sig.outputs[0].dims[0], Dim::Dynamic(_)));
    let s = Session::new(model, SessionOptions::default()).unwrap();
    let good = Tensor::from_vec(vec![2, 3, 8, 8], vec![0.5f32; 384]).unwrap();
    assert_eq!(
        s.run_blocking(vec![("x".into(), good)]).unwrap()[0].1.shape,
        vec![2, 4]
    );
    let wrong_type = Tensor::from_vec(vec![2, 3, 8, 8], vec![0i64; 384]).unwrap();
    let e = s.run_blocking(vec![("x".into(), wrong_type)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("input 'x'") && e.to_string().contains("FP32"),
        "{e}"
    );
    let no_batch = Tensor::from_vec(vec![3, 8, 8], vec![0f32; 192]).unwrap();
    let e = s
        .run_blocking(vec![("x".into(), no_batch)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expected shape [batch,3,8,8]") && e.contains("batch dimension missing"),
        "{e}"
    );
    let e = s.run_blocking(vec![]).unwrap_err().to_string();
    assert!(e.contains("missing input 'x'"), "{e}");
    let e = s
        .run_blocking(vec![("z".into(), Tensor::scalar_f32(1.0))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unexpected input 'z'"), "{e}");
}

#[test]
fn batchnorm_and_relu_are_folded_into_the_conv() {
    let model = Model::from_bytes(&bytes(&small_cnn()), None).unwrap();
    let ops: Vec<&Op> = model.graph().nodes.iter().map(|n| &n.op).collect();
    assert!(
        !ops.iter()
            .any(|o| matches!(o, Op::BatchNormalization { .. } | Op::Unary(_))),
        "{ops:?}"
    );
    let Some(Op::Conv { activation, .. }) = ops.iter().find(|o| matches!(o, Op::Conv { .. })) else {
        panic!("no conv")
    };
    assert_eq!(activation.steps.len(), 1, "{activation:?}");
}

#[test]
fn external_data_is_read_beside_the_model_and_confined_to_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("weights.bin"), [vec![0u8; 8], w].concat()).unwrap();
    let ext = |loc: &str| TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: 1,
        data_location: 1,
        external_data: vec![
            StringStringEntryProto {
                key: "location".into(),
                value: loc.into(),
            },
            StringStringEntryProto {
                key: "offset".into(),
                value: "8".into(),
            },
            StringStringEntryProto {
                key: "length".into(),
                value: "12".into(),
            },
        ],
        ..Default::default()
    };
    let m = |loc: &str| {
        model(
            vec![node("Add", &["x", "w"], &["y"], vec![])],
            vec![vi("x", 1, &[3])],
            vec![vi("y", 1, &[3])],
            vec![ext(loc)],
            13,
        )
    };
    std::fs::write(dir.path().join("model.onnx"), bytes(&m("weights.bin"))).unwrap();
    let model = Arc::new(Model::load(dir.path().join("model.onnx")).unwrap());
    let s = Session::new(model, SessionOptions::default()).unwrap();
    let out = s
        .run_blocking(vec![(
            "x".into(),
            Tensor::from_vec(vec![3], vec![1f32, 1.0, 1.0]).unwrap(),
        )])
        .unwrap();
    assert_eq!(out[0].1.to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
    let e = Model::from_bytes(&bytes(&m("../weights.bin")), Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("inside the model's folder"), "{e}");
    let e = Model::from_bytes(&bytes(&m("weights.bin")), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("external file"), "{e}");
}

/// Deterministic mutation check (the fuzz target's property without a fuzzer): flipped, dropped and
/// inserted bytes of a valid model load or fail with an error, never panic.
#[test]
fn mutated_models_never_panic() {
    let base = bytes(&small_cnn());
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut loaded = 0;
    for i in 0..3000 {
        let mut b = base.clone();
        for _ in 0..1 + (next() % 4) {
            let pos = (next() as usize) % b.len();
            match i % 3 {
                0 => b[pos] ^= 1 << (next() % 8),
                1 => {
                    b.remove(pos);
                }
                _ => b.insert(pos, next() as u8),
            }
        }
        let r = std::panic::catch_unwind(|| {
            if let Ok(m) = Model::from_bytes(&b, None) {
                let dims: Vec<usize> = m
                    .signature()
                    .inputs
                    .first()
                    .map(|s| {
                        s.dims
                            .iter()
                            .map(|d| match d {
                                Dim::Fixed(n) => (*n).min(16),
                                Dim::Dynamic(_) => 1,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = m.specialise(&[infergate_engine::PlanInput {
                    shape: dims,
                    value: None,
                }]);
                true
            } else {
                false
            }
        });
        match r {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(_) => panic!("mutation {i} panicked"),
        }
    }
    assert!(
        loaded > 0,
        "no mutation loaded at all; the check is not exercising the converter"
    );
    let _ = DataType::F32;
}

fn tensor_i64(name: &str, data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![data.len() as i64],
        data_type: 7,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// Shapes written in the model (a Reshape target, Tile repeats, an Expand shape, a ConstantOfShape
/// size) are numbers an attacker picks: ones whose product overflows or asks for all of memory are
/// refused with the node named, at load or when planning, never a panic or an allocation.
#[test]
fn shapes_too_large_to_hold_are_refused() {
    let huge = 1i64 << 40;
    let cases = [
        ("Reshape", vec![-1, huge, huge], vec![]),
        ("Reshape", vec![0, huge, huge], vec![]),
        ("Tile", vec![huge, huge], vec![]),
        ("Expand", vec![huge, huge, 2, 3], vec![]),
        ("ConstantOfShape", vec![1 << 20, 1 << 20], vec![]),
    ];
    for (op, shape, attrs) in cases {
        let (ins, x): (Vec<&str>, Vec<_>) = if op == "ConstantOfShape" {
            (vec!["s"], vec![vi("x", 1, &[2, 3])])
        } else {
            (vec!["x", "s"], vec![vi("x", 1, &[2, 3])])
        };
        let m = model(
            vec![node(op, &ins, &["y"], attrs)],
            x,
            vec![vi("y", 1, &[])],
            vec![tensor_i64("s", &shape)],
            13,
        );
        let outcome = std::panic::catch_unwind(|| match Model::from_bytes(&bytes(&m), None) {
            Err(e) => e,
            Ok(m) => m
                .specialise(&[infergate_engine::PlanInput {
                    shape: vec![2, 3],
                    value: None,
                }])
                .expect_err("a shape this large must not plan"),
        });
        let e = outcome.unwrap_or_else(|_| panic!("{op} {shape:?} panicked"));
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{op} {shape:?}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("more than") && (msg.contains("elements") || msg.contains("element")),
            "{op} {shape:?}: {msg}"
        );
    }
}

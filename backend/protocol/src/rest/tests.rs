//! Tests of the REST infer codec: JSON, binary tensors, raw bodies, and the errors of bad input.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::{
    DataType, ErrorCode, InferOutput, InferRequest, InferResponse, ModelMetadata, Parameter, Parameters,
    ServeError, TensorData, TensorMetadata,
};

fn decode(body: &str) -> Result<(InferRequest, OutputFormat), ServeError> {
    match decode_infer_request("m", None, Bytes::from(body.to_owned()), None)? {
        DecodedInfer::Request(r, f) => Ok((r, f)),
        DecodedInfer::Raw(_) => panic!("not raw"),
    }
}

/// A JSON header followed by binary sections, as tritonclient sends it.
fn binary_body(json: &str, sections: &[&[u8]]) -> (Bytes, usize) {
    let mut b = BytesMut::new();
    b.put_slice(json.as_bytes());
    for s in sections {
        b.put_slice(s);
    }
    (b.freeze(), json.len())
}

#[test]
fn json_request_with_every_field() {
    let (r, f) = decode(
        r#"{"id":"42","parameters":{"priority":2,"timeout":5000,"binary_data_output":true,"custom":"x"},
            "inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,2],"data":[[1,2]]},
                      {"name":"S","datatype":"BYTES","shape":[2],"data":["a","bc"],"parameters":{"p":1}}],
            "outputs":[{"name":"OUTPUT0","parameters":{"binary_data":false}},{"name":"OUTPUT1"}]}"#,
    )
    .unwrap();
    assert_eq!(r.id, "42");
    assert_eq!(r.priority, 2);
    assert_eq!(r.timeout, Some(std::time::Duration::from_micros(5000)));
    assert_eq!(r.parameters.len(), 1);
    assert_eq!(r.parameters["custom"], Parameter::String("x".into()));
    assert_eq!(r.inputs[0].data.as_bytes().as_ref(), &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(r.inputs[1].data, TensorData::from_byte_strings(["a", "bc"]));
    assert_eq!(r.inputs[1].parameters["p"], Parameter::Int64(1));
    assert_eq!(r.outputs.len(), 2);
    assert!(!f.is_binary("OUTPUT0"));
    assert!(f.is_binary("OUTPUT1"));
}

#[test]
fn binary_inputs_are_slices_of_the_body() {
    let a = 1.5f32.to_le_bytes();
    let json = r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}},
                             {"name":"B","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":7}}]}"#;
    let bytes_el = [3, 0, 0, 0, b'a', b'b', b'c'];
    let (body, n) = binary_body(json, &[&a, &bytes_el]);
    let DecodedInfer::Request(r, _) = decode_infer_request("m", Some(2), body.clone(), Some(n)).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.model_version, Some(2));
    assert_eq!(r.inputs[0].data.as_bytes().as_ref(), &a);
    assert_eq!(r.inputs[1].data.as_bytes().as_ref(), &bytes_el);
    // No copy: the input shares the body's buffer.
    assert_eq!(r.inputs[0].data.as_bytes().as_ptr(), body[n..].as_ptr());
}

#[test]
fn lying_or_truncated_binary_sections_are_refused() {
    let json =
        r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]}"#;
    let (body, n) = binary_body(json, &[&[0; 4]]);
    let e = decode_infer_request("m", None, body, Some(n)).unwrap_err();
    assert!(
        e.message.contains("only 4 bytes of binary data remain"),
        "{}",
        e.message
    );

    let (body, n) = binary_body(json, &[&[0; 12]]);
    let e = decode_infer_request("m", None, body, Some(n)).unwrap_err();
    assert!(
        e.message.contains("12 bytes of binary data follow"),
        "{}",
        e.message
    );

    let (body, _) = binary_body(json, &[&[0; 8]]);
    let e = decode_infer_request("m", None, body.clone(), Some(n - 3)).unwrap_err();
    assert!(
        e.message.contains("malformed inference request JSON"),
        "{}",
        e.message
    );
    let e = parse_header_length(Some(b"999999"), body.len()).unwrap_err();
    assert!(
        e.message.contains("must be between 0 and the body length"),
        "{}",
        e.message
    );
    let e = parse_header_length(Some(b"-3"), body.len()).unwrap_err();
    assert!(
        e.message
            .contains("Unable to parse Inference-Header-Content-Length"),
        "{}",
        e.message
    );
    assert_eq!(parse_header_length(None, 5).unwrap(), None);
    assert_eq!(parse_header_length(Some(b"0"), 5).unwrap(), Some(0));

    let e = decode(
        r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]}"#,
    )
    .unwrap_err();
    assert!(
        e.message.contains("no Inference-Header-Content-Length"),
        "{}",
        e.message
    );

    // The binary size does not fit the shape.
    let json =
        r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[3],"parameters":{"binary_data_size":8}}]}"#;
    let (body, n) = binary_body(json, &[&[0; 8]]);
    let e = decode_infer_request("m", None, body, Some(n)).unwrap_err();
    assert!(e.message.contains("needs 12 bytes"), "{}", e.message);
}

#[test]
fn bad_json_requests_name_the_problem() {
    let cases: &[(&str, &str)] = &[
        ("{", "malformed inference request JSON"),
        (r#"{"inputs":{}}"#, "malformed inference request JSON"),
        (r#"{"outputs":[]}"#, "missing field `inputs`"),
        (
            r#"{"inputs":[{"name":"A","datatype":"FLOAT","shape":[1],"data":[1]}]}"#,
            "input 'A': unknown datatype 'FLOAT'",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[-1],"data":[1]}]}"#,
            "negative dimension",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1]}]}"#,
            "the shape has 2 elements",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[1]}]}"#,
            "input 'A': no data",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[1],"parameters":{"binary_data_size":4}}]}"#,
            "not both",
        ),
        (r#"{"inputs":[],"parameters":{"triton_x":1}}"#, "reserved"),
        (
            r#"{"inputs":[],"parameters":{"p":[1]}}"#,
            "parameter 'p' has invalid type",
        ),
        (
            r#"{"inputs":[],"parameters":{"binary_data_output":"yes"}}"#,
            "binary_data_output",
        ),
        (
            r#"{"inputs":[],"outputs":[{"name":"O","parameters":{"binary_data":3}}]}"#,
            "binary_data",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP16","shape":[1],"data":[1]}]}"#,
            "FP16 data cannot be sent as JSON",
        ),
        (
            r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[9223372036854775807,9223372036854775807],"data":[1]}]}"#,
            "more elements",
        ),
    ];
    for (body, needle) in cases {
        let e = decode(body).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{body}");
        assert!(e.message.contains(needle), "{body}: {}", e.message);
    }
    let e =
        decode(r#"{"inputs":[],"outputs":[{"name":"O","parameters":{"classification":3}}]}"#).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    let e = decode(r#"{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"parameters":{"shared_memory_region":"r"}}]}"#)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
}

fn metadata(datatype: DataType, shape: Vec<i64>) -> ModelMetadata {
    ModelMetadata {
        name: "m".into(),
        versions: vec!["1".into()],
        platform: "onnxruntime_onnx".into(),
        inputs: vec![TensorMetadata {
            name: "x".into(),
            datatype,
            shape,
        }],
        outputs: vec![],
    }
}

#[test]
fn raw_bodies_take_the_only_input_and_work_out_the_batch() {
    let body = Bytes::from(vec![0u8; 4 * 8]);
    let DecodedInfer::Raw(raw) = decode_infer_request("m", None, body, Some(0)).unwrap() else {
        panic!()
    };
    let (r, f) = raw_infer_request(None, &metadata(DataType::Fp32, vec![-1, 4]), raw.clone()).unwrap();
    assert_eq!(r.inputs[0].shape, vec![2, 4]);
    assert!(f.binary_by_default);
    let e = raw_infer_request(None, &metadata(DataType::Fp32, vec![-1, 3]), raw.clone()).unwrap_err();
    assert!(e.message.contains("do not fill the shape"), "{}", e.message);
    let e = raw_infer_request(None, &metadata(DataType::Fp32, vec![-1, -1]), raw.clone()).unwrap_err();
    assert!(
        e.message.contains("more than one variable dimension"),
        "{}",
        e.message
    );
    let mut two = metadata(DataType::Fp32, vec![4]);
    two.inputs.push(two.inputs[0].clone());
    let e = raw_infer_request(None, &two, raw).unwrap_err();
    assert!(e.message.contains("exactly one input"), "{}", e.message);
    let strings = TensorData::from_byte_strings(["a", "b", "c"]).into_bytes();
    let (r, _) = raw_infer_request(None, &metadata(DataType::Bytes, vec![-1, 1]), strings).unwrap();
    assert_eq!(r.inputs[0].shape, vec![3, 1]);
}

fn response() -> InferResponse {
    let mut p = Parameters::new();
    p.insert("sequence_id".into(), Parameter::Int64(7));
    InferResponse {
        model_name: "m".into(),
        model_version: "1".into(),
        id: "abc".into(),
        parameters: p,
        outputs: vec![
            InferOutput {
                name: "O".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2],
                parameters: Parameters::new(),
                data: TensorData::from_f32(&[1.0, -2.5]),
            },
            InferOutput {
                name: "S".into(),
                datatype: DataType::Bytes,
                shape: vec![1],
                parameters: Parameters::new(),
                data: TensorData::from_byte_strings(["hi"]),
            },
        ],
    }
}

#[test]
fn json_responses_have_the_triton_shape() {
    let enc = encode_infer_response(&response(), &OutputFormat::default()).unwrap();
    assert!(!enc.has_binary);
    assert_eq!(enc.chunks.len(), 1);
    let v: serde_json::Value = serde_json::from_slice(&enc.chunks[0]).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"model_name":"m","model_version":"1","id":"abc","parameters":{"sequence_id":7},
            "outputs":[{"name":"O","datatype":"FP32","shape":[1,2],"data":[1.0,-2.5]},
                       {"name":"S","datatype":"BYTES","shape":[1],"data":["hi"]}]})
    );
}

#[test]
fn binary_responses_put_raw_outputs_after_the_header() {
    let mut f = OutputFormat::default();
    f.per_output.insert("O".into(), true);
    let r = response();
    let enc = encode_infer_response(&r, &f).unwrap();
    assert!(enc.has_binary);
    assert_eq!(enc.chunks.len(), 2);
    assert_eq!(enc.json_length, enc.chunks[0].len());
    assert_eq!(enc.chunks[1], *r.outputs[0].data.as_bytes());
    let v: serde_json::Value = serde_json::from_slice(&enc.chunks[0]).unwrap();
    assert_eq!(
        v["outputs"][0]["parameters"],
        serde_json::json!({"binary_data_size": 8})
    );
    assert!(v["outputs"][0].get("data").is_none());
    assert_eq!(v["outputs"][1]["data"], serde_json::json!(["hi"]));
    assert_eq!(enc.len(), enc.json_length + 8);
}

#[test]
fn half_float_outputs_must_be_binary() {
    let mut r = response();
    r.outputs[0].datatype = DataType::Fp16;
    r.outputs[0].data = TensorData::from(vec![0u8; 4]);
    let e = encode_infer_response(&r, &OutputFormat::default()).unwrap_err();
    assert!(
        e.message.contains("output 'O': FP16 data cannot be sent as JSON"),
        "{}",
        e.message
    );
    let f = OutputFormat {
        binary_by_default: true,
        ..OutputFormat::default()
    };
    assert!(encode_infer_response(&r, &f).is_ok());
}

#[test]
fn request_round_trip_through_binary_and_json_gives_the_same_tensors() {
    let json = decode(r#"{"inputs":[{"name":"A","datatype":"FP64","shape":[2],"data":[0.5,-1]}]}"#)
        .unwrap()
        .0;
    let mut bin = Vec::new();
    bin.extend_from_slice(&0.5f64.to_le_bytes());
    bin.extend_from_slice(&(-1f64).to_le_bytes());
    let header =
        r#"{"inputs":[{"name":"A","datatype":"FP64","shape":[2],"parameters":{"binary_data_size":16}}]}"#;
    let (body, n) = binary_body(header, &[&bin]);
    let DecodedInfer::Request(b, _) = decode_infer_request("m", None, body, Some(n)).unwrap() else {
        panic!()
    };
    assert_eq!(json.inputs, b.inputs);
}

#[test]
fn health_bodies() {
    assert_eq!(live_body(true), br#"{"live":true}"#);
    assert_eq!(ready_body(false), br#"{"ready":false}"#);
}

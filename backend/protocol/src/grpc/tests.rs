//! Tests of the gRPC conversions: typed and raw contents, errors, and the model config message.

use std::collections::HashMap;

use bytes::Bytes;
use prost::Message;

use super::pb;
use super::*;
use crate::{DataType, ErrorCode, InferOutput, InferResponse, Parameter, Parameters, TensorData};

fn input(
    name: &str,
    datatype: &str,
    shape: Vec<i64>,
    contents: Option<pb::InferTensorContents>,
) -> pb::model_infer_request::InferInputTensor {
    pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape,
        parameters: HashMap::new(),
        contents,
    }
}

fn request(inputs: Vec<pb::model_infer_request::InferInputTensor>, raw: Vec<Bytes>) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "m".into(),
        inputs,
        raw_input_contents: raw,
        ..Default::default()
    }
}

#[test]
fn typed_contents_become_little_endian_bytes() {
    let c = |f: fn(&mut pb::InferTensorContents)| {
        let mut c = pb::InferTensorContents::default();
        f(&mut c);
        Some(c)
    };
    let r = infer_request_from_proto(request(
        vec![
            input("a", "INT16", vec![2], c(|c| c.int_contents = vec![-1, 2])),
            input("b", "UINT8", vec![1], c(|c| c.uint_contents = vec![255])),
            input("c", "FP32", vec![1], c(|c| c.fp32_contents = vec![0.5])),
            input(
                "d",
                "BYTES",
                vec![2],
                c(|c| c.bytes_contents = vec![Bytes::from_static(b"x"), Bytes::new()]),
            ),
            input("e", "BOOL", vec![1], c(|c| c.bool_contents = vec![true])),
            input("f", "INT64", vec![1], c(|c| c.int64_contents = vec![-2])),
            input("g", "FP64", vec![1], c(|c| c.fp64_contents = vec![2.0])),
            input("h", "UINT64", vec![1], c(|c| c.uint64_contents = vec![7])),
        ],
        vec![],
    ))
    .unwrap();
    assert_eq!(r.inputs[0].data.as_bytes().as_ref(), &[0xff, 0xff, 2, 0]);
    assert_eq!(r.inputs[1].data.as_bytes().as_ref(), &[255]);
    assert_eq!(r.inputs[2].data.as_bytes().as_ref(), &0.5f32.to_le_bytes());
    assert_eq!(r.inputs[3].data, TensorData::from_byte_strings(["x", ""]));
    assert_eq!(r.inputs[4].data.as_bytes().as_ref(), &[1]);
    assert_eq!(r.inputs[5].data.as_bytes().as_ref(), &(-2i64).to_le_bytes());
    assert_eq!(r.inputs[6].data.as_bytes().as_ref(), &2f64.to_le_bytes());
    assert_eq!(r.inputs[7].data.as_bytes().as_ref(), &7u64.to_le_bytes());
}

#[test]
fn raw_contents_are_used_as_they_are() {
    let raw = Bytes::from(vec![0u8; 8]);
    let r = infer_request_from_proto(request(
        vec![input("a", "FP16", vec![2, 2], None)],
        vec![raw.clone()],
    ))
    .unwrap();
    assert_eq!(r.inputs[0].data.as_bytes().as_ptr(), raw.as_ptr());
    assert_eq!(r.inputs[0].datatype, DataType::Fp16);
}

#[test]
fn bad_requests_name_the_problem() {
    let fp32 = |v: Vec<f32>| {
        Some(pb::InferTensorContents {
            fp32_contents: v,
            ..Default::default()
        })
    };
    let cases: Vec<(pb::ModelInferRequest, &str)> = vec![
        (
            request(vec![input("a", "FP32", vec![2], fp32(vec![1.0]))], vec![]),
            "the shape has 2 elements but fp32_contents holds 1",
        ),
        (
            request(
                vec![input(
                    "a",
                    "FP32",
                    vec![1],
                    Some(pb::InferTensorContents {
                        int_contents: vec![1],
                        ..Default::default()
                    }),
                )],
                vec![],
            ),
            "its data is in int_contents",
        ),
        (
            request(vec![input("a", "FP32", vec![1], None)], vec![]),
            "input 'a' has no data",
        ),
        (
            request(
                vec![input("a", "FP32", vec![1], None)],
                vec![Bytes::new(), Bytes::new()],
            ),
            "raw_input_contents has 2 entries",
        ),
        (
            request(
                vec![input("a", "FP32", vec![2], None)],
                vec![Bytes::from(vec![0u8; 4])],
            ),
            "needs 8 bytes",
        ),
        (
            request(vec![input("a", "FP32", vec![-2], None)], vec![Bytes::new()]),
            "negative dimension",
        ),
        (
            request(vec![input("a", "F32", vec![1], None)], vec![Bytes::new()]),
            "unknown datatype 'F32'",
        ),
        (
            request(
                vec![input("a", "FP32", vec![1], fp32(vec![1.0]))],
                vec![Bytes::from(vec![0u8; 4])],
            ),
            "also uses raw_input_contents",
        ),
        (
            request(
                vec![input(
                    "a",
                    "INT8",
                    vec![1],
                    Some(pb::InferTensorContents {
                        int_contents: vec![300],
                        ..Default::default()
                    }),
                )],
                vec![],
            ),
            "value 300 in int_contents does not fit INT8",
        ),
        (
            request(vec![input("a", "FP16", vec![1], fp32(vec![1.0]))], vec![]),
            "send it in raw_input_contents",
        ),
    ];
    for (req, needle) in cases {
        let e = infer_request_from_proto(req).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.contains(needle), "{needle}: {}", e.message);
    }
    let mut r = request(vec![], vec![]);
    r.model_version = "x".into();
    assert!(infer_request_from_proto(r).unwrap_err().message.contains("'x'"));
}

#[test]
fn perf_analyzers_empty_final_response_flag_is_accepted_other_reserved_keys_are_not() {
    use pb::infer_parameter::ParameterChoice;
    let flag = |key: &str| {
        let mut r = request(vec![], vec![]);
        r.parameters.insert(
            key.into(),
            pb::InferParameter {
                parameter_choice: Some(ParameterChoice::BoolParam(false)),
            },
        );
        infer_request_from_proto(r)
    };
    assert!(
        flag("triton_enable_empty_final_response")
            .unwrap()
            .parameters
            .is_empty()
    );
    assert!(flag("triton_other").unwrap_err().message.contains("reserved"));
}

#[test]
fn responses_go_out_raw_and_come_back_the_same() {
    let mut params = Parameters::new();
    params.insert("k".into(), Parameter::Double(0.5));
    let resp = InferResponse {
        model_name: "m".into(),
        model_version: "3".into(),
        id: "i".into(),
        parameters: params,
        outputs: vec![InferOutput {
            name: "o".into(),
            datatype: DataType::Int32,
            shape: vec![1, 1],
            parameters: Parameters::new(),
            data: TensorData::from(vec![1, 0, 0, 0]),
        }],
    };
    let pb = infer_response_to_proto(resp.clone());
    assert_eq!(pb.raw_output_contents, vec![Bytes::from(vec![1u8, 0, 0, 0])]);
    assert!(pb.outputs[0].contents.is_none());
    let wire = pb.encode_to_vec();
    let back = infer_response_from_proto(pb::ModelInferResponse::decode(&wire[..]).unwrap()).unwrap();
    assert_eq!(back, resp);
}

#[test]
fn requests_round_trip_through_the_wire() {
    let original = infer_request_from_proto(request(
        vec![input(
            "a",
            "BYTES",
            vec![1],
            Some(pb::InferTensorContents {
                bytes_contents: vec![Bytes::from_static(b"hey")],
                ..Default::default()
            }),
        )],
        vec![],
    ))
    .unwrap();
    let wire = infer_request_to_proto(original.clone()).encode_to_vec();
    let back = infer_request_from_proto(pb::ModelInferRequest::decode(&wire[..]).unwrap()).unwrap();
    assert_eq!(back, original);
}

#[test]
fn load_parameters_and_unload_flag() {
    use pb::model_repository_parameter::ParameterChoice as C;
    let p = |c| pb::ModelRepositoryParameter {
        parameter_choice: Some(c),
    };
    let mut m = HashMap::new();
    m.insert("config".to_owned(), p(C::StringParam("{}".into())));
    m.insert(
        "file:1/model.onnx".to_owned(),
        p(C::BytesParam(Bytes::from_static(b"onnx"))),
    );
    let lp = load_parameters_from_proto(m).unwrap();
    assert_eq!(lp.files["1/model.onnx"], b"onnx");
    let mut m = HashMap::new();
    m.insert("colour".to_owned(), p(C::StringParam("red".into())));
    assert!(
        load_parameters_from_proto(m)
            .unwrap_err()
            .message
            .contains("unknown load parameter")
    );
    let mut m = HashMap::new();
    m.insert("unload_dependents".to_owned(), p(C::BoolParam(true)));
    assert!(unload_dependents_from_proto(&m).unwrap());
}

#[test]
fn model_config_json_becomes_the_proto_message() {
    let json = serde_json::json!({
        "name": "simple", "platform": "onnxruntime_onnx", "backend": "", "max_batch_size": 8,
        "version_policy": {"latest": {"num_versions": 1}},
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "format": "FORMAT_NONE", "dims": ["16"], "is_shape_tensor": false}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_STRING", "dims": [16], "label_filename": ""}],
        "instance_group": [{"name": "g", "kind": "KIND_GPU", "count": 2, "gpus": [0]}],
        "dynamic_batching": {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100,
            "default_queue_policy": {"timeout_action": "DELAY", "max_queue_size": 10},
            "priority_queue_policy": {"1": {"max_queue_size": 3}}},
        "parameters": {"p99_target_ms": {"string_value": "20"}},
        "model_warmup": [{"name": "w", "batch_size": 1, "inputs": {"INPUT0": {"data_type": "TYPE_INT32", "dims": [16], "zero_data": true}}, "count": 1}],
        "model_transaction_policy": {"decoupled": false},
        "optimization": {"whatever": 1}
    });
    let c = model_config_to_proto(&json).unwrap();
    assert_eq!(c.name, "simple");
    assert_eq!(c.max_batch_size, 8);
    assert_eq!(c.input[0].dims, vec![16]);
    assert_eq!(c.input[0].data_type, pb::DataType::TypeInt32 as i32);
    assert_eq!(c.output[0].data_type, pb::DataType::TypeString as i32);
    assert_eq!(
        c.instance_group[0].kind,
        pb::model_instance_group::Kind::Gpu as i32
    );
    let Some(pb::model_config::SchedulingChoice::DynamicBatching(d)) = c.scheduling_choice else {
        panic!()
    };
    assert_eq!(d.preferred_batch_size, vec![4, 8]);
    assert_eq!(
        d.default_queue_policy.unwrap().timeout_action,
        pb::model_queue_policy::TimeoutAction::Delay as i32
    );
    assert_eq!(d.priority_queue_policy[&1].max_queue_size, 3);
    assert_eq!(c.parameters["p99_target_ms"].string_value, "20");
    assert!(c.model_warmup[0].inputs["INPUT0"].input_data_type.is_some());
    let e = model_config_to_proto(&serde_json::json!({"max_batch_size": "many"})).unwrap_err();
    assert!(e.message.contains("max_batch_size"));
}

//! Any bytes as a protobuf `ModelInferRequest`, then through the conversion the gRPC front end uses: a
//! request whose every tensor agrees with its shape, or a client error with a message; never a panic.
#![no_main]

use infergate_protocol::grpc::{infer_request_from_proto, pb};
use infergate_protocol::validate_tensor;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = pb::ModelInferRequest::decode(data) else { return };
    match infer_request_from_proto(message) {
        Ok(request) => {
            assert!(!request.model_name.is_empty());
            for input in &request.inputs {
                validate_tensor(&input.name, input.datatype, &input.shape, input.data.as_bytes())
                    .unwrap_or_else(|e| panic!("converted input '{}' disagrees with its shape: {e:?}", input.name));
            }
        }
        Err(e) => {
            assert!(!e.message.is_empty());
            assert!(e.code.http_status().is_client_error(), "{e:?} is not a client error");
        }
    }
});

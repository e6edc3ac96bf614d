//! The binary-tensor splitter: a JSON header declaring inputs of fuzzed datatypes, shapes and
//! `binary_data_size`s, followed by fuzzed bytes. Each input that decodes holds exactly its declared
//! slice and agrees with its shape; a mismatch in any direction is a client error naming the input.
//!
//! Layout of the fuzz input: one byte of input count (1-4); per input one datatype byte, one rank byte
//! (0-4), rank little-endian i16 dimensions and a little-endian u16 `binary_data_size`; the rest is the
//! binary section.
#![no_main]

use bytes::Bytes;
use infergate_protocol::rest::{DecodedInfer, decode_infer_request};
use infergate_protocol::{DataType, validate_tensor};
use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 14] = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
    "BF16", "BYTES",
];

fuzz_target!(|data: &[u8]| {
    let mut cur = data;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = cur.split_at_checked(n)?;
        cur = tail;
        Some(head)
    };
    let Some(&[count]) = take(1) else { return };
    let mut inputs = Vec::new();
    let mut declared = Vec::new();
    for i in 0..(count % 4 + 1) {
        let Some(&[t, rank]) = take(2) else { return };
        let mut shape = Vec::new();
        for _ in 0..(rank % 5) {
            let Some(d) = take(2) else { return };
            shape.push(i64::from(i16::from_le_bytes([d[0], d[1]])));
        }
        let Some(s) = take(2) else { return };
        let size = u16::from_le_bytes([s[0], s[1]]) as usize;
        let datatype = TYPES[t as usize % TYPES.len()];
        inputs.push(format!(
            r#"{{"name":"x{i}","datatype":"{datatype}","shape":{shape:?},"parameters":{{"binary_data_size":{size}}}}}"#
        ));
        declared.push(size);
    }
    let header = format!(r#"{{"inputs":[{}]}}"#, inputs.join(","));
    let binary = cur;
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(binary);
    match decode_infer_request("m", None, Bytes::from(body), Some(header.len())) {
        Ok(DecodedInfer::Request(request, _)) => {
            assert_eq!(declared.iter().sum::<usize>(), binary.len(), "binary section not used exactly");
            let mut offset = 0;
            for (input, size) in request.inputs.iter().zip(&declared) {
                assert_eq!(input.data.as_bytes().as_ref(), &binary[offset..offset + size]);
                offset += size;
                validate_tensor(&input.name, input.datatype, &input.shape, input.data.as_bytes())
                    .unwrap_or_else(|e| panic!("{e:?}"));
                if input.datatype == DataType::Bytes {
                    assert!(input.data.byte_strings().all(|e| e.is_ok()));
                }
            }
        }
        Ok(DecodedInfer::Raw(_)) => panic!("a non-zero header length decoded as a raw body"),
        Err(e) => {
            assert!(e.code.http_status().is_client_error(), "{e:?}");
            assert!(e.message.contains("input 'x") || e.message.contains("binary data"), "{}", e.message);
        }
    }
});

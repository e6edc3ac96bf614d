//! The differential check of a case with a peer (`same_outputs`): one request — a batch of pseudo-random
//! samples built from the backend's metadata — sent over gRPC to the backend and to the peer, and each output's
//! largest absolute difference between the two answers. A benchmark between two servers means something only
//! if both compute the same thing.

use std::time::Duration;

use infergate_protocol::DataType;
use infergate_protocol::grpc::pb;
use infergate_protocol::grpc::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tonic::transport::Endpoint;

use crate::client::{Client, Protocol};
use crate::target::Target;

/// One output as the two servers answered it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputDiff {
    /// The output's name.
    pub name: String,
    /// Its shape in the backend's answer.
    pub shape: Vec<i64>,
    /// Its shape in the peer's answer; `None` when the peer's answer lacks it.
    pub peer_shape: Option<Vec<i64>>,
    /// The largest absolute difference of two elements; infinite when the shapes differ or only one is NaN.
    pub max_abs_diff: f64,
}

/// An output decoded to f64 values.
#[derive(Debug, Clone, PartialEq)]
struct Decoded {
    name: String,
    shape: Vec<i64>,
    values: Vec<f64>,
}

/// How long one server may take to answer the request (a debug build runs a real model slowly).
const ANSWER_LIMIT: Duration = Duration::from_secs(120);

/// Sends the same request for `model` (`batch` samples) to `ours` and to `peer` and compares the answers.
/// `Err` says why no comparison could be made.
pub async fn compare(
    ours: Target,
    peer: Target,
    model: &str,
    batch: usize,
) -> Result<Vec<OutputDiff>, String> {
    let meta = Client::new(ours, Protocol::Grpc, ANSWER_LIMIT)
        .metadata(model)
        .await
        .map_err(|e| e.to_string())?;
    let mut request = pb::ModelInferRequest {
        model_name: model.to_owned(),
        ..Default::default()
    };
    let mut seed = 7u64;
    for input in &meta.inputs {
        let shape: Vec<i64> = input
            .shape
            .iter()
            .enumerate()
            .map(|(i, d)| match (i, *d) {
                (0, -1) => Ok(batch as i64),
                (_, d) if d >= 0 => Ok(d),
                _ => Err(format!(
                    "input '{}' has a variable dimension {:?}: give the model fixed dims",
                    input.name, input.shape
                )),
            })
            .collect::<Result<_, _>>()?;
        let count: usize = shape.iter().map(|d| *d as usize).product();
        let bytes: Vec<u8> = match input.datatype {
            DataType::Fp32 => (0..count)
                .flat_map(|_| (uniform(&mut seed) as f32).to_le_bytes())
                .collect(),
            DataType::Fp64 => (0..count)
                .flat_map(|_| uniform(&mut seed).to_le_bytes())
                .collect(),
            other => {
                return Err(format!(
                    "input '{}' is {other:?}: the check fills float inputs only",
                    input.name
                ));
            }
        };
        request.inputs.push(pb::model_infer_request::InferInputTensor {
            name: input.name.clone(),
            datatype: input.datatype.as_str().to_owned(),
            shape,
            ..Default::default()
        });
        request.raw_input_contents.push(bytes.into());
    }
    let a = infer(ours, &request)
        .await
        .map_err(|e| format!("the backend: {e}"))?;
    let b = infer(peer, &request)
        .await
        .map_err(|e| format!("the peer: {e}"))?;
    Ok(a.iter()
        .map(|o| diff(o, b.iter().find(|p| p.name == o.name)))
        .collect())
}

/// A value in [0, 1) from a xorshift64 generator: the same request on every run.
fn uniform(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

async fn infer(target: Target, request: &pb::ModelInferRequest) -> Result<Vec<Decoded>, String> {
    let endpoint = Endpoint::from_shared(target.base_uri()).map_err(|e| e.to_string())?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("connecting to {}: {e}", target.addr))?;
    let mut client = GrpcInferenceServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let answer = tokio::time::timeout(ANSWER_LIMIT, client.model_infer(request.clone()))
        .await
        .map_err(|_| format!("no answer within {} s", ANSWER_LIMIT.as_secs()))?
        .map_err(|s| format!("gRPC {:?}: {}", s.code(), s.message()))?
        .into_inner();
    if answer.raw_output_contents.len() != answer.outputs.len() {
        return Err(format!(
            "{} outputs but {} raw_output_contents (only raw contents are read)",
            answer.outputs.len(),
            answer.raw_output_contents.len()
        ));
    }
    answer
        .outputs
        .iter()
        .zip(&answer.raw_output_contents)
        .map(|(o, raw)| {
            Ok(Decoded {
                name: o.name.clone(),
                shape: o.shape.clone(),
                values: decode(&o.datatype, raw).map_err(|e| format!("output '{}': {e}", o.name))?,
            })
        })
        .collect()
}

/// Little-endian raw contents of a numeric type, as f64.
fn decode(datatype: &str, raw: &[u8]) -> Result<Vec<f64>, String> {
    fn each<const N: usize>(raw: &[u8], f: impl Fn([u8; N]) -> f64) -> Result<Vec<f64>, String> {
        if !raw.len().is_multiple_of(N) {
            return Err(format!(
                "{} bytes is not a whole number of {N}-byte elements",
                raw.len()
            ));
        }
        Ok(raw
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect())
    }
    match datatype {
        "FP32" => each(raw, |b| f64::from(f32::from_le_bytes(b))),
        "FP64" => each(raw, f64::from_le_bytes),
        "INT32" => each(raw, |b| f64::from(i32::from_le_bytes(b))),
        // Indices and counts: exact well past any tensor's size.
        "INT64" => each(raw, |b| i64::from_le_bytes(b) as f64),
        other => Err(format!(
            "datatype {other} is not compared (FP32, FP64, INT32 and INT64 are)"
        )),
    }
}

fn diff(ours: &Decoded, peer: Option<&Decoded>) -> OutputDiff {
    let max_abs_diff = match peer {
        Some(p) if p.shape == ours.shape && p.values.len() == ours.values.len() => ours
            .values
            .iter()
            .zip(&p.values)
            .map(|(a, b)| match (a.is_nan(), b.is_nan()) {
                (true, true) => 0.0,
                (false, false) => (a - b).abs(),
                _ => f64::INFINITY,
            })
            .fold(0.0, f64::max),
        _ => f64::INFINITY,
    };
    OutputDiff {
        name: ours.name.clone(),
        shape: ours.shape.clone(),
        peer_shape: peer.map(|p| p.shape.clone()),
        max_abs_diff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(name: &str, shape: &[i64], values: &[f64]) -> Decoded {
        Decoded {
            name: name.into(),
            shape: shape.to_vec(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn the_largest_difference_is_reported_and_mismatches_are_infinite() {
        let ours = out("y", &[1, 3], &[0.5, 1.0, f64::NAN]);
        let d = diff(&ours, Some(&out("y", &[1, 3], &[0.5, 1.25, f64::NAN])));
        assert_eq!((d.max_abs_diff, d.peer_shape), (0.25, Some(vec![1, 3])));
        let d = diff(&ours, Some(&out("y", &[3, 1], &[0.5, 1.0, f64::NAN])));
        assert_eq!(
            d.max_abs_diff,
            f64::INFINITY,
            "a transposed answer is not the same answer"
        );
        assert_eq!(
            diff(&ours, Some(&out("y", &[1, 3], &[0.5, 1.0, 0.0]))).max_abs_diff,
            f64::INFINITY
        );
        let d = diff(&ours, None);
        assert_eq!((d.max_abs_diff, d.peer_shape), (f64::INFINITY, None));
    }

    #[test]
    fn raw_contents_decode_little_endian_and_odd_lengths_are_refused() {
        let raw: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(decode("FP32", &raw).unwrap(), vec![1.5, -2.0]);
        assert_eq!(decode("INT64", &(-3i64).to_le_bytes()).unwrap(), vec![-3.0]);
        assert!(decode("FP32", &raw[..7]).unwrap_err().contains("whole number"));
        assert!(decode("BYTES", &raw).unwrap_err().contains("not compared"));
    }

    #[test]
    fn the_request_values_are_uniform_in_zero_to_one_and_repeat_from_the_seed() {
        let (mut a, mut b) = (7u64, 7u64);
        let first: Vec<f64> = (0..1000).map(|_| uniform(&mut a)).collect();
        assert!(first.iter().all(|v| (0.0..1.0).contains(v)));
        let mean = first.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
        assert_eq!(first[..3], [uniform(&mut b), uniform(&mut b), uniform(&mut b)]);
    }
}

//! Any byte string given to the loader yields a model or an error, never a panic; a model that
//! loads is specialised for its signature too, and when its inputs are small it runs once on the CPU
//! executor with zeros (an error is fine, a panic or a hang is not).
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use infergate_engine::{Dim, ExecutorKind, Model, PlanInput, Session, SessionOptions, Tensor};
use libfuzzer_sys::fuzz_target;

/// Inputs larger than this are only specialised, not run, so one execution stays in microseconds.
const MAX_RUN_ELEMENTS: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::from_bytes(data, None) else { return };
    let shapes: Vec<Vec<usize>> = model
        .signature()
        .inputs
        .iter()
        .map(|s| {
            s.dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => (*n).min(64),
                    Dim::Dynamic(_) => 1,
                })
                .collect()
        })
        .collect();
    let plan: Vec<PlanInput> = shapes.iter().map(|shape| PlanInput { shape: shape.clone(), value: None }).collect();
    if model.specialise(&plan).is_err() {
        return;
    }
    let mut inputs = Vec::new();
    for (spec, shape) in model.signature().inputs.iter().zip(&shapes) {
        let elements: usize = shape.iter().product();
        let Some(size) = spec.dtype.size() else { return };
        if elements > MAX_RUN_ELEMENTS {
            return;
        }
        let Ok(t) = Tensor::new(spec.dtype, shape.clone(), Bytes::from(vec![0u8; elements * size])) else {
            return;
        };
        inputs.push((spec.name.clone(), t));
    }
    let options = SessionOptions { executor: ExecutorKind::Cpu, threads: Some(1), plan_cache_size: 1 };
    if let Ok(session) = Session::new(Arc::new(model), options) {
        let _ = session.run_blocking(inputs);
    }
});

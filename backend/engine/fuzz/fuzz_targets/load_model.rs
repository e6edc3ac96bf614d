//! Any byte string given to the loader yields a model or an error, never a panic; a model that
//! loads is specialised for its signature too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = infergate_engine::Model::from_bytes(data, None) {
        let plan: Vec<infergate_engine::PlanInput> = model
            .signature()
            .inputs
            .iter()
            .map(|s| infergate_engine::PlanInput {
                shape: s.dims.iter().map(|d| match d {
                    infergate_engine::Dim::Fixed(n) => (*n).min(64),
                    infergate_engine::Dim::Dynamic(_) => 1,
                }).collect(),
                value: None,
            })
            .collect();
        let _ = model.specialise(&plan);
    }
});

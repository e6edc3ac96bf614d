//! Any bytes through the gateway routes reader: never a panic; a refusal always explains itself.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(d) = infergate_config::parse_gateway_config(&text, Path::new("routes.yaml")) {
        assert!(d.has_errors() && d.iter().all(|x| !x.message.is_empty()));
    }
});

//! Any bytes through the config.pbtxt reader and, when accepted, the Triton JSON writer.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match infergate_config::parse_pbtxt(&text, Path::new("config.pbtxt")) {
        Ok(config) => {
            let _ = config.to_triton_json();
            let _ = config.support_diagnostics(Path::new("config.pbtxt"), None);
        }
        Err(d) => assert!(d.has_errors() && d.iter().all(|x| !x.message.is_empty())),
    }
});

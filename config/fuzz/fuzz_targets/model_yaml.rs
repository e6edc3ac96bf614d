//! Any bytes through the config.yaml model reader.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match infergate_config::parse_model_yaml(&text, Path::new("config.yaml")) {
        Ok(config) => {
            let _ = config.to_triton_json();
        }
        Err(d) => assert!(d.has_errors() && d.iter().all(|x| !x.message.is_empty())),
    }
});

//! Any bytes through the config.pbtxt reader. An accepted config goes through the Triton JSON writer,
//! and that JSON (what `GET /v2/models/{m}/config` prints and a load request may send back as its
//! `config`) is read again by the model-config reader: it must be accepted and mean the same config.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match infergate_config::parse_pbtxt(&text, Path::new("config.pbtxt")) {
        Ok(config) => {
            let json = config.to_triton_json();
            let _ = config.support_diagnostics(Path::new("config.pbtxt"), None);
            let again = infergate_config::parse_model_yaml(&json.to_string(), Path::new("config.json"))
                .unwrap_or_else(|d| panic!("the Triton JSON of an accepted config is refused: {d}\n{json}"));
            assert_eq!(again.to_triton_json(), json, "the Triton JSON does not read back as the same config");
        }
        Err(d) => assert!(d.has_errors() && d.iter().all(|x| !x.message.is_empty())),
    }
});

//! The committed gRPC code (`src/grpc/generated/inference.rs`) is what tonic-prost-build makes of `proto/`
//! today: a proto edit without regenerating, or a hand edit of the generated file, fails here.
//! `INFERGATE_REGENERATE=1 cargo test -p infergate-protocol --test generated_code` writes the file afresh.
#![allow(clippy::expect_used)]

use std::path::Path;

const GENERATED: &str = "src/grpc/generated/inference.rs";

/// The code the server would be built with if it generated it now, with the settings it was generated with.
fn generate(root: &Path) -> String {
    let out = tempfile::tempdir().expect("a temporary folder for the generated code");
    let fds = protox::compile(["grpc_service.proto", "model_config.proto"], [root.join("proto")])
        .expect("proto/ compiles");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Tensor bytes stay `bytes::Bytes`: decoding slices the received buffer instead of copying.
        .bytes(".")
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("tonic-prost-build generates the service");
    std::fs::read_to_string(out.path().join("inference.rs"))
        .expect("the generated file for package inference")
}

#[test]
fn the_committed_grpc_code_is_what_the_protos_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = generate(root);
    let path = root.join(GENERATED);
    if std::env::var_os("INFERGATE_REGENERATE").is_some() {
        std::fs::write(&path, &fresh).expect("write the generated code");
        return;
    }
    let committed = std::fs::read_to_string(&path).expect("the committed generated code");
    assert!(
        committed == fresh,
        "{GENERATED} is not what proto/ generates: run \
         `INFERGATE_REGENERATE=1 cargo test -p infergate-protocol --test generated_code` and commit the result"
    );
}

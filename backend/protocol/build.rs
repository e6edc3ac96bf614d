//! Generates the gRPC messages and service from `proto/` with protox (pure Rust, no `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["grpc_service.proto", "model_config.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Tensor bytes stay `bytes::Bytes`: decoding slices the received buffer instead of copying.
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}

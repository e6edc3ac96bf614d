//! `infergate-gateway`: the sidecar binary.

fn main() {}

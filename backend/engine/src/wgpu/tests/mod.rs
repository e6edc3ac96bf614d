//! Unit tests of the wgpu executor: naga validation of every shader (CPU only) and kernel tests against small
//! CPU reference loops on the real adapter (lavapipe in CI). With no adapter they fail, naming the driver.

// Reference loops index several arrays with the same counters; iterator chains would hide that.
#![allow(clippy::needless_range_loop, clippy::type_complexity)]

mod conv;
mod device;
mod elementwise;
mod integer;
mod matmul;
mod movement;
mod pool;
mod reduce;
mod rnn;
mod shaders;
mod support;

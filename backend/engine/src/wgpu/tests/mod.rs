//! Unit tests of the wgpu executor: naga validation of every shader (CPU only) and kernel tests against small
//! CPU reference loops on the real adapter (lavapipe in CI). With no adapter they fail, naming the driver.

mod conv;
mod elementwise;
mod matmul;
mod movement;
mod pool;
mod reduce;
mod shaders;
mod support;

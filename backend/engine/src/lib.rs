//! ONNX models compiled to an IR and executed with wgpu compute shaders or on the CPU.
//!
//! Flow: [`Model::load`] parses ONNX into an [`ir::Graph`], folds constants and runs the optimisation
//! passes; [`Model::specialise`] turns it into an [`ir::ConcreteGraph`] for concrete input shapes;
//! a [`Session`] runs concrete graphs on an executor. See `docs/engine.md`.

pub mod cpu;
mod error;
pub mod ir;
mod model;
pub mod onnx;
mod ops;
pub mod passes;
mod plan_cache;
mod session;
pub mod specialise;
mod stages;
mod tensor;
mod wgpu;

pub use error::{EngineError, ErrorKind, Result};
pub use model::{Dim, Model, PlanInput, Signature, TensorSpec};
pub use session::{AdapterChoice, ExecutorKind, Session, SessionOptions};
pub use tensor::{DataType, Element, Tensor};
pub use wgpu::{DeviceMemory, device_memory};

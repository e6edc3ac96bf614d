//! ONNX models compiled to an IR and executed with wgpu compute shaders or on the CPU.

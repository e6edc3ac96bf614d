//! Integer quantization kernels: linear (de)quantization with per-tensor, per-axis and blocked
//! parameters, and integer matrix products and convolutions with INT32 accumulators.

pub(crate) mod binary;
pub(crate) mod igemm;
pub(crate) mod linear;
pub(crate) mod qconv;
pub(crate) mod qdepthwise;
pub(crate) mod qgemm;

#[cfg(test)]
mod tests;

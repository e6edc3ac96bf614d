//! The KServe V2 / Open Inference Protocol as Triton speaks it: REST JSON, binary tensors and gRPC messages.

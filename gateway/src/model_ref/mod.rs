//! Reading the model a request names, on the wire: the REST path (`kserve`) and the gRPC message (`grpc`,
//! which also lets a version be rewritten in place). A leaf: it knows nothing of routes or policies, so
//! route matching and the split's version rewrite both build on it without importing each other.

pub mod grpc;
pub mod kserve;

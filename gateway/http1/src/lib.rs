//! The HTTP/1.1 wire codec (RFC 9112) of the infergate gateway: request and response heads, body framing, chunked and length bodies, and writing messages out; no policies.
//!
//! The gateway's listener (`infergate-gateway`'s `h1/`) and its upstream client (`upstream/h1.rs`) both
//! read and write the wire through this crate; what to allow, how long to wait and what to answer stay
//! with them. Limits that bound memory (head size, header count, chunk-line length) are parameters.

pub mod body;
mod error;
pub mod head;
pub mod out;
pub mod response;

pub use error::Error;

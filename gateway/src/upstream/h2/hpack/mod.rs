//! HPACK (RFC 7541) for the upstream HTTP/2 client: an [`Encoder`] for request heads and trailers and a
//! [`Decoder`] for response heads and trailers. It is ours rather than the `h2` crate's generic codec
//! because the gateway only needs one narrow profile of it, and the narrow profile is cheaper per request:
//! the encoder never Huffman-codes (bytes are free on the loopback and LAN links to upstreams, CPU is not)
//! and indexes through a tiny insert-once name cache instead of a full dynamic table with eviction
//! bookkeeping, and the decoder builds the `http::HeaderMap` directly, keeping its dynamic table as
//! already-validated `HeaderName`/`HeaderValue` pairs so that an indexed field costs two reference-count
//! bumps and a raw literal value is a zero-copy slice of the received block.

mod decoder;
mod encoder;
mod huffman;
mod static_table;
#[cfg(test)]
mod tests;

pub(crate) use decoder::Decoder;
pub(crate) use encoder::Encoder;

/// Why a header block could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The block is not valid HPACK, or decoding it would leave our dynamic table out of step with the
    /// peer's: a connection error of type COMPRESSION_ERROR (RFC 9113 §4.3). The decoder must not be used
    /// again.
    #[error("HPACK decoding failed: {0}")]
    Compression(&'static str),
    /// The block decoded cleanly (the dynamic table is in step) but its fields do not form a valid
    /// response or trailer section (RFC 9113 §8.1.1): a stream error of type PROTOCOL_ERROR.
    #[error("malformed header block: {0}")]
    Malformed(&'static str),
    /// The decoded field list is larger than the limit passed to [`Decoder::decode`] (RFC 9113 §6.5.2);
    /// the block was still decoded in full, so only the stream is affected.
    #[error("header list too large")]
    TooLarge,
}

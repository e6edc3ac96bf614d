//! Message bodies: decoding `Content-Length`, chunked and until-close framing out of a connection's read
//! buffer.
//!
//! A body that was cut short (the client closed, or sent broken chunks) ends with an error, never with a
//! clean end of stream: the upstream must not take half a tensor for a whole one.

use bytes::{Buf, Bytes, BytesMut};

use crate::Error;

/// The longest chunk-size line (size, extensions, CRLF) or trailer line accepted.
const MAX_LINE: usize = 4096;

/// What the decoder found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// The body is complete.
    End,
    /// The buffer holds no more of the body; read from the connection.
    NeedMore,
}

/// Decodes one request body from the connection's read buffer, leaving whatever follows it there.
#[derive(Debug)]
pub enum Decoder {
    /// A `Content-Length` body.
    Length {
        /// Bytes still to come.
        remaining: u64,
    },
    /// A chunked body.
    Chunked(ChunkState),
    /// A response body delimited by the connection's close: everything until then.
    UntilClose,
    /// The body has been read to its end.
    Done,
    /// The body's framing was broken; every later call gives the same error, so a caller that stops at a
    /// piece and comes back cannot read past the break.
    Failed(Error),
}

/// Where a chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkState {
    /// Reading a chunk-size line.
    Size,
    /// Inside a chunk's data.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// Reading trailer lines after the last chunk.
    Trailers {
        /// Trailer bytes so far.
        seen: usize,
    },
}

impl Decoder {
    /// A decoder for a `Content-Length` body.
    pub fn length(n: u64) -> Decoder {
        if n == 0 {
            Decoder::Done
        } else {
            Decoder::Length { remaining: n }
        }
    }

    /// A decoder for a chunked body.
    pub fn chunked() -> Decoder {
        Decoder::Chunked(ChunkState::Size)
    }

    /// Whether the whole body has been decoded.
    pub fn is_done(&self) -> bool {
        matches!(self, Decoder::Done)
    }

    /// The next piece of the body from `buf`. Trailers are read and dropped (the bridge to HTTP/2 does not
    /// forward them); `max_trailer_bytes` bounds them.
    pub fn decode(&mut self, buf: &mut BytesMut, max_trailer_bytes: usize) -> Result<Decoded, Error> {
        if let Decoder::Failed(e) = self {
            return Err(e.clone());
        }
        let decoded = self.step(buf, max_trailer_bytes);
        if let Err(e) = &decoded {
            *self = Decoder::Failed(e.clone());
        }
        decoded
    }

    fn step(&mut self, buf: &mut BytesMut, max_trailer_bytes: usize) -> Result<Decoded, Error> {
        loop {
            match self {
                Decoder::Done => return Ok(Decoded::End),
                Decoder::Failed(e) => return Err(e.clone()),
                Decoder::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                Decoder::Length { remaining } => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = usize::try_from(*remaining).map_or(buf.len(), |r| r.min(buf.len()));
                    *remaining -= take as u64;
                    let data = buf.split_to(take).freeze();
                    if *remaining == 0 {
                        *self = Decoder::Done;
                    }
                    return Ok(Decoded::Data(data));
                }
                Decoder::Chunked(state) => match *state {
                    ChunkState::Size => {
                        let Some(line) = take_line(buf)? else {
                            return Ok(Decoded::NeedMore);
                        };
                        let size = chunk_size(&line)?;
                        *state = if size == 0 {
                            ChunkState::Trailers { seen: 0 }
                        } else {
                            ChunkState::Data(size)
                        };
                    }
                    ChunkState::Data(remaining) => {
                        if buf.is_empty() {
                            return Ok(Decoded::NeedMore);
                        }
                        let take = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
                        let left = remaining - take as u64;
                        *state = if left == 0 {
                            ChunkState::DataEnd
                        } else {
                            ChunkState::Data(left)
                        };
                        return Ok(Decoded::Data(buf.split_to(take).freeze()));
                    }
                    ChunkState::DataEnd => {
                        if buf.len() < 2 {
                            return Ok(Decoded::NeedMore);
                        }
                        if &buf[..2] != b"\r\n" {
                            return Err(Error::MalformedBody("chunk data is not followed by CRLF"));
                        }
                        buf.advance(2);
                        *state = ChunkState::Size;
                    }
                    ChunkState::Trailers { seen } => {
                        let Some(line) = take_line(buf)? else {
                            return Ok(Decoded::NeedMore);
                        };
                        if line.is_empty() {
                            *self = Decoder::Done;
                            return Ok(Decoded::End);
                        }
                        let seen = seen + line.len() + 2;
                        if seen > max_trailer_bytes {
                            return Err(Error::MalformedBody(
                                "the trailers are larger than max_header_bytes",
                            ));
                        }
                        *state = ChunkState::Trailers { seen };
                    }
                },
            }
        }
    }
}

/// Takes one CRLF-terminated line (without the CRLF) off the front of `buf`, if it is all there.
fn take_line(buf: &mut BytesMut) -> Result<Option<BytesMut>, Error> {
    match buf.iter().take(MAX_LINE).position(|&b| b == b'\n') {
        Some(nl) => {
            if nl == 0 || buf[nl - 1] != b'\r' {
                return Err(Error::MalformedBody("a line ends in a bare LF"));
            }
            let mut line = buf.split_to(nl + 1);
            line.truncate(nl - 1);
            Ok(Some(line))
        }
        None if buf.len() >= MAX_LINE => {
            Err(Error::MalformedBody("a chunk-size or trailer line is too long"))
        }
        None => Ok(None),
    }
}

/// The size in a chunk-size line: hex digits, then optional extensions (ignored) after `;`.
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let (digits, rest) = line.split_at(digits_end);
    if digits.is_empty() {
        return Err(Error::MalformedBody("a chunk size is not a hex number"));
    }
    let rest = rest.trim_ascii_start();
    if !rest.is_empty() && rest[0] != b';' {
        return Err(Error::MalformedBody(
            "a chunk size is followed by something other than an extension",
        ));
    }
    if digits.len() > 15 {
        return Err(Error::MalformedBody("a chunk size is too large"));
    }
    Ok(digits.iter().fold(0u64, |n, &d| n * 16 + u64::from(hex_value(d))))
}

fn hex_value(d: u8) -> u8 {
    match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        _ => d - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes all of `input`, returning the body and what is left in the buffer.
    fn decode_all(mut decoder: Decoder, input: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Error> {
        let mut buf = BytesMut::from(input);
        let mut body = Vec::new();
        loop {
            match decoder.decode(&mut buf, 1024)? {
                Decoded::Data(d) => body.extend_from_slice(&d),
                Decoded::End => return Ok((body, buf.to_vec())),
                Decoded::NeedMore => return Err(Error::Truncated),
            }
        }
    }

    #[test]
    fn chunks_decode_and_what_follows_stays_in_the_buffer() {
        let input = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\nGET / HTTP/1.1\r\n";
        let (body, rest) = decode_all(Decoder::chunked(), input).unwrap();
        assert_eq!(body, b"hello world");
        assert_eq!(rest, b"GET / HTTP/1.1\r\n");
        let (body, rest) = decode_all(Decoder::chunked(), b"A\r\n0123456789\r\n0\r\n\r\n").unwrap();
        assert_eq!((body.len(), rest.len()), (10, 0));
    }

    #[test]
    fn chunks_split_anywhere_decode_the_same() {
        let input = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        for split in 1..input.len() {
            let mut decoder = Decoder::chunked();
            let mut buf = BytesMut::from(&input[..split]);
            let mut body = Vec::new();
            let mut fed = false;
            loop {
                match decoder.decode(&mut buf, 1024).unwrap() {
                    Decoded::Data(d) => body.extend_from_slice(&d),
                    Decoded::End => break,
                    Decoded::NeedMore => {
                        assert!(!fed, "split at {split}: stuck");
                        buf.extend_from_slice(&input[split..]);
                        fed = true;
                    }
                }
            }
            assert_eq!(body, b"hello world", "split at {split}");
        }
    }

    #[test]
    fn broken_chunks_are_errors() {
        for bad in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"1000000000000000\r\n",
            b"5 x\r\nhello\r\n0\r\n\r\n",
        ] {
            assert!(
                matches!(decode_all(Decoder::chunked(), bad), Err(Error::MalformedBody(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'1'; MAX_LINE + 1];
        assert!(matches!(
            decode_all(Decoder::chunked(), &long),
            Err(Error::MalformedBody(_))
        ));
        let mut trailers = b"0\r\n".to_vec();
        for _ in 0..100 {
            trailers.extend_from_slice(b"x-t: 0123456789\r\n");
        }
        assert!(matches!(
            decode_all(Decoder::chunked(), &trailers),
            Err(Error::MalformedBody(_))
        ));
    }

    #[test]
    fn a_broken_body_stays_broken() {
        let mut decoder = Decoder::chunked();
        let mut buf = BytesMut::from(&b"zz\r\n5\r\nhello\r\n0\r\n\r\n"[..]);
        assert!(decoder.decode(&mut buf, 64).is_err());
        assert!(
            decoder.decode(&mut buf, 64).is_err(),
            "the chunks after the broken line are not read"
        );
    }

    #[test]
    fn random_chunked_bodies_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let alphabet = b"0123456789abcdefABCDEF;= \r\nxyz";
        for _ in 0..20_000 {
            let input: Vec<u8> = (0..rng.random_range(0..120))
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let mut decoder = Decoder::chunked();
            let mut buf = BytesMut::from(&input[..]);
            for _ in 0..64 {
                match decoder.decode(&mut buf, 64) {
                    Ok(Decoded::Data(_)) => {}
                    Ok(Decoded::End | Decoded::NeedMore) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn a_length_body_takes_exactly_its_bytes() {
        let (body, rest) = decode_all(Decoder::length(5), b"helloGET").unwrap();
        assert_eq!((body.as_slice(), rest.as_slice()), (&b"hello"[..], &b"GET"[..]));
        assert!(matches!(
            decode_all(Decoder::length(9), b"hello"),
            Err(Error::Truncated)
        ));
    }
}

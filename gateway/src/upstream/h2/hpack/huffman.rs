//! Huffman decoding of HPACK string literals (RFC 7541 §5.2 with the code of Appendix B).
//!
//! The Appendix B code is canonical: the codes of one length are consecutive in symbol order, and the
//! first code of each length follows the last code of the previous length. So only the code length per
//! symbol is stored and everything else is derived once, into a [`LazyLock`]: a 256-entry table that
//! decodes any code of at most 8 bits (every letter, digit and common punctuation mark) from the next
//! byte in one step, and for the longer codes the canonical per-length bounds, where finding a code's
//! length is a few comparisons of a left-aligned 32-bit window. Nothing needs encoding: our encoder
//! sends raw strings.

use std::sync::LazyLock;

use super::DecodeError;

/// Code length in bits of each symbol: bytes 0 to 255, then EOS (256). RFC 7541 Appendix B.
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

/// The end-of-string symbol; a decoder must reject it inside a string (§5.2).
const EOS: u16 = 256;
/// The longest code (EOS and a few control bytes).
const MAX_CODE_LEN: usize = 30;
/// The number of bits looked up at once in [`Tables::fast`].
const FAST_BITS: u32 = 8;

/// Each symbol's code, derived from [`CODE_LENGTHS`] by the canonical construction.
fn canonical_codes() -> [u32; 257] {
    let mut codes = [0u32; 257];
    let mut next = 0u32;
    for len in 1..=MAX_CODE_LEN {
        for (symbol, &symbol_len) in CODE_LENGTHS.iter().enumerate() {
            if usize::from(symbol_len) == len {
                codes[symbol] = next;
                next += 1;
            }
        }
        next <<= 1;
    }
    codes
}

/// The decoding tables, derived once from [`CODE_LENGTHS`].
struct Tables {
    /// For each value of the next 8 bits: `symbol | len << 9` of the code of at most 8 bits they start
    /// with, or 0 when they start a longer code.
    fast: [u16; 256],
    /// The code lengths over 8 bits that occur, ascending.
    long_lengths: Vec<u32>,
    /// Per length: one past the last code of that length, left-aligned in 32 bits (so a window below it
    /// and at or above the previous length's bound holds a code of this length). A `u64` because the
    /// bound of the last length is exactly 2^32.
    limit: [u64; MAX_CODE_LEN + 1],
    /// Per length: the first code of that length.
    first: [u32; MAX_CODE_LEN + 1],
    /// Per length: where that length's symbols start in `sorted`.
    offset: [u16; MAX_CODE_LEN + 1],
    /// The symbols in code order (by length, then symbol).
    sorted: [u16; 257],
}

/// Built on first use; a few KiB.
static TABLES: LazyLock<Tables> = LazyLock::new(build_tables);

/// Derives [`Tables`] from the code lengths.
fn build_tables() -> Tables {
    let codes = canonical_codes();
    let mut tables = Tables {
        fast: [0; 256],
        long_lengths: Vec::new(),
        limit: [0; MAX_CODE_LEN + 1],
        first: [0; MAX_CODE_LEN + 1],
        offset: [0; MAX_CODE_LEN + 1],
        sorted: [0; 257],
    };
    let mut position = 0u16;
    for len in 1..=MAX_CODE_LEN {
        let symbols = (0..=EOS).filter(|&s| usize::from(CODE_LENGTHS[usize::from(s)]) == len);
        let mut count = 0u32;
        for symbol in symbols {
            if count == 0 {
                tables.first[len] = codes[usize::from(symbol)];
                tables.offset[len] = position;
            }
            tables.sorted[usize::from(position)] = symbol;
            position += 1;
            count += 1;
        }
        if count == 0 {
            continue;
        }
        tables.limit[len] = u64::from(tables.first[len] + count) << (32 - len);
        if len > FAST_BITS as usize {
            tables.long_lengths.push(len as u32);
        }
    }
    for (symbol, &len) in CODE_LENGTHS.iter().enumerate() {
        let len = u32::from(len);
        if len <= FAST_BITS {
            let spread = FAST_BITS - len;
            let start = (codes[symbol] << spread) as usize;
            let entry = symbol as u16 | (len as u16) << 9;
            tables.fast[start..start + (1 << spread)].fill(entry);
        }
    }
    tables
}

/// Decodes the Huffman-coded `src`, appending the bytes to `dst`.
///
/// Errors (all connection errors, RFC 7541 §5.2): EOS inside the string, more than 7 bits of padding or
/// an incomplete code at the end, padding that is not the most significant bits of EOS (all ones).
pub(super) fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    let tables = &*TABLES;
    dst.reserve(src.len() * 8 / 5);
    // Pending bits sit left-aligned in `acc` (its top bit is the next bit); `nbits` of them are real.
    let mut acc = 0u64;
    let mut nbits = 0u32;
    let mut input = src.iter();
    loop {
        // Topping up to more than 56 bits keeps at least one full code (at most 30 bits) ready whenever
        // the input has it.
        while nbits <= 56 {
            let Some(&byte) = input.next() else { break };
            acc |= u64::from(byte) << (56 - nbits);
            nbits += 8;
        }
        if nbits == 0 {
            return Ok(());
        }
        // Bits past `nbits` are zeros, so a code found here is complete exactly when `len <= nbits`.
        let entry = tables.fast[(acc >> 56) as usize];
        let (symbol, len) = if entry != 0 {
            (entry & 0x1ff, u32::from(entry >> 9))
        } else {
            let window = acc >> 32;
            let Some(&len) = tables
                .long_lengths
                .iter()
                .find(|&&len| window < tables.limit[len as usize])
            else {
                return Err(DecodeError::Compression("invalid Huffman code"));
            };
            let index = (window >> (32 - len)) as u32 - tables.first[len as usize];
            (
                tables.sorted[usize::from(tables.offset[len as usize]) + index as usize],
                len,
            )
        };
        if len > nbits {
            // Out of input with only part of a code left: that must be padding (§5.2).
            if nbits > 7 {
                return Err(DecodeError::Compression("Huffman padding longer than 7 bits"));
            }
            if acc >> (64 - nbits) != (1u64 << nbits) - 1 {
                return Err(DecodeError::Compression("Huffman padding not all ones"));
            }
            return Ok(());
        }
        if symbol == EOS {
            return Err(DecodeError::Compression("Huffman string contains EOS"));
        }
        dst.push(symbol as u8);
        acc <<= len;
        nbits -= len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test-only encoder, to drive the decoder with arbitrary input.
    fn encode(src: &[u8]) -> Vec<u8> {
        let codes = canonical_codes();
        let mut out = Vec::new();
        let mut acc = 0u64;
        let mut nbits = 0u32;
        for &b in src {
            let len = u32::from(CODE_LENGTHS[usize::from(b)]);
            acc = acc << len | u64::from(codes[usize::from(b)]);
            nbits += len;
            while nbits >= 8 {
                out.push((acc >> (nbits - 8)) as u8);
                nbits -= 8;
            }
        }
        if nbits > 0 {
            let pad = 8 - nbits;
            out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
        }
        out
    }

    /// Decodes into a fresh vector.
    fn decode_vec(src: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    /// The derived codes must be the ones printed in Appendix B.
    #[test]
    fn derived_codes_match_rfc() {
        let codes = canonical_codes();
        let known: [(usize, u32, u8); 12] = [
            (usize::from(b'0'), 0b00000, 5),
            (usize::from(b'1'), 0b00001, 5),
            (usize::from(b'a'), 0b00011, 5),
            (usize::from(b't'), 0b01001, 5),
            (usize::from(b' '), 0b010100, 6),
            (usize::from(b'z'), 0b1111011, 7),
            (usize::from(b'&'), 0b11111000, 8),
            (usize::from(b'~'), 0b1111111111101, 13),
            (0, 0x1ff8, 13),
            (10, 0x3ffffffc, 30),
            (255, 0x3ffffee, 26),
            (256, 0x3fffffff, 30),
        ];
        for (symbol, code, len) in known {
            assert_eq!(
                (codes[symbol], CODE_LENGTHS[symbol]),
                (code, len),
                "symbol {symbol}"
            );
        }
    }

    /// The code fills its code space exactly (Kraft sum 1), so every bit string starts with a code.
    #[test]
    fn code_is_complete() {
        let sum: u64 = CODE_LENGTHS
            .iter()
            .map(|&len| 1u64 << (MAX_CODE_LEN - usize::from(len)))
            .sum();
        assert_eq!(sum, 1 << MAX_CODE_LEN);
    }

    /// RFC 7541 C.4.1 and C.6.1 strings.
    #[test]
    fn rfc_strings() {
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(decode_vec(&www).unwrap(), b"www.example.com");
        assert_eq!(
            decode_vec(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]).unwrap(),
            b"no-cache"
        );
        assert_eq!(decode_vec(&[0x64, 0x02]).unwrap(), b"302");
        assert_eq!(decode_vec(&[0xae, 0xc3, 0x77, 0x1a, 0x4b]).unwrap(), b"private");
    }

    /// Every byte value, alone and in a long mixed string, survives encode and decode.
    #[test]
    fn round_trip_all_bytes() {
        for b in 0..=255u8 {
            assert_eq!(decode_vec(&encode(&[b])).unwrap(), [b], "byte {b}");
        }
        let all: Vec<u8> = (0..=255u8)
            .chain((0..=255u8).rev())
            .chain(*b"plain ascii text")
            .collect();
        assert_eq!(decode_vec(&encode(&all)).unwrap(), all);
        assert_eq!(decode_vec(&[]).unwrap(), b"");
    }

    /// Padding of exactly 7 one-bits is fine; 8 is not (§5.2).
    #[test]
    fn padding_limits() {
        // Five 5-bit codes leave 7 bits of padding.
        assert_eq!(encode(b"aaaaa").len(), 4);
        assert_eq!(decode_vec(&encode(b"aaaaa")).unwrap(), b"aaaaa");
        let mut long_padding = encode(b"aaaaaaaa");
        assert_eq!(long_padding.len(), 5);
        long_padding.push(0xff);
        assert_eq!(
            decode_vec(&long_padding),
            Err(DecodeError::Compression("Huffman padding longer than 7 bits"))
        );
    }

    /// Padding must be the high bits of EOS, i.e. all ones.
    #[test]
    fn padding_not_ones() {
        // 'a' = 00011, then padding 010.
        assert_eq!(
            decode_vec(&[0b0001_1010]),
            Err(DecodeError::Compression("Huffman padding not all ones"))
        );
        assert_eq!(decode_vec(&[0b0001_1111]).unwrap(), b"a");
        // A lone zero byte: a 5-bit '0' and then 000 padding.
        assert_eq!(
            decode_vec(&[0]),
            Err(DecodeError::Compression("Huffman padding not all ones"))
        );
    }

    /// EOS decoded as a symbol is an error, even when followed by valid padding.
    #[test]
    fn eos_rejected() {
        assert_eq!(
            decode_vec(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::Compression("Huffman string contains EOS"))
        );
        // 'a', then EOS, then 5 bits of padding: 00011 + 30 ones + 11111.
        let bits: u64 = (0b00011 << 35) | (0x3fff_ffff << 5) | 0b11111;
        let bytes = &bits.to_be_bytes()[3..];
        assert_eq!(
            decode_vec(bytes),
            Err(DecodeError::Compression("Huffman string contains EOS"))
        );
    }
}

//! Whole-block tests: the RFC 7541 Appendix C examples, encoder-to-decoder round trips over one
//! connection, and the decoder's errors.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::decoder::{Field, Name, Value};
use super::{DecodeError, Decoder, Encoder};

/// Parses hex with optional whitespace, as the RFC prints it.
fn hex(s: &str) -> Bytes {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let bytes = digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect::<Vec<u8>>();
    Bytes::from(bytes)
}

/// Runs the low-level field reader over a whole block (so request pseudo-headers are fine).
fn raw_fields(dec: &mut Decoder, block: &Bytes) -> Vec<Field> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < block.len() {
        if let Some(field) = dec.next_field(block, &mut pos, !out.is_empty()).unwrap() {
            out.push(field);
        }
    }
    out
}

/// [`raw_fields`] as `(name, value)` strings; every field must be valid.
fn fields(dec: &mut Decoder, block: &Bytes) -> Vec<(String, String)> {
    raw_fields(dec, block)
        .iter()
        .map(|field| {
            let name = match &field.name {
                Name::Pseudo(pseudo) => pseudo.as_str().to_owned(),
                Name::Regular(name) => name.as_str().to_owned(),
                Name::Invalid(raw) => panic!("invalid name {raw:?}"),
            };
            let Value::Valid(value) = &field.value else {
                panic!("invalid value for {name}")
            };
            (name, value.to_str().unwrap().to_owned())
        })
        .collect()
}

/// `(name, value)` string pairs.
fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// A decoded block's regular fields as string pairs, in order.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect()
}

/// C.3 and C.4 decode to the same requests and tables; `blocks` are the three encodings.
fn check_request_examples(blocks: [&str; 3]) {
    let mut dec = Decoder::new(4096);
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    assert_eq!(fields(&mut dec, &hex(blocks[0])), pairs(&first));
    assert_eq!(
        dec.table_snapshot(),
        (pairs(&[(":authority", "www.example.com")]), 57)
    );

    let mut second = first.to_vec();
    second.push(("cache-control", "no-cache"));
    assert_eq!(fields(&mut dec, &hex(blocks[1])), pairs(&second));
    let table = [("cache-control", "no-cache"), (":authority", "www.example.com")];
    assert_eq!(dec.table_snapshot(), (pairs(&table), 110));

    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(fields(&mut dec, &hex(blocks[2])), pairs(&third));
    let table = [
        ("custom-key", "custom-value"),
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ];
    assert_eq!(dec.table_snapshot(), (pairs(&table), 164));
}

/// RFC 7541 C.3: requests without Huffman coding.
#[test]
fn rfc_c3_requests() {
    check_request_examples([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

/// RFC 7541 C.4: requests with Huffman coding.
#[test]
fn rfc_c4_requests_huffman() {
    check_request_examples([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

/// C.5 and C.6 decode to the same responses and tables (with eviction, table size 256).
fn check_response_examples(blocks: [&str; 3]) {
    let mut dec = Decoder::new(256);
    assert_eq!(dec.table_max_size(), 256);
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
    let location = "https://www.example.com";
    let regular1 = [
        ("cache-control", "private"),
        ("date", date1),
        ("location", location),
    ];

    let block = dec.decode(&hex(blocks[0]), 16 << 10).unwrap();
    assert_eq!(block.status, Some(StatusCode::FOUND));
    assert_eq!(header_pairs(&block.headers), pairs(&regular1));
    let table = [
        ("location", location),
        ("date", date1),
        ("cache-control", "private"),
        (":status", "302"),
    ];
    assert_eq!(dec.table_snapshot(), (pairs(&table), 222));

    let block = dec.decode(&hex(blocks[1]), 16 << 10).unwrap();
    assert_eq!(block.status, Some(StatusCode::TEMPORARY_REDIRECT));
    assert_eq!(header_pairs(&block.headers), pairs(&regular1));
    let table = [
        (":status", "307"),
        ("location", location),
        ("date", date1),
        ("cache-control", "private"),
    ];
    assert_eq!(dec.table_snapshot(), (pairs(&table), 222));

    let block = dec.decode(&hex(blocks[2]), 16 << 10).unwrap();
    assert_eq!(block.status, Some(StatusCode::OK));
    let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
    let regular3 = [
        ("cache-control", "private"),
        ("date", date2),
        ("location", location),
        ("content-encoding", "gzip"),
        ("set-cookie", cookie),
    ];
    assert_eq!(header_pairs(&block.headers), pairs(&regular3));
    let table = [
        ("set-cookie", cookie),
        ("content-encoding", "gzip"),
        ("date", date2),
    ];
    assert_eq!(dec.table_snapshot(), (pairs(&table), 215));
}

/// RFC 7541 C.5: responses without Huffman coding.
#[test]
fn rfc_c5_responses() {
    check_response_examples([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a \
         3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 \
         677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 \
         553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
    ]);
}

/// RFC 7541 C.6: responses with Huffman coding.
#[test]
fn rfc_c6_responses_huffman() {
    check_response_examples([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e \
         919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 \
         821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed \
         4ee5 b106 3d50 07",
    ]);
}

/// A header map from string pairs, appending so repeated names keep every value.
fn map(list: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in list {
        headers.append(*name, HeaderValue::from_static(value));
    }
    headers
}

/// The regular fields of a decoded request, the pseudo-headers checked against the expected ones.
fn decode_request(dec: &mut Decoder, block: Vec<u8>, pseudo: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all = fields(dec, &Bytes::from(block));
    let regular = all.split_off(pseudo.len());
    assert_eq!(all, pairs(pseudo));
    regular
}

/// Several requests and trailers on one connection: cache misses then hits, a value change, a sensitive
/// value, and the peer's table going to 0 and back; every block decodes to what was encoded.
#[test]
fn round_trip_connection() {
    let mut enc = Encoder::new();
    let mut dec = Decoder::new(4096);
    let mut headers = map(&[
        ("user-agent", "infergate/0.1"),
        ("accept", "application/json"),
        ("x-request-id", "1"),
        ("content-type", "application/json"),
    ]);
    let get = [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "up:8000"),
        (":path", "/v1/models"),
    ];

    let out = encode_get(&mut enc, &headers);
    assert_eq!(decode_request(&mut dec, out, &get), header_pairs(&headers));
    let (table, size) = dec.table_snapshot();
    assert_eq!(table.len(), 4);
    assert_eq!(size, enc_cache_size(&headers));

    // Second request: same headers but a new request id. Every unchanged field is one byte.
    headers.insert("x-request-id", HeaderValue::from_static("2"));
    let out = encode_get(&mut enc, &headers);
    let pseudo_len = 1 + 1 + (2 + 7) + (2 + 10);
    // Insertion order user-agent, accept, x-request-id, content-type: indices 65, 64, 63, 62.
    assert_eq!(
        out[pseudo_len..],
        [0x80 | 65, 0x80 | 64, 0x0f, 63 - 15, 1, b'2', 0x80 | 62]
    );
    assert_eq!(decode_request(&mut dec, out, &get), header_pairs(&headers));
    assert_eq!(dec.table_snapshot().0.len(), 4);

    // A POST with a sensitive authorization: never indexed, and the decoder keeps it marked.
    let mut secret = HeaderValue::from_static("Bearer t");
    secret.set_sensitive(true);
    headers.insert("authorization", secret);
    let post = [(":method", "POST"), (":scheme", "https"), (":path", "/v1/chat")];
    let mut out = Vec::new();
    enc.encode_request(&Method::POST, "https", None, "/v1/chat", &headers, &mut out);
    // Not cached, so spelled as a never-indexed literal with the static name index 23.
    let secret_literal = [0x1f, 23 - 15, 8, b'B', b'e', b'a', b'r', b'e', b'r', b' ', b't'];
    assert!(out.ends_with(&secret_literal));
    let decoded = raw_fields(&mut dec, &Bytes::from(out));
    let mut expected = pairs(&post);
    expected.extend(header_pairs(&headers));
    assert_eq!(decoded.len(), expected.len());
    for (field, (name, value)) in decoded.iter().zip(&expected) {
        let Value::Valid(decoded_value) = &field.value else {
            panic!("invalid value for {name}")
        };
        assert_eq!(
            (field.name.as_bytes(), decoded_value.as_bytes()),
            (name.as_bytes(), value.as_bytes())
        );
    }
    let Value::Valid(value) = &decoded[decoded.len() - 1].value else {
        panic!("invalid authorization")
    };
    assert!(value.is_sensitive());
    assert_eq!(dec.table_snapshot().0.len(), 4);

    // The peer's table goes to 0: cache dropped, update to 0, everything literal, nothing inserted.
    enc.set_peer_table_size(0);
    let out = encode_get(&mut enc, &headers);
    assert_eq!(out[..2], [0x20, 0x82]);
    assert_eq!(decode_request(&mut dec, out, &get), header_pairs(&headers));
    assert_eq!(dec.table_snapshot(), (Vec::new(), 0));
    assert_eq!(dec.table_max_size(), 0);

    // Back to 4096: one update, then the cache refills from scratch.
    enc.set_peer_table_size(4096);
    let mut out = Vec::new();
    enc.encode_trailers(&map(&[("grpc-status", "0")]), &mut out);
    assert_eq!(out[..3], [0x3f, 0xe1, 0x1f]);
    let block = dec.decode(&Bytes::from(out), 16 << 10).unwrap();
    assert_eq!(
        (block.status, header_pairs(&block.headers)),
        (None, pairs(&[("grpc-status", "0")]))
    );
    assert_eq!(dec.table_max_size(), 4096);
    assert_eq!(dec.table_snapshot().0, pairs(&[("grpc-status", "0")]));

    let out = encode_get(&mut enc, &headers);
    assert_eq!(decode_request(&mut dec, out, &get), header_pairs(&headers));
    let mut out = Vec::new();
    enc.encode_trailers(&map(&[("grpc-status", "0")]), &mut out);
    assert_eq!(out, [0x80 | (62 + 4)]);
    assert_eq!(
        header_pairs(&dec.decode(&Bytes::from(out), 16 << 10).unwrap().headers),
        pairs(&[("grpc-status", "0")])
    );
}

/// The HPACK size of a header map's fields (what the encoder's cache holds after inserting them all).
fn enc_cache_size(headers: &HeaderMap) -> usize {
    headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum()
}

/// A repeated name keeps all its values, in order, through encoder and decoder.
#[test]
fn round_trip_repeated_names() {
    let mut enc = Encoder::new();
    let mut dec = Decoder::new(4096);
    let trailers = map(&[
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("x-e", ""),
        ("set-cookie", "c=3"),
    ]);
    for _ in 0..3 {
        let mut out = Vec::new();
        enc.encode_trailers(&trailers, &mut out);
        let block = dec.decode(&Bytes::from(out), 16 << 10).unwrap();
        let cookies: Vec<_> = block.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2", "c=3"]);
        assert_eq!(block.headers.get("x-e").unwrap(), "");
    }
}

/// Decodes a block given as bytes with a generous list limit.
fn decode(dec: &mut Decoder, block: &[u8]) -> Result<super::decoder::DecodedBlock, DecodeError> {
    dec.decode(&Bytes::copy_from_slice(block), 16 << 10)
}

/// Broken HPACK is a connection error.
#[test]
fn compression_errors() {
    let cases: [(&[u8], &str); 10] = [
        (&[0xff], "truncated integer"),
        (&[0xff, 0x80], "truncated integer"),
        (&[0x80], "index 0"),
        (&[0xbe], "index beyond the dynamic table"),
        (&[0x0f, 0x2f, 0x00], "index beyond the dynamic table"),
        (
            &[0x3f, 0xe2, 0x1f],
            "table size update above the advertised limit",
        ),
        (&[0x88, 0x20], "table size update after a header field"),
        (&[0x00, 0x05, b'a'], "truncated string literal"),
        (&[0x00, 0x01, b'a', 0x81, 0x1a], "Huffman padding not all ones"),
        (
            &[0x00, 0x01, b'a', 0x84, 0xff, 0xff, 0xff, 0xff],
            "Huffman string contains EOS",
        ),
    ];
    for (block, reason) in cases {
        let mut dec = Decoder::new(4096);
        assert_eq!(
            decode(&mut dec, block).unwrap_err(),
            DecodeError::Compression(reason),
            "{block:02x?}"
        );
    }
    let mut dec = Decoder::new(4096);
    let long_padding = [0x00, 0x01, b'a', 0x82, 0x1f, 0xff];
    assert_eq!(
        decode(&mut dec, &long_padding).unwrap_err(),
        DecodeError::Compression("Huffman padding longer than 7 bits")
    );
    // Several size updates at the start are fine, up to the ceiling.
    let mut dec = Decoder::new(4096);
    let block = decode(&mut dec, &[0x20, 0x3f, 0xe1, 0x1f, 0x88]).unwrap();
    assert_eq!(block.status, Some(StatusCode::OK));
    assert_eq!(dec.table_max_size(), 4096);
}

/// Fields that are valid HPACK but not a valid response are a stream error, reported after the whole
/// block was decoded.
#[test]
fn malformed_blocks() {
    let cases: [(&[u8], &str); 12] = [
        (&[0x00, 0x01, b'A', 0x01, b'x'], "uppercase header name"),
        (&[0x00, 0x02, b'a', b' ', 0x01, b'x'], "invalid header name"),
        (&[0x00, 0x00, 0x01, b'x'], "invalid header name"),
        (&[0x00, 0x01, b'a', 0x01, b'\n'], "invalid header value"),
        (&[0x84], "request pseudo-header in a response"),
        (&[0x88, 0x82], "request pseudo-header in a response"),
        (
            &[0x00, 0x04, b':', b'f', b'o', b'o', 0x00],
            "unknown pseudo-header",
        ),
        (
            &[0x00, 0x01, b'a', 0x01, b'x', 0x88],
            "pseudo-header after a regular header",
        ),
        (&[0x88, 0x89], "duplicate :status"),
        (&[0x08, 0x02, b'2', b'0'], "invalid :status"),
        (&[0x08, 0x03, b'a', b'b', b'c'], "invalid :status"),
        (
            &[
                0x88, 0x00, 0x0a, b'c', b'o', b'n', b'n', b'e', b'c', b't', b'i', b'o', b'n', 0x01, b'x',
            ],
            "connection-specific header field",
        ),
    ];
    for (block, reason) in cases {
        let mut dec = Decoder::new(4096);
        assert_eq!(
            decode(&mut dec, block).unwrap_err(),
            DecodeError::Malformed(reason),
            "{block:02x?}"
        );
    }
    for name in ["keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
        let mut block = vec![0x00, name.len() as u8];
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(&[0x01, b'x']);
        let mut dec = Decoder::new(4096);
        assert_eq!(
            decode(&mut dec, &block).unwrap_err(),
            DecodeError::Malformed("connection-specific header field")
        );
    }
    // `te` is a request-side rule; a response carrying it is passed through.
    assert!(decode(&mut Decoder::new(4096), &[0x00, 0x02, b't', b'e', 0x01, b'x']).is_ok());
}

/// A malformed block still updates the table, including with an entry that can never be used, and a
/// compression error later in the block still wins.
#[test]
fn malformed_block_keeps_table_in_step() {
    let mut dec = Decoder::new(4096);
    // An uppercase name inserted, then a valid field inserted.
    let block = [0x40, 0x01, b'A', 0x01, b'x', 0x40, 0x01, b'b', 0x01, b'y'];
    assert_eq!(
        decode(&mut dec, &block).unwrap_err(),
        DecodeError::Malformed("uppercase header name")
    );
    assert_eq!(dec.table_snapshot(), (pairs(&[("b", "y"), ("A", "x")]), 68));
    let block = decode(&mut dec, &[0x88, 0xbe]).unwrap();
    assert_eq!(header_pairs(&block.headers), pairs(&[("b", "y")]));
    assert_eq!(
        decode(&mut dec, &[0x88, 0xbf]).unwrap_err(),
        DecodeError::Malformed("uppercase header name")
    );
    // An invalid value is inserted too, and is still invalid when indexed.
    assert_eq!(
        decode(&mut dec, &[0x40, 0x01, b'c', 0x01, 0x00]).unwrap_err(),
        DecodeError::Malformed("invalid header value")
    );
    assert_eq!(
        dec.table_snapshot().0[0],
        ("c".to_owned(), "<invalid>".to_owned())
    );
    assert_eq!(
        decode(&mut dec, &[0xbe]).unwrap_err(),
        DecodeError::Malformed("invalid header value")
    );
    // Its name alone is fine.
    let block = decode(&mut dec, &[0x0f, 0x2f, 0x01, b'z']).unwrap();
    assert_eq!(header_pairs(&block.headers), pairs(&[("c", "z")]));
    // Malformed first, then broken HPACK: the connection error is what counts.
    assert_eq!(
        decode(&mut dec, &[0x84, 0x80]).unwrap_err(),
        DecodeError::Compression("index 0")
    );
}

/// Over the list limit the block is still decoded in full (the table follows), then reported.
#[test]
fn list_too_large() {
    let mut dec = Decoder::new(4096);
    // :status 200 (42) + "a: xxxxxxxx" (41) = 83.
    let block = Bytes::from_static(&[
        0x88, 0x40, 0x01, b'a', 0x08, b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x',
    ]);
    assert_eq!(dec.decode(&block, 82).unwrap_err(), DecodeError::TooLarge);
    assert_eq!(dec.table_snapshot(), (pairs(&[("a", "xxxxxxxx")]), 41));
    let mut dec = Decoder::new(4096);
    let decoded = dec.decode(&block, 83).unwrap();
    assert_eq!(header_pairs(&decoded.headers), pairs(&[("a", "xxxxxxxx")]));
    // A malformed field after the limit is still found.
    let block = Bytes::from_static(&[0x88, 0xbe, 0x84]);
    assert_eq!(
        dec.decode(&block, 50).unwrap_err(),
        DecodeError::Malformed("pseudo-header after a regular header")
    );
}

/// Size updates evict; an entry larger than the table empties it.
#[test]
fn size_updates_and_eviction() {
    let mut dec = Decoder::new(4096);
    let block = [0x40, 0x01, b'a', 0x01, b'1', 0x40, 0x01, b'b', 0x01, b'2'];
    decode(&mut dec, &block).unwrap();
    assert_eq!(dec.table_snapshot().1, 68);
    // Down to 40: only the newest entry stays.
    decode(&mut dec, &[0x3f, 40 - 31]).unwrap();
    assert_eq!(dec.table_snapshot(), (pairs(&[("b", "2")]), 34));
    // An entry of 41 bytes in a 40-byte table: the table empties and the field is still delivered.
    let block = decode(
        &mut dec,
        &[
            0x40, 0x01, b'c', 0x08, b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x',
        ],
    )
    .unwrap();
    assert_eq!(header_pairs(&block.headers), pairs(&[("c", "xxxxxxxx")]));
    assert_eq!(dec.table_snapshot(), (Vec::new(), 0));
    // A ceiling below 4096 is also the starting size.
    assert_eq!(Decoder::new(100).table_max_size(), 100);
}

/// Never-indexed and without-indexing literals are delivered but not stored; never-indexed values come
/// out marked sensitive.
#[test]
fn literal_kinds() {
    let mut dec = Decoder::new(4096);
    let block = [
        0x10, 0x01, b'a', 0x01, b'1', 0x00, 0x01, b'b', 0x01, b'2', 0x1f, 0x08, 0x01, b'3',
    ];
    let decoded = decode(&mut dec, &block).unwrap();
    assert_eq!(
        header_pairs(&decoded.headers),
        pairs(&[("a", "1"), ("b", "2"), ("authorization", "3")])
    );
    assert!(decoded.headers.get("a").unwrap().is_sensitive());
    assert!(!decoded.headers.get("b").unwrap().is_sensitive());
    assert!(decoded.headers.get("authorization").unwrap().is_sensitive());
    assert_eq!(dec.table_snapshot(), (Vec::new(), 0));
}

/// An empty block is an empty (trailer) section.
#[test]
fn empty_block() {
    let decoded = decode(&mut Decoder::new(4096), &[]).unwrap();
    assert_eq!((decoded.status, decoded.headers.len()), (None, 0));
}

/// A raw literal value is a slice of the block, not a copy; the table keeps its own copy, so an entry
/// does not pin the block.
#[test]
fn raw_values_are_not_copied() {
    let mut dec = Decoder::new(4096);
    let block = Bytes::from(vec![0x40, 0x01, b'a', 0x05, b'h', b'e', b'l', b'l', b'o']);
    let decoded = dec.decode(&block, 16 << 10).unwrap();
    let value = decoded.headers.get("a").unwrap();
    assert_eq!(value.as_bytes().as_ptr(), block[4..].as_ptr());
    let again = dec.decode(&Bytes::from_static(&[0xbe]), 16 << 10).unwrap();
    let indexed = again.headers.get("a").unwrap();
    assert_eq!(indexed, "hello");
    assert_ne!(indexed.as_bytes().as_ptr(), block[4..].as_ptr());
}

/// The block of a `GET http://up:8000/v1/models` request with `headers`.
fn encode_get(enc: &mut Encoder, headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::new();
    enc.encode_request(
        &Method::GET,
        "http",
        Some("up:8000"),
        "/v1/models",
        headers,
        &mut out,
    );
    out
}

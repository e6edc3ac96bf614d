//! Tensor `data` in JSON: nested or flat arrays read straight into little-endian bytes, and written back
//! as flat arrays.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::value::RawValue;

use crate::datatype::DataType;
use crate::error::ServeError;
use crate::tensor::put_bytes_element;

/// Deepest nesting accepted in a JSON tensor (Triton's limit is of the same order).
const MAX_DEPTH: usize = 64;

/// Reads the JSON `data` of a tensor (nested or flat, row-major) into little-endian bytes.
///
/// `what` names the tensor in errors (`input 'x'`); `expected` is the element count of its shape. The
/// output grows with what is read, never with what the shape claims, so a huge declared shape cannot
/// make the server allocate.
pub(crate) fn read_json_tensor(
    what: &str,
    datatype: DataType,
    expected: usize,
    data: &RawValue,
) -> Result<Bytes, ServeError> {
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        return Err(ServeError::invalid_argument(format!(
            "{what}: {datatype} data cannot be sent as JSON (Triton refuses it too); send it as binary \
             data (the 'binary_data_size' parameter) or over gRPC"
        )));
    }
    let initial = datatype
        .element_size()
        .map_or(0, |s| s.saturating_mul(expected.min(1 << 20)));
    let mut state = ReadState {
        what,
        datatype,
        expected,
        count: 0,
        out: BytesMut::with_capacity(initial),
        error: None,
    };
    let mut de = serde_json::Deserializer::from_str(data.get());
    let result = ElementSeed {
        state: &mut state,
        depth: 0,
    }
    .deserialize(&mut de);
    if let Some(e) = state.error.take() {
        return Err(e);
    }
    result.map_err(|e| ServeError::invalid_argument(format!("{what}: unable to parse 'data': {e}")))?;
    if state.count != expected {
        return Err(ServeError::invalid_argument(format!(
            "{what}: the shape has {expected} elements but 'data' holds {}",
            state.count
        )));
    }
    Ok(state.out.freeze())
}

struct ReadState<'w> {
    what: &'w str,
    datatype: DataType,
    expected: usize,
    count: usize,
    out: BytesMut,
    /// The first problem found, with our own wording (serde's error only stops the parse).
    error: Option<ServeError>,
}

/// A scalar read from JSON.
#[derive(Clone, Copy)]
enum Scalar<'s> {
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(&'s str),
}

impl ReadState<'_> {
    fn push(&mut self, v: Scalar<'_>) -> Result<(), String> {
        if self.count >= self.expected {
            return Err(self.fail(format!(
                "{}: 'data' holds more elements than the shape's {}",
                self.what, self.expected
            )));
        }
        let index = self.count;
        let ok = match (self.datatype, v) {
            (DataType::Bool, Scalar::Bool(b)) => {
                self.out.put_u8(u8::from(b));
                true
            }
            (DataType::Uint8, _) => self.put_int(v, |o, x| o.put_u8(x), u8::try_from),
            (DataType::Uint16, _) => self.put_int(v, |o, x| o.put_u16_le(x), u16::try_from),
            (DataType::Uint32, _) => self.put_int(v, |o, x| o.put_u32_le(x), u32::try_from),
            (DataType::Uint64, _) => self.put_int(v, |o, x| o.put_u64_le(x), u64::try_from),
            (DataType::Int8, _) => self.put_int(v, |o, x| o.put_i8(x), i8::try_from),
            (DataType::Int16, _) => self.put_int(v, |o, x| o.put_i16_le(x), i16::try_from),
            (DataType::Int32, _) => self.put_int(v, |o, x| o.put_i32_le(x), i32::try_from),
            (DataType::Int64, _) => self.put_int(v, |o, x| o.put_i64_le(x), i64::try_from),
            (DataType::Fp32, _) => match as_f64(v) {
                Some(x) => {
                    self.out.put_f32_le(x as f32);
                    true
                }
                None => false,
            },
            (DataType::Fp64, _) => match as_f64(v) {
                Some(x) => {
                    self.out.put_f64_le(x);
                    true
                }
                None => false,
            },
            (DataType::Bytes, Scalar::Str(s)) => {
                put_bytes_element(&mut self.out, s.as_bytes());
                true
            }
            _ => false,
        };
        if !ok {
            return Err(self.fail(format!(
                "{}: element {index} of 'data' is {}, which is not a valid {} value",
                self.what,
                describe(v),
                self.datatype
            )));
        }
        self.count += 1;
        Ok(())
    }

    /// Writes an integer scalar if it is a JSON integer that fits the target type.
    fn put_int<T>(
        &mut self,
        v: Scalar<'_>,
        put: impl FnOnce(&mut BytesMut, T),
        from_i128: impl FnOnce(i128) -> Result<T, std::num::TryFromIntError>,
    ) -> bool {
        let wide = match v {
            Scalar::I64(x) => i128::from(x),
            Scalar::U64(x) => i128::from(x),
            _ => return false,
        };
        match from_i128(wide) {
            Ok(x) => {
                put(&mut self.out, x);
                true
            }
            Err(_) => false,
        }
    }

    fn fail(&mut self, message: String) -> String {
        if self.error.is_none() {
            self.error = Some(ServeError::invalid_argument(message.clone()));
        }
        message
    }
}

fn as_f64(v: Scalar<'_>) -> Option<f64> {
    match v {
        Scalar::I64(x) => Some(x as f64),
        Scalar::U64(x) => Some(x as f64),
        Scalar::F64(x) => Some(x),
        _ => None,
    }
}

fn describe(v: Scalar<'_>) -> String {
    match v {
        Scalar::Bool(b) => format!("the boolean {b}"),
        Scalar::I64(x) => format!("the number {x}"),
        Scalar::U64(x) => format!("the number {x}"),
        Scalar::F64(x) => format!("the number {x}"),
        Scalar::Str(s) => {
            let short: String = s.chars().take(32).collect();
            format!("the string \"{short}\"")
        }
    }
}

/// Reads one JSON value: an array (recursing) or a scalar.
struct ElementSeed<'s, 'w> {
    state: &'s mut ReadState<'w>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ElementSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ElementSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tensor elements")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<(), E> {
        self.state.push(Scalar::Bool(v)).map_err(E::custom)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<(), E> {
        self.state.push(Scalar::I64(v)).map_err(E::custom)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<(), E> {
        self.state.push(Scalar::U64(v)).map_err(E::custom)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<(), E> {
        self.state.push(Scalar::F64(v)).map_err(E::custom)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.state.push(Scalar::Str(v)).map_err(E::custom)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        let msg = format!(
            "{}: element {} of 'data' is null, which is not a valid {} value",
            self.state.what, self.state.count, self.state.datatype
        );
        Err(E::custom(self.state.fail(msg)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _map: A) -> Result<(), A::Error> {
        let msg = format!(
            "{}: element {} of 'data' is an object; 'data' must be an array of {} values",
            self.state.what, self.state.count, self.state.datatype
        );
        Err(serde::de::Error::custom(self.state.fail(msg)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            let msg = format!(
                "{}: 'data' is nested deeper than {MAX_DEPTH} levels",
                self.state.what
            );
            return Err(serde::de::Error::custom(self.state.fail(msg)));
        }
        while seq
            .next_element_seed(ElementSeed {
                state: &mut *self.state,
                depth: self.depth + 1,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// Tensor bytes written as a flat JSON array (Triton writes flat arrays in responses).
pub(crate) struct JsonTensorData<'a> {
    pub(crate) datatype: DataType,
    pub(crate) data: &'a [u8],
}

impl Serialize for JsonTensorData<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let d = self.data;
        let size = self.datatype.element_size();
        let count = size.map(|s| d.len() / s);
        let mut seq = serializer.serialize_seq(count)?;
        macro_rules! each {
            ($n:literal, $conv:expr) => {
                for c in d.chunks_exact($n) {
                    let mut a = [0u8; $n];
                    a.copy_from_slice(c);
                    seq.serialize_element(&$conv(a))?;
                }
            };
        }
        match self.datatype {
            DataType::Bool => each!(1, |a: [u8; 1]| a[0] != 0),
            DataType::Uint8 => each!(1, u8::from_le_bytes),
            DataType::Int8 => each!(1, i8::from_le_bytes),
            DataType::Uint16 => each!(2, u16::from_le_bytes),
            DataType::Int16 => each!(2, i16::from_le_bytes),
            DataType::Uint32 => each!(4, u32::from_le_bytes),
            DataType::Int32 => each!(4, i32::from_le_bytes),
            DataType::Fp32 => each!(4, f32::from_le_bytes),
            DataType::Uint64 => each!(8, u64::from_le_bytes),
            DataType::Int64 => each!(8, i64::from_le_bytes),
            DataType::Fp64 => each!(8, f64::from_le_bytes),
            DataType::Fp16 | DataType::Bf16 => {
                return Err(S::Error::custom(format!(
                    "{} data cannot be sent as JSON; ask for the output as binary data",
                    self.datatype
                )));
            }
            DataType::Bytes => {
                let mut rest = d;
                while let Some((len, after)) = rest.split_first_chunk::<4>() {
                    let len = u32::from_le_bytes(*len) as usize;
                    let Some(element) = after.get(..len) else {
                        return Err(S::Error::custom(
                            "BYTES output element runs past the end of its data",
                        ));
                    };
                    seq.serialize_element(&String::from_utf8_lossy(element))?;
                    rest = &after[len..];
                }
            }
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn read(dt: DataType, n: usize, s: &str) -> Result<Bytes, ServeError> {
        read_json_tensor("input 'x'", dt, n, &raw(s))
    }

    #[test]
    fn nested_and_flat_arrays_give_the_same_bytes() {
        let flat = read(DataType::Int32, 4, "[1,2,3,4]").unwrap();
        let nested = read(DataType::Int32, 4, "[[1,2],[3,4]]").unwrap();
        assert_eq!(flat, nested);
        assert_eq!(&flat[..], &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]);
    }

    #[test]
    fn every_datatype_reads_little_endian() {
        assert_eq!(&read(DataType::Bool, 2, "[true,false]").unwrap()[..], &[1, 0]);
        assert_eq!(&read(DataType::Uint8, 2, "[0,255]").unwrap()[..], &[0, 255]);
        assert_eq!(&read(DataType::Int8, 1, "[-2]").unwrap()[..], &[0xfe]);
        assert_eq!(&read(DataType::Uint16, 1, "[258]").unwrap()[..], &[2, 1]);
        assert_eq!(&read(DataType::Int16, 1, "[-1]").unwrap()[..], &[0xff, 0xff]);
        assert_eq!(
            &read(DataType::Uint32, 1, "[4294967295]").unwrap()[..],
            &[0xff; 4]
        );
        assert_eq!(
            &read(DataType::Uint64, 1, "[18446744073709551615]").unwrap()[..],
            &[0xff; 8]
        );
        assert_eq!(&read(DataType::Int64, 1, "[-1]").unwrap()[..], &[0xff; 8]);
        assert_eq!(
            &read(DataType::Fp32, 2, "[1.5, 2]").unwrap()[..],
            &[&1.5f32.to_le_bytes()[..], &2f32.to_le_bytes()].concat()
        );
        assert_eq!(
            &read(DataType::Fp64, 1, "[-0.25]").unwrap()[..],
            &(-0.25f64).to_le_bytes()
        );
        let b = read(DataType::Bytes, 2, r#"["hi","é"]"#).unwrap();
        assert_eq!(&b[..], &[2, 0, 0, 0, b'h', b'i', 2, 0, 0, 0, 0xc3, 0xa9]);
    }

    #[test]
    fn wrong_types_and_out_of_range_values_are_named() {
        let e = read(DataType::Int32, 2, r#"[1,"two"]"#).unwrap_err();
        assert_eq!(
            e.message,
            "input 'x': element 1 of 'data' is the string \"two\", which is not a valid INT32 value"
        );
        let e = read(DataType::Uint8, 1, "[256]").unwrap_err();
        assert!(
            e.message.contains("256") && e.message.contains("UINT8"),
            "{}",
            e.message
        );
        let e = read(DataType::Int64, 1, "[1.5]").unwrap_err();
        assert!(e.message.contains("1.5"), "{}", e.message);
        let e = read(DataType::Bool, 1, "[1]").unwrap_err();
        assert!(e.message.contains("BOOL"), "{}", e.message);
        let e = read(DataType::Fp32, 1, "[null]").unwrap_err();
        assert!(e.message.contains("null"), "{}", e.message);
        let e = read(DataType::Fp32, 1, r#"[{"a":1}]"#).unwrap_err();
        assert!(e.message.contains("object"), "{}", e.message);
    }

    #[test]
    fn element_count_must_match_the_shape() {
        let e = read(DataType::Fp32, 3, "[1,2]").unwrap_err();
        assert_eq!(
            e.message,
            "input 'x': the shape has 3 elements but 'data' holds 2"
        );
        let e = read(DataType::Fp32, 1, "[1,2]").unwrap_err();
        assert!(
            e.message.contains("more elements than the shape's 1"),
            "{}",
            e.message
        );
    }

    #[test]
    fn half_floats_are_refused_as_json_like_triton() {
        let e = read(DataType::Fp16, 1, "[1.0]").unwrap_err();
        assert!(
            e.message.contains("FP16 data cannot be sent as JSON"),
            "{}",
            e.message
        );
        assert!(read(DataType::Bf16, 1, "[1.0]").is_err());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let e = read(DataType::Fp32, 1, &s).unwrap_err();
        assert!(e.message.contains("nested deeper"), "{}", e.message);
    }

    #[test]
    fn writes_flat_arrays_of_every_type() {
        let w = |dt, d: &[u8]| {
            serde_json::to_string(&JsonTensorData {
                datatype: dt,
                data: d,
            })
            .unwrap()
        };
        assert_eq!(w(DataType::Bool, &[1, 0]), "[true,false]");
        assert_eq!(w(DataType::Int16, &[0xff, 0xff, 2, 0]), "[-1,2]");
        assert_eq!(
            w(
                DataType::Fp32,
                &[&0.1f32.to_le_bytes()[..], &2f32.to_le_bytes()].concat()
            ),
            "[0.1,2.0]"
        );
        assert_eq!(w(DataType::Uint64, &[0xff; 8]), "[18446744073709551615]");
        assert_eq!(
            w(DataType::Bytes, &[2, 0, 0, 0, b'h', b'i', 0, 0, 0, 0]),
            r#"["hi",""]"#
        );
        assert!(
            serde_json::to_string(&JsonTensorData {
                datatype: DataType::Fp16,
                data: &[0, 0]
            })
            .is_err()
        );
    }
}

//! A positioned document tree shared by the YAML and protobuf-text readers, and a serde `Deserializer`
//! over it that puts file:line:column on every error and reports every unknown field at once.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

use crate::diagnostic::{Diagnostic, Diagnostics, Pos, did_you_mean};

/// Which reader produced a tree; protobuf text has a few rules of its own (repeated fields may be written
/// once without brackets, maps are lists of `key`/`value` entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Yaml,
    Pbtxt,
}

/// How a scalar was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarKind {
    /// YAML plain scalar: typed by its text (bool, number, string).
    Plain,
    /// A quoted string (YAML or protobuf text).
    Quoted,
    /// A protobuf-text identifier (enum value, `true`, `inf`).
    Ident,
    /// A protobuf-text number.
    Number,
}

/// A node with the position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) pos: Pos,
    pub(crate) value: Value,
}

/// What a node holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Scalar(String, ScalarKind),
    /// A list; `true` when it was built from a protobuf-text field written several times.
    Seq(Vec<Node>, bool),
    /// Key, key position, value; in file order.
    Map(Vec<(String, Pos, Node)>),
}

impl Node {
    pub(crate) fn new(pos: Pos, value: Value) -> Self {
        Node { pos, value }
    }

    /// Number of nodes in this tree (for alias-expansion limits).
    pub(crate) fn size(&self) -> usize {
        1 + match &self.value {
            Value::Seq(items, _) => items.iter().map(Node::size).sum(),
            Value::Map(entries) => entries.iter().map(|(_, _, n)| n.size()).sum(),
            _ => 0,
        }
    }

    /// A short description of what the node is, for messages.
    fn describe(&self) -> String {
        match &self.value {
            Value::Null => "nothing".to_string(),
            Value::Scalar(s, ScalarKind::Quoted) => format!("string \"{}\"", truncate(s)),
            Value::Scalar(s, _) => format!("'{}'", truncate(s)),
            Value::Seq(..) => "a list".to_string(),
            Value::Map(..) => "a mapping".to_string(),
        }
    }
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Positions of every node by path (`routes[0].destinations[1].upstream`), for semantic checks.
#[derive(Debug, Clone, Default)]
pub struct SpanIndex {
    values: HashMap<String, Pos>,
    keys: HashMap<String, Pos>,
}

impl SpanIndex {
    pub(crate) fn build(root: &Node, origin: Origin) -> Self {
        let mut index = SpanIndex::default();
        index.walk(root, String::new(), origin);
        index
    }

    fn walk(&mut self, node: &Node, path: String, origin: Origin) {
        match &node.value {
            Value::Seq(items, _) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, format!("{path}[{i}]"), origin);
                }
            }
            Value::Map(entries) => {
                for (k, kpos, v) in entries {
                    let child = child_path(&path, k);
                    self.keys.insert(child.clone(), *kpos);
                    if origin == Origin::Pbtxt && !matches!(v.value, Value::Seq(..)) {
                        // A repeated field written once has no brackets; index it as element 0 as well.
                        self.walk(v, format!("{child}[0]"), origin);
                    }
                    self.walk(v, child, origin);
                }
            }
            _ => {}
        }
        self.values.entry(path).or_insert(node.pos);
    }

    /// The position of the value at `path`, or of its closest ancestor that exists in the file
    /// (a defaulted field points at the section that would hold it).
    pub fn at(&self, path: &str) -> Pos {
        let mut p = path;
        loop {
            if let Some(pos) = self.values.get(p) {
                return *pos;
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => return self.values.get("").copied().unwrap_or(Pos { line: 1, column: 1 }),
            }
        }
    }

    /// The position of the key naming `path` (falls back to [`SpanIndex::at`]).
    pub fn key(&self, path: &str) -> Pos {
        self.keys.get(path).copied().unwrap_or_else(|| self.at(path))
    }

    /// Whether the file spells out `path` (as opposed to it taking its default).
    pub fn contains(&self, path: &str) -> bool {
        self.values.contains_key(path)
    }
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Deserialization error carrying the node position where it arose.
#[derive(Debug)]
pub(crate) struct DeError {
    message: String,
    hint: Option<String>,
    pos: Option<Pos>,
    path: Option<String>,
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            hint: None,
            pos: None,
            path: None,
        }
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format_args!("expected {exp}, found {unexp}"))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format_args!("invalid value {unexp}: expected {exp}"))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let mut e = Self::custom(format_args!(
            "unknown value '{variant}' (expected one of: {})",
            expected.join(", ")
        ));
        if let Some(s) = did_you_mean(variant, expected.iter().copied()) {
            e.hint = Some(format!("did you mean '{s}'?"));
        }
        e
    }

    fn missing_field(field: &'static str) -> Self {
        Self::custom(format_args!("missing required field '{field}'"))
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::custom(format_args!("field '{field}' is given more than once"))
    }
}

/// Shared state of one deserialization: the file, the reader, and problems recorded without stopping.
pub(crate) struct Ctx<'f> {
    file: &'f Path,
    origin: Origin,
    recorded: RefCell<Vec<Diagnostic>>,
}

/// Deserializes a tree into `T`, returning every unknown field, duplicate key and the first type error.
pub(crate) fn from_node<T: DeserializeOwned>(
    node: &Node,
    file: &Path,
    origin: Origin,
) -> Result<T, Diagnostics> {
    let ctx = Ctx {
        file,
        origin,
        recorded: RefCell::new(Vec::new()),
    };
    let result = T::deserialize(De {
        node,
        ctx: &ctx,
        path: String::new(),
    });
    let mut diags = Diagnostics(ctx.recorded.into_inner());
    match result {
        Ok(v) if !diags.has_errors() => Ok(v),
        Ok(_) => {
            diags.sort();
            Err(diags)
        }
        Err(e) => {
            let pos = e.pos.unwrap_or(node.pos);
            let message = match e.path.as_deref() {
                Some(p) if !p.is_empty() => format!("{p}: {}", e.message),
                _ => e.message,
            };
            let mut d = Diagnostic::error(file, pos, message);
            d.hint = e.hint;
            diags.push(d);
            diags.sort();
            Err(diags)
        }
    }
}

struct De<'a, 'f> {
    node: &'a Node,
    ctx: &'a Ctx<'f>,
    path: String,
}

impl<'a, 'f> De<'a, 'f> {
    fn child(&self, node: &'a Node, key: &str) -> Self {
        De {
            node,
            ctx: self.ctx,
            path: child_path(&self.path, key),
        }
    }

    fn item(&self, node: &'a Node, i: usize) -> Self {
        De {
            node,
            ctx: self.ctx,
            path: format!("{}[{i}]", self.path),
        }
    }

    /// Attaches this node's position and path to an error that has none yet.
    fn locate<T>(&self, r: Result<T, DeError>) -> Result<T, DeError> {
        r.map_err(|mut e| {
            if e.pos.is_none() {
                e.pos = Some(self.node.pos);
                e.path = Some(self.path.clone());
            }
            e
        })
    }

    fn err(&self, message: String) -> DeError {
        DeError {
            message,
            hint: None,
            pos: Some(self.node.pos),
            path: Some(self.path.clone()),
        }
    }

    fn record(&self, d: Diagnostic) {
        self.ctx.recorded.borrow_mut().push(d);
    }

    fn where_(&self) -> String {
        if self.path.is_empty() {
            "at the top level".to_string()
        } else {
            format!("in '{}'", self.path)
        }
    }

    fn scalar(&self, what: &str) -> Result<(&'a str, ScalarKind), DeError> {
        match &self.node.value {
            Value::Scalar(s, k) => Ok((s.as_str(), *k)),
            Value::Seq(_, true) => Err(self.err(format!(
                "expected {what}, but the field is given more than once (it is not a repeated field)"
            ))),
            _ => Err(self.err(format!("expected {what}, found {}", self.node.describe()))),
        }
    }

    fn integer(&self) -> Result<i128, DeError> {
        let (s, kind) = self.scalar("an integer")?;
        if kind == ScalarKind::Quoted {
            return Err(self.err(format!(
                "expected an integer, found string \"{}\" (remove the quotes)",
                truncate(s)
            )));
        }
        parse_int(s).ok_or_else(|| self.err(format!("expected an integer, found '{}'", truncate(s))))
    }

    fn float(&self) -> Result<f64, DeError> {
        let (s, kind) = self.scalar("a number")?;
        if kind == ScalarKind::Quoted {
            return Err(self.err(format!(
                "expected a number, found string \"{}\" (remove the quotes)",
                truncate(s)
            )));
        }
        parse_float(s).ok_or_else(|| self.err(format!("expected a number, found '{}'", truncate(s))))
    }

    fn boolean(&self) -> Result<bool, DeError> {
        let (s, kind) = self.scalar("true or false")?;
        let b = match (s, kind) {
            (_, ScalarKind::Quoted) => None,
            ("true" | "True" | "TRUE", _) => Some(true),
            ("false" | "False" | "FALSE", _) => Some(false),
            ("t" | "1", ScalarKind::Ident | ScalarKind::Number) => Some(true),
            ("f" | "0", ScalarKind::Ident | ScalarKind::Number) => Some(false),
            _ => None,
        };
        b.ok_or_else(|| self.err(format!("expected true or false, found {}", self.node.describe())))
    }

    fn int_in<T: TryFrom<i128>>(&self, min: i128, max: i128, ty: &str) -> Result<T, DeError> {
        let v = self.integer()?;
        T::try_from(v).map_err(|_| self.err(format!("value {v} is out of range for {ty} ({min}..={max})")))
    }

    /// Checks the keys of a mapping against a struct's fields, recording unknown and repeated ones,
    /// and returns the entries to hand to the struct's visitor.
    fn struct_entries(
        &self,
        fields: &'static [&'static str],
    ) -> Result<Vec<&'a (String, Pos, Node)>, DeError> {
        let entries = match &self.node.value {
            Value::Map(entries) => entries,
            Value::Null => return Ok(Vec::new()),
            Value::Seq(_, true) => {
                return Err(
                    self.err("this section is given more than once (it is not a repeated field)".into())
                );
            }
            _ => {
                return Err(self.err(format!(
                    "expected a section with fields ({}), found {}",
                    fields.join(", "),
                    self.node.describe()
                )));
            }
        };
        let mut seen = HashSet::new();
        let mut keep = Vec::with_capacity(entries.len());
        for entry in entries {
            let (key, kpos, _) = entry;
            if !fields.contains(&key.as_str()) {
                let mut d = Diagnostic::error(
                    self.ctx.file,
                    *kpos,
                    format!("unknown field '{key}' {}", self.where_()),
                );
                d.hint = Some(match did_you_mean(key, fields.iter().copied()) {
                    Some(s) => format!("did you mean '{s}'?"),
                    None => format!("known fields: {}", fields.join(", ")),
                });
                self.record(d);
                continue;
            }
            if !seen.insert(key.as_str()) {
                self.record(Diagnostic::error(
                    self.ctx.file,
                    *kpos,
                    format!("field '{key}' is given more than once {}", self.where_()),
                ));
                continue;
            }
            keep.push(entry);
        }
        Ok(keep)
    }

    /// Entries of a map-typed field: a mapping, or in protobuf text a list of `{ key, value }` entries.
    fn map_entries(&self) -> Result<Vec<(&'a str, Pos, &'a Node)>, DeError> {
        match (&self.node.value, self.ctx.origin) {
            (Value::Null, _) => Ok(Vec::new()),
            (Value::Map(entries), Origin::Yaml) => {
                let mut seen = HashSet::new();
                let mut out = Vec::new();
                for (k, kpos, v) in entries {
                    if !seen.insert(k.as_str()) {
                        self.record(Diagnostic::error(
                            self.ctx.file,
                            *kpos,
                            format!("key '{k}' is given more than once {}", self.where_()),
                        ));
                        continue;
                    }
                    out.push((k.as_str(), *kpos, v));
                }
                Ok(out)
            }
            // `parameters {}`: an empty map.
            (Value::Map(m), Origin::Pbtxt) if m.is_empty() => Ok(Vec::new()),
            (Value::Map(_), Origin::Pbtxt) => self.pb_map_entry(self.node).map(|e| vec![e]),
            (Value::Seq(items, _), Origin::Pbtxt) => items.iter().map(|n| self.pb_map_entry(n)).collect(),
            _ => Err(self.err(format!("expected a mapping, found {}", self.node.describe()))),
        }
    }

    fn pb_map_entry(&self, node: &'a Node) -> Result<(&'a str, Pos, &'a Node), DeError> {
        let bad = || DeError {
            message: "expected a map entry '{ key: ... value: ... }'".into(),
            hint: None,
            pos: Some(node.pos),
            path: Some(self.path.clone()),
        };
        let Value::Map(entries) = &node.value else {
            return Err(bad());
        };
        let mut key = None;
        let mut value = None;
        for (k, _, v) in entries {
            match k.as_str() {
                "key" => match &v.value {
                    Value::Scalar(s, _) => key = Some((s.as_str(), v.pos)),
                    _ => return Err(bad()),
                },
                "value" => value = Some(v),
                other => {
                    return Err(DeError {
                        message: format!(
                            "unknown field '{other}' in a map entry (expected 'key' and 'value')"
                        ),
                        hint: None,
                        pos: Some(node.pos),
                        path: Some(self.path.clone()),
                    });
                }
            }
        }
        let (k, kpos) = key.ok_or_else(bad)?;
        static NULL: Node = Node {
            pos: Pos { line: 0, column: 0 },
            value: Value::Null,
        };
        Ok((k, kpos, value.unwrap_or(&NULL)))
    }
}

/// Attaches `pos` and `path` to an error raised by a `Deserialize` impl after the deserializer returned
/// (e.g. a string that deserialized fine but does not parse as an endpoint).
fn relocate<T>(r: Result<T, DeError>, pos: Pos, path: String) -> Result<T, DeError> {
    r.map_err(|mut e| {
        if e.pos.is_none() {
            e.pos = Some(pos);
            e.path = Some(path);
        }
        e
    })
}

/// Parses decimal, hex (`0x`), octal (`0o`, or protobuf's leading `0`) integers with an optional sign.
pub(crate) fn parse_int(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() || body.starts_with(['-', '+']) {
        return None;
    }
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i128::from_str_radix(h, 16).ok()?
    } else if let Some(o) = body.strip_prefix("0o") {
        i128::from_str_radix(o, 8).ok()?
    } else if body.len() > 1 && body.starts_with('0') && body.bytes().all(|b| b.is_ascii_digit()) {
        i128::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Parses YAML/protobuf floats, including `.inf`, `inf`, `nan` and protobuf's `1.5f` suffix.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = body.to_ascii_lowercase();
    let v = match lower.as_str() {
        ".inf" | "inf" | "infinity" => f64::INFINITY,
        ".nan" | "nan" => f64::NAN,
        _ => {
            let b = lower
                .strip_suffix('f')
                .filter(|b| !b.starts_with("0x"))
                .unwrap_or(&lower);
            if b.is_empty()
                || !b
                    .bytes()
                    .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'-' | b'+'))
            {
                return parse_int(body)
                    .map(|i| i as f64)
                    .map(|v| if neg { -v } else { v });
            }
            b.parse::<f64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

macro_rules! int_method {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            let v: $ty = self.int_in(<$ty>::MIN as i128, <$ty>::MAX as i128, stringify!($ty))?;
            let r = visitor.$visit(v);
            self.locate(r)
        }
    };
}

impl<'de> de::Deserializer<'de> for De<'_, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Scalar(s, ScalarKind::Quoted) => visitor.visit_str(s),
            Value::Scalar(s, kind) => {
                if let Ok(b) = self.boolean() {
                    visitor.visit_bool(b)
                } else if let Some(i) = parse_int(s).filter(|_| *kind != ScalarKind::Ident) {
                    if let Ok(u) = u64::try_from(i) {
                        visitor.visit_u64(u)
                    } else if let Ok(i) = i64::try_from(i) {
                        visitor.visit_i64(i)
                    } else {
                        visitor.visit_str(s)
                    }
                } else if let Some(f) =
                    parse_float(s).filter(|_| *kind == ScalarKind::Number || looks_numeric(s))
                {
                    visitor.visit_f64(f)
                } else {
                    visitor.visit_str(s)
                }
            }
            Value::Seq(items, _) => visitor.visit_seq(SeqDe {
                de: &self,
                items: items.iter().enumerate(),
            }),
            Value::Map(entries) => visitor.visit_map(MapDe {
                de: &self,
                entries: entries
                    .iter()
                    .map(|(k, p, v)| (k.as_str(), *p, v))
                    .collect::<Vec<_>>()
                    .into_iter(),
                value: None,
            }),
        };
        self.locate(r)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let b = self.boolean()?;
        let r = visitor.visit_bool(b);
        self.locate(r)
    }

    int_method!(deserialize_i8, visit_i8, i8);
    int_method!(deserialize_i16, visit_i16, i16);
    int_method!(deserialize_i32, visit_i32, i32);
    int_method!(deserialize_i64, visit_i64, i64);
    int_method!(deserialize_u8, visit_u8, u8);
    int_method!(deserialize_u16, visit_u16, u16);
    int_method!(deserialize_u32, visit_u32, u32);
    int_method!(deserialize_u64, visit_u64, u64);

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let f = self.float()?;
        let r = visitor.visit_f32(f as f32);
        self.locate(r)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let f = self.float()?;
        let r = visitor.visit_f64(f);
        self.locate(r)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let (s, _) = self.scalar("a string")?;
        let r = visitor.visit_str(s);
        self.locate(r)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match self.node.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(De {
                node: self.node,
                ctx: self.ctx,
                path: self.path.clone(),
            }),
        };
        self.locate(r)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Map(m) if m.is_empty() => visitor.visit_unit(),
            _ => Err(self.err(format!("expected nothing, found {}", self.node.describe()))),
        };
        self.locate(r)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let r = visitor.visit_newtype_struct(De {
            node: self.node,
            ctx: self.ctx,
            path: self.path.clone(),
        });
        self.locate(r)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let single = std::slice::from_ref(self.node);
        let items: &[Node] = match (&self.node.value, self.ctx.origin) {
            (Value::Seq(items, _), _) => items,
            (Value::Null, _) => &[],
            // A repeated protobuf field written once carries no brackets.
            (_, Origin::Pbtxt) => single,
            _ => return Err(self.err(format!("expected a list, found {}", self.node.describe()))),
        };
        let r = visitor.visit_seq(SeqDe {
            de: &self,
            items: items.iter().enumerate(),
        });
        self.locate(r)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let entries = self.map_entries()?;
        let r = visitor.visit_map(MapDe {
            de: &self,
            entries: entries.into_iter(),
            value: None,
        });
        self.locate(r)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let entries = self.struct_entries(fields)?;
        let entries: Vec<_> = entries.into_iter().map(|(k, p, v)| (k.as_str(), *p, v)).collect();
        let r = visitor.visit_map(MapDe {
            de: &self,
            entries: entries.into_iter(),
            value: None,
        });
        self.locate(r)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let (variant, vpos, value): (&str, Pos, Option<&Node>) = match &self.node.value {
            Value::Scalar(s, _) => (s.as_str(), self.node.pos, None),
            Value::Map(entries) if entries.len() == 1 => {
                let (k, p, v) = &entries[0];
                (k.as_str(), *p, Some(v))
            }
            Value::Map(entries) => {
                return Err(self.err(format!(
                    "expected exactly one of {} here, found {} fields",
                    variants.join(", "),
                    entries.len()
                )));
            }
            _ => {
                return Err(self.err(format!(
                    "expected one of {}, found {}",
                    variants.join(", "),
                    self.node.describe()
                )));
            }
        };
        if !variants.contains(&variant) {
            let mut e = <DeError as de::Error>::unknown_variant(variant, variants);
            e.pos = Some(vpos);
            e.path = Some(self.path.clone());
            return Err(e);
        }
        let r = visitor.visit_enum(EnumDe {
            de: &self,
            variant,
            value,
        });
        self.locate(r)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

fn looks_numeric(s: &str) -> bool {
    let t = s.trim_start_matches(['-', '+']);
    t.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && !t.contains(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        || matches!(t.to_ascii_lowercase().as_str(), ".inf" | ".nan")
}

struct SeqDe<'b, 'a, 'f, I> {
    de: &'b De<'a, 'f>,
    items: I,
}

impl<'de, 'a, I: Iterator<Item = (usize, &'a Node)>> de::SeqAccess<'de> for SeqDe<'_, 'a, '_, I> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some((i, node)) => {
                let child = self.de.item(node, i);
                let (pos, path) = (node.pos, child.path.clone());
                relocate(seed.deserialize(child), pos, path).map(Some)
            }
            None => Ok(None),
        }
    }
}

struct MapDe<'b, 'a, 'f, I> {
    de: &'b De<'a, 'f>,
    entries: I,
    value: Option<(&'a str, &'a Node)>,
}

impl<'de, 'a, I: Iterator<Item = (&'a str, Pos, &'a Node)>> de::MapAccess<'de> for MapDe<'_, 'a, '_, I> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((k, kpos, v)) => {
                self.value = Some((k, v));
                let key_de = KeyDe {
                    key: k,
                    pos: kpos,
                    path: child_path(&self.de.path, k),
                };
                seed.deserialize(key_de).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some((k, node)) => {
                let child = self.de.child(node, k);
                let (pos, path) = (node.pos, child.path.clone());
                relocate(seed.deserialize(child), pos, path)
            }
            None => Err(self.de.err("internal: map value requested before its key".into())),
        }
    }
}

/// Deserializes a mapping key: a string, or a number for integer-keyed maps.
struct KeyDe<'a> {
    key: &'a str,
    pos: Pos,
    path: String,
}

impl KeyDe<'_> {
    fn err(&self, message: String) -> DeError {
        DeError {
            message,
            hint: None,
            pos: Some(self.pos),
            path: Some(self.path.clone()),
        }
    }
}

macro_rules! key_int_method {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            let v = parse_int(self.key)
                .and_then(|v| <$ty>::try_from(v).ok())
                .ok_or_else(|| self.err(format!("key '{}' must be an integer", self.key)))?;
            visitor.$visit(v)
        }
    };
}

impl<'de> de::Deserializer<'de> for KeyDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_str(self.key)
    }

    key_int_method!(deserialize_i8, visit_i8, i8);
    key_int_method!(deserialize_i16, visit_i16, i16);
    key_int_method!(deserialize_i32, visit_i32, i32);
    key_int_method!(deserialize_i64, visit_i64, i64);
    key_int_method!(deserialize_u8, visit_u8, u8);
    key_int_method!(deserialize_u16, visit_u16, u16);
    key_int_method!(deserialize_u32, visit_u32, u32);
    key_int_method!(deserialize_u64, visit_u64, u64);

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _n: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if !variants.contains(&self.key) {
            let mut e = <DeError as de::Error>::unknown_variant(self.key, variants);
            e.pos = Some(self.pos);
            return Err(e);
        }
        visitor.visit_enum(self.key.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

struct EnumDe<'b, 'a, 'f> {
    de: &'b De<'a, 'f>,
    variant: &'a str,
    value: Option<&'a Node>,
}

impl<'de, 'b, 'a, 'f> de::EnumAccess<'de> for EnumDe<'b, 'a, 'f> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), DeError> {
        let v = seed.deserialize(self.variant.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for EnumDe<'_, '_, '_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.value.map(|n| &n.value) {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Map(m)) if m.is_empty() => Ok(()),
            Some(_) => Err(self.de.err(format!("'{}' takes no value", self.variant))),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        match self.value {
            Some(node) => seed.deserialize(self.de.child(node, self.variant)),
            None => Err(self.de.err(format!(
                "'{}' needs a value, written '{}: ...'",
                self.variant, self.variant
            ))),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Some(node) => de::Deserializer::deserialize_seq(self.de.child(node, self.variant), visitor),
            None => Err(self.de.err(format!("'{}' needs a list", self.variant))),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.value {
            Some(node) => {
                de::Deserializer::deserialize_struct(self.de.child(node, self.variant), "", fields, visitor)
            }
            None => visitor.visit_map(MapDe {
                de: self.de,
                entries: Vec::<(&str, Pos, &Node)>::new().into_iter(),
                value: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_floats() {
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("0x1F"), Some(31));
        assert_eq!(parse_int("017"), Some(15));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int("--1"), None);
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_float("1.5f"), Some(1.5));
        assert_eq!(parse_float("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(".5"), Some(0.5));
        assert_eq!(parse_float("3"), Some(3.0));
        assert_eq!(parse_float("abc"), None);
    }
}

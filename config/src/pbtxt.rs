//! Protocol-buffer text format (Triton's `config.pbtxt`) to a positioned [`Node`] tree.
//!
//! Handles `#` comments, `field: value`, `field { }`, `field: { }` and `field < >`, `[a, b]` lists (of
//! scalars or messages), repeated fields written several times, enum identifiers, single- and
//! double-quoted strings with C escapes (adjacent strings concatenate), signed, hex, octal and float
//! numbers (`-1`, `0x10`, `1e-3`, `1.5f`, `-inf`). Every error carries line and column.

use std::path::Path;

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::node::{Node, ScalarKind, Value};
use crate::yaml::MAX_DEPTH;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(String),
    Punct(char),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Str(s) => format!("string \"{}\"", s.chars().take(30).collect::<String>()),
            Tok::Num(s) => format!("number {s}"),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Eof => "the end of the file".to_string(),
        }
    }
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

type Fail = (Pos, String);

impl Lexer<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn skip_space_and_comments(&mut self) {
        while let Some(&c) = self.chars.peek() {
            if c == '#' {
                while let Some(c) = self.bump() {
                    if c == '\n' {
                        break;
                    }
                }
            } else if c.is_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn next(&mut self) -> Result<(Tok, Pos), Fail> {
        self.skip_space_and_comments();
        let pos = self.pos();
        let Some(&c) = self.chars.peek() else {
            return Ok((Tok::Eof, pos));
        };
        let tok = match c {
            '{' | '}' | '[' | ']' | '<' | '>' | ':' | ',' | ';' => {
                self.bump();
                Tok::Punct(c)
            }
            '"' | '\'' => Tok::Str(self.string(pos)?),
            c if c.is_ascii_alphabetic() || c == '_' => Tok::Ident(self.word()),
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => self.number(pos)?,
            other => {
                let shown = if other.is_control() {
                    format!("control character U+{:04X}", other as u32)
                } else {
                    format!("'{other}'")
                };
                return Err((pos, format!("unexpected {shown} (is this a text config.pbtxt?)")));
            }
        };
        Ok((tok, pos))
    }

    fn word(&mut self) -> String {
        let mut s = String::new();
        while let Some(&c) = self.chars.peek() {
            if c.is_ascii_alphanumeric() || c == '_' {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        s
    }

    fn number(&mut self, pos: Pos) -> Result<Tok, Fail> {
        let mut s = String::new();
        if let Some(&c @ ('-' | '+')) = self.chars.peek() {
            s.push(c);
            self.bump();
            self.skip_space_and_comments();
            if self.chars.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                let w = self.word();
                return match w.to_ascii_lowercase().as_str() {
                    "inf" | "infinity" | "nan" => Ok(Tok::Num(format!("{s}{w}"))),
                    _ => Err((pos, format!("expected a number after '{s}', found '{w}'"))),
                };
            }
        }
        let mut prev = ' ';
        while let Some(&c) = self.chars.peek() {
            let exp_sign = (c == '-' || c == '+') && (prev == 'e' || prev == 'E') && !s.contains(['x', 'X']);
            if c.is_ascii_alphanumeric() || c == '.' || exp_sign {
                s.push(c);
                prev = c;
                self.bump();
            } else {
                break;
            }
        }
        let digits = s.trim_start_matches(['-', '+']);
        if digits.is_empty() || !digits.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Err((pos, format!("expected a number, found '{s}'")));
        }
        if crate::node::parse_int(&s).is_none() && crate::node::parse_float(&s).is_none() {
            return Err((pos, format!("'{s}' is not a valid number")));
        }
        Ok(Tok::Num(s))
    }

    fn string(&mut self, pos: Pos) -> Result<String, Fail> {
        let quote = self.bump().unwrap_or('"');
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let Some(c) = self.bump() else {
                return Err((pos, "unterminated string: add the closing quote".to_string()));
            };
            match c {
                '\n' => return Err((pos, "unterminated string: strings cannot span lines".to_string())),
                c if c == quote => break,
                '\\' => {
                    let esc_pos = self.pos();
                    let Some(e) = self.bump() else {
                        return Err((pos, "unterminated string: add the closing quote".to_string()));
                    };
                    match e {
                        'n' => bytes.push(b'\n'),
                        'r' => bytes.push(b'\r'),
                        't' => bytes.push(b'\t'),
                        'a' => bytes.push(0x07),
                        'b' => bytes.push(0x08),
                        'f' => bytes.push(0x0c),
                        'v' => bytes.push(0x0b),
                        '\\' | '\'' | '"' | '?' => bytes.push(e as u8),
                        '0'..='7' => {
                            let mut v = e.to_digit(8).unwrap_or(0);
                            for _ in 0..2 {
                                match self.chars.peek().and_then(|c| c.to_digit(8)) {
                                    Some(d) => {
                                        v = v * 8 + d;
                                        self.bump();
                                    }
                                    None => break,
                                }
                            }
                            let b = u8::try_from(v).map_err(|_| {
                                (esc_pos, format!("octal escape \\{v:o} is larger than a byte"))
                            })?;
                            bytes.push(b);
                        }
                        'x' => {
                            let mut v = 0u32;
                            let mut n = 0;
                            while n < 2 {
                                match self.chars.peek().and_then(|c| c.to_digit(16)) {
                                    Some(d) => {
                                        v = v * 16 + d;
                                        self.bump();
                                        n += 1;
                                    }
                                    None => break,
                                }
                            }
                            if n == 0 {
                                return Err((esc_pos, "\\x must be followed by hex digits".to_string()));
                            }
                            bytes.push(v as u8);
                        }
                        'u' | 'U' => {
                            let want = if e == 'u' { 4 } else { 8 };
                            let mut v = 0u32;
                            for _ in 0..want {
                                let d = self.chars.peek().and_then(|c| c.to_digit(16)).ok_or_else(|| {
                                    (esc_pos, format!("\\{e} must be followed by {want} hex digits"))
                                })?;
                                v = v.wrapping_mul(16).wrapping_add(d);
                                self.bump();
                            }
                            let ch = char::from_u32(v).ok_or_else(|| {
                                (esc_pos, format!("\\{e}{v:X} is not a valid Unicode character"))
                            })?;
                            let mut buf = [0u8; 4];
                            bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        other => return Err((esc_pos, format!("unknown escape '\\{other}' in string"))),
                    }
                }
                c => {
                    let mut buf = [0u8; 4];
                    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        String::from_utf8(bytes).map_err(|_| (pos, "string escapes do not form valid UTF-8 text".to_string()))
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    peeked: Option<(Tok, Pos)>,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&mut self) -> Result<&Tok, Fail> {
        static EOF: Tok = Tok::Eof;
        if self.peeked.is_none() {
            self.peeked = Some(self.lexer.next()?);
        }
        Ok(self.peeked.as_ref().map(|(t, _)| t).unwrap_or(&EOF))
    }

    fn next(&mut self) -> Result<(Tok, Pos), Fail> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lexer.next(),
        }
    }

    fn eat(&mut self, c: char) -> Result<bool, Fail> {
        if *self.peek()? == Tok::Punct(c) {
            self.next()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Fields until `close` (or the end of the file for the top level).
    fn message(&mut self, open: Option<(char, Pos)>) -> Result<Vec<(String, Pos, Node)>, Fail> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let pos = open.map(|(_, p)| p).unwrap_or_default();
            return Err((pos, format!("messages nest deeper than {MAX_DEPTH} levels")));
        }
        let close = open.map(|(c, _)| if c == '<' { '>' } else { '}' });
        let mut entries: Vec<(String, Pos, Node)> = Vec::new();
        loop {
            let (tok, pos) = self.next()?;
            match tok {
                Tok::Punct(c) if Some(c) == close => break,
                Tok::Eof => match open {
                    None => break,
                    Some((c, opened)) => {
                        return Err((
                            pos,
                            format!(
                                "the message opened with '{c}' at {}:{} is not closed (expected '{}')",
                                opened.line,
                                opened.column,
                                close.unwrap_or('}')
                            ),
                        ));
                    }
                },
                Tok::Ident(name) => {
                    let value = self.field_value(&name)?;
                    merge(&mut entries, name, pos, value);
                    if !self.eat(',')? {
                        self.eat(';')?;
                    }
                }
                Tok::Punct('[') => {
                    return Err((
                        pos,
                        "extension and Any fields ('[type.name]') are not supported in model configs".into(),
                    ));
                }
                other => {
                    let expect = match close {
                        Some(c) => format!("a field name or '{c}'"),
                        None => "a field name".to_string(),
                    };
                    return Err((pos, format!("expected {expect}, found {}", other.describe())));
                }
            }
        }
        self.depth -= 1;
        Ok(entries)
    }

    fn field_value(&mut self, name: &str) -> Result<Node, Fail> {
        let colon = self.eat(':')?;
        let (tok, pos) = self.next()?;
        match tok {
            Tok::Punct(c @ ('{' | '<')) => Ok(Node::new(pos, Value::Map(self.message(Some((c, pos)))?))),
            // `field [ ... ]` without a colon is how Triton writes lists of messages.
            Tok::Punct('[') => self.list(pos),
            tok if colon => self.scalar(tok, pos),
            other => Err((
                pos,
                format!(
                    "expected ':' or '{{' after field name '{name}', found {}",
                    other.describe()
                ),
            )),
        }
    }

    fn list(&mut self, open: Pos) -> Result<Node, Fail> {
        let mut items = Vec::new();
        if self.eat(']')? {
            return Ok(Node::new(open, Value::Seq(items, false)));
        }
        loop {
            let (tok, pos) = self.next()?;
            let item = match tok {
                Tok::Punct(c @ ('{' | '<')) => Node::new(pos, Value::Map(self.message(Some((c, pos)))?)),
                Tok::Eof => {
                    return Err((
                        open,
                        format!(
                            "the list opened at {}:{} is not closed (expected ']')",
                            open.line, open.column
                        ),
                    ));
                }
                tok => self.scalar(tok, pos)?,
            };
            items.push(item);
            let (tok, pos) = self.next()?;
            match tok {
                Tok::Punct(',') => continue,
                Tok::Punct(']') => break,
                other => {
                    return Err((
                        pos,
                        format!("expected ',' or ']' in a list, found {}", other.describe()),
                    ));
                }
            }
        }
        Ok(Node::new(open, Value::Seq(items, false)))
    }

    fn scalar(&mut self, tok: Tok, pos: Pos) -> Result<Node, Fail> {
        let value = match tok {
            Tok::Ident(s) => Value::Scalar(s, ScalarKind::Ident),
            Tok::Num(s) => Value::Scalar(s, ScalarKind::Number),
            Tok::Str(mut s) => {
                // Adjacent string literals concatenate, as in C.
                while let Tok::Str(_) = self.peek()? {
                    if let (Tok::Str(more), _) = self.next()? {
                        s.push_str(&more);
                    }
                }
                Value::Scalar(s, ScalarKind::Quoted)
            }
            other => return Err((pos, format!("expected a value, found {}", other.describe()))),
        };
        Ok(Node::new(pos, value))
    }
}

/// Adds a field, turning a field written more than once into a repeated list.
fn merge(entries: &mut Vec<(String, Pos, Node)>, name: String, pos: Pos, value: Node) {
    let Some(existing) = entries.iter_mut().find(|(k, _, _)| *k == name) else {
        entries.push((name, pos, value));
        return;
    };
    let flatten = |n: Node| match n.value {
        Value::Seq(items, _) => items,
        _ => vec![n],
    };
    let first = std::mem::replace(&mut existing.2, Node::new(pos, Value::Null));
    let start = first.pos;
    let mut items = flatten(first);
    items.extend(flatten(value));
    existing.2 = Node::new(start, Value::Seq(items, true));
}

/// Parses protobuf text into a tree (a top-level mapping).
pub(crate) fn parse_pbtxt_tree(text: &str, file: &Path) -> Result<Node, Diagnostics> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser {
        lexer: Lexer {
            chars: text.chars().peekable(),
            line: 1,
            column: 1,
        },
        peeked: None,
        depth: 0,
    };
    match parser.message(None) {
        Ok(entries) => Ok(Node::new(Pos { line: 1, column: 1 }, Value::Map(entries))),
        Err((pos, message)) => Err(Diagnostics::single(Diagnostic::error(file, pos, message))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(s: &str) -> Node {
        parse_pbtxt_tree(s, Path::new("config.pbtxt")).unwrap()
    }

    fn fail(s: &str) -> String {
        parse_pbtxt_tree(s, Path::new("config.pbtxt"))
            .unwrap_err()
            .to_string()
    }

    fn field<'a>(n: &'a Node, k: &str) -> &'a Node {
        let Value::Map(e) = &n.value else {
            panic!("not a map: {n:?}")
        };
        &e.iter()
            .find(|(key, _, _)| key == k)
            .unwrap_or_else(|| panic!("no field {k}"))
            .2
    }

    #[test]
    fn every_syntax_form() {
        let n = tree(
            "# comment\nname: \"a\" 'b' # trailing\nmax_batch_size: -1\ndims: [ 1, -1 ]\ndims: 3\n\
             input { name: \"x\" } input: { name: \"y\" }\nkind: KIND_GPU; f: 1.5f, g < h: 0x10 >\ne: [ { a: 1 }, { a: 2 } ]\nlist: []\n",
        );
        assert_eq!(
            field(&n, "name").value,
            Value::Scalar("ab".into(), ScalarKind::Quoted)
        );
        assert_eq!(
            field(&n, "max_batch_size").value,
            Value::Scalar("-1".into(), ScalarKind::Number)
        );
        let Value::Seq(dims, true) = &field(&n, "dims").value else {
            panic!()
        };
        assert_eq!(dims.len(), 3);
        assert_eq!(dims[2].pos, Pos { line: 5, column: 7 });
        let Value::Seq(inputs, true) = &field(&n, "input").value else {
            panic!()
        };
        assert_eq!(inputs.len(), 2);
        assert_eq!(
            field(&n, "kind").value,
            Value::Scalar("KIND_GPU".into(), ScalarKind::Ident)
        );
        assert_eq!(
            field(field(&n, "g"), "h").value,
            Value::Scalar("0x10".into(), ScalarKind::Number)
        );
        let Value::Seq(e, false) = &field(&n, "e").value else {
            panic!()
        };
        assert_eq!(e.len(), 2);
        assert_eq!(field(&n, "list").value, Value::Seq(vec![], false));
    }

    #[test]
    fn escapes() {
        let n = tree(r#"s: "a\n\t\"\\\x41\101\u00e9" t: 'it\'s'"#);
        assert_eq!(
            field(&n, "s").value,
            Value::Scalar("a\n\t\"\\AAé".into(), ScalarKind::Quoted)
        );
        assert_eq!(
            field(&n, "t").value,
            Value::Scalar("it's".into(), ScalarKind::Quoted)
        );
    }

    #[test]
    fn errors_have_positions() {
        assert_eq!(
            fail("name: \"abc\ndims: [1]"),
            "config.pbtxt:1:7: unterminated string: strings cannot span lines"
        );
        assert_eq!(
            fail("input {\n  name: \"x\"\n"),
            "config.pbtxt:3:1: the message opened with '{' at 1:7 is not closed (expected '}')"
        );
        assert_eq!(
            fail("name \"x\""),
            "config.pbtxt:1:6: expected ':' or '{' after field name 'name', found string \"x\""
        );
        assert_eq!(
            fail("dims: [1 2]"),
            "config.pbtxt:1:10: expected ',' or ']' in a list, found number 2"
        );
        assert_eq!(
            fail("a: 1 }"),
            "config.pbtxt:1:6: expected a field name, found '}'"
        );
        assert_eq!(
            fail("a: @"),
            "config.pbtxt:1:4: unexpected '@' (is this a text config.pbtxt?)"
        );
        assert_eq!(
            fail("a: 12abc"),
            "config.pbtxt:1:4: '12abc' is not a valid number"
        );
        assert_eq!(
            fail("a: \"\\q\""),
            "config.pbtxt:1:6: unknown escape '\\q' in string"
        );
        assert_eq!(
            fail("a: -foo"),
            "config.pbtxt:1:4: expected a number after '-', found 'foo'"
        );
        assert_eq!(
            fail("[ext.field]: 1"),
            "config.pbtxt:1:1: extension and Any fields ('[type.name]') are not supported in model configs"
        );
        let deep = "a {".repeat(100);
        assert!(fail(&deep).contains("nest deeper than 64 levels"));
    }
}

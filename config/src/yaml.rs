//! YAML text to a positioned [`Node`] tree, using saphyr-parser's event stream (every event carries its span).

use std::collections::HashMap;
use std::path::Path;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::node::{Node, ScalarKind, Value};

/// The most nodes a document may expand to (aliases included): guards against "billion laughs".
pub(crate) const MAX_NODES: usize = 200_000;
/// The deepest nesting accepted.
pub(crate) const MAX_DEPTH: usize = 64;

enum Frame {
    Seq {
        pos: Pos,
        items: Vec<Node>,
        anchor: usize,
    },
    Map {
        pos: Pos,
        entries: Vec<(String, Pos, Node)>,
        key: Option<(String, Pos)>,
        anchor: usize,
    },
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

/// Parses one YAML document. An empty document is `Value::Null`.
pub(crate) fn parse_yaml(text: &str, file: &Path) -> Result<Node, Diagnostics> {
    let err = |pos: Pos, msg: String| Diagnostics::single(Diagnostic::error(file, pos, msg));
    let mut parser = Parser::new_from_str(text);
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    let mut budget = MAX_NODES;
    while let Some(event) = parser.next_event() {
        let (event, span) = match event {
            Ok(e) => e,
            Err(e) => {
                let m = e.marker();
                let message = if e.info().contains("recursion limit") {
                    format!("the document nests deeper than {MAX_DEPTH} levels")
                } else {
                    format!("invalid YAML: {}", e.info())
                };
                return Err(err(
                    Pos {
                        line: m.line(),
                        column: m.col() + 1,
                    },
                    message,
                ));
            }
        };
        let pos = pos_of(&span);
        let finished: Option<(Node, usize)> = match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => None,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(err(
                        pos,
                        "the file holds more than one YAML document; keep one (remove the extra '---')"
                            .into(),
                    ));
                }
                None
            }
            Event::Alias(id) => {
                let Some(target) = anchors.get(&id) else {
                    return Err(err(pos, "alias refers to an unknown anchor".into()));
                };
                let size = target.size();
                if size > budget {
                    return Err(err(
                        pos,
                        format!(
                            "the document expands to more than {MAX_NODES} nodes (through aliases); simplify it"
                        ),
                    ));
                }
                budget -= size;
                let mut n = target.clone();
                n.pos = pos;
                Some((n, 0))
            }
            Event::Scalar(text, style, anchor, tag) => {
                let forced_str = tag.as_ref().is_some_and(|t| t.suffix == "str");
                let value = if style == ScalarStyle::Plain && !forced_str {
                    match text.as_ref() {
                        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
                        _ => Value::Scalar(text.into_owned(), ScalarKind::Plain),
                    }
                } else {
                    Value::Scalar(text.into_owned(), ScalarKind::Quoted)
                };
                Some((Node::new(pos, value), anchor))
            }
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq {
                    pos,
                    items: Vec::new(),
                    anchor,
                });
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map {
                    pos,
                    entries: Vec::new(),
                    key: None,
                    anchor,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq { pos, items, anchor }) => {
                    Some((Node::new(pos, Value::Seq(items, false)), anchor))
                }
                _ => return Err(err(pos, "invalid YAML: unbalanced sequence".into())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    pos, entries, anchor, ..
                }) => Some((Node::new(pos, Value::Map(entries)), anchor)),
                _ => return Err(err(pos, "invalid YAML: unbalanced mapping".into())),
            },
        };
        if stack.len() > MAX_DEPTH {
            return Err(err(
                pos,
                format!("the document nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        let Some((node, anchor)) = finished else { continue };
        budget = budget
            .checked_sub(1)
            .ok_or_else(|| err(pos, format!("the document has more than {MAX_NODES} nodes")))?;
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => match node.value {
                    Value::Scalar(s, _) => *key = Some((s, node.pos)),
                    Value::Null => *key = Some((String::new(), node.pos)),
                    _ => {
                        return Err(err(
                            node.pos,
                            "a mapping key must be a plain value, not a list or a mapping".into(),
                        ));
                    }
                },
                Some((k, kpos)) => entries.push((k, kpos, node)),
            },
        }
    }
    Ok(root.unwrap_or(Node::new(Pos { line: 1, column: 1 }, Value::Null)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Node, Diagnostics> {
        parse_yaml(s, Path::new("t.yaml"))
    }

    #[test]
    fn positions_are_one_based() {
        let n = p("a:\n  b: 5\n  c: [1, 'x']\n").unwrap();
        let Value::Map(entries) = &n.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].0, "a");
        assert_eq!(entries[0].1, Pos { line: 1, column: 1 });
        let Value::Map(inner) = &entries[0].2.value else {
            panic!("not a map")
        };
        assert_eq!(inner[0].2.pos, Pos { line: 2, column: 6 });
        assert_eq!(inner[0].2.value, Value::Scalar("5".into(), ScalarKind::Plain));
        let Value::Seq(items, _) = &inner[1].2.value else {
            panic!("not a seq")
        };
        assert_eq!(items[1].value, Value::Scalar("x".into(), ScalarKind::Quoted));
        assert_eq!(items[1].pos, Pos { line: 3, column: 10 });
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = p("a: [1, 2\nb: 3\n").unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e.0[0].message.starts_with("invalid YAML"), "{e}");
        assert!(e.0[0].line >= 1);
        let e = p("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(e.to_string().contains("more than one YAML document"), "{e}");
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let prev = i - 1;
            s.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let e = p(&s).unwrap_err();
        assert!(e.to_string().contains("expands to more than"), "{e}");
    }

    #[test]
    fn empty_document_is_null() {
        assert_eq!(p("").unwrap().value, Value::Null);
        assert_eq!(p("# only a comment\n").unwrap().value, Value::Null);
    }
}

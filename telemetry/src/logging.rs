//! Log setup shared by both binaries: one line per event on stderr, JSON for log collectors or text for
//! people, ANSI colours only when stderr is a terminal.

use std::io::{IsTerminal, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, spans).
    Json,
    /// Human-readable lines with RFC 3339 time stamps.
    Text,
    /// Human-readable lines without time stamps (the backend's Triton-style `default`).
    TextNoTime,
}

/// Installs the global subscriber: `filter` (an `EnvFilter` directive such as `info` or
/// `infergate_gateway=debug`), written to stderr in `format`. Multi-line messages stay on one line: the
/// JSON writer escapes newlines, and the text writer's are written as `\n` by [`OneLine`].
pub fn init_logging(filter: EnvFilter, format: LogFormat) {
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(OneLine)
        .with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
        LogFormat::Text => builder.init(),
        LogFormat::TextNoTime => builder.without_time().init(),
    }
}

/// Stderr, with the newlines inside an event written as `\n`, so a multi-line error (a config rejection
/// lists one problem per line) stays one log line. The formatter hands each event over in one
/// `write_all` of a whole line, so the line's own final newline is the only one kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OneLine;

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = OneLineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(std::io::stderr())
    }
}

/// The writer of one event (see [`OneLine`]).
#[derive(Debug)]
pub(crate) struct OneLineWriter(std::io::Stderr);

impl Write for OneLineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().write_all(&one_line(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `buf` with every newline but a final one written as the two characters `\n`.
fn one_line(buf: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    if !body.contains(&b'\n') {
        return buf.into();
    }
    let mut out = Vec::with_capacity(buf.len() + 16);
    for &b in body {
        if b == b'\n' {
            out.extend_from_slice(b"\\n");
        } else {
            out.push(b);
        }
    }
    if body.len() < buf.len() {
        out.push(b'\n');
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_newlines_are_escaped_and_the_last_is_kept() {
        assert_eq!(&*one_line(b"a=1 msg\n"), b"a=1 msg\n");
        assert_eq!(
            &*one_line(b"error=f.yaml:1:2: x\nf.yaml:3:4: y\n"),
            b"error=f.yaml:1:2: x\\nf.yaml:3:4: y\n"
        );
        assert_eq!(&*one_line(b"no end\nhere"), b"no end\\nhere");
    }
}

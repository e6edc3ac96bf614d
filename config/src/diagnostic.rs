//! Problems found in a config file, each pointing at a file, line and column.

use std::fmt;
use std::path::{Path, PathBuf};

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file cannot be used as it is.
    Error,
    /// The file is usable, but something in it is ignored or needs attention
    /// (an unsupported Triton field, a listener change that needs a restart, ...).
    Warning,
}

/// One problem in a config file.
///
/// `Display` renders it as `file:line:column: message`, followed by `(hint: ...)` when there is a hint,
/// for example `routes.yaml:14:9: route 'resnet' sends traffic to unknown upstream 'resnet-v3' (known: resnet-v1, resnet-v2)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The file the problem is in, as it was given to the parser.
    pub file: PathBuf,
    /// 1-based line; 0 when the problem concerns the whole file (unreadable, too large).
    pub line: usize,
    /// 1-based column, counted in characters; 0 when the problem concerns the whole file.
    pub column: usize,
    /// What is wrong, naming the thing.
    pub message: String,
    /// How to fix it, when we can tell.
    pub hint: Option<String>,
}

/// A position in a file: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column in characters.
    pub column: usize,
}

/// Every problem found in one parse or validation; the error type of all parse and validate functions.
///
/// It may also hold warnings; [`Diagnostics::has_errors`] tells whether the input was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostic {
    /// An error at `pos` in `file`.
    pub fn error(file: &Path, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.to_path_buf(),
            line: pos.line,
            column: pos.column,
            message: message.into(),
            hint: None,
        }
    }

    /// A warning at `pos` in `file`.
    pub fn warning(file: &Path, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message)
        }
    }

    /// The same diagnostic with a hint attached.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Whether this is an error (as opposed to a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        f.write_str(": ")?;
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl Diagnostics {
    /// No diagnostics.
    pub fn new() -> Self {
        Diagnostics(Vec::new())
    }

    /// A list holding one diagnostic.
    pub fn single(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }

    /// Adds a diagnostic.
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| !d.is_error())
    }

    /// Whether there are no diagnostics at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many diagnostics there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Iterates over the diagnostics.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// Sorts by file, line and column (stable, so rules keep their order on one spot).
    pub fn sort(&mut self) {
        self.0
            .sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    }
}

impl fmt::Display for Diagnostics {
    /// One diagnostic per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl std::error::Error for Diagnostic {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<I: IntoIterator<Item = Diagnostic>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

/// Edit distance (optimal string alignment: insertions, deletions, substitutions and adjacent swaps)
/// between two short strings, for "did you mean" hints.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `word`, when it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1) && *d < word.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_the_contract() {
        let d = Diagnostic::error(
            Path::new("routes.yaml"),
            Pos { line: 14, column: 9 },
            "route 'resnet' sends traffic to unknown upstream 'resnet-v3' (known: resnet-v1, resnet-v2)",
        );
        assert_eq!(
            d.to_string(),
            "routes.yaml:14:9: route 'resnet' sends traffic to unknown upstream 'resnet-v3' (known: resnet-v1, resnet-v2)"
        );
        let w = Diagnostic::warning(Path::new("a.yaml"), Pos { line: 1, column: 2 }, "x").with_hint("do y");
        assert_eq!(w.to_string(), "a.yaml:1:2: warning: x (hint: do y)");
        let whole = Diagnostic::error(Path::new("a.yaml"), Pos::default(), "file is empty");
        assert_eq!(whole.to_string(), "a.yaml: file is empty");
    }

    #[test]
    fn suggestions_pick_close_names_only() {
        assert_eq!(did_you_mean("timout", ["timeout", "retries"]), Some("timeout"));
        assert_eq!(did_you_mean("upstreams", ["routes", "callers"]), None);
        assert_eq!(did_you_mean("Retries", ["retries"]), Some("retries"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("modle", "model"), 1);
        assert_eq!(did_you_mean("b", ["a"]), None);
    }
}

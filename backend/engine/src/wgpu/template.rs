//! The small template step that specialises a `.wgsl` file before compilation.
//!
//! Every kernel file is valid WGSL as written (naga validates it in a unit test), with defaults for what a
//! launcher may change:
//! - `alias NAME = TYPE;` lines: element types (`f32`, `f16`, `i32`); a source using `f16` outside comments
//!   gets `enable f16;` (kernel files must not name that type in comments).
//! - `const NAME: TYPE = VALUE;` lines: tile sizes, flags, unroll factors.
//! - regions between `// @begin NAME` and `// @end NAME`: generated code (operand bindings, fused epilogues).
//!
//! The specialised source is the pipeline cache key, so every parameter that changes the compiled pipeline is
//! part of the key by construction.

use super::error::{GpuError, GpuResult};

/// A kernel source ready to compile: the specialised WGSL and a short name for labels and errors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelSource {
    pub(crate) name: &'static str,
    pub(crate) wgsl: String,
}

/// Builder for a specialised kernel source.
pub(crate) struct Template {
    name: &'static str,
    base: &'static str,
    aliases: Vec<(String, String)>,
    consts: Vec<(String, String)>,
    regions: Vec<(String, String)>,
}

impl Template {
    /// Starts from a kernel file's text.
    pub(crate) fn new(name: &'static str, base: &'static str) -> Self {
        Self {
            name,
            base,
            aliases: Vec::new(),
            consts: Vec::new(),
            regions: Vec::new(),
        }
    }

    /// Sets `alias NAME = ty;`.
    pub(crate) fn alias(mut self, name: &str, ty: &str) -> Self {
        self.aliases.push((name.to_owned(), ty.to_owned()));
        self
    }

    /// Sets `const NAME: _ = value;` (the value as WGSL text, e.g. `4u`, `true`).
    pub(crate) fn constant(mut self, name: &str, value: impl ToString) -> Self {
        self.consts.push((name.to_owned(), value.to_string()));
        self
    }

    /// Replaces the region `// @begin NAME` .. `// @end NAME` with `code`.
    pub(crate) fn region(mut self, name: &str, code: impl Into<String>) -> Self {
        self.regions.push((name.to_owned(), code.into()));
        self
    }

    /// Produces the specialised source; every requested substitution must match the file exactly once.
    pub(crate) fn build(self) -> GpuResult<KernelSource> {
        let mut out = String::with_capacity(self.base.len() + 256);
        let mut used_alias = vec![false; self.aliases.len()];
        let mut used_const = vec![false; self.consts.len()];
        let mut used_region = vec![false; self.regions.len()];
        let mut skipping: Option<String> = None;
        for line in self.base.lines() {
            let trimmed = line.trim_start();
            if let Some(region) = &skipping {
                if trimmed.strip_prefix("// @end ").map(str::trim) == Some(region.as_str()) {
                    skipping = None;
                    out.push_str(line);
                    out.push('\n');
                }
                continue;
            }
            if let Some(name) = trimmed.strip_prefix("// @begin ").map(str::trim)
                && let Some(k) = self.regions.iter().position(|(n, _)| n == name)
            {
                used_region[k] = true;
                out.push_str(line);
                out.push('\n');
                out.push_str(&self.regions[k].1);
                if !self.regions[k].1.ends_with('\n') {
                    out.push('\n');
                }
                skipping = Some(name.to_owned());
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix("alias ") {
                let name = rest.split('=').next().unwrap_or("").trim();
                if let Some(k) = self.aliases.iter().position(|(n, _)| n == name) {
                    used_alias[k] = true;
                    let ty = &self.aliases[k].1;
                    out.push_str(&format!("alias {name} = {ty};\n"));
                    continue;
                }
            }
            if let Some(rest) = trimmed.strip_prefix("const ") {
                let name = rest.split(':').next().unwrap_or("").trim();
                if let (Some(k), Some(colon), Some(eq)) = (
                    self.consts.iter().position(|(n, _)| n == name),
                    rest.find(':'),
                    rest.find('='),
                ) {
                    used_const[k] = true;
                    let ty = rest[colon + 1..eq].trim();
                    out.push_str(&format!("const {name}: {ty} = {};\n", self.consts[k].1));
                    continue;
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        if skipping.is_some() {
            return Err(GpuError::internal(format!(
                "kernel '{}': unterminated region {skipping:?}",
                self.name
            )));
        }
        let missing: Vec<&str> = (self.aliases.iter().zip(&used_alias))
            .chain(self.consts.iter().zip(&used_const))
            .chain(self.regions.iter().zip(&used_region))
            .filter(|(_, used)| !**used)
            .map(|((n, _), _)| n.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(GpuError::internal(format!(
                "kernel '{}': the template has no {missing:?} to specialise",
                self.name
            )));
        }
        let needs_f16 = out
            .lines()
            .any(|l| !l.trim_start().starts_with("//") && l.contains("f16"));
        if needs_f16 && !out.contains("enable f16;") {
            out.insert_str(0, "enable f16;\n");
        }
        Ok(KernelSource {
            name: self.name,
            wgsl: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str =
        "alias T = f32;\nconst TILE: u32 = 4u;\n// @begin body\nlet a = 1;\n// @end body\nfn f() {}\n";

    #[test]
    fn substitutes_aliases_consts_and_regions() {
        let k = Template::new("t", SRC)
            .alias("T", "f16")
            .constant("TILE", "8u")
            .region("body", "let b = 2;")
            .build()
            .expect("builds");
        assert_eq!(
            k.wgsl,
            "enable f16;\nalias T = f16;\nconst TILE: u32 = 8u;\n// @begin body\nlet b = 2;\n// @end body\nfn f() {}\n"
        );
    }

    #[test]
    fn unknown_names_are_an_error() {
        let err = Template::new("t", SRC)
            .constant("NOPE", "1u")
            .build()
            .expect_err("no NOPE");
        assert!(err.message.contains("NOPE"));
    }
}

//! The registry's own checks, and the supported-operator list in `docs/engine.md` generated from it.

use super::onnx::lookup;
use super::registry;
use crate::ErrorKind;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/engine.md");
const BEGIN: &str = "<!-- supported-operators: begin (generated from the registry by `ops::tests`) -->";
const END: &str = "<!-- supported-operators: end -->";

/// The operator table as `docs/engine.md` shows it.
fn supported_operators_table() -> String {
    let mut rows: Vec<(String, &str, String, &str, &str)> = registry()
        .map(|o| {
            let (lo, hi) = o.opsets();
            let domain = if o.domain.is_empty() { "ai.onnx" } else { o.domain };
            let runs = if o.family.value_dependent_shapes {
                "when the plan is built, or on the host between stages"
            } else if o.family.plan_time {
                "when the plan is built"
            } else if std::ptr::eq(o.family, &super::indexed::FAMILY)
                && super::indexed::CPU_ONLY.contains(&o.op_type)
            {
                // the operators `ops::wgpu_refusal` names
                "CPU"
            } else {
                "CPU, wgpu"
            };
            (
                domain.to_string(),
                o.op_type,
                format!("{lo}–{hi}"),
                o.family.name,
                runs,
            )
        })
        .collect();
    rows.sort();
    let mut out = String::from(
        "| Domain | Operator | Opsets | Module (`src/ops/`) | Runs on |\n|---|---|---|---|---|\n",
    );
    for (d, op, opsets, module, runs) in rows {
        out.push_str(&format!("| {d} | {op} | {opsets} | `{module}.rs` | {runs} |\n"));
    }
    out
}

/// `docs/engine.md` lists exactly the registered operators. `INFERGATE_BLESS=1` rewrites the list.
#[test]
fn supported_operator_list_matches_the_registry() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/engine.md lacks the generated operator list markers");
    };
    let current = &doc[b + BEGIN.len()..e];
    let want = format!("\n{}", supported_operators_table());
    if current != want {
        if std::env::var_os("INFERGATE_BLESS").is_some() {
            let new = format!("{}{}{}{}", &doc[..b], BEGIN, want, &doc[e..]);
            std::fs::write(DOC, new).unwrap();
        } else {
            panic!(
                "docs/engine.md's operator list differs from the registry; run \
                 `INFERGATE_BLESS=1 cargo test -p infergate-engine --lib supported_operator_list` and commit it"
            );
        }
    }
}

#[test]
fn each_operator_is_registered_once_per_opset() {
    let all: Vec<_> = registry().collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            let (alo, ahi) = a.opsets();
            let (blo, bhi) = b.opsets();
            assert!(
                a.domain != b.domain || a.op_type != b.op_type || ahi < blo || bhi < alo,
                "{}:{} is registered twice for overlapping opsets",
                a.domain,
                a.op_type
            );
        }
    }
}

#[test]
fn lookup_names_the_operator_and_the_opsets_it_knows() {
    assert_eq!(lookup("", "Conv", 13).unwrap().family.name, "conv");
    assert_eq!(lookup("ai.onnx", "Relu", 7).unwrap().family.name, "elementwise");
    let unknown = lookup("", "NoSuchOp", 13).unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::Unsupported);
    assert!(
        unknown.to_string().contains("operator NoSuchOp is not supported"),
        "{unknown}"
    );
    // Gelu entered the default domain in opset 20.
    let early = lookup("", "Gelu", 17).unwrap_err();
    assert_eq!(early.kind(), ErrorKind::Unsupported);
    assert!(early.to_string().contains("opsets 20 to"), "{early}");
    assert!(early.to_string().contains("opset 17"), "{early}");
}

//! `docs/configuration.md` stays in step with the types: its reference examples must parse (so no field
//! there is stale: unknown fields are errors), and every field the types serialize must be spelled out in
//! them (so a new field fails this test until it is documented), with a comment on the gateway side.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn doc() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")).unwrap()
}

/// The fenced blocks of one language, in order.
fn blocks(doc: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in doc.lines() {
        match &mut cur {
            None if line.trim_start() == format!("```{lang}") => cur = Some(String::new()),
            Some(b) if line.trim_start() == "```" => {
                out.push(std::mem::take(b));
                cur = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

/// Field names reachable in a serialized value. Map-typed fields (user keys) are descended without their
/// keys; opaque fields (kept as raw JSON) are not descended.
fn field_names(v: &Value, maps: &[&str], opaque: &[&str], out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                out.insert(k.clone());
                if opaque.contains(&k.as_str()) {
                    continue;
                }
                if maps.contains(&k.as_str()) {
                    if let Value::Object(entries) = child {
                        for value in entries.values() {
                            field_names(value, maps, opaque, out);
                        }
                    }
                } else {
                    field_names(child, maps, opaque, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| field_names(i, maps, opaque, out)),
        _ => {}
    }
}

fn spelled(text: &str, word: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(word).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + word.len()).copied();
        let ident = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        !ident(before) && !ident(after)
    })
}

#[test]
fn gateway_reference_parses_and_documents_every_field() {
    let doc = doc();
    let reference = blocks(&doc, "yaml")
        .into_iter()
        .find(|b| b.contains("listeners:"))
        .expect("gateway reference block");
    // The example names TLS files; give them a home so it validates like a real deployment.
    let dir = tempfile::tempdir().unwrap();
    for word in reference.split_whitespace().filter(|w| w.starts_with("tls/")) {
        let p = dir.path().join(word);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "pem").unwrap();
    }
    let file = dir.path().join("routes.yaml");
    let (config, warnings) = infergate_config::load_gateway_config(&reference, &file)
        .unwrap_or_else(|e| panic!("the reference is invalid:\n{e}"));
    assert!(warnings.is_empty(), "the reference has warnings:\n{warnings}");
    let json = serde_json::to_value(&config).unwrap();
    let mut names = BTreeSet::new();
    field_names(&json, &[], &[], &mut names);
    assert!(names.len() > 80, "schema walk found only {} names", names.len());
    let commented: String = reference
        .lines()
        .filter(|l| l.contains('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let undocumented: Vec<&String> = names.iter().filter(|n| !spelled(&commented, n)).collect();
    assert!(
        undocumented.is_empty(),
        "fields missing from the commented reference in docs/configuration.md: {undocumented:?}"
    );
}

#[test]
fn model_reference_parses_and_documents_every_field() {
    let doc = doc();
    let examples = blocks(&doc, "pbtxt");
    assert!(
        examples.len() >= 3,
        "expected the model, sequence and ensemble examples"
    );
    let maps = [
        "parameters",
        "cc_model_filenames",
        "metric_tags",
        "priority_queue_policy",
        "inputs",
        "input_map",
        "output_map",
    ];
    let opaque = [
        "optimization",
        "model_operations",
        "model_repository_agents",
        "response_cache",
        "batch_input",
        "batch_output",
        "secondary_devices",
        "rate_limiter",
        "state",
        "direct",
    ];
    let mut names = BTreeSet::new();
    for (i, text) in examples.iter().enumerate() {
        let config = infergate_config::parse_pbtxt(text, Path::new(&format!("example-{i}.pbtxt")))
            .unwrap_or_else(|e| panic!("pbtxt example {i} is invalid:\n{e}"));
        field_names(
            &serde_json::to_value(&config).unwrap(),
            &maps,
            &opaque,
            &mut names,
        );
    }
    let all = examples.join("\n");
    let undocumented: Vec<&String> = names.iter().filter(|n| !spelled(&all, n)).collect();
    assert!(
        undocumented.is_empty(),
        "model config fields missing from docs/configuration.md: {undocumented:?}"
    );
    for word in ["latest", "num_versions", "all", "specific", "versions"] {
        assert!(
            spelled(&all, word),
            "version policy form '{word}' is not documented"
        );
    }
    let yaml = blocks(&doc, "yaml")
        .into_iter()
        .find(|b| b.contains("max_batch_size"))
        .expect("config.yaml example");
    let from_yaml =
        infergate_config::parse_model_yaml(&yaml, Path::new("config.yaml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_yaml.name, "resnet");
}

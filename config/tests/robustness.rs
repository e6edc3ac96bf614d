//! Bad input never panics: deterministic random bytes and mutations of realistic files through both
//! parsers. Every refusal must carry a message and point inside the file. (The cargo-fuzz targets in
//! `config/fuzz/` explore the same entry points for longer.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly

use std::path::Path;

use infergate_config::{Diagnostics, parse_gateway_config, parse_model_yaml, parse_pbtxt};

/// xorshift64*: deterministic, so a failure reproduces exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u8] = b"{}[]<>:,;\"'#-\n\t &*!|>%@?\\0123456789.e_xyzTYPE -1 ~";

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let len = b.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                b.insert(i, INTERESTING[rng.below(INTERESTING.len())]);
            }
            2 if len > 0 => {
                let i = rng.below(len);
                let j = (i + rng.below(32)).min(len);
                b.drain(i..j);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let j = (i + rng.below(64)).min(len);
                let chunk = b[i..j].to_vec();
                let at = rng.below(len + 1);
                b.splice(at..at, chunk);
            }
            4 => b.truncate(rng.below(len + 1)),
            _ => {
                let i = rng.below(len + 1);
                b.insert(i, rng.next() as u8);
            }
        }
    }
    b
}

/// A refusal must explain itself and point at a real place in the file.
fn check_refusal(text: &str, d: &Diagnostics) {
    assert!(d.has_errors(), "an Err must hold at least one error");
    // YAML also ends lines at a lone '\r'; counting both is an upper bound.
    let lines = text.split(['\n', '\r']).count();
    for diag in d.iter() {
        assert!(!diag.message.is_empty(), "empty message for input {text:?}");
        assert!(
            diag.line <= lines + 1,
            "line {} past the end ({lines} lines) for {text:?}: {diag}",
            diag.line
        );
    }
}

fn run(name: &str, seeds: &[&str], parse: impl Fn(&str) -> Result<(), Diagnostics>, iterations: usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..iterations {
        let bytes = if i % 10 == 0 {
            (0..rng.below(200)).map(|_| rng.next() as u8).collect()
        } else {
            mutate(&mut rng, seeds[i % seeds.len()].as_bytes())
        };
        let text = String::from_utf8_lossy(&bytes);
        match parse(&text) {
            Ok(()) => ok += 1,
            Err(d) => {
                check_refusal(&text, &d);
                refused += 1;
            }
        }
    }
    eprintln!("{name}: {iterations} inputs, {ok} accepted, {refused} refused with positioned errors");
    assert!(
        refused > iterations / 10,
        "{name}: mutations should mostly break the file"
    );
}

#[test]
fn routes_yaml_mutations_never_panic() {
    let example = include_str!("../../deploy/local/routes.yaml");
    let small = "upstreams: [{ name: a, endpoints: [\"h:1\"] }]\nroutes: [{ name: r, destinations: [{ upstream: a }] }]\n";
    run(
        "routes.yaml",
        &[example, small],
        |t| parse_gateway_config(t, Path::new("routes.yaml")).map(|_| ()),
        3000,
    );
}

#[test]
fn pbtxt_mutations_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triton");
    let seeds: Vec<String> = ["simple", "nobatch", "ens", "seq", "dyn"]
        .iter()
        .map(|m| std::fs::read_to_string(dir.join(m).join("config.pbtxt")).unwrap())
        .collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    run(
        "config.pbtxt",
        &seeds,
        |t| parse_pbtxt(t, Path::new("config.pbtxt")).map(|_| ()),
        3000,
    );
}

#[test]
fn model_yaml_mutations_never_panic() {
    let seed = "name: m\nmax_batch_size: 4\ninput: [{ name: x, data_type: TYPE_FP32, dims: [3] }]\n\
                output: [{ name: y, data_type: TYPE_FP32, dims: [3] }]\ndynamic_batching: { preferred_batch_size: [2] }\n\
                parameters: { k: { string_value: v } }\n";
    run(
        "config.yaml",
        &[seed],
        |t| parse_model_yaml(t, Path::new("config.yaml")).map(|_| ()),
        1500,
    );
}

#[test]
fn pathological_nesting_is_refused_not_overflowed() {
    let deep_yaml = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let e = parse_gateway_config(&deep_yaml, Path::new("routes.yaml")).unwrap_err();
    assert!(e.to_string().contains("nests deeper than 64 levels"), "{e}");
    let deep_map = "a:\n".to_string()
        + &(1..200)
            .map(|i| format!("{}a:\n", "  ".repeat(i)))
            .collect::<String>();
    let e = parse_gateway_config(&deep_map, Path::new("routes.yaml")).unwrap_err();
    assert!(e.to_string().contains("nests deeper than 64 levels"), "{e}");
    let deep_pb = format!("{}{}", "a { ".repeat(100_000), "}".repeat(100_000));
    let e = parse_pbtxt(&deep_pb, Path::new("config.pbtxt")).unwrap_err();
    assert!(e.to_string().contains("nest deeper than 64 levels"), "{e}");
}

//! Every `.wgsl` file (and representative specialisations) parses and validates with naga, on any machine.

use crate::wgpu::kernels;

fn validate(name: &str, src: &str) {
    let module = match naga::front::wgsl::parse_str(src) {
        Ok(m) => m,
        Err(e) => panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(src)),
    };
    let mut v = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    if let Err(e) = v.validate(&module) {
        panic!("{name}: WGSL validation error:\n{}", e.emit_to_string(src));
    }
}

#[test]
fn every_kernel_file_validates_with_naga() {
    assert!(!kernels::ALL.is_empty());
    for (name, src) in kernels::ALL {
        validate(name, src);
    }
}

#[test]
fn every_kernel_uses_the_launchers_workgroup_size() {
    let want = format!("const WG: u32 = {}u;", crate::wgpu::plan::WG);
    for (name, src) in kernels::ALL {
        if src.contains("const WG:") {
            assert!(
                src.contains(&want),
                "{name}: workgroup size differs from plan::WG"
            );
        }
    }
}

#[test]
fn every_specialisation_the_launchers_produce_validates_with_naga() {
    let variants = kernels::variants().unwrap_or_else(|e| panic!("specialising: {e}"));
    assert!(variants.len() > kernels::ALL.len());
    for k in variants {
        validate(k.name, &k.wgsl);
    }
}

#[test]
fn a_broken_shader_is_caught() {
    let err = naga::front::wgsl::parse_str("fn main( { }");
    assert!(err.is_err());
}

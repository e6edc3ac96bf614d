// Element-wise programs with numpy broadcasting: out[i] = ew_out(0, i). The `ew` region is generated from the
// program (operand bindings from binding 2, a stride/constant table when needed, and `ew_out`).

alias TO = f32;

struct Params {
    // x: element count
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<TO>;

// @begin ew
@group(0) @binding(2) var<storage, read> ew_in0: array<f32>;
fn ew_out(acc: f32, oidx: u32) -> TO {
    return TO(ew_in0[oidx]);
}
// @end ew

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    out[i] = ew_out(0.0, i);
}

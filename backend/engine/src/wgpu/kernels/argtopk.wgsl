// ArgMax/ArgMin and TopK along one axis of an [outer, L, inner] view, one invocation per (outer, inner).
// TopK selects k times the best element after the previous pick in the order (value, then lower index),
// which needs no scratch memory; ties go to the lower index as ONNX requires.

alias T = f32;

// true: TopK; false: ArgMax/ArgMin
const TOPK: bool = false;
// ArgMax / TopK largest
const LARGEST: bool = true;
const LAST_INDEX: bool = false;

struct Params {
    // x: outer * inner, y: L, z: inner, w: k
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> values: array<T>;
@group(0) @binding(3) var<storage, read_write> indices: array<i32>;

const WG: u32 = 64u;

// Whether (a, ia) comes before (b, ib) in the selection order.
fn before(a: f32, ia: u32, b: f32, ib: u32) -> bool {
    if (a == b) {
        if (LAST_INDEX) {
            return ia > ib;
        }
        return ia < ib;
    }
    if (LARGEST) {
        return a > b;
    }
    return a < b;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let L = p.n.y;
    let inner = p.n.z;
    let outer = i / inner;
    let in_pos = i % inner;
    let base = outer * L * inner + in_pos;
    var k = 1u;
    if (TOPK) {
        k = p.n.w;
    }
    var prev_v = 0.0;
    var prev_i = 0u;
    for (var j = 0u; j < k; j = j + 1u) {
        var best_i = L;
        var best_v = 0.0;
        for (var t = 0u; t < L; t = t + 1u) {
            let v = f32(x[base + t * inner]);
            if (j > 0u && !before(prev_v, prev_i, v, t)) {
                continue;
            }
            if (best_i == L || before(v, t, best_v, best_i)) {
                best_v = v;
                best_i = t;
            }
        }
        let o = (outer * k + j) * inner + in_pos;
        if (TOPK) {
            values[o] = T(best_v);
        }
        indices[o] = i32(best_i);
        prev_v = best_v;
        prev_i = best_i;
    }
}

// Gather (numpy take along an axis) and GatherElements. Negative indices count from the end of the axis;
// out-of-range indices read element 0 of the axis rather than outside the buffer (ONNX leaves them undefined).

alias T = f32;

// false: Gather, true: GatherElements
const ELEMENTS: bool = false;

struct Params {
    // Gather: x: total, y: inner (product of data dims after axis), z: index count, w: axis dim
    // GatherElements: x: total, y: rank, z: axis, w: axis dim
    n: vec4<u32>,
    // GatherElements: output (= indices) dims and data strides
    dims: array<vec4<u32>, 2>,
    strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> data: array<T>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

fn fix(k: i32, dim: u32) -> u32 {
    var v = k;
    if (v < 0) {
        v = v + i32(dim);
    }
    if (v < 0 || u32(v) >= dim) {
        return 0u;
    }
    return u32(v);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    if (ELEMENTS) {
        var rem = i;
        var src = 0u;
        let k = fix(indices[i], p.n.w);
        for (var d = p.n.y; d > 0u; d = d - 1u) {
            let a = d - 1u;
            let dim = p.dims[a / 4u][a % 4u];
            var c = rem % dim;
            rem = rem / dim;
            if (a == p.n.z) {
                c = k;
            }
            src = src + c * p.strides[a / 4u][a % 4u];
        }
        y[i] = data[src];
    } else {
        let inner = p.n.y;
        let count = p.n.z;
        let in_pos = i % inner;
        let j = (i / inner) % count;
        let outer = i / (inner * count);
        let k = fix(indices[j], p.n.w);
        y[i] = data[(outer * p.n.w + k) * inner + in_pos];
    }
}

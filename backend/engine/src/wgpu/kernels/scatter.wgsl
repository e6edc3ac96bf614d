// ScatterElements, one invocation per output element: the element starts as data's and takes, in
// row-major order of the indices, every update whose index (its axis coordinate replaced) addresses
// it. Only the indices that share the element's other coordinates can, so the loop runs along the
// axis of the indices, and the order is the CPU executor's. The work is the output size times the
// indices' axis length: correct everywhere, not tuned. Negative indices count from the end;
// out-of-range indices address nothing (the CPU executor refuses them).

alias T = f32;

// 0: replace, 1: add, 2: mul, 3: max, 4: min
const REDUCTION: u32 = 0u;

struct Params {
    // x: total, y: rank, z: axis, w: data's axis dim
    n: vec4<u32>,
    // data dims, then indices (= updates) dims
    data_dims: array<vec4<u32>, 2>,
    idx_dims: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> data: array<T>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read> updates: array<T>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

fn combine(a: T, b: T) -> T {
    if (REDUCTION == 1u) {
        return a + b;
    }
    if (REDUCTION == 2u) {
        return a * b;
    }
    if (REDUCTION == 3u) {
        return max(a, b);
    }
    if (REDUCTION == 4u) {
        return min(a, b);
    }
    return b;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let axis = p.n.z;
    // the element's coordinate on the axis, and the position in the indices of the first index that
    // shares its other coordinates (none when a coordinate lies past the indices' extent)
    var rem = i;
    var own = 0u;
    var base = 0u;
    var idx_stride = 1u;
    var axis_stride = 1u;
    var inside = true;
    for (var d = p.n.y; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let dim = p.data_dims[a / 4u][a % 4u];
        let idim = p.idx_dims[a / 4u][a % 4u];
        let c = rem % dim;
        rem = rem / dim;
        if (a == axis) {
            own = c;
            axis_stride = idx_stride;
        } else {
            if (c >= idim) {
                inside = false;
            }
            base = base + c * idx_stride;
        }
        idx_stride = idx_stride * idim;
    }
    var acc = data[i];
    if (inside) {
        let along = p.idx_dims[axis / 4u][axis % 4u];
        for (var k = 0u; k < along; k = k + 1u) {
            let q = base + k * axis_stride;
            var v = indices[q];
            if (v < 0) {
                v = v + i32(p.n.w);
            }
            if (v == i32(own)) {
                acc = combine(acc, updates[q]);
            }
        }
    }
    y[i] = acc;
}

// Strided copy: the one data-movement kernel behind Transpose, Slice, Expand, Tile, Concat, Split and
// DepthToSpace. Invocation i takes the coordinates c of i in the iteration shape and copies
// x[in_base + sum((c[d] % in_mod[d]) * in_stride[d])] to y[out_base + sum(c[d] * out_stride[d])].
// Strides may be negative (Slice with negative steps) or zero (Expand).

alias T = f32;

struct Params {
    // x: element count, y: rank, z: in_base (i32 bits), w: out_base
    n: vec4<u32>,
    dims: array<vec4<u32>, 2>,
    in_strides: array<vec4<i32>, 2>,
    in_mods: array<vec4<u32>, 2>,
    out_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    var rem = i;
    var src = bitcast<i32>(p.n.z);
    var dst = p.n.w;
    for (var d = p.n.y; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let dim = p.dims[k / 4u][k % 4u];
        let c = rem % dim;
        rem = rem / dim;
        src = src + i32(c % p.in_mods[k / 4u][k % 4u]) * p.in_strides[k / 4u][k % 4u];
        dst = dst + c * p.out_strides[k / 4u][k % 4u];
    }
    y[dst] = x[u32(src)];
}

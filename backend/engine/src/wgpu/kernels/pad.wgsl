// Pad in constant, reflect, edge or wrap mode; negative pads crop. One invocation per output element.

alias T = f32;

// 0 constant, 1 reflect, 2 edge, 3 wrap
const MODE: u32 = 0u;

struct Params {
    // x: total, y: rank
    n: vec4<u32>,
    out_dims: array<vec4<u32>, 2>,
    in_dims: array<vec4<u32>, 2>,
    begin: array<vec4<i32>, 2>,
    // x: the constant as f32 bits
    value: vec4<u32>,
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
    var src = 0u;
    var stride = 1u;
    var inside = true;
    for (var d = p.n.y; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let od = p.out_dims[a / 4u][a % 4u];
        let n = i32(p.in_dims[a / 4u][a % 4u]);
        let c = i32(rem % od);
        rem = rem / od;
        var s = c - p.begin[a / 4u][a % 4u];
        if (s < 0 || s >= n) {
            if (MODE == 0u) {
                inside = false;
            } else if (MODE == 1u) {
                if (n == 1) {
                    s = 0;
                } else {
                    let period = 2 * (n - 1);
                    var m = s % period;
                    if (m < 0) {
                        m = m + period;
                    }
                    s = select(m, period - m, m >= n);
                }
            } else if (MODE == 2u) {
                s = clamp(s, 0, n - 1);
            } else {
                s = s % n;
                if (s < 0) {
                    s = s + n;
                }
            }
        }
        src = src + u32(max(s, 0)) * stride;
        stride = stride * u32(n);
    }
    if (inside) {
        y[i] = x[src];
    } else {
        y[i] = T(bitcast<f32>(p.value.x));
    }
}

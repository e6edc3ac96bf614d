// Resize (nearest, multi-linear, cubic) over up to 8 dims, one invocation per output element. Each dim maps
// its output coordinate to an input coordinate with the ONNX coordinate transformation; linear mode
// interpolates between the two neighbours in every dim (2^rank taps), cubic between four (Keys kernel with
// coefficient a, edge-clamped or, with exclude_outside, renormalised); a dim whose coordinate has no
// fractional part contributes one tap.

alias T = f32;

// 0 nearest, 1 linear, 2 cubic
const MODE: u32 = 0u;
const EXCLUDE_OUTSIDE: bool = false;
// 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners, 3 asymmetric, 4 tf_crop_and_resize, 5 half_pixel_symmetric
const COORD: u32 = 0u;
// 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil
const NEAREST: u32 = 0u;

struct Params {
    // x: total, y: rank, z: extrapolation value (f32 bits), w: cubic coefficient (f32 bits)
    n: vec4<u32>,
    out_dims: array<vec4<u32>, 2>,
    in_dims: array<vec4<u32>, 2>,
    scales: array<vec4<f32>, 2>,
    roi_start: array<vec4<f32>, 2>,
    roi_end: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

fn source(c: u32, d: u32) -> f32 {
    let scale = p.scales[d / 4u][d % 4u];
    let out_len = f32(p.out_dims[d / 4u][d % 4u]);
    let in_len = f32(p.in_dims[d / 4u][d % 4u]);
    let xf = f32(c);
    if (COORD == 1u) {
        if (out_len > 1.0) {
            return (xf + 0.5) / scale - 0.5;
        }
        return 0.0;
    }
    if (COORD == 2u) {
        // The resized length is in_len * scale (not rounded), as the ONNX reference computes it.
        let resized = in_len * scale;
        if (resized <= 1.0) {
            return 0.0;
        }
        return xf * (in_len - 1.0) / (resized - 1.0);
    }
    if (COORD == 3u) {
        return xf / scale;
    }
    if (COORD == 4u) {
        let s = p.roi_start[d / 4u][d % 4u];
        let e = p.roi_end[d / 4u][d % 4u];
        if (out_len > 1.0) {
            return s * (in_len - 1.0) + xf * (e - s) * (in_len - 1.0) / (out_len - 1.0);
        }
        return 0.5 * (s + e) * (in_len - 1.0);
    }
    if (COORD == 5u) {
        let adj = out_len / (scale * in_len);
        let center = in_len / 2.0;
        let offset = center * (1.0 - adj);
        return offset + (xf + 0.5) / scale - 0.5;
    }
    return (xf + 0.5) / scale - 0.5;
}

fn nearest(v: f32) -> f32 {
    if (NEAREST == 2u) {
        return floor(v);
    }
    if (NEAREST == 3u) {
        return ceil(v);
    }
    let f = floor(v);
    if (v - f == 0.5) {
        if (NEAREST == 1u) {
            return f + 1.0;
        }
        return f;
    }
    return round(v);
}

fn cubic_weights(t: f32) -> vec4<f32> {
    let a = bitcast<f32>(p.n.w);
    let t0 = t + 1.0;
    let t1 = t;
    let t2 = 1.0 - t;
    let t3 = 2.0 - t;
    return vec4<f32>(
        ((a * t0 - 5.0 * a) * t0 + 8.0 * a) * t0 - 4.0 * a,
        ((a + 2.0) * t1 - (a + 3.0)) * t1 * t1 + 1.0,
        ((a + 2.0) * t2 - (a + 3.0)) * t2 * t2 + 1.0,
        ((a * t3 - 5.0 * a) * t3 + 8.0 * a) * t3 - 4.0 * a,
    );
}

fn cubic(i: u32) -> f32 {
    let rank = p.n.y;
    var base: array<i32, 8>;
    var taps: array<u32, 8>;
    var weights: array<vec4<f32>, 8>;
    var strides: array<u32, 8>;
    var sizes: array<i32, 8>;
    var rem = i;
    var stride = 1u;
    var total = 1u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let od = p.out_dims[a / 4u][a % 4u];
        let n = p.in_dims[a / 4u][a % 4u];
        let c = rem % od;
        rem = rem / od;
        strides[a] = stride;
        stride = stride * n;
        sizes[a] = i32(n);
        let s = source(c, a);
        let f = floor(s);
        let t = s - f;
        if (t == 0.0) {
            base[a] = i32(f);
            taps[a] = 1u;
            weights[a] = vec4<f32>(1.0, 0.0, 0.0, 0.0);
        } else {
            base[a] = i32(f) - 1;
            taps[a] = 4u;
            var w = cubic_weights(t);
            if (EXCLUDE_OUTSIDE) {
                for (var k = 0; k < 4; k = k + 1) {
                    let at = i32(f) - 1 + k;
                    if (at < 0 || at >= i32(n)) {
                        w[k] = 0.0;
                    }
                }
                w = w / (w.x + w.y + w.z + w.w);
            }
            weights[a] = w;
        }
        total = total * taps[a];
    }
    var acc = 0.0;
    for (var t = 0u; t < total; t = t + 1u) {
        var r = t;
        var w = 1.0;
        var off = 0u;
        for (var a = 0u; a < rank; a = a + 1u) {
            let k = r % taps[a];
            r = r / taps[a];
            w = w * weights[a][k];
            let at = clamp(base[a] + i32(k), 0, sizes[a] - 1);
            off = off + u32(at) * strides[a];
        }
        if (w != 0.0) {
            acc = acc + w * f32(x[off]);
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let rank = p.n.y;
    var lo: array<u32, 8>;
    var hi: array<u32, 8>;
    var frac: array<f32, 8>;
    var strides: array<u32, 8>;
    var rem = i;
    var stride = 1u;
    var outside = false;
    for (var d = rank; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let od = p.out_dims[a / 4u][a % 4u];
        let n = p.in_dims[a / 4u][a % 4u];
        let c = rem % od;
        rem = rem / od;
        strides[a] = stride;
        stride = stride * n;
        let s = source(c, a);
        if (COORD == 4u && (s < 0.0 || s > f32(n) - 1.0)) {
            outside = true;
        }
        if (MODE == 0u) {
            let k = u32(clamp(nearest(s), 0.0, f32(n) - 1.0));
            lo[a] = k;
            hi[a] = k;
            frac[a] = 0.0;
        } else {
            let cs = clamp(s, 0.0, f32(n) - 1.0);
            let f = floor(cs);
            lo[a] = u32(f);
            hi[a] = min(u32(f) + 1u, n - 1u);
            frac[a] = cs - f;
        }
    }
    if (outside) {
        y[i] = T(bitcast<f32>(p.n.z));
        return;
    }
    if (MODE == 2u) {
        y[i] = T(cubic(i));
        return;
    }
    if (MODE == 0u) {
        var off = 0u;
        for (var a = 0u; a < rank; a = a + 1u) {
            off = off + lo[a] * strides[a];
        }
        y[i] = x[off];
        return;
    }
    var acc = 0.0;
    let taps = 1u << rank;
    for (var t = 0u; t < taps; t = t + 1u) {
        var w = 1.0;
        var off = 0u;
        for (var a = 0u; a < rank; a = a + 1u) {
            if (((t >> a) & 1u) == 1u) {
                w = w * frac[a];
                off = off + hi[a] * strides[a];
            } else {
                w = w * (1.0 - frac[a]);
                off = off + lo[a] * strides[a];
            }
        }
        if (w != 0.0) {
            acc = acc + w * f32(x[off]);
        }
    }
    y[i] = T(acc);
}

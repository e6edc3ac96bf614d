// GridSample, one invocation per output element [image, channel, row, column], in f32 and in the CPU
// kernel's order (`cpu/grid_sample.rs`, onnxruntime's `grid_sample.cc`): denormalise, round (nearest),
// fold an out-of-range position back (border: clamp, reflection: mirror), then read the neighbours
// through the padding rule.

alias T = f32;

// 0 linear, 1 nearest, 2 cubic
const MODE: u32 = 0u;
// 0 zeros, 1 border, 2 reflection
const PADDING: u32 = 0u;
const ALIGN_CORNERS: bool = false;

struct Params {
    // x: total, y: channels, z: height, w: width
    n: vec4<u32>,
    // x: output height, y: output width
    m: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> grid: array<T>;
@group(0) @binding(3) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;
// cubic convolution's A (onnxruntime's and PyTorch's)
const CUBIC_A: f32 = -0.75;

fn denormalize(v: f32, len: u32) -> f32 {
    let l = f32(len);
    if (ALIGN_CORNERS) {
        return (v + 1.0) / 2.0 * (l - 1.0);
    }
    return ((v + 1.0) * l - 1.0) / 2.0;
}

// v mirrored into [lo, hi] as many times as it takes
fn reflect(v: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if (range <= 0.0) {
        return lo;
    }
    if (v < lo) {
        let d = lo - v;
        let k = i32(d / range);
        let r = d - f32(k) * range;
        if (k % 2 == 0) {
            return lo + r;
        }
        return hi - r;
    }
    if (v > hi) {
        let d = v - hi;
        let k = i32(d / range);
        let r = d - f32(k) * range;
        if (k % 2 == 0) {
            return hi - r;
        }
        return lo + r;
    }
    return v;
}

// (x_min, y_min, x_max, y_max)
fn bounds() -> vec4<f32> {
    let w = f32(p.n.w);
    let h = f32(p.n.z);
    if (ALIGN_CORNERS) {
        return vec4<f32>(0.0, 0.0, w - 1.0, h - 1.0);
    }
    return vec4<f32>(-0.5, -0.5, w - 0.5, h - 0.5);
}

// the pixel at (r, c) of the plane starting at `base`, through the padding rule
fn pixel(base: u32, r_in: i32, c_in: i32) -> f32 {
    let h = i32(p.n.z);
    let w = i32(p.n.w);
    var r = r_in;
    var c = c_in;
    if (PADDING == 0u) {
        if (r < 0 || r >= h || c < 0 || c >= w) {
            return 0.0;
        }
    } else if (PADDING == 1u) {
        r = clamp(r, 0, h - 1);
        c = clamp(c, 0, w - 1);
    } else {
        let bd = bounds();
        r = i32(reflect(f32(r), bd.y, bd.w));
        c = i32(reflect(f32(c), bd.x, bd.z));
    }
    r = clamp(r, 0, max(h - 1, 0));
    c = clamp(c, 0, max(w - 1, 0));
    return f32(x[base + u32(r) * p.n.w + u32(c)]);
}

fn cubic_coeffs(t: f32) -> vec4<f32> {
    let a = CUBIC_A;
    let v = abs(t);
    return vec4<f32>(
        ((a * (v + 1.0) - 5.0 * a) * (v + 1.0) + 8.0 * a) * (v + 1.0) - 4.0 * a,
        ((a + 2.0) * v - (a + 3.0)) * v * v + 1.0,
        ((a + 2.0) * (1.0 - v) - (a + 3.0)) * (1.0 - v) * (1.0 - v) + 1.0,
        ((a * (2.0 - v) - 5.0 * a) * (2.0 - v) + 8.0 * a) * (2.0 - v) - 4.0 * a,
    );
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let ho = p.m.x;
    let wo = p.m.y;
    let channels = p.n.y;
    let ox = i % wo;
    let oy = (i / wo) % ho;
    let ch = (i / (wo * ho)) % channels;
    let b = i / (wo * ho * channels);
    let g = ((b * ho + oy) * wo + ox) * 2u;
    var sx = denormalize(f32(grid[g]), p.n.w);
    var sy = denormalize(f32(grid[g + 1u]), p.n.z);
    if (MODE == 1u) {
        // WGSL's round is ties-to-even, as C's nearbyint
        sx = round(sx);
        sy = round(sy);
    }
    let bd = bounds();
    if (sx < bd.x || sx > bd.z || sy < bd.y || sy > bd.w) {
        if (PADDING == 1u) {
            sx = clamp(sx, 0.0, f32(p.n.w) - 1.0);
            sy = clamp(sy, 0.0, f32(p.n.z) - 1.0);
        } else if (PADDING == 2u) {
            sx = reflect(sx, bd.x, bd.z);
            sy = reflect(sy, bd.y, bd.w);
        }
    }
    let base = (b * channels + ch) * p.n.z * p.n.w;
    if (MODE == 1u) {
        y[i] = T(pixel(base, i32(sy), i32(sx)));
        return;
    }
    if (MODE == 0u) {
        let x1 = floor(sx);
        let y1 = floor(sy);
        let x2 = x1 + 1.0;
        let y2 = y1 + 1.0;
        let p11 = pixel(base, i32(y1), i32(x1));
        let p12 = pixel(base, i32(y1), i32(x2));
        let p21 = pixel(base, i32(y2), i32(x1));
        let p22 = pixel(base, i32(y2), i32(x2));
        let dx2 = x2 - sx;
        let dx1 = sx - x1;
        let dy2 = y2 - sy;
        let dy1 = sy - y1;
        y[i] = T(dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22));
        return;
    }
    let x0 = floor(sx) - 1.0;
    let y0 = floor(sy) - 1.0;
    let cx = cubic_coeffs(sx - x0 - 1.0);
    let cy = cubic_coeffs(sy - y0 - 1.0);
    var v = vec4<f32>(0.0);
    for (var r = 0; r < 4; r = r + 1) {
        let row = i32(y0) + r;
        let c0 = i32(x0);
        v[r] = cx.x * pixel(base, row, c0) + cx.y * pixel(base, row, c0 + 1) + cx.z * pixel(base, row, c0 + 2)
            + cx.w * pixel(base, row, c0 + 3);
    }
    y[i] = T(cy.x * v.x + cy.y * v.y + cy.z * v.z + cy.w * v.w);
}

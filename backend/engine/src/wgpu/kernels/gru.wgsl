// One GRU time step of one direction, one invocation per (batch, hidden unit); gate order z, r, h. The input
// projection X * W^T + Wb is precomputed (xw). With linear_before_reset the reset gate multiplies
// (h_prev * Rh^T + Rbh) and is computed here; without it, (r . h_prev) * Rh^T needs r for every unit, so
// the reset pass (gru_reset.wgsl) wrote rh = r . h_prev first. Batches past their length carry their state.

const HAS_LENS: bool = false;
const LINEAR_BEFORE_RESET: bool = false;
const HAS_CLIP: bool = false;
const BATCH_MAJOR: bool = false;

struct Params {
    // x: batch, y: hidden, z: seq length, w: step
    dims: vec4<u32>,
    // x: direction index, y: directions, z: reverse (0/1), w: clip (f32 bits)
    dir: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xw: array<f32>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read> rb: array<f32>;
@group(0) @binding(4) var<storage, read> lens: array<i32>;
@group(0) @binding(5) var<storage, read> h_in: array<f32>;
@group(0) @binding(6) var<storage, read> rh: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;
@group(0) @binding(8) var<storage, read_write> h_out: array<f32>;

// @begin act
fn act_f(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}
fn act_g(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}
// @end act

const WG: u32 = 64u;

fn pre(v: f32) -> f32 {
    if (HAS_CLIP) {
        let cl = bitcast<f32>(p.dir.w);
        return clamp(v, -cl, cl);
    }
    return v;
}

// sum_q v[b, q] * R[d, gate * H + j, q]
fn recur(src_is_rh: bool, gate: u32, b: u32, j: u32) -> f32 {
    let H = p.dims.y;
    let rrow = (p.dir.x * 3u * H + gate * H + j) * H;
    var acc = 0.0;
    for (var q = 0u; q < H; q = q + 1u) {
        var v: f32;
        if (src_is_rh) {
            v = rh[b * H + q];
        } else {
            v = h_in[b * H + q];
        }
        acc = acc + v * r[rrow + q];
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let B = p.dims.x;
    let H = p.dims.y;
    let T = p.dims.z;
    let s = p.dims.w;
    let d = p.dir.x;
    let D = p.dir.y;
    let u = gid.x;
    if (u >= B * H) {
        return;
    }
    let b = u / H;
    let j = u % H;
    var len = T;
    if (HAS_LENS) {
        len = u32(clamp(lens[b], 0, i32(T)));
    }
    var t = s;
    if (s < len && p.dir.z == 1u) {
        t = len - 1u - s;
    }
    var yi = ((t * D + d) * B + b) * H + j;
    if (BATCH_MAJOR) {
        yi = ((b * T + t) * D + d) * H + j;
    }
    if (s >= len) {
        y[yi] = 0.0;
        h_out[u] = h_in[u];
        return;
    }
    var row = t * B + b;
    if (BATCH_MAJOR) {
        row = b * T + t;
    }
    let xw_base = (d * B * T + row) * 3u * H;
    let rb_base = d * 3u * H;
    let z = act_f(pre(xw[xw_base + j] + recur(false, 0u, b, j) + rb[rb_base + j]));
    var hh: f32;
    if (LINEAR_BEFORE_RESET) {
        let rg = act_f(pre(xw[xw_base + H + j] + recur(false, 1u, b, j) + rb[rb_base + H + j]));
        hh = act_g(pre(xw[xw_base + 2u * H + j] + rg * (recur(false, 2u, b, j) + rb[rb_base + 2u * H + j])));
    } else {
        hh = act_g(pre(xw[xw_base + 2u * H + j] + recur(true, 2u, b, j) + rb[rb_base + 2u * H + j]));
    }
    let h = (1.0 - z) * hh + z * h_in[u];
    y[yi] = h;
    h_out[u] = h;
}

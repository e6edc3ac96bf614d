// One LSTM time step of one direction, one invocation per (batch, hidden unit). The input projection
// X * W^T + Wb + Rb was computed for every step by one matmul beforehand (xw); this step adds the recurrent
// product h_prev * R^T, applies peepholes, clip and the activations, and writes Y[t], the next hidden state
// (ping-pong buffers: h_in is read, h_out written) and the cell state (in place: each invocation owns one).
// Batches past their sequence length write zeros to Y and carry their state.

const HAS_LENS: bool = false;
const HAS_PEEP: bool = false;
const HAS_CLIP: bool = false;
const INPUT_FORGET: bool = false;
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
@group(0) @binding(3) var<storage, read> peep: array<f32>;
@group(0) @binding(4) var<storage, read> lens: array<i32>;
@group(0) @binding(5) var<storage, read> h_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read_write> h_out: array<f32>;
@group(0) @binding(8) var<storage, read_write> c: array<f32>;

// @begin act
fn act_f(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}
fn act_g(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}
fn act_h(x: f32) -> f32 {
    return tanh(clamp(x, -15.0, 15.0));
}
// @end act

const WG: u32 = 64u;

fn y_index(t: u32, b: u32, j: u32) -> u32 {
    let B = p.dims.x;
    let H = p.dims.y;
    let D = p.dir.y;
    if (BATCH_MAJOR) {
        return ((b * p.dims.z + t) * D + p.dir.x) * H + j;
    }
    return ((t * D + p.dir.x) * B + b) * H + j;
}

fn pre(v: f32) -> f32 {
    if (HAS_CLIP) {
        let cl = bitcast<f32>(p.dir.w);
        return clamp(v, -cl, cl);
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let B = p.dims.x;
    let H = p.dims.y;
    let T = p.dims.z;
    let s = p.dims.w;
    let d = p.dir.x;
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
    if (s >= len) {
        y[y_index(s, b, j)] = 0.0;
        h_out[u] = h_in[u];
        return;
    }
    var t = s;
    if (p.dir.z == 1u) {
        t = len - 1u - s;
    }
    var row = t * B + b;
    if (BATCH_MAJOR) {
        row = b * T + t;
    }
    let xw_base = (d * B * T + row) * 4u * H;
    var g: array<f32, 4>;
    for (var k = 0u; k < 4u; k = k + 1u) {
        var acc = xw[xw_base + k * H + j];
        let rrow = (d * 4u * H + k * H + j) * H;
        for (var q = 0u; q < H; q = q + 1u) {
            acc = acc + h_in[b * H + q] * r[rrow + q];
        }
        g[k] = acc;
    }
    let c_prev = c[u];
    var gi = g[0];
    var go = g[1];
    var gf = g[2];
    if (HAS_PEEP) {
        gi = gi + peep[d * 3u * H + j] * c_prev;
        gf = gf + peep[d * 3u * H + 2u * H + j] * c_prev;
    }
    let i = act_f(pre(gi));
    var f = act_f(pre(gf));
    if (INPUT_FORGET) {
        f = 1.0 - i;
    }
    let ct = act_g(pre(g[3]));
    let c_new = f * c_prev + i * ct;
    if (HAS_PEEP) {
        go = go + peep[d * 3u * H + H + j] * c_new;
    }
    let o = act_f(pre(go));
    let h = o * act_h(c_new);
    y[y_index(t, b, j)] = h;
    h_out[u] = h;
    c[u] = c_new;
}

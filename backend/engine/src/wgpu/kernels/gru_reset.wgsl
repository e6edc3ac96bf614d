// The GRU reset pass (without linear_before_reset): rh[b, j] = r[b, j] * h_prev[b, j], where
// r = f(xw_r + h_prev * Rr^T + Rbr). gru.wgsl reads rh in the same step.

const HAS_LENS: bool = false;
const HAS_CLIP: bool = false;
const BATCH_MAJOR: bool = false;

struct Params {
    dims: vec4<u32>,
    dir: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xw: array<f32>;
@group(0) @binding(2) var<storage, read> r: array<f32>;
@group(0) @binding(3) var<storage, read> rb: array<f32>;
@group(0) @binding(4) var<storage, read> lens: array<i32>;
@group(0) @binding(5) var<storage, read> h_in: array<f32>;
@group(0) @binding(6) var<storage, read_write> rh: array<f32>;

// @begin act
fn act_f(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}
// @end act

const WG: u32 = 64u;

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
        rh[u] = 0.0;
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
    let xw_base = (d * B * T + row) * 3u * H;
    let rrow = (d * 3u * H + H + j) * H;
    var acc = xw[xw_base + H + j] + rb[d * 3u * H + H + j];
    for (var q = 0u; q < H; q = q + 1u) {
        acc = acc + h_in[b * H + q] * r[rrow + q];
    }
    if (HAS_CLIP) {
        let cl = bitcast<f32>(p.dir.w);
        acc = clamp(acc, -cl, cl);
    }
    rh[u] = act_f(acc) * h_in[u];
}

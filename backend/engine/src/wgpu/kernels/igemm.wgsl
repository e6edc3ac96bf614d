// MatMulInteger: y[b, i, j] = sum_k (a[b, i, k] - a_zp) * (b[b, k, j] - b_zp) in i32, one invocation per output
// element. a's zero point is per-tensor or per-row, b's per-tensor or per-column; batch dims broadcast through
// strides (0 where an operand has size 1). Products are exact; the sum wraps as onnxruntime's does.

struct Params {
    // x: m, y: k, z: n, w: output elements
    d: vec4<u32>,
    // x: a zero point per row (1) or per tensor (0), y: b zero point per column (1) or per tensor (0),
    // z: batch rank (<= 4)
    f: vec4<u32>,
    // the output's batch dims, and a's and b's matrix strides per batch dim
    bdims: vec4<u32>,
    astr: vec4<u32>,
    bstr: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<i32>;
@group(0) @binding(2) var<storage, read> b: array<i32>;
@group(0) @binding(3) var<storage, read> a_zp: array<i32>;
@group(0) @binding(4) var<storage, read> b_zp: array<i32>;
@group(0) @binding(5) var<storage, read_write> y: array<i32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * WG;
    if (idx >= p.d.w) {
        return;
    }
    let m = p.d.x;
    let k = p.d.y;
    let n = p.d.z;
    let j = idx % n;
    let i = (idx / n) % m;
    var batch = idx / (m * n);
    var am = 0u;
    var bm = 0u;
    for (var d = p.f.z; d > 0u; d = d - 1u) {
        let c = batch % p.bdims[d - 1u];
        batch = batch / p.bdims[d - 1u];
        am = am + c * p.astr[d - 1u];
        bm = bm + c * p.bstr[d - 1u];
    }
    let za = a_zp[select(0u, i, p.f.x == 1u)];
    let zb = b_zp[select(0u, j, p.f.y == 1u)];
    let a0 = am * m * k + i * k;
    let b0 = bm * k * n + j;
    var acc = 0i;
    for (var t = 0u; t < k; t = t + 1u) {
        acc = acc + (a[a0 + t] - za) * (b[b0 + t * n] - zb);
    }
    y[idx] = acc;
}

// The requantization of QLinearMatMul and QLinearConv: y = clamp(round((acc + bias) * s1 * s2 / ys) + y_zp,
// lo, hi), the multiplier computed in f32 as onnxruntime does ((s1 * s2) / ys). s1 is indexed by
// (i / inner1) % dim1 (a's row, or x's single scale), s2 by (i / inner2) % dim2 (b's column or the output
// channel), bias by (i / inner3) % dim3 (the same, but never per-tensor); a dim of 1 means per-tensor.

alias TS = f32;

struct Params {
    // x: elements, y: dim1, z: inner1, w: has bias (1)
    n: vec4<u32>,
    // x: dim2, y: inner2, z: dim3, w: inner3
    m: vec4<u32>,
    // x: lo, y: hi
    r: vec4<i32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> s1: array<TS>;
@group(0) @binding(3) var<storage, read> s2: array<TS>;
@group(0) @binding(4) var<storage, read> ys: array<TS>;
@group(0) @binding(5) var<storage, read> y_zp: array<i32>;
@group(0) @binding(6) var<storage, read> bias: array<i32>;
@group(0) @binding(7) var<storage, read_write> y: array<i32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let k1 = (i / p.n.z) % p.n.y;
    let k2 = (i / p.m.y) % p.m.x;
    var v = acc[i];
    if (p.n.w == 1u) {
        v = v + bias[(i / p.m.w) % p.m.z];
    }
    let mult = (f32(s1[k1]) * f32(s2[k2])) / f32(ys[0]);
    let q = round(f32(v) * mult) + f32(y_zp[0]);
    y[i] = i32(clamp(q, f32(p.r.x), f32(p.r.y)));
}

// Softmax / LogSoftmax along one axis of an [outer, L, inner] view: one workgroup per (outer, inner) row,
// maximum and sum of exponentials reduced through workgroup memory.

alias T = f32;

const LOG: bool = false;
const WG: u32 = 64u;

struct Params {
    // x: rows (outer * inner), y: L, z: inner
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

var<workgroup> part: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.n.x) {
        return;
    }
    let L = p.n.y;
    let inner = p.n.z;
    let base = (row / inner) * L * inner + row % inner;
    var m = -3.402823e38;
    for (var i = lid; i < L; i = i + WG) {
        m = max(m, f32(x[base + i * inner]));
    }
    part[lid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            part[lid] = max(part[lid], part[lid + s]);
        }
        workgroupBarrier();
    }
    m = part[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var i = lid; i < L; i = i + WG) {
        sum = sum + exp(f32(x[base + i * inner]) - m);
    }
    part[lid] = sum;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            part[lid] = part[lid] + part[lid + s];
        }
        workgroupBarrier();
    }
    sum = part[0];
    for (var i = lid; i < L; i = i + WG) {
        let v = f32(x[base + i * inner]) - m;
        if (LOG) {
            y[base + i * inner] = T(v - log(sum));
        } else {
            y[base + i * inner] = T(exp(v) / sum);
        }
    }
}

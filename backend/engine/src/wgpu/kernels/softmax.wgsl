// Softmax / LogSoftmax along one axis of an [outer, L, inner] view. With COOP one workgroup reduces each
// (outer, inner) row through workgroup memory (few, long rows); otherwise one invocation loops over its row
// (many or short rows, where barriers would cost more than they save).

alias T = f32;

const LOG: bool = false;
const COOP: bool = true;
// Zeros for a row whose softmax is NaN: every value −∞, or a NaN or +∞ among them.
const NAN_ROWS_TO_ZERO: bool = false;
const WG: u32 = 64u;

struct Params {
    // x: rows (outer * inner), y: L, z: inner
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

var<workgroup> part: array<f32, WG>;

// Whether a row with largest value `m` and sum of exponentials `total` has a NaN softmax: nothing summed
// (every value −∞) or a NaN sum (a NaN or +∞ among the values). Read from the bits: a WGSL compiler may
// assume floats are never NaN or infinite.
fn nan_row(m: f32, total: f32) -> bool {
    let t = bitcast<u32>(total) & 0x7fffffffu;
    let mm = bitcast<u32>(m) & 0x7fffffffu;
    return t == 0u || t >= 0x7f800000u || mm >= 0x7f800000u;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let L = p.n.y;
    let inner = p.n.z;
    if (!COOP) {
        let r = (wid.x + wid.y * nwg.x) * WG + lid;
        if (r >= p.n.x) {
            return;
        }
        let b = (r / inner) * L * inner + r % inner;
        var mx = -3.402823e38;
        for (var i = 0u; i < L; i = i + 1u) {
            mx = max(mx, f32(x[b + i * inner]));
        }
        var total = 0.0;
        for (var i = 0u; i < L; i = i + 1u) {
            total = total + exp(f32(x[b + i * inner]) - mx);
        }
        let zero = NAN_ROWS_TO_ZERO && nan_row(mx, total);
        for (var i = 0u; i < L; i = i + 1u) {
            let v = f32(x[b + i * inner]) - mx;
            if (zero) {
                y[b + i * inner] = T(0.0);
            } else if (LOG) {
                y[b + i * inner] = T(v - log(total));
            } else {
                y[b + i * inner] = T(exp(v) / total);
            }
        }
        return;
    }
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.n.x) {
        return;
    }
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
    let zero = NAN_ROWS_TO_ZERO && nan_row(m, sum);
    for (var i = lid; i < L; i = i + WG) {
        let v = f32(x[base + i * inner]) - m;
        if (zero) {
            y[base + i * inner] = T(0.0);
        } else if (LOG) {
            y[base + i * inner] = T(v - log(sum));
        } else {
            y[base + i * inner] = T(exp(v) / sum);
        }
    }
}

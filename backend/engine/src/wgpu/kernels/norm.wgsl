// LayerNormalization and InstanceNormalization over rows of L elements: mean and variance (two passes, for
// accuracy), then y = (x - mean) * inv_std * scale + bias. With COOP one workgroup reduces each row through
// workgroup memory (few, long rows); otherwise one invocation loops over its row.
// LayerNorm indexes scale/bias by position in the row; InstanceNorm by the row's channel (row % C).
// Optional outputs: mean and inverse standard deviation per row.

alias T = f32;
alias TS = f32;

const INSTANCE: bool = false;
const HAS_BIAS: bool = true;
const STATS: bool = false;
const COOP: bool = true;
const WG: u32 = 64u;

struct Params {
    // x: rows, y: L, z: channels (InstanceNorm), w: epsilon (f32 bits)
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> scale: array<TS>;
@group(0) @binding(3) var<storage, read> bias: array<TS>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;

var<workgroup> part: array<f32, WG>;

fn reduce_sum(v: f32, lid: u32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            part[lid] = part[lid] + part[lid + s];
        }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return r;
}

// Writes the normalised row, elements first, first + step, ...
fn write_row(row: u32, base: u32, mean: f32, inv: f32, first: u32, step: u32) {
    let L = p.n.y;
    let ch = row % max(p.n.z, 1u);
    for (var i = first; i < L; i = i + step) {
        var k = i;
        if (INSTANCE) {
            k = ch;
        }
        var v = (f32(x[base + i]) - mean) * inv * f32(scale[k]);
        if (HAS_BIAS) {
            v = v + f32(bias[k]);
        }
        y[base + i] = T(v);
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let L = p.n.y;
    if (!COOP) {
        let r = (wid.x + wid.y * nwg.x) * WG + lid;
        if (r >= p.n.x) {
            return;
        }
        let b = r * L;
        var s1 = 0.0;
        for (var i = 0u; i < L; i = i + 1u) {
            s1 = s1 + f32(x[b + i]);
        }
        let m = s1 / f32(L);
        var q1 = 0.0;
        for (var i = 0u; i < L; i = i + 1u) {
            let d = f32(x[b + i]) - m;
            q1 = q1 + d * d;
        }
        let iv = 1.0 / sqrt(q1 / f32(L) + bitcast<f32>(p.n.w));
        write_row(r, b, m, iv, 0u, 1u);
        if (STATS) {
            stats[r] = m;
            stats[p.n.x + r] = iv;
        }
        return;
    }
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.n.x) {
        return;
    }
    let base = row * L;
    var s = 0.0;
    for (var i = lid; i < L; i = i + WG) {
        s = s + f32(x[base + i]);
    }
    let mean = reduce_sum(s, lid) / f32(L);
    var q = 0.0;
    for (var i = lid; i < L; i = i + WG) {
        let d = f32(x[base + i]) - mean;
        q = q + d * d;
    }
    let inv = 1.0 / sqrt(reduce_sum(q, lid) / f32(L) + bitcast<f32>(p.n.w));
    write_row(row, base, mean, inv, lid, WG);
    if (STATS && lid == 0u) {
        stats[row] = mean;
        stats[p.n.x + row] = inv;
    }
}

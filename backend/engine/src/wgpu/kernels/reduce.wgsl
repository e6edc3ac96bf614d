// Reductions over any set of axes. Output element o has a base offset from its coordinates in the kept dims;
// the reduced index r (0..R) adds an offset from its coordinates in the reduced dims. With COOP a workgroup of
// 64 invocations reduces one output element through workgroup memory; otherwise one invocation loops over R
// (for small R).

alias T = f32;
alias TO = f32;

// 0 sum, 1 mean, 2 max, 3 min, 4 prod, 5 l1, 6 l2, 7 sum_square, 8 log_sum, 9 log_sum_exp
const OP: u32 = 0u;
const COOP: bool = true;
const WG: u32 = 64u;

struct Params {
    // x: outputs, y: R, z: kept rank, w: reduced rank
    n: vec4<u32>,
    kept_dims: array<vec4<u32>, 2>,
    kept_strides: array<vec4<u32>, 2>,
    red_dims: array<vec4<u32>, 2>,
    red_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<TO>;

var<workgroup> part: array<f32, WG>;

fn base_of(o: u32) -> u32 {
    var rem = o;
    var off = 0u;
    for (var d = p.n.z; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let dim = p.kept_dims[a / 4u][a % 4u];
        off = off + (rem % dim) * p.kept_strides[a / 4u][a % 4u];
        rem = rem / dim;
    }
    return off;
}

fn offset_of(r: u32) -> u32 {
    var rem = r;
    var off = 0u;
    for (var d = p.n.w; d > 0u; d = d - 1u) {
        let a = d - 1u;
        let dim = p.red_dims[a / 4u][a % 4u];
        off = off + (rem % dim) * p.red_strides[a / 4u][a % 4u];
        rem = rem / dim;
    }
    return off;
}

fn init(pass_: u32) -> f32 {
    if (pass_ == 0u && (OP == 2u || OP == 9u)) {
        return -3.402823e38;
    }
    if (OP == 3u) {
        return 3.402823e38;
    }
    if (OP == 4u) {
        return 1.0;
    }
    return 0.0;
}

fn nan() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

fn is_nan(v: f32) -> bool {
    let b = bitcast<u32>(v);
    return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u;
}

// pass 0 of log_sum_exp finds the maximum; pass 1 sums exp(v - m).
fn term(v: f32, pass_: u32, m: f32) -> f32 {
    if (OP == 5u) {
        return abs(v);
    }
    if (OP == 6u || OP == 7u) {
        return v * v;
    }
    if (OP == 9u && pass_ == 1u) {
        return exp(v - m);
    }
    return v;
}

fn combine(a: f32, b: f32, pass_: u32) -> f32 {
    if (OP == 2u || (OP == 9u && pass_ == 0u)) {
        if (is_nan(a) || is_nan(b)) {
            return nan();
        }
        return max(a, b);
    }
    if (OP == 3u) {
        if (is_nan(a) || is_nan(b)) {
            return nan();
        }
        return min(a, b);
    }
    if (OP == 4u) {
        return a * b;
    }
    return a + b;
}

fn finish(v: f32, m: f32) -> f32 {
    let count = f32(p.n.y);
    if (OP == 1u) {
        return v / count;
    }
    if (OP == 6u) {
        return sqrt(v);
    }
    if (OP == 8u) {
        return log(v);
    }
    if (OP == 9u) {
        return m + log(v);
    }
    return v;
}

fn passes() -> u32 {
    if (OP == 9u) {
        return 2u;
    }
    return 1u;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let R = p.n.y;
    if (COOP) {
        let o = wid.x + wid.y * nwg.x;
        if (o >= p.n.x) {
            return;
        }
        let base = base_of(o);
        var m = 0.0;
        var acc = 0.0;
        for (var pass_ = 0u; pass_ < passes(); pass_ = pass_ + 1u) {
            acc = init(pass_);
            for (var r = lid; r < R; r = r + WG) {
                acc = combine(acc, term(f32(x[base + offset_of(r)]), pass_, m), pass_);
            }
            part[lid] = acc;
            workgroupBarrier();
            for (var s = WG / 2u; s > 0u; s = s / 2u) {
                if (lid < s) {
                    part[lid] = combine(part[lid], part[lid + s], pass_);
                }
                workgroupBarrier();
            }
            acc = part[0];
            workgroupBarrier();
            if (pass_ == 0u) {
                m = acc;
            }
        }
        if (lid == 0u) {
            y[o] = TO(finish(acc, m));
        }
    } else {
        let o = (wid.x + wid.y * nwg.x) * WG + lid;
        if (o >= p.n.x) {
            return;
        }
        let base = base_of(o);
        var m = 0.0;
        var acc = 0.0;
        for (var pass_ = 0u; pass_ < passes(); pass_ = pass_ + 1u) {
            acc = init(pass_);
            for (var r = 0u; r < R; r = r + 1u) {
                acc = combine(acc, term(f32(x[base + offset_of(r)]), pass_, m), pass_);
            }
            if (pass_ == 0u) {
                m = acc;
            }
        }
        y[o] = TO(finish(acc, m));
    }
}

// MaxPool and AveragePool over up to three spatial dims, one invocation per output element. MaxPool can
// also write the flat index of each maximum (row-major, or column-major over the spatial dims).

alias T = f32;

const MAX: bool = true;
const COUNT_PAD: bool = false;
const INDICES: bool = false;
const COL_MAJOR: bool = false;

struct Params {
    // x: total outputs, y: channels (N * C), z: rank of spatial dims (1..3)
    n: vec4<u32>,
    in_sp: vec4<u32>,
    out_sp: vec4<u32>,
    ker: vec4<u32>,
    strides: vec4<u32>,
    pads: vec4<u32>,
    pads_end: vec4<u32>,
    dilations: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;
@group(0) @binding(3) var<storage, read_write> idx: array<i32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = gid.x + gid.y * nwg.x * WG;
    if (o >= p.n.x) {
        return;
    }
    let osp = p.out_sp.w;
    let s = o % osp;
    let ch = o / osp;
    let ow = s % p.out_sp.z;
    let oh = (s / p.out_sp.z) % p.out_sp.y;
    let od = s / (p.out_sp.z * p.out_sp.y);
    var best = -3.402823e38;
    var best_at = 0u;
    var found = false;
    var sum = 0.0;
    var count = 0u;
    for (var kd = 0u; kd < p.ker.x; kd = kd + 1u) {
        let id = i32(od * p.strides.x + kd * p.dilations.x) - i32(p.pads.x);
        for (var kh = 0u; kh < p.ker.y; kh = kh + 1u) {
            let ih = i32(oh * p.strides.y + kh * p.dilations.y) - i32(p.pads.y);
            for (var kw = 0u; kw < p.ker.z; kw = kw + 1u) {
                let iw = i32(ow * p.strides.z + kw * p.dilations.z) - i32(p.pads.z);
                let inside = id >= 0 && ih >= 0 && iw >= 0 && u32(id) < p.in_sp.x && u32(ih) < p.in_sp.y
                    && u32(iw) < p.in_sp.z;
                if (!MAX && COUNT_PAD) {
                    // Taps inside the padded extent count even when they read padding.
                    let in_pad = id < i32(p.in_sp.x + p.pads_end.x) && ih < i32(p.in_sp.y + p.pads_end.y)
                        && iw < i32(p.in_sp.z + p.pads_end.z);
                    if (in_pad) {
                        count = count + 1u;
                    }
                }
                if (!inside) {
                    continue;
                }
                let sp = (u32(id) * p.in_sp.y + u32(ih)) * p.in_sp.z + u32(iw);
                let v = f32(x[ch * p.in_sp.w + sp]);
                if (MAX) {
                    if (!found || v > best) {
                        best = v;
                        found = true;
                        if (COL_MAJOR) {
                            best_at = ch * p.in_sp.w + (u32(iw) * p.in_sp.y + u32(ih)) * p.in_sp.x + u32(id);
                        } else {
                            best_at = ch * p.in_sp.w + sp;
                        }
                    }
                } else {
                    sum = sum + v;
                    if (!COUNT_PAD) {
                        count = count + 1u;
                    }
                }
            }
        }
    }
    if (MAX) {
        y[o] = T(best);
        if (INDICES) {
            idx[o] = i32(best_at);
        }
    } else {
        y[o] = T(sum / f32(max(count, 1u)));
    }
}

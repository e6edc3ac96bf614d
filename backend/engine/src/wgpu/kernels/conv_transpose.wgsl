// Transposed convolution, one invocation per output element: y[n, oc, o] = sum over input channels c of the
// group and kernel taps k with o = i * stride - pad + k * dilation of x[n, c, i] * w[c, oc % (OC/groups), k].

alias TX = f32;
alias TW = f32;
alias TO = f32;

struct Params {
    // x: N, y: C, z: OC, w: groups
    nc: vec4<u32>,
    in_sp: vec4<u32>,
    out_sp: vec4<u32>,
    ker: vec4<u32>,
    strides: vec4<u32>,
    pads: vec4<u32>,
    dilations: vec4<u32>,
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<TX>;
@group(0) @binding(2) var<storage, read> w: array<TW>;
@group(0) @binding(3) var<storage, read_write> out: array<TO>;

// @begin ew
fn ew_out(acc: f32, oidx: u32) -> TO {
    return TO(acc);
}
// @end ew

const WG: u32 = 64u;

// Input index along one axis for output o and tap k, or -1 when no input maps there.
fn src(o: u32, k: u32, stride: u32, pad: u32, dil: u32, size: u32) -> i32 {
    let t = i32(o + pad) - i32(k * dil);
    if (t < 0 || (t % i32(stride)) != 0) {
        return -1;
    }
    let i = t / i32(stride);
    if (u32(i) >= size) {
        return -1;
    }
    return i;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = gid.x + gid.y * nwg.x * WG;
    if (o >= p.n.x) {
        return;
    }
    let osp = p.out_sp.w;
    let s = o % osp;
    let oc = (o / osp) % p.nc.z;
    let n = o / (osp * p.nc.z);
    let ow = s % p.out_sp.z;
    let oh = (s / p.out_sp.z) % p.out_sp.y;
    let od = s / (p.out_sp.z * p.out_sp.y);
    let groups = p.nc.w;
    let cg = p.nc.y / groups;
    let mg = p.nc.z / groups;
    let g = oc / mg;
    let ocg = oc % mg;
    var acc = 0.0;
    for (var kd = 0u; kd < p.ker.x; kd = kd + 1u) {
        let id = src(od, kd, p.strides.x, p.pads.x, p.dilations.x, p.in_sp.x);
        if (id < 0) {
            continue;
        }
        for (var kh = 0u; kh < p.ker.y; kh = kh + 1u) {
            let ih = src(oh, kh, p.strides.y, p.pads.y, p.dilations.y, p.in_sp.y);
            if (ih < 0) {
                continue;
            }
            for (var kw = 0u; kw < p.ker.z; kw = kw + 1u) {
                let iw = src(ow, kw, p.strides.z, p.pads.z, p.dilations.z, p.in_sp.z);
                if (iw < 0) {
                    continue;
                }
                let sp = (u32(id) * p.in_sp.y + u32(ih)) * p.in_sp.z + u32(iw);
                let tap = (kd * p.ker.y + kh) * p.ker.z + kw;
                for (var c = 0u; c < cg; c = c + 1u) {
                    let ci = g * cg + c;
                    acc = acc + f32(x[(n * p.nc.y + ci) * p.in_sp.w + sp]) * f32(w[(ci * mg + ocg) * p.ker.w + tap]);
                }
            }
        }
    }
    out[o] = ew_out(acc, o);
}

// Direct convolution, one invocation per output element: the path for depthwise convolutions (each output
// channel reads C/groups input channels, usually one) where a GEMM tile would be mostly empty.

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
    // x: total outputs
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
    let g = oc / (p.nc.z / groups);
    var acc = 0.0;
    for (var c = 0u; c < cg; c = c + 1u) {
        let ch = n * p.nc.y + g * cg + c;
        let wbase = (oc * cg + c) * p.ker.w;
        for (var kd = 0u; kd < p.ker.x; kd = kd + 1u) {
            let id = i32(od * p.strides.x + kd * p.dilations.x) - i32(p.pads.x);
            if (id < 0 || u32(id) >= p.in_sp.x) {
                continue;
            }
            for (var kh = 0u; kh < p.ker.y; kh = kh + 1u) {
                let ih = i32(oh * p.strides.y + kh * p.dilations.y) - i32(p.pads.y);
                if (ih < 0 || u32(ih) >= p.in_sp.y) {
                    continue;
                }
                let row = ((ch * p.in_sp.x + u32(id)) * p.in_sp.y + u32(ih)) * p.in_sp.z;
                let wrow = wbase + (kd * p.ker.y + kh) * p.ker.z;
                for (var kw = 0u; kw < p.ker.z; kw = kw + 1u) {
                    let iw = i32(ow * p.strides.z + kw * p.dilations.z) - i32(p.pads.z);
                    if (iw < 0 || u32(iw) >= p.in_sp.z) {
                        continue;
                    }
                    acc = acc + f32(x[row + u32(iw)]) * f32(w[wrow + kw]);
                }
            }
        }
    }
    out[o] = ew_out(acc, o);
}

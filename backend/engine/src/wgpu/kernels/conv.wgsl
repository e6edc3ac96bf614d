// Convolution as an implicit GEMM, per group: C[m, col] = sum_k W[m, k] * im2col(X)[k, col], where m is an
// output channel of the group, col an output pixel (n, od, oh, ow) and k an input tap (c, kd, kh, kw).
// Up to three spatial dims (1-D and 2-D convolutions have leading spatial dims of 1). The tiling is the
// matmul kernel's: a 16x16 workgroup computes (16*RM) channels x 64 pixels, RM x 4 accumulators per
// invocation; the im2col gather happens while filling the workgroup tile of X.

alias TX = f32;
alias TW = f32;
alias TO = f32;

const RM: u32 = 4u;
const TK: u32 = 16u;
const TM: u32 = 16u * RM;
const TN: u32 = 64u;

struct Params {
    // x: N, y: C (input channels), z: OC, w: groups
    nc: vec4<u32>,
    // input spatial dims (d, h, w), w: input spatial size
    in_sp: vec4<u32>,
    // output spatial dims, w: output spatial size
    out_sp: vec4<u32>,
    // kernel dims, w: kernel size
    ker: vec4<u32>,
    strides: vec4<u32>,
    pads: vec4<u32>,
    dilations: vec4<u32>,
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

var<workgroup> a_tile: array<f32, 1024>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

fn gather(c: u32, k: u32, col: u32, n_cols: u32, cin_base: u32) -> f32 {
    if (col >= n_cols) {
        return 0.0;
    }
    let osp = p.out_sp.w;
    let n = col / osp;
    let s = col % osp;
    let ow = s % p.out_sp.z;
    let oh = (s / p.out_sp.z) % p.out_sp.y;
    let od = s / (p.out_sp.z * p.out_sp.y);
    let kw = k % p.ker.z;
    let kh = (k / p.ker.z) % p.ker.y;
    let kd = k / (p.ker.z * p.ker.y);
    let id = i32(od * p.strides.x + kd * p.dilations.x) - i32(p.pads.x);
    let ih = i32(oh * p.strides.y + kh * p.dilations.y) - i32(p.pads.y);
    let iw = i32(ow * p.strides.z + kw * p.dilations.z) - i32(p.pads.z);
    if (id < 0 || ih < 0 || iw < 0 || u32(id) >= p.in_sp.x || u32(ih) >= p.in_sp.y || u32(iw) >= p.in_sp.z) {
        return 0.0;
    }
    let ch = n * p.nc.y + cin_base + c;
    return f32(x[(ch * p.in_sp.x + u32(id)) * p.in_sp.y * p.in_sp.z + u32(ih) * p.in_sp.z + u32(iw)]);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let groups = p.nc.w;
    let g = wid.z;
    let M = p.nc.z / groups;
    let cg = p.nc.y / groups;
    let ksz = p.ker.w;
    let K = cg * ksz;
    let n_cols = p.nc.x * p.out_sp.w;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    let tid = lid.y * 16u + lid.x;
    var acc: array<vec4<f32>, RM>;
    for (var i = 0u; i < RM; i = i + 1u) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        for (var e = tid; e < TM * TK; e = e + 256u) {
            let k = e % TK;
            let m = e / TK;
            let gm = row0 + m;
            let gk = k0 + k;
            var v = 0.0;
            if (gm < M && gk < K) {
                v = f32(w[(g * M + gm) * K + gk]);
            }
            a_tile[k * TM + m] = v;
        }
        for (var e = tid; e < TK * 16u; e = e + 256u) {
            let k = e / 16u;
            let n4 = e % 16u;
            let gk = k0 + k;
            var v = vec4<f32>(0.0);
            if (gk < K) {
                let c = gk / ksz;
                let kk = gk % ksz;
                for (var j = 0u; j < 4u; j = j + 1u) {
                    v[j] = gather(c, kk, col0 + n4 * 4u + j, n_cols, g * cg);
                }
            }
            b_tile[e] = v;
        }
        workgroupBarrier();
        for (var k = 0u; k < TK; k = k + 1u) {
            let bv = b_tile[k * 16u + lid.x];
            for (var i = 0u; i < RM; i = i + 1u) {
                acc[i] = acc[i] + a_tile[k * TM + lid.y * RM + i] * bv;
            }
        }
        workgroupBarrier();
    }
    let osp = p.out_sp.w;
    for (var i = 0u; i < RM; i = i + 1u) {
        let r = row0 + lid.y * RM + i;
        if (r < M) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                let col = col0 + lid.x * 4u + j;
                if (col < n_cols) {
                    let n = col / osp;
                    let s = col % osp;
                    let o = (n * p.nc.z + g * M + r) * osp + s;
                    out[o] = ew_out(acc[i][j], o);
                }
            }
        }
    }
}

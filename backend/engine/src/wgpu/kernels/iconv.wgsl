// ConvInteger over two spatial dims (1-D convolutions come as height 1): y[n, m, oy, ox] =
// sum over the group's channels and the kernel of (x - x_zp) * (w - w_zp[m]) in i32, padding reading x_zp
// (contributing 0). One invocation per output element.

struct Params {
    // x: output elements, y: input channels, z: output channels, w: groups
    n: vec4<u32>,
    // x: input height, y: input width, z: output height, w: output width
    s: vec4<u32>,
    // x: kernel height, y: kernel width, z: stride y, w: stride x
    k: vec4<u32>,
    // x: pad top, y: pad left, z: dilation y, w: dilation x
    g: vec4<u32>,
    // x: w zero point per output channel (1) or per tensor (0)
    f: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<i32>;
@group(0) @binding(2) var<storage, read> w: array<i32>;
@group(0) @binding(3) var<storage, read> x_zp: array<i32>;
@group(0) @binding(4) var<storage, read> w_zp: array<i32>;
@group(0) @binding(5) var<storage, read_write> y: array<i32>;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * WG;
    if (idx >= p.n.x) {
        return;
    }
    let c = p.n.y;
    let mm = p.n.z;
    let cg = c / p.n.w;
    let mg = mm / p.n.w;
    let ih = p.s.x;
    let iw = p.s.y;
    let oh = p.s.z;
    let ow = p.s.w;
    let ox = idx % ow;
    let oy = (idx / ow) % oh;
    let m = (idx / (ow * oh)) % mm;
    let img = idx / (ow * oh * mm);
    let grp = m / mg;
    let zx = x_zp[0];
    let zw = w_zp[select(0u, m, p.f.x == 1u)];
    var acc = 0i;
    for (var ci = 0u; ci < cg; ci = ci + 1u) {
        let xc = (img * c + grp * cg + ci) * ih * iw;
        let wc = (m * cg + ci) * p.k.x * p.k.y;
        for (var ky = 0u; ky < p.k.x; ky = ky + 1u) {
            let yy = i32(oy * p.k.z + ky * p.g.z) - i32(p.g.x);
            if (yy < 0 || yy >= i32(ih)) {
                continue;
            }
            for (var kx = 0u; kx < p.k.y; kx = kx + 1u) {
                let xx = i32(ox * p.k.w + kx * p.g.w) - i32(p.g.y);
                if (xx < 0 || xx >= i32(iw)) {
                    continue;
                }
                acc = acc + (x[xc + u32(yy) * iw + u32(xx)] - zx) * (w[wc + ky * p.k.y + kx] - zw);
            }
        }
    }
    y[idx] = acc;
}

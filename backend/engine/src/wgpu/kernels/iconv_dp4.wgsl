// ConvInteger over two spatial dims with packed dot products (after idot_tile.wgsl), as an implicit GEMM per
// group: y[img, g*mg + r, oy, ox] = sum over k = (c, ky, kx) of (w[g*mg + r, k] - w_zp[r]) * (x[img, g*cg + c,
// oy*sy + ky*dy - pt, ox*sx + kx*dx - pl] - x_zp), for 8-bit codes. The filters are the rows (a), the image's
// im2col columns (b) are gathered while filling the workgroup tile; padding reads x_zp (contributing 0).
// Workgroups: x over tiles of output positions (all images), y over tiles of a group's channels, z over groups.

struct Params {
    // x: output channels per group (mg), y: K = cg * kh * kw, z: output positions (images * oh * ow),
    // w: input channels per group (cg)
    d: vec4<u32>,
    // x: w zero point per output channel (1) or per tensor (0), y: 0,
    // z: w's code offset, w: x's (128 for uint8 codes, 0 for int8)
    f: vec4<u32>,
    // x: input channels, y: input height, z: input width, w: output channels
    c: vec4<u32>,
    // x: output height, y: output width, z: kernel height, w: kernel width
    s: vec4<u32>,
    // x: stride y, y: stride x, z: pad top, w: pad left
    t: vec4<u32>,
    // x: dilation y, y: dilation x
    u: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<i32>;
@group(0) @binding(2) var<storage, read> x: array<i32>;
@group(0) @binding(3) var<storage, read> w_zp: array<i32>;
@group(0) @binding(4) var<storage, read> x_zp: array<i32>;
@group(0) @binding(5) var<storage, read_write> y: array<i32>;

// The code of im2col row kk (a tap) at output position col of group g, or x's zero point in the padding.
fn tap(g: u32, kk: u32, col: u32, zx: i32) -> i32 {
    let oh = p.s.x;
    let ow = p.s.y;
    let kh = p.s.z;
    let kw = p.s.w;
    let ih = p.c.y;
    let iw = p.c.z;
    let kx = kk % kw;
    let ky = (kk / kw) % kh;
    let ci = kk / (kw * kh);
    let ox = col % ow;
    let oy = (col / ow) % oh;
    let img = col / (ow * oh);
    let yy = i32(oy * p.t.x + ky * p.u.x) - i32(p.t.z);
    let xx = i32(ox * p.t.y + kx * p.u.y) - i32(p.t.w);
    if (yy < 0 || yy >= i32(ih) || xx < 0 || xx >= i32(iw)) {
        return zx;
    }
    let channel = img * p.c.x + g * p.d.w + ci;
    return x[(channel * ih + u32(yy)) * iw + u32(xx)];
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let mg = p.d.x;
    let k = p.d.y;
    let cols = p.d.z;
    let off_w = i32(p.f.z);
    let off_x = i32(p.f.w);
    let zx = x_zp[0];
    let g = wid.z;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    let tid = lid.y * 16u + lid.x;
    clear_sums();
    for (var k0 = 0u; k0 < k; k0 = k0 + TK4 * 4u) {
        for (var e = tid; e < TM * TK4; e = e + 256u) {
            let r = row0 + e / TK4;
            let kk = k0 + (e % TK4) * 4u;
            var v = vec4<i32>(0);
            if (r < mg) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = w[(g * mg + r) * k + kk + q] - off_w;
                    }
                }
            }
            a_tile[(e % TK4) * TM + e / TK4] = pack_codes(v);
        }
        for (var e = tid; e < TK4 * TN; e = e + 256u) {
            let col = col0 + e % TN;
            let kk = k0 + (e / TN) * 4u;
            var v = vec4<i32>(0);
            if (col < cols) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = tap(g, kk + q, col, zx) - off_x;
                    }
                }
            }
            b_tile[e] = pack_codes(v);
        }
        workgroupBarrier();
        multiply_tiles(lid);
        workgroupBarrier();
    }
    let plane = p.s.x * p.s.y;
    let db = off_x - zx;
    for (var i = 0u; i < RM; i = i + 1u) {
        let r = row0 + lid.y * RM + i;
        if (r < mg) {
            let channel = g * mg + r;
            let da = off_w - w_zp[select(0u, channel, p.f.x == 1u)];
            for (var j = 0u; j < 4u; j = j + 1u) {
                let col = col0 + lid.x * 4u + j;
                if (col < cols) {
                    let img = col / plane;
                    y[(img * p.c.w + channel) * plane + col % plane] = corrected(i, j, k, da, db);
                }
            }
        }
    }
}

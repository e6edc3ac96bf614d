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

// This workgroup's group, x's zero point, and the codes' offsets into signed bytes.
var<private> g: u32;
var<private> zx: i32;
var<private> off_w: i32;
var<private> off_x: i32;

// Row r of the group's filters, tap kk.
fn a_code(r: u32, kk: u32) -> i32 {
    return w[(g * p.d.x + r) * p.d.y + kk] - off_w;
}

// The code of im2col row kk (a tap) at output position col, or x's zero point in the padding.
fn b_code(kk: u32, col: u32) -> i32 {
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
        return zx - off_x;
    }
    let channel = img * p.c.x + g * p.d.w + ci;
    return x[(channel * ih + u32(yy)) * iw + u32(xx)] - off_x;
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let mg = p.d.x;
    let k = p.d.y;
    let cols = p.d.z;
    off_w = i32(p.f.z);
    off_x = i32(p.f.w);
    zx = x_zp[0];
    g = wid.z;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    tile_products(lid, row0, mg, col0, cols, k);
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

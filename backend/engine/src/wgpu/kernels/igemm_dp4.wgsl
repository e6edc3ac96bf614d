// MatMulInteger with packed dot products (after idot_tile.wgsl): y[b, i, j] = sum_k (a[b, i, k] - a_zp) *
// (b[b, k, j] - b_zp) in i32, for 8-bit codes. a's zero point is per tensor or per row, b's per tensor or per
// column; batch dims broadcast through strides (0 where an operand has size 1). Workgroups: x over column
// tiles, y over row tiles, z over batches.

struct Params {
    // x: m, y: k, z: n, w: batch rank (<= 4)
    d: vec4<u32>,
    // x: a zero point per row (1) or per tensor (0), y: b zero point per column (1) or per tensor (0),
    // z: a's code offset, w: b's (128 for uint8 codes, 0 for int8)
    f: vec4<u32>,
    // the output's batch dims, and a's and b's matrix strides per batch dim
    bdims: vec4<u32>,
    astr: vec4<u32>,
    bstr: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<i32>;
@group(0) @binding(2) var<storage, read> b: array<i32>;
@group(0) @binding(3) var<storage, read> a_zp: array<i32>;
@group(0) @binding(4) var<storage, read> b_zp: array<i32>;
@group(0) @binding(5) var<storage, read_write> y: array<i32>;

// This workgroup's matrices: their offsets in a and b, and the codes' offsets into signed bytes.
var<private> a_base: u32;
var<private> b_base: u32;
var<private> off_a: i32;
var<private> off_b: i32;

fn a_code(r: u32, kk: u32) -> i32 {
    return a[a_base + r * p.d.y + kk] - off_a;
}

fn b_code(kk: u32, col: u32) -> i32 {
    return b[b_base + kk * p.d.z + col] - off_b;
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = p.d.x;
    let k = p.d.y;
    let n = p.d.z;
    off_a = i32(p.f.z);
    off_b = i32(p.f.w);
    var batch = wid.z;
    var am = 0u;
    var bm = 0u;
    for (var d = p.d.w; d > 0u; d = d - 1u) {
        let c = batch % p.bdims[d - 1u];
        batch = batch / p.bdims[d - 1u];
        am = am + c * p.astr[d - 1u];
        bm = bm + c * p.bstr[d - 1u];
    }
    a_base = am * m * k;
    b_base = bm * k * n;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    tile_products(lid, row0, m, col0, n, k);
    let out_base = wid.z * m * n;
    for (var i = 0u; i < RM; i = i + 1u) {
        let r = row0 + lid.y * RM + i;
        if (r < m) {
            let da = off_a - a_zp[select(0u, r, p.f.x == 1u)];
            for (var j = 0u; j < 4u; j = j + 1u) {
                let c = col0 + lid.x * 4u + j;
                if (c < n) {
                    let db = off_b - b_zp[select(0u, c, p.f.y == 1u)];
                    y[out_base + r * n + c] = corrected(i, j, k, da, db);
                }
            }
        }
    }
}

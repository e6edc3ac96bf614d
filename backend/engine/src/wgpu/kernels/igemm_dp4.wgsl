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

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = p.d.x;
    let k = p.d.y;
    let n = p.d.z;
    let off_a = i32(p.f.z);
    let off_b = i32(p.f.w);
    var batch = wid.z;
    var am = 0u;
    var bm = 0u;
    for (var d = p.d.w; d > 0u; d = d - 1u) {
        let c = batch % p.bdims[d - 1u];
        batch = batch / p.bdims[d - 1u];
        am = am + c * p.astr[d - 1u];
        bm = bm + c * p.bstr[d - 1u];
    }
    let a_base = am * m * k;
    let b_base = bm * k * n;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    let tid = lid.y * 16u + lid.x;
    clear_sums();
    for (var k0 = 0u; k0 < k; k0 = k0 + TK4 * 4u) {
        for (var e = tid; e < TM * TK4; e = e + 256u) {
            let r = row0 + e / TK4;
            let kk = k0 + (e % TK4) * 4u;
            var v = vec4<i32>(0);
            if (r < m) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = a[a_base + r * k + kk + q] - off_a;
                    }
                }
            }
            a_tile[(e % TK4) * TM + e / TK4] = pack_codes(v);
        }
        for (var e = tid; e < TK4 * TN; e = e + 256u) {
            let col = col0 + e % TN;
            let kk = k0 + (e / TN) * 4u;
            var v = vec4<i32>(0);
            if (col < n) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = b[b_base + (kk + q) * n + col] - off_b;
                    }
                }
            }
            b_tile[e] = pack_codes(v);
        }
        workgroupBarrier();
        multiply_tiles(lid);
        workgroupBarrier();
    }
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

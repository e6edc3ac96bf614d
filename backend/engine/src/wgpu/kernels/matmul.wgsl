// Batched matrix product C[b] = op(A[b]) x op(B[b]) with a fused element-wise epilogue.
// Tiled and register-blocked: a 16x16 workgroup computes a (16*RM) x 64 tile of C; each invocation keeps an
// RM x 4 block of accumulators in registers (one vec4 per row) and reads B from workgroup memory as vec4.
// K advances in steps of TK through workgroup tiles. Batch dims broadcast through per-operand strides.

alias TA = f32;
alias TB = f32;
alias TO = f32;

// Rows per invocation (1, 2 or 4); columns per invocation are always 4 (one vec4).
const RM: u32 = 4u;
const TK: u32 = 16u;
const TRANS_A: bool = false;
const TRANS_B: bool = false;
const TM: u32 = 16u * RM;
const TN: u32 = 64u;

struct Params {
    // x: M, y: N, z: K, w: batch rank
    mnk: vec4<u32>,
    // output batch dims (row-major, up to 8)
    batch_dims: array<vec4<u32>, 2>,
    // element strides of A's and B's batch dims (0 where broadcast)
    a_strides: array<vec4<u32>, 2>,
    b_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<TA>;
@group(0) @binding(2) var<storage, read> b: array<TB>;
@group(0) @binding(3) var<storage, read_write> out: array<TO>;

// @begin ew
fn ew_out(acc: f32, oidx: u32) -> TO {
    return TO(acc);
}
// @end ew

var<workgroup> a_tile: array<f32, 1024>;
var<workgroup> b_tile: array<vec4<f32>, 256>;

fn at8(v: array<vec4<u32>, 2>, i: u32) -> u32 {
    return v[i / 4u][i % 4u];
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = p.mnk.x;
    let N = p.mnk.y;
    let K = p.mnk.z;
    let batch = wid.z;
    var a_base = 0u;
    var b_base = 0u;
    var rem = batch;
    for (var d = p.mnk.w; d > 0u; d = d - 1u) {
        let dim = at8(p.batch_dims, d - 1u);
        let c = rem % dim;
        rem = rem / dim;
        a_base = a_base + c * at8(p.a_strides, d - 1u);
        b_base = b_base + c * at8(p.b_strides, d - 1u);
    }
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    let tid = lid.y * 16u + lid.x;
    var acc: array<vec4<f32>, RM>;
    for (var i = 0u; i < RM; i = i + 1u) {
        acc[i] = vec4<f32>(0.0);
    }
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        // A tile: TM x TK values stored k-major (a_tile[k * TM + m]).
        for (var e = tid; e < TM * TK; e = e + 256u) {
            var m: u32;
            var k: u32;
            if (TRANS_A) {
                m = e % TM;
                k = e / TM;
            } else {
                k = e % TK;
                m = e / TK;
            }
            let gm = row0 + m;
            let gk = k0 + k;
            var v = 0.0;
            if (gm < M && gk < K) {
                if (TRANS_A) {
                    v = f32(a[a_base + gk * M + gm]);
                } else {
                    v = f32(a[a_base + gm * K + gk]);
                }
            }
            a_tile[k * TM + m] = v;
        }
        // B tile: TK x TN values as vec4 along N (b_tile[k * 16 + n / 4]).
        for (var e = tid; e < TK * 16u; e = e + 256u) {
            let k = e / 16u;
            let n4 = e % 16u;
            let gk = k0 + k;
            var v = vec4<f32>(0.0);
            if (gk < K) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    let gn = col0 + n4 * 4u + j;
                    if (gn < N) {
                        if (TRANS_B) {
                            v[j] = f32(b[b_base + gn * K + gk]);
                        } else {
                            v[j] = f32(b[b_base + gk * N + gn]);
                        }
                    }
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
    let out_base = batch * M * N;
    for (var i = 0u; i < RM; i = i + 1u) {
        let r = row0 + lid.y * RM + i;
        if (r < M) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                let c = col0 + lid.x * 4u + j;
                if (c < N) {
                    let o = out_base + r * N + c;
                    out[o] = ew_out(acc[i][j], o);
                }
            }
        }
    }
}

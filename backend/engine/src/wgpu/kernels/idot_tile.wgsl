// The tiled product shared by the packed integer kernels (igemm_dp4.wgsl, iconv_dp4.wgsl), which follow this
// file and define how an operand's codes are read: `a_code(row, kk)` and `b_code(kk, col)`, each returning
// the code already offset into a signed byte. A 16x16 workgroup computes a (16*RM) x 64 tile of i32 sums;
// each invocation keeps RM x 4 of them. K advances 16 codes at a time, held in workgroup memory as packed
// words of four signed bytes (pack4xI8), and every product of four codes is one dot4I8Packed: the adapter's
// packed dot-product instruction where it has one (naga emits SPIR-V SDot, Metal's and DX12's equivalents),
// a shift-and-multiply sequence elsewhere.
//
// The codes are packed as a' = a - off_a (off 128 for uint8, 0 for int8: both become signed bytes), so
//   sum (a - za)(b - zb) = sum a'b' + db * sum a' + da * sum b' + K * da * db,   da = off_a - za, db = off_b - zb.
// Codes past K pack as 0 and add nothing to any sum. All arithmetic is i32 and wraps, so the result is the
// direct sum's to the last bit, wrapping included.

// Rows per invocation (1, 2 or 4); columns per invocation are always 4.
const RM: u32 = 4u;
const TM: u32 = 16u * RM;
const TN: u32 = 64u;
// packed words of K per step (16 codes)
const TK4: u32 = 4u;
const ONES: u32 = 0x01010101u;

// a_tile[k4 * TM + row]: four codes of a row; b_tile[k4 * TN + col]: four codes of a column.
var<workgroup> a_tile: array<u32, 256>;
var<workgroup> b_tile: array<u32, 256>;

var<private> acc: array<vec4<i32>, RM>;
var<private> row_sum: array<i32, RM>;
var<private> col_sum: vec4<i32>;

// The sums of this invocation's block of the tile at rows row0.., columns col0.. of a rows x k by k x cols
// product, into acc, row_sum and col_sum.
fn tile_products(lid: vec3<u32>, row0: u32, rows: u32, col0: u32, cols: u32, k: u32) {
    let tid = lid.y * 16u + lid.x;
    for (var i = 0u; i < RM; i = i + 1u) {
        acc[i] = vec4<i32>(0);
        row_sum[i] = 0;
    }
    col_sum = vec4<i32>(0);
    for (var k0 = 0u; k0 < k; k0 = k0 + TK4 * 4u) {
        for (var e = tid; e < TM * TK4; e = e + 256u) {
            let r = row0 + e / TK4;
            let kk = k0 + (e % TK4) * 4u;
            var v = vec4<i32>(0);
            if (r < rows) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = a_code(r, kk + q);
                    }
                }
            }
            a_tile[(e % TK4) * TM + e / TK4] = pack4xI8(v);
        }
        for (var e = tid; e < TK4 * TN; e = e + 256u) {
            let col = col0 + e % TN;
            let kk = k0 + (e / TN) * 4u;
            var v = vec4<i32>(0);
            if (col < cols) {
                for (var q = 0u; q < 4u; q = q + 1u) {
                    if (kk + q < k) {
                        v[q] = b_code(kk + q, col);
                    }
                }
            }
            b_tile[e] = pack4xI8(v);
        }
        workgroupBarrier();
        multiply_tiles(lid);
        workgroupBarrier();
    }
}

// Adds the products of the tiles in workgroup memory (between two barriers).
fn multiply_tiles(lid: vec3<u32>) {
    for (var k4 = 0u; k4 < TK4; k4 = k4 + 1u) {
        let c0 = k4 * TN + lid.x * 4u;
        let b = vec4<u32>(b_tile[c0], b_tile[c0 + 1u], b_tile[c0 + 2u], b_tile[c0 + 3u]);
        col_sum = col_sum + vec4<i32>(
            dot4I8Packed(ONES, b.x),
            dot4I8Packed(ONES, b.y),
            dot4I8Packed(ONES, b.z),
            dot4I8Packed(ONES, b.w),
        );
        for (var i = 0u; i < RM; i = i + 1u) {
            let a = a_tile[k4 * TM + lid.y * RM + i];
            row_sum[i] = row_sum[i] + dot4I8Packed(a, ONES);
            acc[i] = acc[i] + vec4<i32>(
                dot4I8Packed(a, b.x),
                dot4I8Packed(a, b.y),
                dot4I8Packed(a, b.z),
                dot4I8Packed(a, b.w),
            );
        }
    }
}

// The zero-point-corrected sum of row i, column j of this invocation's block.
fn corrected(i: u32, j: u32, k: u32, da: i32, db: i32) -> i32 {
    return acc[i][j] + db * row_sum[i] + da * col_sum[j] + i32(k) * da * db;
}

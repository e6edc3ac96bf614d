// ScatterND, one invocation per output element: the element starts as data's and takes, in order of
// the index tuples, every update whose tuple addresses its slice. Data is viewed as [rows, slice], the
// rows being data's first K dims (K = the tuple length) and the slice the dims after them; tuple t's
// update for the element is updates[t * slice + the element's position in its slice]. The loop visits
// every tuple, so duplicates combine in the CPU executor's order. The work is the output size times
// the number of tuples: correct everywhere, not tuned. Negative indices count from the end;
// out-of-range tuples address nothing (the CPU executor refuses them).

alias T = f32;

// 0: replace, 1: add, 2: mul, 3: max, 4: min
const REDUCTION: u32 = 0u;

struct Params {
    // x: total, y: tuple length K, z: tuple count, w: slice length
    n: vec4<u32>,
    // data's first K dims
    dims: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> data: array<T>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read> updates: array<T>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

fn combine(a: T, b: T) -> T {
    if (REDUCTION == 1u) {
        return a + b;
    }
    if (REDUCTION == 2u) {
        return a * b;
    }
    if (REDUCTION == 3u) {
        return max(a, b);
    }
    if (REDUCTION == 4u) {
        return min(a, b);
    }
    return b;
}

// The row tuple t addresses, or -1 when one of its indices lies outside its dim.
fn row_of(t: u32) -> i32 {
    let k = p.n.y;
    var row = 0;
    for (var j = 0u; j < k; j = j + 1u) {
        let dim = i32(p.dims[j / 4u][j % 4u]);
        var v = indices[t * k + j];
        if (v < 0) {
            v = v + dim;
        }
        if (v < 0 || v >= dim) {
            return -1;
        }
        row = row * dim + v;
    }
    return row;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let slice = p.n.w;
    let row = i32(i / slice);
    let at = i % slice;
    var acc = data[i];
    for (var t = 0u; t < p.n.z; t = t + 1u) {
        if (row_of(t) == row) {
            acc = combine(acc, updates[t * slice + at]);
        }
    }
    y[i] = acc;
}

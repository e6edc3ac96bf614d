// QuantizeLinear and DequantizeLinear with a per-tensor, per-axis or blocked scale and zero point.
// Quantize: y = clamp(round(x / s) + zp, lo, hi); WGSL's round() rounds half to even, as ONNX asks.
// Dequantize: y = (x - zp) * s. Integer tensors live on the device as i32.

alias TX = f32;
alias TS = f32;
alias TY = i32;

// true: QuantizeLinear, false: DequantizeLinear
const QUANTIZE: bool = true;

struct Params {
    // x: elements, y: layout (0 per-tensor, 1 per-axis, 2 blocked), z: axis dim, w: inner (elements after the axis)
    n: vec4<u32>,
    // x: block size, y: lo, z: hi (quantize only)
    q: vec4<i32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<TX>;
@group(0) @binding(2) var<storage, read> s: array<TS>;
@group(0) @binding(3) var<storage, read> zp: array<i32>;
@group(0) @binding(4) var<storage, read_write> y: array<TY>;

const WG: u32 = 64u;

// The index of the scale and zero point of element i.
fn param(i: u32) -> u32 {
    if (p.n.y == 0u) {
        return 0u;
    }
    let dim = p.n.z;
    let inner = p.n.w;
    let r = i / inner;
    if (p.n.y == 1u) {
        return r % dim;
    }
    let block = u32(p.q.x);
    let blocks = (dim + block - 1u) / block;
    return ((r / dim) * blocks + (r % dim) / block) * inner + i % inner;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let k = param(i);
    if (QUANTIZE) {
        let v = round(f32(x[i]) / f32(s[k])) + f32(zp[k]);
        y[i] = TY(clamp(v, f32(p.q.y), f32(p.q.z)));
    } else {
        y[i] = TY(f32(i32(x[i]) - zp[k]) * f32(s[k]));
    }
}

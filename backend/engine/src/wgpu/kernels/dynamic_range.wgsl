// DynamicQuantizeLinear's parameters: one workgroup scans x for its range (extended to include 0) and
// writes the UINT8 scale and zero point; quant.wgsl then quantizes with them.
// scale = (max - min) / 255 (1 when max == min, as onnxruntime), zero point = round(clamp(-min / scale, 0, 255)).

struct Params {
    // x: elements
    n: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> zero_point: array<i32>;

const WG: u32 = 64u;

var<workgroup> lo: array<f32, WG>;
var<workgroup> hi: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    var a = 0.0;
    var b = 0.0;
    for (var i = t; i < p.n.x; i = i + WG) {
        a = min(a, x[i]);
        b = max(b, x[i]);
    }
    lo[t] = a;
    hi[t] = b;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        if (t < half) {
            lo[t] = min(lo[t], lo[t + half]);
            hi[t] = max(hi[t], hi[t + half]);
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        var s = 1.0;
        if (hi[0] != lo[0]) {
            s = (hi[0] - lo[0]) / 255.0;
        }
        scale[0] = s;
        zero_point[0] = i32(round(clamp(-lo[0] / s, 0.0, 255.0)));
    }
}

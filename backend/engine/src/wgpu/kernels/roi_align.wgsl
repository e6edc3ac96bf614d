// RoiAlign, one invocation per output element [roi, channel, row, column]: the bin's grid of bilinear
// samples, averaged or (max mode) the largest weighted neighbour, in f32 and in the CPU kernel's
// order (`cpu/roi_align.rs`, onnxruntime's loops). A batch index outside the input gives 0 (the CPU
// executor refuses it).

alias T = f32;

const MAX_MODE: bool = false;
const HALF_PIXEL: bool = true;

struct Params {
    // x: total, y: channels, z: height, w: width
    n: vec4<u32>,
    // x: output height, y: output width, z: sampling ratio (0: adaptive), w: images
    m: vec4<u32>,
    // x: spatial scale
    f: vec4<f32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> rois: array<T>;
@group(0) @binding(3) var<storage, read> batch: array<i32>;
@group(0) @binding(4) var<storage, read_write> y: array<T>;

const WG: u32 = 64u;

// The four weighted neighbours of the sample at (yy, xx) in the plane starting at `base`; all 0 when
// the sample lies more than a pixel outside.
fn weighted(base: u32, yy: f32, xx: f32) -> vec4<f32> {
    let h = p.n.z;
    let w = p.n.w;
    if (yy < -1.0 || yy > f32(h) || xx < -1.0 || xx > f32(w) || h == 0u || w == 0u) {
        return vec4<f32>(0.0);
    }
    var sy = max(yy, 0.0);
    var sx = max(xx, 0.0);
    var y_low = u32(sy);
    var x_low = u32(sx);
    var y_high = y_low + 1u;
    var x_high = x_low + 1u;
    if (y_low >= h - 1u) {
        y_low = h - 1u;
        y_high = h - 1u;
        sy = f32(y_low);
    }
    if (x_low >= w - 1u) {
        x_low = w - 1u;
        x_high = w - 1u;
        sx = f32(x_low);
    }
    let ly = sy - f32(y_low);
    let lx = sx - f32(x_low);
    let hy = 1.0 - ly;
    let hx = 1.0 - lx;
    return vec4<f32>(
        hy * hx * f32(x[base + y_low * w + x_low]),
        hy * lx * f32(x[base + y_low * w + x_high]),
        ly * hx * f32(x[base + y_high * w + x_low]),
        ly * lx * f32(x[base + y_high * w + x_high]),
    );
}

fn grid(ratio: u32, size: f32, bins: u32) -> u32 {
    if (ratio > 0u) {
        return ratio;
    }
    return u32(max(ceil(size / f32(bins)), 0.0));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p.n.x) {
        return;
    }
    let oh = p.m.x;
    let ow = p.m.y;
    let channels = p.n.y;
    let pw = i % ow;
    let ph = (i / ow) % oh;
    let c = (i / (ow * oh)) % channels;
    let r = i / (ow * oh * channels);
    let b = batch[r];
    if (b < 0 || u32(b) >= p.m.w) {
        y[i] = T(0.0);
        return;
    }
    var offset = 0.0;
    if (HALF_PIXEL) {
        offset = 0.5;
    }
    let scale = p.f.x;
    let start_w = f32(rois[r * 4u]) * scale - offset;
    let start_h = f32(rois[r * 4u + 1u]) * scale - offset;
    var roi_w = f32(rois[r * 4u + 2u]) * scale - offset - start_w;
    var roi_h = f32(rois[r * 4u + 3u]) * scale - offset - start_h;
    if (!HALF_PIXEL) {
        roi_w = max(roi_w, 1.0);
        roi_h = max(roi_h, 1.0);
    }
    let bin_h = roi_h / f32(oh);
    let bin_w = roi_w / f32(ow);
    let grid_h = grid(p.m.z, roi_h, oh);
    let grid_w = grid(p.m.z, roi_w, ow);
    let base = (u32(b) * channels + c) * p.n.z * p.n.w;
    var sum = 0.0;
    var best = 0.0;
    var seen = false;
    for (var iy = 0u; iy < grid_h; iy = iy + 1u) {
        let yy = start_h + f32(ph) * bin_h + (f32(iy) + 0.5) * bin_h / f32(grid_h);
        for (var ix = 0u; ix < grid_w; ix = ix + 1u) {
            let xx = start_w + f32(pw) * bin_w + (f32(ix) + 0.5) * bin_w / f32(grid_w);
            let v = weighted(base, yy, xx);
            if (MAX_MODE) {
                let m = max(max(max(v.x, v.y), v.z), v.w);
                if (!seen || m > best) {
                    best = m;
                }
                seen = true;
            } else {
                sum = sum + (v.x + v.y + v.z + v.w);
            }
        }
    }
    if (MAX_MODE) {
        y[i] = T(best);
    } else {
        y[i] = T(sum / f32(max(grid_h * grid_w, 1u)));
    }
}

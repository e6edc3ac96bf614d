//! The operator set of the IR: one enum, plain data, typed attributes.
//!
//! Conventions shared by every variant:
//! - Inputs and outputs are positional, as listed in each variant's doc (`Node::inputs`,
//!   `Node::outputs`); an absent optional input or output is `None`.
//! - In an [`crate::ir::Graph`] (before specialisation) an op may still take *parameter inputs*
//!   (Reshape's `shape`, Slice's `starts`…) as ONNX does. In a [`crate::ir::ConcreteGraph`] every
//!   parameter has been resolved into the variant's fields or into the output value's shape, and the
//!   node's inputs are only the *data inputs* listed under "Concrete". Executors only see concrete form.
//! - Axes in a concrete graph are non-negative and normalised against the input rank.
//! - Broadcasting is numpy/ONNX multidirectional broadcasting unless stated otherwise.

use crate::tensor::DataType;

/// Element-wise functions of one input. Float functions apply to F16/BF16/F32/F64 (computed in f32 or
/// f64); `Abs`, `Neg`, `Relu`, `Clip`, `Sign`-like functions also apply to integers; `Not` to BOOL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// |x|
    Abs,
    /// -x
    Neg,
    /// sqrt(x)
    Sqrt,
    /// e^x
    Exp,
    /// ln(x)
    Log,
    /// 1/x
    Reciprocal,
    /// floor(x)
    Floor,
    /// ceil(x)
    Ceil,
    /// round half to even
    Round,
    /// erf(x)
    Erf,
    /// tanh(x)
    Tanh,
    /// 1/(1+e^-x)
    Sigmoid,
    /// sin(x)
    Sin,
    /// cos(x)
    Cos,
    /// logical not (BOOL)
    Not,
    /// max(x, 0)
    Relu,
    /// x if x ≥ 0 else alpha·x
    LeakyRelu {
        /// slope for negative x
        alpha: f32,
    },
    /// x if x > 0 else alpha·(e^x − 1)
    Elu {
        /// scale of the negative part
        alpha: f32,
    },
    /// gamma·(x if x > 0 else alpha·(e^x − 1))
    Selu {
        /// alpha
        alpha: f32,
        /// gamma
        gamma: f32,
    },
    /// max(0, min(1, alpha·x + beta))
    HardSigmoid {
        /// alpha
        alpha: f32,
        /// beta
        beta: f32,
    },
    /// x · max(0, min(1, x/6 + 1/2))
    HardSwish,
    /// x · sigmoid(x) (SiLU, Swish with β = 1): produced by the pattern pass from `Mul(x, Sigmoid(x))`, the
    /// form exporters write EfficientNet's and YOLO's activation in.
    Silu,
    /// ln(1 + e^x)
    Softplus,
    /// −1, 0 or 1 by the sign of x (NaN stays NaN); also on integers
    Sign,
    /// x·tanh(ln(1 + e^x))
    Mish,
    /// x·Φ(x) = 0.5·x·(1 + erf(x/√2)); with `tanh`, the tanh approximation
    /// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). Produced by the GELU pattern pass or ONNX `Gelu`.
    Gelu {
        /// use the tanh approximation
        tanh: bool,
    },
    /// x is NaN → BOOL (floats only)
    IsNaN,
    /// x is +∞ (when `positive`) or −∞ (when `negative`) → BOOL (floats only)
    IsInf {
        /// detect −∞
        negative: bool,
        /// detect +∞
        positive: bool,
    },
    /// QuantizeLinear then DequantizeLinear with one scale and zero point: (saturate(round_half_even(x /
    /// scale) + zero_point, lo, hi) − zero_point) · scale, FP32 out whatever x is. The pass
    /// `fuse_quantize_dequantize` makes it from the pairs QDQ models put on their activations, so that
    /// the producer's epilogue can take it.
    QuantizeDequantize {
        /// the scale
        scale: f32,
        /// the zero point
        zero_point: i32,
        /// the smallest code (0 for UINT8, −128 for INT8)
        lo: i32,
        /// the largest code
        hi: i32,
    },
    /// min(max(x, min), max); bounds are stored as f64 so integer clips are exact.
    Clip {
        /// lower bound (−∞ when absent)
        min: f64,
        /// upper bound (+∞ when absent)
        max: f64,
    },
}

/// Element-wise functions of two broadcast inputs `[a, b]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a − b
    Sub,
    /// a · b
    Mul,
    /// a / b (integer division truncates toward zero)
    Div,
    /// a mod b with the sign of b, as numpy's `mod` (ONNX Mod, fmod = 0); integer mod 0 gives 0
    Mod,
    /// a mod b with the sign of a, as C's `fmod` (ONNX Mod, fmod = 1); integer mod 0 gives 0
    Fmod,
    /// a ^ b (b may have another numeric dtype; output has a's dtype)
    Pow,
    /// min(a, b)
    Min,
    /// max(a, b)
    Max,
    /// a == b → BOOL
    Equal,
    /// a < b → BOOL
    Less,
    /// a > b → BOOL
    Greater,
    /// a ≤ b → BOOL
    LessOrEqual,
    /// a ≥ b → BOOL
    GreaterOrEqual,
    /// a ∧ b (BOOL)
    And,
    /// a ∨ b (BOOL)
    Or,
    /// x if x ≥ 0 else slope·x, with `[x, slope]` (ONNX PRelu; slope broadcasts to x).
    PRelu,
}

impl UnaryOp {
    /// True when the output dtype is BOOL.
    pub fn is_predicate(self) -> bool {
        matches!(self, UnaryOp::Not | UnaryOp::IsNaN | UnaryOp::IsInf { .. })
    }

    /// True for the predicates of float values (IsNaN, IsInf): float in, BOOL out.
    pub fn tests_floats(self) -> bool {
        matches!(self, UnaryOp::IsNaN | UnaryOp::IsInf { .. })
    }

    /// Whether `x` passes this predicate of float values (false for every other op).
    pub fn test_float(self, x: f64) -> bool {
        match self {
            UnaryOp::IsNaN => x.is_nan(),
            UnaryOp::IsInf { negative, positive } => {
                (positive && x == f64::INFINITY) || (negative && x == f64::NEG_INFINITY)
            }
            _ => false,
        }
    }
}

impl BinaryOp {
    /// True when the output dtype is BOOL.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::Greater
                | BinaryOp::LessOrEqual
                | BinaryOp::GreaterOrEqual
        )
    }
}

/// One step of an [`Epilogue`], applied element-wise to the producer's output in order.
#[derive(Debug, Clone, PartialEq)]
pub enum EpilogueStep {
    /// y = f(y)
    Unary(UnaryOp),
    /// y = op(y, t) (or op(t, y) when `operand_first`), where `t` is the node input at index
    /// `input`. In a concrete graph `t` has either exactly the output's shape (a residual) or a
    /// shape that broadcasts to it.
    Binary {
        /// the binary function
        op: BinaryOp,
        /// index into the node's `inputs` of the second operand
        input: usize,
        /// true when the operand is the left-hand side (`t op y`)
        operand_first: bool,
    },
}

/// Element-wise work fused into the op that produces its input (Conv/MatMul/Gemm), written in place
/// to the output before it is stored. Empty = plain op.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Epilogue {
    /// Steps in application order.
    pub steps: Vec<EpilogueStep>,
}

impl Epilogue {
    /// True when no step is fused.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// ONNX `auto_pad`. Only [`AutoPad::NotSet`] (explicit `pads`) appears in a concrete graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoPad {
    /// use `pads`
    #[default]
    NotSet,
    /// output = ceil(input / stride), extra padding at the end
    SameUpper,
    /// output = ceil(input / stride), extra padding at the start
    SameLower,
    /// no padding
    Valid,
}

/// Reduction kinds for [`Op::Reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// arithmetic mean
    Mean,
    /// sum
    Sum,
    /// maximum
    Max,
    /// minimum
    Min,
    /// product
    Prod,
    /// sqrt(Σx²)
    L2,
    /// Σ|x|
    L1,
    /// Σx²
    SumSquare,
    /// ln Σx
    LogSum,
    /// ln Σe^x
    LogSumExp,
}

/// How [`Op::ScatterNd`] combines an update with the element it addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterReduction {
    /// replace it
    None,
    /// add to it
    Add,
    /// multiply it
    Mul,
    /// keep the larger
    Max,
    /// keep the smaller
    Min,
}

/// `Pad` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// fill with a constant
    Constant,
    /// mirror without repeating the edge
    Reflect,
    /// repeat the edge value
    Edge,
    /// wrap around
    Wrap,
}

/// `Resize` interpolation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeMode {
    /// nearest neighbour (see [`NearestMode`])
    Nearest,
    /// (multi-)linear
    Linear,
    /// cubic with `cubic_coeff_a`
    Cubic,
}

/// `Resize` coordinate transformation from output to input coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordTransform {
    /// (x + 0.5)/scale − 0.5
    HalfPixel,
    /// like half_pixel but 0 when the output length is 1
    PytorchHalfPixel,
    /// x·(in−1)/(out−1)
    AlignCorners,
    /// x/scale
    Asymmetric,
    /// uses roi: start·(in−1) + x·(end−start)·(in−1)/(out−1)
    TfCropAndResize,
    /// (x + 0.5)/scale − 0.5 with the scale derived from the integer sizes (opset 19 `half_pixel_symmetric`)
    HalfPixelSymmetric,
}

/// Rounding of `Resize` nearest mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestMode {
    /// round half down
    RoundPreferFloor,
    /// round half up
    RoundPreferCeil,
    /// floor
    Floor,
    /// ceil
    Ceil,
}

/// Direction of a recurrent op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnnDirection {
    /// t = 0..T
    Forward,
    /// t = T..0
    Reverse,
    /// both, outputs stacked on the direction axis (forward first)
    Bidirectional,
}

/// Activation functions of LSTM/GRU gates (ONNX names Sigmoid, Tanh, Relu, …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RnnActivation {
    /// logistic sigmoid
    Sigmoid,
    /// tanh
    Tanh,
    /// relu
    Relu,
    /// alpha·x + beta clipped to [0, 1]
    HardSigmoid {
        /// alpha
        alpha: f32,
        /// beta
        beta: f32,
    },
    /// leaky relu
    LeakyRelu {
        /// alpha
        alpha: f32,
    },
    /// alpha·tanh(beta·x)
    ScaledTanh {
        /// alpha
        alpha: f32,
        /// beta
        beta: f32,
    },
    /// alpha·x + beta
    Affine {
        /// alpha
        alpha: f32,
        /// beta
        beta: f32,
    },
    /// elu
    Elu {
        /// alpha
        alpha: f32,
    },
    /// softsign x/(1+|x|)
    Softsign,
    /// softplus
    Softplus,
    /// x if x > alpha else 0
    ThresholdedRelu {
        /// alpha
        alpha: f32,
    },
}

/// Shared attributes of LSTM and GRU.
#[derive(Debug, Clone, PartialEq)]
pub struct RnnAttrs {
    /// hidden size H
    pub hidden_size: usize,
    /// direction
    pub direction: RnnDirection,
    /// gate activations per direction (LSTM: f, g, h; GRU: f, g), repeated for the reverse direction
    pub activations: Vec<RnnActivation>,
    /// cell clip threshold (applied to gate pre-activations), if any
    pub clip: Option<f32>,
    /// `layout = 1`: X is [batch, seq, input] and Y is [batch, seq, dirs, hidden]
    pub batch_major: bool,
}

/// The operators of the IR. See the module doc for input conventions.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    // ----- element-wise -----
    /// `[x]` → `[y]`, y = f(x); output dtype = input dtype (BOOL for `Not`).
    Unary(UnaryOp),
    /// `[a, b]` → `[y]` with broadcasting; output dtype = a's, or BOOL for comparisons.
    Binary(BinaryOp),
    /// `[cond, x, y]` → `[z]`, z = cond ? x : y with three-way broadcasting.
    Where,
    /// `[x]` → `[y]` converting each element to `to` (float→int truncates toward zero; to BOOL is
    /// x ≠ 0; strings parse/print numbers as ONNX does).
    Cast {
        /// target dtype
        to: DataType,
    },
    /// `[x, like]` → `[y]`: x converted to like's dtype (ONNX CastLike). Only in a `Graph`: it
    /// becomes [`Op::Cast`] (or nothing) once like's dtype is known, at specialisation.
    CastLike,
    /// `[x]` → `[y]`, a copy (also the concrete form of Dropout in inference). Passes remove it.
    Identity,

    // ----- linear algebra -----
    /// `[a, b, epilogue operands…]` → `[y]`: numpy matmul (batch dims broadcast; 1-D inputs promoted
    /// and the promoted dims removed), with `trans_a`/`trans_b` transposing the last two dims of
    /// a/b first (set by the transpose-merge pass), then the epilogue.
    MatMul {
        /// transpose the last two dims of a
        trans_a: bool,
        /// transpose the last two dims of b
        trans_b: bool,
        /// fused element-wise tail
        epilogue: Epilogue,
    },
    /// `[a, b, c?, epilogue operands…]` → `[y]`: y = alpha·op(a)·op(b) + beta·c (c broadcast to
    /// [M, N]), then the epilogue. a, b are 2-D. A folded BatchNormalization changes b and c.
    Gemm {
        /// alpha
        alpha: f32,
        /// beta
        beta: f32,
        /// a is [K, M]
        trans_a: bool,
        /// b is [N, K]
        trans_b: bool,
        /// fused element-wise tail
        epilogue: Epilogue,
    },

    // ----- convolution and normalisation -----
    /// `[x, w, bias?, epilogue operands…]` → `[y]`: N-d cross-correlation, x `[N, C, *spatial]`,
    /// w `[M, C/group, *kernel]`. `pads` is `[begin…, end…]` per spatial axis. Then `activation`
    /// (a fused Relu/Clip/HardSwish/…, residual Add, or a folded BatchNormalization's effect already
    /// merged into w and bias).
    Conv {
        /// kernel spatial shape (empty in a `Graph` = taken from w)
        kernel_shape: Vec<usize>,
        /// strides per spatial axis
        strides: Vec<usize>,
        /// `[begin…, end…]`
        pads: Vec<usize>,
        /// dilations per spatial axis
        dilations: Vec<usize>,
        /// groups (C and M divisible by it; group == C == M is depthwise)
        group: usize,
        /// auto_pad (NotSet in concrete graphs)
        auto_pad: AutoPad,
        /// fused element-wise tail
        activation: Epilogue,
    },
    /// `[x, w, bias?]` → `[y]`: transposed convolution, w `[C, M/group, *kernel]`. In a concrete graph
    /// `pads` are final (output_shape and auto_pad resolved) and `output_padding` is applied.
    ConvTranspose {
        /// kernel spatial shape
        kernel_shape: Vec<usize>,
        /// strides
        strides: Vec<usize>,
        /// `[begin…, end…]`
        pads: Vec<usize>,
        /// dilations
        dilations: Vec<usize>,
        /// extra size added at the end of each spatial axis
        output_padding: Vec<usize>,
        /// requested output spatial shape (resolved into pads in concrete graphs; then empty)
        output_shape: Vec<usize>,
        /// groups
        group: usize,
        /// auto_pad (NotSet in concrete graphs)
        auto_pad: AutoPad,
    },
    /// `[x, scale, bias, mean, var]` → `[y]`: inference-mode batch norm over axis 1.
    BatchNormalization {
        /// epsilon
        epsilon: f32,
    },
    /// `[x, scale, bias]` → `[y]`: per-(n, c) normalisation over spatial dims.
    InstanceNormalization {
        /// epsilon
        epsilon: f32,
    },
    /// `[x, scale, bias?]` → `[y, mean?, inv_std_dev?]`: normalise over dims `axis..`, then
    /// y·scale + bias. Also produced by the pass that recognises the decomposed ReduceMean/Sub/Pow/
    /// ReduceMean/Add/Sqrt/Div/Mul/Add pattern. mean and inv_std_dev have x's shape with the
    /// normalised dims set to 1.
    LayerNormalization {
        /// first normalised axis (may be negative in a `Graph`)
        axis: i64,
        /// epsilon
        epsilon: f32,
    },

    // ----- pooling -----
    /// `[x]` → `[y, indices?]`: max pooling; indices are flat row-major offsets into x (INT64).
    MaxPool {
        /// window
        kernel_shape: Vec<usize>,
        /// strides
        strides: Vec<usize>,
        /// `[begin…, end…]`
        pads: Vec<usize>,
        /// dilations
        dilations: Vec<usize>,
        /// round output size up
        ceil_mode: bool,
        /// auto_pad (NotSet in concrete graphs)
        auto_pad: AutoPad,
        /// indices in column-major order (storage_order = 1)
        storage_order_col: bool,
    },
    /// `[x]` → `[y]`: average pooling.
    AveragePool {
        /// window
        kernel_shape: Vec<usize>,
        /// strides
        strides: Vec<usize>,
        /// `[begin…, end…]`
        pads: Vec<usize>,
        /// dilations
        dilations: Vec<usize>,
        /// round output size up
        ceil_mode: bool,
        /// divide by the full window including padding
        count_include_pad: bool,
        /// auto_pad (NotSet in concrete graphs)
        auto_pad: AutoPad,
    },
    /// `[x]` → `[y]`: mean over all spatial dims, y `[N, C, 1, …]`.
    GlobalAveragePool,
    /// `[x]` → `[y]`: max over all spatial dims.
    GlobalMaxPool,
    /// `[x, rois, batch_indices]` → `[y]`: ONNX RoiAlign. x is `[N, C, H, W]`, rois `[R, 4]` as
    /// `(x1, y1, x2, y2)` in input coordinates (scaled by `spatial_scale`), batch_indices `[R]`
    /// INT64; y is `[R, C, output_height, output_width]`, each bin the average (or maximum) of
    /// bilinearly interpolated samples on a regular grid.
    RoiAlign {
        /// max of the weighted samples (else their average)
        max: bool,
        /// output rows per region
        output_height: usize,
        /// output columns per region
        output_width: usize,
        /// samples per bin along each axis (0: `ceil(roi_size / output_size)`)
        sampling_ratio: usize,
        /// roi coordinates × this = input coordinates
        spatial_scale: f32,
        /// coordinate_transformation_mode half_pixel (shift by −0.5; else output_half_pixel, which
        /// also makes regions at least 1 × 1)
        half_pixel: bool,
    },
    /// `[x, grid]` → `[y]`: ONNX GridSample over 4-D inputs. x is `[N, C, H, W]`, grid `[N, Ho, Wo, 2]`
    /// of normalised `(x, y)` sample positions in `[-1, 1]`; y is `[N, C, Ho, Wo]`.
    GridSample {
        /// how a sample is interpolated
        mode: GridMode,
        /// what a sample outside the input reads
        padding: GridPadding,
        /// −1 and 1 are the centres of the corner pixels (else their outer edges)
        align_corners: bool,
    },

    // ----- reductions -----
    /// `[x, axes?]` → `[y]`. Concrete: `[x]`, `axes` sorted and normalised; empty axes with
    /// `noop_with_empty_axes` is resolved at specialisation (Identity) or into all axes.
    Reduce {
        /// kind
        op: ReduceOp,
        /// reduced axes
        axes: Vec<i64>,
        /// keep reduced dims as 1
        keepdims: bool,
        /// empty axes means identity rather than all axes
        noop_with_empty_axes: bool,
    },
    /// `[x]` → `[y]` INT64 indices of the max (or min) along `axis`.
    ArgReduce {
        /// ArgMax when true, ArgMin otherwise
        max: bool,
        /// axis
        axis: i64,
        /// keep the reduced dim
        keepdims: bool,
        /// ties pick the last index
        select_last_index: bool,
    },
    /// `[x]` → `[y]`: softmax (or log-softmax) along `axis`; with `coerce_2d` (opset < 13) over all
    /// dims from `axis` on, as if x were flattened to 2-D.
    Softmax {
        /// axis
        axis: i64,
        /// log-softmax
        log: bool,
        /// opset < 13 semantics
        coerce_2d: bool,
        /// rows whose softmax is NaN (every value −∞, or a NaN or +∞ among them) give zeros instead:
        /// torch's "safe" softmax `Where(IsNaN(Softmax(x)), 0, Softmax(x))`, which the pattern pass
        /// `safe_softmax` folds into the op
        nan_rows_to_zero: bool,
    },
    /// `[x, k]` → `[values, indices]`. Concrete: `[x]`, `k` resolved.
    TopK {
        /// axis
        axis: i64,
        /// k (resolved at specialisation)
        k: usize,
        /// largest (true) or smallest
        largest: bool,
        /// sorted output
        sorted: bool,
    },

    // ----- data movement -----
    /// `[data, shape]` → `[y]`. Concrete: `[data]`; the target shape is the output value's shape
    /// (a row-major reinterpretation, no data movement). Flatten, Squeeze and Unsqueeze become this.
    Reshape {
        /// a 0 in `shape` means 0 rather than "copy the input dim"
        allowzero: bool,
    },
    /// `[x]` → `[y]` flattened to 2-D at `axis` (becomes Reshape when specialised).
    Flatten {
        /// axis
        axis: i64,
    },
    /// `[x, axes?]` → `[y]` (becomes Reshape when specialised).
    Squeeze {
        /// axes (opset < 13 attribute form)
        axes: Option<Vec<i64>>,
    },
    /// `[x, axes?]` → `[y]` (becomes Reshape when specialised).
    Unsqueeze {
        /// axes (opset < 13 attribute form)
        axes: Option<Vec<i64>>,
    },
    /// `[x]` → `[y]`, y = x permuted by `perm` (y.shape[i] = x.shape[perm[i]]).
    Transpose {
        /// permutation; empty means reverse (resolved in concrete graphs)
        perm: Vec<usize>,
    },
    /// `[x…]` → `[y]` concatenated along `axis`.
    Concat {
        /// axis
        axis: i64,
    },
    /// `[x, split?]` → `[y…]`. Concrete: `[x]`, `sizes` has one entry per output.
    Split {
        /// axis
        axis: i64,
        /// sizes along axis (attribute form or resolved)
        sizes: Vec<usize>,
    },
    /// `[data, starts, ends, axes?, steps?]` → `[y]`. Concrete: `[data]` and the fields hold one entry
    /// per data dim: `starts` is the first index taken (already clamped), `steps` non-zero, and the
    /// output shape gives the count per axis. Opset < 10's attributes are turned into inputs at load.
    Slice {
        /// first index per axis (concrete)
        starts: Vec<i64>,
        /// step per axis (concrete)
        steps: Vec<i64>,
    },
    /// `[data, indices]` → `[y]`: numpy take along `axis`; negative indices count from the end.
    Gather {
        /// axis
        axis: i64,
    },
    /// `[data, indices]` → `[y]`: y[i][j][k] = data[index along axis][j][k] (same rank).
    GatherElements {
        /// axis
        axis: i64,
    },
    /// `[x, shape]` → `[y]` broadcast to the (bidirectionally broadcast) shape. Concrete: `[x]`, the
    /// target is the output value's shape.
    Expand,
    /// `[x, repeats]` → `[y]`. Concrete: `[x]` with `repeats`.
    Tile {
        /// repeats per dim (resolved)
        repeats: Vec<usize>,
    },
    /// `[x, pads, value?, axes?]` → `[y]`. Concrete: `[x]` with `pads` `[begin…, end…]` over every
    /// dim (negative = crop) and the constant `value`.
    Pad {
        /// mode
        mode: PadMode,
        /// pads per dim, begin then end (resolved)
        pads: Vec<i64>,
        /// fill value for constant mode (resolved)
        value: f64,
    },
    /// `[x]` → `[shape]` (INT64) of dims `start..end`. Computed on the host; never concrete.
    Shape {
        /// start (may be negative)
        start: i64,
        /// end (may be negative; None = rank)
        end: Option<i64>,
    },
    /// `[x]` → `[n]` (INT64 scalar). Host only.
    Size,
    /// `[shape]` → `[y]` filled with `value`. Host only (folded to a constant).
    ConstantOfShape {
        /// fill value (a one-element tensor; F32 0 by default)
        value: crate::tensor::Tensor,
    },
    /// `[start, limit, delta]` → `[y]`. Host only.
    Range,
    /// `[x, roi?, scales?, sizes?]` → `[y]`. Concrete: `[x]`, `scales` one per dim (the scale used in
    /// the coordinate transform: given scales, or out/in when sizes were given), `roi` per dim
    /// `[start…, end…]` (only for tf_crop_and_resize), output shape from the value.
    Resize {
        /// interpolation
        mode: ResizeMode,
        /// coordinate transformation
        coord: CoordTransform,
        /// rounding for nearest
        nearest: NearestMode,
        /// cubic coefficient
        cubic_coeff_a: f32,
        /// exclude out-of-image taps for cubic
        exclude_outside: bool,
        /// value outside the image for tf_crop_and_resize
        extrapolation_value: f32,
        /// resolved scales per dim
        scales: Vec<f32>,
        /// resolved roi per dim (`[start…, end…]`), empty unless tf_crop_and_resize
        roi: Vec<f32>,
        /// opset 18+ `keep_aspect_ratio_policy`: 0 stretch, 1 not larger, 2 not smaller
        keep_aspect_ratio_policy: u8,
        /// opset 18+ `axes` (graph form; resolved away in concrete graphs)
        axes: Vec<i64>,
    },
    /// `[x]` → `[y]`: rearrange blocks of depth into space; `crd` = CRD mode (else DCR).
    DepthToSpace {
        /// block size
        blocksize: usize,
        /// CRD mode
        crd: bool,
    },

    /// `[x]` → `[y]`: move blocks of space into depth, `[N, C, H, W]` → `[N, C·b², H/b, W/b]`
    /// (the inverse of DCR-mode DepthToSpace).
    SpaceToDepth {
        /// block size
        blocksize: usize,
    },

    // ----- indexed data movement and scans -----
    /// `[x, axis]` → `[y]`: running sum of x along `axis` (ONNX CumSum). Concrete: `[x]`, `axis`
    /// resolved and non-negative. `exclusive` leaves the element itself out of its sum; `reverse`
    /// sums from the end of the axis.
    CumSum {
        /// summed axis (graph form: resolved from the axis input; concrete: non-negative)
        axis: i64,
        /// leave the element itself out of its sum
        exclusive: bool,
        /// sum from the last element backwards
        reverse: bool,
    },
    /// `[x, k?]` → `[y]`: the upper (or lower) triangle of the last two dims of x, the rest zero;
    /// the diagonal is shifted by `k` (ONNX Trilu). Concrete: `[x]`, `k` resolved.
    Trilu {
        /// keep the upper triangle (else the lower)
        upper: bool,
        /// diagonal offset (resolved from the k input)
        k: i64,
    },
    /// `[indices, depth, values]` → `[y]`: y has a new axis of size `depth` at `axis`, holding
    /// values[1] where the position equals the index (negative indices count from the end) and
    /// values[0] elsewhere. Concrete: `[indices, values]`, `depth` resolved, `axis` non-negative.
    OneHot {
        /// position of the new axis in the output
        axis: i64,
        /// size of the new axis (resolved from the depth input)
        depth: usize,
    },
    /// `[data, indices]` → `[y]`: ONNX GatherND; the last dim of indices (INT64) indexes the leading
    /// dims of data after the first `batch_dims` dims, which data and indices share.
    GatherNd {
        /// leading dims shared by data and indices
        batch_dims: usize,
    },
    /// `[data, indices, updates]` → `[y]`: a copy of data with the slices addressed by indices
    /// (INT64, last dim indexes data's leading dims) replaced by, or combined with, updates, in
    /// index order (ONNX ScatterND).
    ScatterNd {
        /// how an update combines with the element it addresses
        reduction: ScatterReduction,
    },
    /// `[data, indices, updates]` → `[y]`: a copy of data where, for every position of indices
    /// (same rank as data, INT64/INT32, negative counting from the end), the element at that
    /// position with its `axis` coordinate replaced by the index is replaced by, or combined with,
    /// the update at that position, in row-major order of indices (ONNX ScatterElements).
    /// Concrete: `axis` non-negative.
    ScatterElements {
        /// the axis the indices address
        axis: i64,
        /// how an update combines with the element it addresses
        reduction: ScatterReduction,
    },
    /// `[x]` → `[indices]` (INT64 `[rank, count]`) of the non-zero elements, row-major. Its output
    /// shape depends on x's values, so it is computed while the plan is built (x must be known on
    /// the host: a constant, or a graph input the plan is specialised for); never concrete.
    NonZero,
    /// `[boxes, scores, max_output_boxes_per_class?, iou_threshold?, score_threshold?]` →
    /// `[selected]` (INT64 `[count, 3]`: batch, class, box index): ONNX NonMaxSuppression. Its output
    /// shape depends on the values, so it is computed while the plan is built (every input must be
    /// known on the host: constants, or graph inputs the plan is specialised for); never concrete.
    NonMaxSuppression {
        /// boxes are `[x_center, y_center, width, height]` (else `[y1, x1, y2, x2]`, either corner
        /// order)
        center_point_box: bool,
    },

    // ----- recurrent -----
    /// `[X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?]` → `[Y?, Y_h?, Y_c?]`: ONNX LSTM
    /// (gate order i, o, f, c in W/R/B).
    Lstm {
        /// shared recurrent attributes
        attrs: RnnAttrs,
        /// couple input and forget gates
        input_forget: bool,
    },
    /// `[X, W, R, B?, sequence_lens?, initial_h?]` → `[Y?, Y_h?]`: ONNX GRU (gate order z, r, h).
    Gru {
        /// shared recurrent attributes
        attrs: RnnAttrs,
        /// apply the reset gate after the recurrent matmul
        linear_before_reset: bool,
    },

    // ----- quantization -----
    /// Integer quantization operators (`ir/quant.rs`): QuantizeLinear, DequantizeLinear,
    /// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.
    Quant(crate::ir::QuantOp),

    // ----- control flow -----
    /// `[cond]` → outputs of the branch taken. Only in a `Graph`: inlined at load when `cond` is a
    /// constant, else at specialisation when `cond` is known on the host; otherwise unsupported.
    /// Branch nodes read outer values by id and their outputs are ids in the same value table.
    If {
        /// nodes and outputs when cond is true
        then_branch: Box<crate::ir::Branch>,
        /// nodes and outputs when cond is false
        else_branch: Box<crate::ir::Branch>,
    },
    /// `[M?, cond?, v_initial…]` → `[v_final…, scan_outputs…]`. Only in a `Graph`: unrolled at
    /// specialisation when the trip count and the condition are known on the host
    /// (`specialise/unroll.rs`). The body's inputs are `[iteration_num, cond, v…]`, its outputs
    /// `[cond, v…, scan_outputs…]`.
    Loop {
        /// the loop body
        body: Box<crate::ir::Branch>,
    },
    /// `[states…, scan_inputs…]` → `[final_states…, scan_outputs…]` (opset 8: a leading
    /// `sequence_lens` input and a batch axis 0 on every input and output). Only in a `Graph`:
    /// unrolled at specialisation over the scan inputs' length. The body's inputs are
    /// `[states…, one slice per scan input…]`, its outputs `[states…, one slice per scan output…]`.
    Scan {
        /// the loop body
        body: Box<crate::ir::Branch>,
        /// how many of the node's inputs are scan inputs (the rest, before them, are states)
        num_scan_inputs: usize,
        /// the axis each scan input is sliced along (may be negative)
        input_axes: Vec<i64>,
        /// per scan input: iterate from the end
        input_reverse: Vec<bool>,
        /// the axis each scan output's slices are stacked along (may be negative)
        output_axes: Vec<i64>,
        /// per scan output: stack the slices in reverse order
        output_reverse: Vec<bool>,
        /// opset 8's form: `sequence_lens` first and a batch axis 0 on every input and output
        batched: bool,
    },
}

impl Op {
    /// The ONNX-like name of the op, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(_) => "Unary",
            Op::Binary(_) => "Binary",
            Op::Where => "Where",
            Op::Cast { .. } => "Cast",
            Op::CastLike => "CastLike",
            Op::Identity => "Identity",
            Op::MatMul { .. } => "MatMul",
            Op::Gemm { .. } => "Gemm",
            Op::Conv { .. } => "Conv",
            Op::ConvTranspose { .. } => "ConvTranspose",
            Op::BatchNormalization { .. } => "BatchNormalization",
            Op::InstanceNormalization { .. } => "InstanceNormalization",
            Op::LayerNormalization { .. } => "LayerNormalization",
            Op::MaxPool { .. } => "MaxPool",
            Op::AveragePool { .. } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::GlobalMaxPool => "GlobalMaxPool",
            Op::Reduce { .. } => "Reduce",
            Op::ArgReduce { .. } => "ArgReduce",
            Op::Softmax { .. } => "Softmax",
            Op::TopK { .. } => "TopK",
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Squeeze { .. } => "Squeeze",
            Op::Unsqueeze { .. } => "Unsqueeze",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice { .. } => "Slice",
            Op::Gather { .. } => "Gather",
            Op::GatherElements { .. } => "GatherElements",
            Op::Expand => "Expand",
            Op::Tile { .. } => "Tile",
            Op::Pad { .. } => "Pad",
            Op::Shape { .. } => "Shape",
            Op::Size => "Size",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Range => "Range",
            Op::Resize { .. } => "Resize",
            Op::DepthToSpace { .. } => "DepthToSpace",
            Op::SpaceToDepth { .. } => "SpaceToDepth",
            Op::CumSum { .. } => "CumSum",
            Op::Trilu { .. } => "Trilu",
            Op::OneHot { .. } => "OneHot",
            Op::GatherNd { .. } => "GatherND",
            Op::ScatterNd { .. } => "ScatterND",
            Op::NonZero => "NonZero",
            Op::RoiAlign { .. } => "RoiAlign",
            Op::GridSample { .. } => "GridSample",
            Op::ScatterElements { .. } => "ScatterElements",
            Op::NonMaxSuppression { .. } => "NonMaxSuppression",
            Op::Lstm { .. } => "LSTM",
            Op::Gru { .. } => "GRU",
            Op::Quant(q) => q.name(),
            Op::If { .. } => "If",
            Op::Loop { .. } => "Loop",
            Op::Scan { .. } => "Scan",
        }
    }

    /// The subgraphs the op holds (`If` branches, `Loop`/`Scan` bodies), whose nodes read values of
    /// the enclosing graph.
    pub fn subgraphs(&self) -> Vec<&crate::ir::Branch> {
        match self {
            Op::If {
                then_branch,
                else_branch,
            } => vec![then_branch, else_branch],
            Op::Loop { body } | Op::Scan { body, .. } => vec![body],
            _ => Vec::new(),
        }
    }

    /// The subgraphs the op holds, mutably.
    pub fn subgraphs_mut(&mut self) -> Vec<&mut crate::ir::Branch> {
        match self {
            Op::If {
                then_branch,
                else_branch,
            } => vec![then_branch, else_branch],
            Op::Loop { body } | Op::Scan { body, .. } => vec![body],
            _ => Vec::new(),
        }
    }
}

/// GridSample's interpolation (opset 16 names bilinear/bicubic, opset 20 linear/cubic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GridMode {
    /// the four neighbours, weighted by distance
    Linear,
    /// the nearest pixel (ties to even)
    Nearest,
    /// the 4 × 4 neighbours with cubic convolution weights (A = −0.75)
    Cubic,
}

/// GridSample's padding_mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GridPadding {
    /// 0 outside the input
    Zeros,
    /// the nearest border pixel
    Border,
    /// the input mirrored at its borders
    Reflection,
}

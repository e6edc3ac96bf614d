//! LSTM and GRU: one matmul for the input projection of every step, then one dispatch per time step and
//! direction (two for GRU without linear_before_reset), all recorded into the plan's one command buffer.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::expr::{BinaryOp, EwNode, EwProgram};
use crate::wgpu::kernels::matmul::{self, Epilogue};
use crate::wgpu::kernels::reduce::{self, Reduction};
use crate::wgpu::kernels::{copy, elementwise};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder};
#[cfg(test)]
use crate::wgpu::template::KernelSource;
use crate::wgpu::template::Template;

/// The LSTM step kernel file.
pub(crate) const WGSL_LSTM: &str = include_str!("lstm.wgsl");
/// The GRU step kernel file.
pub(crate) const WGSL_GRU: &str = include_str!("gru.wgsl");
/// The GRU reset-pass kernel file.
pub(crate) const WGSL_GRU_RESET: &str = include_str!("gru_reset.wgsl");

/// A gate activation as WGSL over `x` (constants inlined: they are part of the pipeline).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Act {
    Sigmoid,
    Tanh,
    Relu,
    HardSigmoid(f32, f32),
    LeakyRelu(f32),
    ScaledTanh(f32, f32),
    Affine(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
    ThresholdedRelu(f32),
}

fn lit(v: f32) -> String {
    let s = format!("{v:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

impl Act {
    fn wgsl(self) -> String {
        match self {
            Act::Sigmoid => "select(exp(x) / (1.0 + exp(x)), 1.0 / (1.0 + exp(-x)), x >= 0.0)".into(),
            Act::Tanh => "tanh(clamp(x, -15.0, 15.0))".into(),
            Act::Relu => "max(x, 0.0)".into(),
            Act::HardSigmoid(a, b) => format!("clamp({} * x + {}, 0.0, 1.0)", lit(a), lit(b)),
            Act::LeakyRelu(a) => format!("select({} * x, x, x >= 0.0)", lit(a)),
            Act::ScaledTanh(a, b) => format!("{} * tanh(clamp({} * x, -15.0, 15.0))", lit(a), lit(b)),
            Act::Affine(a, b) => format!("{} * x + {}", lit(a), lit(b)),
            Act::Elu(a) => format!("select({} * (exp(x) - 1.0), x, x >= 0.0)", lit(a)),
            Act::Softsign => "x / (1.0 + abs(x))".into(),
            Act::Softplus => "max(x, 0.0) + log(1.0 + exp(-abs(x)))".into(),
            Act::ThresholdedRelu(a) => format!("select(0.0, x, x > {})", lit(a)),
        }
    }
}

fn act_region(names: &[&str], acts: &[Act]) -> String {
    names
        .iter()
        .zip(acts)
        .map(|(n, a)| format!("fn {n}(x: f32) -> f32 {{\n    return {};\n}}\n", a.wgsl()))
        .collect()
}

/// Which recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Lstm { input_forget: bool },
    Gru { linear_before_reset: bool },
}

/// Attributes of a recurrent op.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RnnSpec {
    pub(crate) cell: Cell,
    pub(crate) hidden: usize,
    /// Direction of each of the 1 or 2 directions: false forward, true reverse.
    pub(crate) reverse: Vec<bool>,
    /// Activations per direction (LSTM f, g, h; GRU f, g), concatenated.
    pub(crate) activations: Vec<Act>,
    pub(crate) clip: Option<f32>,
    pub(crate) batch_major: bool,
}

/// Optional inputs of a recurrent op.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RnnInputs<'a> {
    pub(crate) bias: Option<&'a DTensor>,
    pub(crate) lens: Option<&'a DTensor>,
    pub(crate) init_h: Option<&'a DTensor>,
    pub(crate) init_c: Option<&'a DTensor>,
    pub(crate) peepholes: Option<&'a DTensor>,
}

/// Outputs: Y `[T, D, B, H]` (`[B, T, D, H]` batch-major), Y_h and, for LSTM, Y_c (`[D, B, H]` or `[B, D, H]`).
pub(crate) struct RnnOutputs {
    pub(crate) y: DTensor,
    pub(crate) y_h: DTensor,
    pub(crate) y_c: Option<DTensor>,
}

fn zeros(b: &mut PlanBuilder, name: &str, shape: &[usize]) -> GpuResult<DTensor> {
    let prog = EwProgram {
        nodes: vec![EwNode::Const(0.0)],
    };
    elementwise::elementwise(b, name, &prog, &[], DType::F32, shape)
}

/// Direction `d`'s `[B, H]` slice of a `[D, B, H]` state, or zeros.
fn initial(
    b: &mut PlanBuilder,
    name: &str,
    t: Option<&DTensor>,
    d: usize,
    bh: [usize; 2],
) -> GpuResult<DTensor> {
    match t {
        Some(t) => {
            let s = copy::slice(b, name, t, &[d as i64, 0, 0], &[1, 1, 1], &[1, bh[0], bh[1]])?;
            b.alias(&s, &bh)
        }
        None => zeros(b, name, &bh),
    }
}

/// Runs an LSTM or GRU. `x` is `[T, B, I]` (`[B, T, I]` batch-major), `w` `[D, G*H, I]`, `r` `[D, G*H, H]`.
pub(crate) fn rnn(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    w: &DTensor,
    r: &DTensor,
    inputs: RnnInputs<'_>,
    spec: &RnnSpec,
) -> GpuResult<RnnOutputs> {
    for t in [
        Some(x),
        Some(w),
        Some(r),
        inputs.bias,
        inputs.init_h,
        inputs.init_c,
        inputs.peepholes,
    ]
    .into_iter()
    .flatten()
    {
        if t.dtype != DType::F32 {
            return Err(GpuError::unsupported(format!(
                "recurrent op '{name}' on {:?} tensors (the wgpu executor runs LSTM/GRU in f32)",
                t.dtype
            )));
        }
    }
    let (gates, per_dir) = match spec.cell {
        Cell::Lstm { .. } => (4, 3),
        Cell::Gru { .. } => (3, 2),
    };
    let h = spec.hidden;
    let dirs = spec.reverse.len();
    if x.rank() != 3 || w.shape != [dirs, gates * h, x.shape[2]] || r.shape != [dirs, gates * h, h] {
        return Err(GpuError::invalid(format!(
            "recurrent op '{name}': X {:?}, W {:?}, R {:?} do not fit hidden size {h} and {dirs} direction(s)",
            x.shape, w.shape, r.shape
        )));
    }
    if spec.activations.len() != per_dir * dirs {
        return Err(GpuError::invalid(format!(
            "recurrent op '{name}': {} activations for {dirs} direction(s)",
            spec.activations.len()
        )));
    }
    let (t_len, batch) = if spec.batch_major {
        (x.shape[1], x.shape[0])
    } else {
        (x.shape[0], x.shape[1])
    };
    let rows = t_len * batch;

    // Input projection for every step and direction: [D, rows, G*H] = X[rows, I] x W[D]^T + bias.
    let x2 = b.alias(x, &[1, rows, x.shape[2]])?;
    let (xw_bias, rb) = match (spec.cell, inputs.bias) {
        (Cell::Lstm { .. }, Some(bias)) => {
            let v = b.alias(bias, &[dirs, 2, gates * h])?;
            (
                Some(reduce::reduce(
                    b,
                    &format!("{name}.bias"),
                    &v,
                    Reduction::Sum,
                    &[1],
                    true,
                )?),
                None,
            )
        }
        (Cell::Gru { .. }, Some(bias)) => {
            let wb = copy::slice(
                b,
                &format!("{name}.wb"),
                bias,
                &[0, 0],
                &[1, 1],
                &[dirs, gates * h],
            )?;
            let wb = b.alias(&wb, &[dirs, 1, gates * h])?;
            let rb = copy::slice(
                b,
                &format!("{name}.rb"),
                bias,
                &[0, (gates * h) as i64],
                &[1, 1],
                &[dirs, gates * h],
            )?;
            (Some(wb), Some(rb))
        }
        (_, None) => (None, None),
    };
    let rb = match rb {
        Some(t) => t,
        None => zeros(b, &format!("{name}.rb"), &[dirs, gates * h])?,
    };
    let ep = match &xw_bias {
        Some(bias) => Epilogue {
            program: Some(EwProgram {
                nodes: vec![
                    EwNode::Acc,
                    EwNode::Operand(0),
                    EwNode::Binary(BinaryOp::Add, 0, 1),
                ],
            }),
            operands: vec![bias],
            shape: None,
        },
        None => Epilogue::default(),
    };
    let xw = matmul::matmul(b, &format!("{name}.xw"), &x2, w, false, true, DType::F32, &ep)?;

    let y_shape = if spec.batch_major {
        vec![batch, t_len, dirs, h]
    } else {
        vec![t_len, dirs, batch, h]
    };
    let y = b.temp(name, DType::F32, &y_shape)?;
    let dummy = b.constant_i32(&format!("{name}.none"), &[1], &[0])?;
    let dummy_f = b.constant_f32(&format!("{name}.none_f"), &[1], &[0.0])?;
    let lens = inputs.lens.unwrap_or(&dummy);
    if lens.dtype != DType::I32 && inputs.lens.is_some() {
        return Err(GpuError::invalid(format!(
            "recurrent op '{name}': sequence_lens must be integers"
        )));
    }
    let clip_bits = spec.clip.unwrap_or(0.0).to_bits();
    let mut finals_h = Vec::with_capacity(dirs);
    let mut finals_c = Vec::with_capacity(dirs);
    for (d, &reverse) in spec.reverse.iter().enumerate() {
        let acts = &spec.activations[d * per_dir..(d + 1) * per_dir];
        let hs = [
            initial(b, &format!("{name}.h{d}"), inputs.init_h, d, [batch, h])?,
            b.temp(&format!("{name}.h{d}'"), DType::F32, &[batch, h])?,
        ];
        let c = match spec.cell {
            Cell::Lstm { .. } => Some(initial(b, &format!("{name}.c{d}"), inputs.init_c, d, [batch, h])?),
            Cell::Gru { .. } => None,
        };
        let rh = b.temp(&format!("{name}.rh{d}"), DType::F32, &[batch, h])?;
        let units = batch * h;
        let grid = [units.div_ceil(64) as u32, 1, 1];
        for s in 0..t_len {
            let params = Params::new()
                .u4([batch as u32, h as u32, t_len as u32, s as u32])
                .u4([d as u32, dirs as u32, u32::from(reverse), clip_bits]);
            let (h_in, h_out) = (&hs[s % 2], &hs[(s + 1) % 2]);
            match spec.cell {
                Cell::Lstm { input_forget } => {
                    let k = Template::new("lstm", WGSL_LSTM)
                        .constant("HAS_LENS", inputs.lens.is_some())
                        .constant("HAS_PEEP", inputs.peepholes.is_some())
                        .constant("HAS_CLIP", spec.clip.is_some())
                        .constant("INPUT_FORGET", input_forget)
                        .constant("BATCH_MAJOR", spec.batch_major)
                        .region("act", act_region(&["act_f", "act_g", "act_h"], acts))
                        .build()?;
                    let peep = inputs.peepholes.unwrap_or(&dummy_f);
                    let c = c
                        .as_ref()
                        .ok_or_else(|| GpuError::internal("LSTM without a cell state"))?;
                    b.dispatch(
                        &k,
                        params,
                        &[
                            Bind::R(&xw),
                            Bind::R(r),
                            Bind::R(peep),
                            Bind::R(lens),
                            Bind::R(h_in),
                            Bind::W(&y),
                            Bind::W(h_out),
                            Bind::W(c),
                        ],
                        grid,
                    )?;
                }
                Cell::Gru { linear_before_reset } => {
                    if !linear_before_reset {
                        let k = Template::new("gru_reset", WGSL_GRU_RESET)
                            .constant("HAS_LENS", inputs.lens.is_some())
                            .constant("HAS_CLIP", spec.clip.is_some())
                            .constant("BATCH_MAJOR", spec.batch_major)
                            .region("act", act_region(&["act_f"], &acts[..1]))
                            .build()?;
                        b.dispatch(
                            &k,
                            params.clone(),
                            &[
                                Bind::R(&xw),
                                Bind::R(r),
                                Bind::R(&rb),
                                Bind::R(lens),
                                Bind::R(h_in),
                                Bind::W(&rh),
                            ],
                            grid,
                        )?;
                    }
                    let k = Template::new("gru", WGSL_GRU)
                        .constant("HAS_LENS", inputs.lens.is_some())
                        .constant("LINEAR_BEFORE_RESET", linear_before_reset)
                        .constant("HAS_CLIP", spec.clip.is_some())
                        .constant("BATCH_MAJOR", spec.batch_major)
                        .region("act", act_region(&["act_f", "act_g"], acts))
                        .build()?;
                    let rh_in = if linear_before_reset { &dummy_f } else { &rh };
                    b.dispatch(
                        &k,
                        params,
                        &[
                            Bind::R(&xw),
                            Bind::R(r),
                            Bind::R(&rb),
                            Bind::R(lens),
                            Bind::R(h_in),
                            Bind::R(rh_in),
                            Bind::W(&y),
                            Bind::W(h_out),
                        ],
                        grid,
                    )?;
                }
            }
        }
        let [h0, h1] = hs;
        let final_h = if t_len % 2 == 0 { h0 } else { h1 };
        finals_h.push(final_h);
        if let Some(c) = c {
            finals_c.push(c);
        }
    }
    let stack = |b: &mut PlanBuilder, nm: &str, parts: &[DTensor]| -> GpuResult<DTensor> {
        let (view, axis, out) = if spec.batch_major {
            ([batch, 1, h], 1, vec![batch, dirs, h])
        } else {
            ([1, batch, h], 0, vec![dirs, batch, h])
        };
        let views = parts
            .iter()
            .map(|p| b.alias(p, &view))
            .collect::<GpuResult<Vec<_>>>()?;
        let refs: Vec<&DTensor> = views.iter().collect();
        copy::concat(b, nm, &refs, axis, &out)
    };
    let y_h = stack(b, &format!("{name}.y_h"), &finals_h)?;
    let y_c = if finals_c.is_empty() {
        None
    } else {
        Some(stack(b, &format!("{name}.y_c"), &finals_c)?)
    };
    Ok(RnnOutputs { y, y_h, y_c })
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let all = [
        Act::Sigmoid,
        Act::Tanh,
        Act::Relu,
        Act::HardSigmoid(0.2, 0.5),
        Act::LeakyRelu(0.01),
        Act::ScaledTanh(1.0, 2.0),
        Act::Affine(2.0, 1e-5),
        Act::Elu(1.0),
        Act::Softsign,
        Act::Softplus,
        Act::ThresholdedRelu(1.0),
    ];
    let mut v = Vec::new();
    for chunk in all.chunks(3) {
        let acts = [chunk[0], chunk[chunk.len() / 2], chunk[chunk.len() - 1]];
        v.push(
            Template::new("lstm", WGSL_LSTM)
                .constant("HAS_LENS", true)
                .constant("HAS_PEEP", true)
                .constant("HAS_CLIP", true)
                .constant("INPUT_FORGET", true)
                .constant("BATCH_MAJOR", true)
                .region("act", act_region(&["act_f", "act_g", "act_h"], &acts))
                .build()?,
        );
        v.push(
            Template::new("gru", WGSL_GRU)
                .constant("HAS_LENS", true)
                .constant("LINEAR_BEFORE_RESET", true)
                .constant("HAS_CLIP", true)
                .constant("BATCH_MAJOR", true)
                .region("act", act_region(&["act_f", "act_g"], &acts[..2]))
                .build()?,
        );
        v.push(
            Template::new("gru_reset", WGSL_GRU_RESET)
                .constant("HAS_LENS", true)
                .region("act", act_region(&["act_f"], &acts[..1]))
                .build()?,
        );
    }
    Ok(v)
}

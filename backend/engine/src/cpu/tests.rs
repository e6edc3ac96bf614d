//! Plans of one executor share their weights ([`Weights`]) and still compute the same outputs.

use super::*;
use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};
use prost::Message;

fn vi(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: (d >= 0).then_some(d),
                            dim_param: (d < 0).then(|| "batch".to_string()),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            }),
            ..Default::default()
        }),
        doc_string: String::new(),
    }
}

fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, x: &[i64], y: &[i64], inits: Vec<TensorProto>) -> Arc<Model> {
    model_with_inputs(nodes, vec![vi("x", x)], y, inits)
}

/// An opset-13 model of `nodes` reading `inputs`, with one output `y`.
fn model_with_inputs(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    y: &[i64],
    inits: Vec<TensorProto>,
) -> Arc<Model> {
    model_with_outputs(nodes, inputs, vec![vi("y", y)], inits)
}

/// An opset-13 model of `nodes` reading `inputs` and returning `outputs`.
fn model_with_outputs(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
) -> Arc<Model> {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer: inits,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    Arc::new(Model::from_bytes(&m.encode_to_vec(), None).unwrap())
}

fn ramp(n: usize, mul: usize, modulo: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * mul % modulo) as f32 - (modulo / 2) as f32) / 10.0)
        .collect()
}

/// Conv (pads 1) → BatchNormalization (folded into the Conv at load) → Relu → GlobalAveragePool →
/// Flatten → Gemm: batches of 2 or more run split into one-sample runs.
fn small_cnn() -> Arc<Model> {
    let pads = AttributeProto {
        name: "pads".into(),
        r#type: attribute_type::INTS,
        ints: vec![1, 1, 1, 1],
        ..Default::default()
    };
    model(
        vec![
            node("Conv", &["x", "w"], "c", vec![pads]),
            node("BatchNormalization", &["c", "s", "b", "m", "v"], "bn", vec![]),
            node("Relu", &["bn"], "r", vec![]),
            node("GlobalAveragePool", &["r"], "p", vec![]),
            node("Flatten", &["p"], "f", vec![]),
            node("Gemm", &["f", "fc"], "y", vec![attr_int("transB", 1)]),
        ],
        &[-1, 3, 8, 8],
        &[-1, 4],
        vec![
            init("w", &[8, 3, 3, 3], &ramp(8 * 27, 7, 13)),
            init("s", &[8], &[1.0, 0.5, 2.0, 1.5, 1.0, 0.8, 1.2, 0.9]),
            init("b", &[8], &[0.1, -0.1, 0.2, 0.0, 0.3, -0.2, 0.1, 0.0]),
            init("m", &[8], &[0.0, 0.1, -0.1, 0.2, 0.0, 0.0, 0.1, -0.2]),
            init("v", &[8], &[1.0, 0.9, 1.1, 1.2, 0.8, 1.0, 1.0, 1.3]),
            init("fc", &[4, 8], &ramp(32, 5, 11)),
        ],
    )
}

/// `x [n, 16] · w1 [16, 16] · w2 [16, 16]`, then Softmax over the batch axis (which mixes samples:
/// not split). Two weights of one shape: they must stay apart.
fn two_matmuls_softmax(w1: &[f32], w2: &[f32]) -> Arc<Model> {
    model(
        vec![
            node("MatMul", &["x", "w1"], "h", vec![]),
            node("MatMul", &["h", "w2"], "mm", vec![]),
            node("Softmax", &["mm"], "y", vec![attr_int("axis", 0)]),
        ],
        &[-1, 16],
        &[-1, 16],
        vec![init("w1", &[16, 16], w1), init("w2", &[16, 16], w2)],
    )
}

fn two_weights() -> (Vec<f32>, Vec<f32>) {
    (ramp(256, 7, 19), ramp(256, 5, 23))
}

fn input(shape: Vec<usize>) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(shape, ramp(n, 3, 17)).unwrap()
}

/// The plan that holds the weights: the one-sample plan of a split plan.
fn holder(plan: &CpuPlan) -> &CpuPlan {
    plan.split.as_ref().map_or(plan, |s| &s.one)
}

/// The addresses of a plan's constant buffers and packed weights.
fn weight_addrs(plan: &CpuPlan) -> (Vec<*const Buf>, Vec<*const Prepared>) {
    let p = holder(plan);
    let mut bufs: Vec<_> = p.consts.iter().flatten().map(Arc::as_ptr).collect();
    let mut packed: Vec<_> = p.prepared.iter().flatten().map(Arc::as_ptr).collect();
    bufs.sort();
    packed.sort();
    (bufs, packed)
}

fn executor(model: &Arc<Model>, plan_cache_size: usize) -> CpuExecutor {
    CpuExecutor::new(model.clone(), Some(2), plan_cache_size).unwrap()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    // f32 products and sums of a few dozen terms, in a different order
    const TOL: f32 = 1e-5;
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= TOL * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn plans_for_every_batch_size_share_one_copy_of_the_weights() {
    for model in [small_cnn(), {
        let (w1, w2) = two_weights();
        two_matmuls_softmax(&w1, &w2)
    }] {
        let x_shape = |n: usize| {
            let mut s: Vec<usize> = model.signature().inputs[0]
                .dims
                .iter()
                .map(|d| match d {
                    crate::ir::Dim::Fixed(d) => *d,
                    crate::ir::Dim::Dynamic(_) => n,
                })
                .collect();
            s[0] = n;
            s
        };
        let exec = executor(&model, 16);
        let first = exec.inner.plan(&[input(x_shape(1))]).unwrap();
        let (bufs, packed) = weight_addrs(&first);
        assert!(
            !bufs.is_empty() && !packed.is_empty(),
            "the model has packed weights"
        );
        let live = exec.inner.weights.live();
        for n in 2..=8 {
            let plan = exec.inner.plan(&[input(x_shape(n))]).unwrap();
            assert_eq!(weight_addrs(&plan), (bufs.clone(), packed.clone()), "batch {n}");
            assert_eq!(exec.inner.weights.live(), live, "batch {n}: no new weight copies");
            // the outputs are those of a plan built on its own
            let x = input(x_shape(n));
            let got = exec.run_blocking(vec![x.clone()]).unwrap();
            let alone = executor(&model, 1).run_blocking(vec![x]).unwrap();
            assert_close(
                &got[0].to_vec::<f32>().unwrap(),
                &alone[0].to_vec::<f32>().unwrap(),
                &format!("batch {n}"),
            );
        }
    }
}

#[test]
fn weights_of_the_same_shape_stay_apart() {
    let (w1, w2) = two_weights();
    let exec = executor(&two_matmuls_softmax(&w1, &w2), 16);
    let x = input(vec![3, 16]);
    let xs = x.to_vec::<f32>().unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        // the second run reuses the cached plan
        got = exec.run_blocking(vec![x.clone()]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
    }
    assert_eq!(exec.inner.weights.live(), (2, 2), "w1 and w2, each once");
    // reference: the two products, then a softmax down each column
    let product = |a: &[f32], w: &[f32]| -> Vec<f32> {
        (0..3 * 16)
            .map(|i| (0..16).map(|k| a[i / 16 * 16 + k] * w[k * 16 + i % 16]).sum())
            .collect()
    };
    let mm = product(&product(&xs, &w1), &w2);
    let want: Vec<f32> = (0..3 * 16)
        .map(|i| {
            let c = i % 16;
            let max = (0..3).map(|r| mm[r * 16 + c]).fold(f32::MIN, f32::max);
            let sum: f32 = (0..3).map(|r| (mm[r * 16 + c] - max).exp()).sum();
            (mm[i] - max).exp() / sum
        })
        .collect();
    assert_close(&got, &want, "softmax(x·w1·w2)");
}

#[test]
fn weights_live_only_as_long_as_a_plan_holds_them() {
    let model = {
        let (w1, w2) = two_weights();
        two_matmuls_softmax(&w1, &w2)
    };
    let exec = executor(&model, 1);
    exec.inner.plan(&[input(vec![2, 16])]).unwrap();
    let live = exec.inner.weights.live();
    assert_eq!(live, (2, 2), "w1 and w2 converted and packed once each");
    // a new batch size evicts the previous plan after borrowing its weights
    for n in 3..6 {
        exec.inner.plan(&[input(vec![n, 16])]).unwrap();
        assert_eq!(exec.inner.weights.live(), live, "batch {n}");
    }
    exec.inner.plans.clear();
    assert_eq!(exec.inner.weights.live(), (0, 0), "no plan left, no weights kept");
}

#[test]
fn batches_split_only_when_the_weights_are_not_what_overflows_the_cache() {
    // small weights, large per-sample activations: one-sample runs
    let cnn = executor(&small_cnn(), 4);
    assert!(
        cnn.inner
            .plan(&[input(vec![4, 3, 8, 8])])
            .unwrap()
            .split
            .is_some()
    );

    // 36 MiB of weights against a few KiB of activations per sample: samples in parallel would each
    // stream the weights, so the batch runs whole or one sample at a time on every thread (as single
    // requests do), never split — and computes the same either way
    let (k, n) = (1024, 9216);
    let wide = model(
        vec![
            node("MatMul", &["x", "w"], "h", vec![]),
            node("Relu", &["h"], "y", vec![]),
        ],
        &[-1, k as i64],
        &[-1, n as i64],
        vec![init("w", &[k as i64, n as i64], &ramp(k * n, 7, 31))],
    );
    let exec = executor(&wide, 4);
    let x = input(vec![3, k]);
    let plan = exec.inner.plan(std::slice::from_ref(&x)).unwrap();
    let split = plan.split.as_ref().expect("the samples are independent");
    let rows = x.to_vec::<f32>().unwrap();
    let alone: Vec<Vec<f32>> = rows
        .chunks(k)
        .map(|row| {
            let one = Tensor::from_vec(vec![1, k], row.to_vec()).unwrap();
            exec.run_blocking(vec![one]).unwrap()[0].to_vec::<f32>().unwrap()
        })
        .collect();
    for run in 0..super::SETTLING_RUNS {
        let way = split.choice.next();
        assert_ne!(
            way,
            super::split::Way::Split,
            "a weight-bound batch must not run split"
        );
        let got = exec.run_blocking(vec![x.clone()]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        for (i, want) in alone.iter().enumerate() {
            assert_close(
                &got[i * n..(i + 1) * n],
                want,
                &format!("run {run} ({way:?}), sample {i}"),
            );
        }
    }
    assert!(
        split.choice.settled().is_some(),
        "two runs each of whole and serial settle it"
    );
}

/// `y = x + x`: a plan that only adds a few elements.
fn doubling() -> Arc<Model> {
    model(
        vec![node("Add", &["x", "x"], "y", vec![])],
        &[-1, 16],
        &[-1, 16],
        vec![],
    )
}

fn one_thread_executor(model: &Arc<Model>) -> CpuExecutor {
    CpuExecutor::new(
        model.clone(),
        Some(1),
        crate::SessionOptions::default().plan_cache_size,
    )
    .unwrap()
}

/// Runs `inputs` on a thread of its own; the receiver gets the outputs when the run ends.
fn run_in_background(
    exec: &Arc<CpuExecutor>,
    inputs: Vec<Tensor>,
) -> std::sync::mpsc::Receiver<Result<Vec<Tensor>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let exec = exec.clone();
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(exec.run(inputs)));
    });
    rx
}

#[test]
fn tiny_plans_run_on_the_callers_thread_and_real_work_waits_for_the_pool() {
    let tiny = Arc::new(one_thread_executor(&doubling()));
    let heavy = Arc::new(one_thread_executor(&two_matmuls_softmax(
        &two_weights().0,
        &two_weights().1,
    )));
    let x = input(vec![4, 16]);
    // The first runs build the plans, on the pool.
    futures::executor::block_on(tiny.run(vec![x.clone()])).unwrap();
    futures::executor::block_on(heavy.run(vec![x.clone()])).unwrap();

    // Keep both pools' only thread busy until released.
    let mut releases = Vec::new();
    for exec in [&tiny, &heavy] {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        exec.inner.pool.spawn(move || {
            let _ = wait.recv();
        });
        releases.push(release);
    }
    let tiny_run = run_in_background(&tiny, vec![x.clone()]);
    let heavy_run = run_in_background(&heavy, vec![x.clone()]);
    let tiny_out = tiny_run.recv_timeout(std::time::Duration::from_secs(10));
    let heavy_early = heavy_run.recv_timeout(std::time::Duration::from_millis(300));
    drop(releases);
    let tiny_out = tiny_out.expect("a tiny plan waited for the busy pool").unwrap();
    assert!(
        heavy_early.is_err(),
        "a plan with matrix products ran outside the pool"
    );
    heavy_run
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap()
        .unwrap();

    let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| v + v).collect();
    assert_close(&tiny_out[0].to_vec::<f32>().unwrap(), &want, "x + x");
}

#[test]
fn only_small_element_wise_plans_run_on_the_caller_and_they_are_not_split() {
    let tiny = one_thread_executor(&doubling());
    let small = tiny.inner.plan(&[input(vec![8, 16])]).unwrap();
    assert!(small.on_caller);
    assert!(
        small.split.is_none(),
        "a batch of 8 x 16 values was split into one-sample runs"
    );
    let large = tiny
        .inner
        .plan(&[input(vec![inline::MAX_ELEMENTS / 16 + 1, 16])])
        .unwrap();
    assert!(
        !large.on_caller,
        "a plan over {} elements ran on the caller",
        inline::MAX_ELEMENTS
    );

    let (w1, w2) = two_weights();
    let matmuls = one_thread_executor(&two_matmuls_softmax(&w1, &w2));
    assert!(!matmuls.inner.plan(&[input(vec![2, 16])]).unwrap().on_caller);
}

fn int64_init(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 7,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// A ViT's embedding: a class token `[1, 1, 4]` expanded to the batch (through Shape → Gather →
/// Concat, folded into a `[n, 1, 4]` constant at specialisation), put before the `[n, 3, 4]` input,
/// then a MatMul.
fn class_token_then_matmul() -> Arc<Model> {
    model(
        vec![
            node("Shape", &["x"], "s", vec![]),
            node("Gather", &["s", "zero"], "nb", vec![attr_int("axis", 0)]),
            node("Concat", &["nb", "one_four"], "target", vec![attr_int("axis", 0)]),
            node("Expand", &["cls", "target"], "cls_b", vec![]),
            node("Concat", &["cls_b", "x"], "seq", vec![attr_int("axis", 1)]),
            node("MatMul", &["seq", "w"], "y", vec![]),
        ],
        &[-1, 3, 4],
        &[-1, 4, 4],
        vec![
            int64_init("zero", &[1], &[0]),
            int64_init("one_four", &[2], &[1, 4]),
            init("cls", &[1, 1, 4], &[0.5, -1.0, 2.0, 0.25]),
            init("w", &[4, 4], &ramp(16, 5, 11)),
        ],
    )
}

#[test]
fn a_class_token_expanded_to_the_batch_keeps_the_batch_splittable() {
    let exec = executor(&class_token_then_matmul(), 4);
    let x = input(vec![3, 3, 4]);
    let plan = exec.inner.plan(std::slice::from_ref(&x)).unwrap();
    assert!(
        plan.split.is_some(),
        "the repeated class token must not block splitting"
    );
    // every way of running it (whole, split, serial, then the settled one) computes what one
    // sample at a time does
    let rows = x.to_vec::<f32>().unwrap();
    let mut alone = Vec::new();
    for sample in rows.chunks(12) {
        let one = Tensor::from_vec(vec![1, 3, 4], sample.to_vec()).unwrap();
        alone.extend(exec.run_blocking(vec![one]).unwrap()[0].to_vec::<f32>().unwrap());
    }
    for run in 0..super::SETTLING_RUNS + 1 {
        let got = exec.run_blocking(vec![x.clone()]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        assert_close(&got, &alone, &format!("run {run}"));
    }
    assert!(
        plan.split.as_ref().is_some_and(|s| s.choice.settled().is_some()),
        "two timed runs of each way settle the choice"
    );
}

fn u8_tensor(name: &str, dims: &[i64], data: &[u8]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 2,
        raw_data: data.to_vec(),
        ..Default::default()
    }
}

fn u8_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    let mut v = vi(name, dims);
    if let Some(t) = v.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = 2;
    }
    v
}

/// DynamicQuantizeLinear of `x`: outputs `{x}q` (codes), `{x}s` (scale), `{x}z` (zero point).
fn dynamic_quantize(x: &str) -> NodeProto {
    NodeProto {
        input: vec![x.into()],
        output: ["q", "s", "z"].iter().map(|o| format!("{x}{o}")).collect(),
        name: format!("dql_{x}"),
        op_type: "DynamicQuantizeLinear".into(),
        ..Default::default()
    }
}

/// `quantize_dynamic`'s pattern: DynamicQuantizeLinear → ConvInteger (pads 1) → Cast → Mul → Relu →
/// GlobalAveragePool → Flatten → DynamicQuantizeLinear → MatMulInteger → Cast → Mul, the UINT8
/// filters `wq [8, 3, 3, 3]` and matrix `bq [8, 4]` as initializers or, with `weights_as_inputs`,
/// as graph inputs fed with the same codes (then nothing can be packed at plan time).
fn dynamic_quantized_cnn(weights_as_inputs: bool) -> (Arc<Model>, Vec<Tensor>) {
    let pads = AttributeProto {
        name: "pads".into(),
        r#type: attribute_type::INTS,
        ints: vec![1, 1, 1, 1],
        ..Default::default()
    };
    let to_float = attr_int("to", 1);
    let nodes = vec![
        dynamic_quantize("x"),
        node("ConvInteger", &["xq", "wq", "xz", "wz"], "ci", vec![pads]),
        node("Cast", &["ci"], "cf", vec![to_float.clone()]),
        node("Mul", &["cf", "xs"], "cm", vec![]),
        node("Relu", &["cm"], "r", vec![]),
        node("GlobalAveragePool", &["r"], "p", vec![]),
        node("Flatten", &["p"], "f", vec![]),
        dynamic_quantize("f"),
        node("MatMulInteger", &["fq", "bq", "fz", "bz"], "mi", vec![]),
        node("Cast", &["mi"], "mf", vec![to_float]),
        node("Mul", &["mf", "fs"], "y", vec![]),
    ];
    let wq: Vec<u8> = (0..8 * 27).map(|i| (i * 37 % 251) as u8).collect();
    let bq: Vec<u8> = (0..8 * 4).map(|i| (i * 53 % 241) as u8).collect();
    let weights = [("wq", vec![8, 3, 3, 3], wq), ("bq", vec![8, 4], bq)];
    let mut inits = vec![u8_tensor("wz", &[], &[121]), u8_tensor("bz", &[], &[7])];
    let mut inputs = vec![vi("x", &[-1, 3, 8, 8])];
    let mut fed = Vec::new();
    for (name, dims, codes) in weights {
        if weights_as_inputs {
            inputs.push(u8_input(name, &dims));
            let shape = dims.iter().map(|&d| d as usize).collect();
            fed.push(Tensor::from_vec(shape, codes).unwrap());
        } else {
            inits.push(u8_tensor(name, &dims, &codes));
        }
    }
    (model_with_inputs(nodes, inputs, &[-1, 4], inits), fed)
}

#[test]
fn integer_products_pack_constant_codes_once_and_compute_what_unpacked_codes_do() {
    if crate::cpu::quant::qgemm::QKernel::current().is_none() {
        // no integer micro-kernel on this CPU: the products run on centred values, nothing is packed
        return;
    }
    let (packed_model, _) = dynamic_quantized_cnn(false);
    let (fed_model, weights) = dynamic_quantized_cnn(true);
    let packed = executor(&packed_model, 16);
    let fed = executor(&fed_model, 16);
    for n in [1, 3] {
        let x = input(vec![n, 3, 8, 8]);
        let plan = packed.inner.plan(std::slice::from_ref(&x)).unwrap();
        let p = holder(&plan);
        let prepared: Vec<&str> = p
            .graph
            .nodes
            .iter()
            .zip(&p.prepared)
            .filter(|(_, prep)| prep.is_some())
            .map(|(node, _)| node.op.name())
            .collect();
        assert_eq!(prepared, ["ConvInteger", "MatMulInteger"], "batch {n}");
        let got = packed.run_blocking(vec![x.clone()]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        let mut ins = vec![x];
        ins.extend(weights.iter().cloned());
        let want = fed.run_blocking(ins).unwrap()[0].to_vec::<f32>().unwrap();
        // the same integer products and the same float steps after them
        assert_eq!(got, want, "batch {n}");
        assert!(got.iter().any(|&v| v != 0.0), "batch {n}: a non-trivial output");
    }
}

/// A float unary op runs in its input's buffer only at the value's last use: a value read again
/// later (by an Add) or returned as an output keeps its values.
#[test]
fn unary_ops_run_in_place_only_where_nothing_reads_their_input_again() {
    let n = 40_000; // a parallel element-wise op
    let x = input(vec![1, n]);
    let xs = x.to_vec::<f32>().unwrap();
    // y = neg(x) + x = 0; in place, neg would overwrite x before the Add reads it
    let read_again = model(
        vec![
            node("Neg", &["x"], "a", vec![]),
            node("Add", &["a", "x"], "y", vec![]),
        ],
        &[1, n as i64],
        &[1, n as i64],
        vec![],
    );
    let exec = executor(&read_again, 4);
    let g = exec.plan_for(std::slice::from_ref(&x)).unwrap();
    assert!(
        g.nodes.iter().any(|n| matches!(n.op, crate::ir::Op::Unary(_))),
        "the Neg stays a node of its own: {:?}",
        g.nodes.iter().map(|n| n.op.name()).collect::<Vec<_>>()
    );
    let y = exec.run_blocking(vec![x.clone()]).unwrap();
    assert!(
        y[0].to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0),
        "x was overwritten"
    );

    // outputs a = x + x and y = neg(a): a is returned, so neg may not run in its buffer
    let returned = model_with_outputs(
        vec![
            node("Add", &["x", "x"], "a", vec![]),
            node("Neg", &["a"], "y", vec![]),
        ],
        vec![vi("x", &[1, n as i64])],
        vec![vi("a", &[1, n as i64]), vi("y", &[1, n as i64])],
        vec![],
    );
    let out = executor(&returned, 4).run_blocking(vec![x]).unwrap();
    let doubled: Vec<f32> = xs.iter().map(|v| v + v).collect();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        doubled,
        "the returned value was overwritten"
    );
    let negated: Vec<f32> = doubled.iter().map(|v| -v).collect();
    assert_eq!(out[1].to_vec::<f32>().unwrap(), negated);
}

#[test]
fn an_integer_value_returned_as_two_outputs_is_in_both() {
    // y1 and y2 are the same INT64 value once the Identities are gone: its buffer moves into one
    // tensor without a copy, and the other output still reads it
    let mut y1 = vi("y1", &[1, 4]);
    let mut y2 = vi("y2", &[1, 4]);
    for v in [&mut y1, &mut y2] {
        if let Some(t) = v.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
            t.elem_type = 7;
        }
    }
    let m = model_with_outputs(
        vec![
            node("Cast", &["x"], "t", vec![attr_int("to", 7)]),
            node("Identity", &["t"], "y1", vec![]),
            node("Identity", &["t"], "y2", vec![]),
        ],
        vec![vi("x", &[1, 4])],
        vec![y1, y2],
        vec![],
    );
    let x = Tensor::from_vec(vec![1, 4], vec![1.5f32, -2.0, 3.0, 40.0]).unwrap();
    let out = executor(&m, 4).run_blocking(vec![x]).unwrap();
    for (i, y) in out.iter().enumerate() {
        assert_eq!(y.to_vec::<i64>().unwrap(), [1, -2, 3, 40], "output {i}");
    }
}

use super::*;
use crate::ir::{ConcreteValue, Node, ReduceOp, ValueId};
use std::collections::BTreeMap;

/// A chain `x → op → y` plus the extra constant inputs `consts` (shape each), with `x` [n, 8, 4, 4].
fn graph(op: Op, n: usize, consts: &[Vec<usize>], out: Vec<usize>) -> ConcreteGraph {
    let val = |name: &str, shape: Vec<usize>| ConcreteValue {
        name: name.into(),
        dtype: DataType::F32,
        shape,
    };
    let mut values = vec![val("x", vec![n, 8, 4, 4])];
    let mut constants = BTreeMap::new();
    let mut inputs = vec![Some(ValueId(0))];
    for (i, s) in consts.iter().enumerate() {
        let id = ValueId(values.len());
        let len: usize = s.iter().product();
        constants.insert(
            id,
            Tensor::from_vec(s.clone(), (0..len).map(|i| i as f32).collect()).unwrap(),
        );
        values.push(val(&format!("c{i}"), s.clone()));
        inputs.push(Some(id));
    }
    let y = ValueId(values.len());
    values.push(val("y", out));
    ConcreteGraph {
        values,
        nodes: vec![Node {
            name: "n".into(),
            op,
            inputs,
            outputs: vec![Some(y)],
        }],
        inputs: vec![ValueId(0)],
        outputs: vec![y],
        constants,
    }
}

fn conv() -> Op {
    Op::Conv {
        kernel_shape: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![1, 1, 1, 1],
        dilations: vec![1, 1],
        group: 1,
        auto_pad: crate::ir::AutoPad::NotSet,
        activation: Default::default(),
    }
}

#[test]
fn per_sample_ops_split_and_mixing_ops_do_not() {
    // a convolution with shared weights: split, at its batch size
    let g = graph(conv(), 4, &[vec![8, 8, 3, 3], vec![8]], vec![4, 8, 4, 4]);
    assert_eq!(batch_axis(&g), Some(4));
    // batch 1 has nothing to split
    assert_eq!(
        batch_axis(&graph(conv(), 1, &[vec![8, 8, 3, 3]], vec![1, 8, 4, 4])),
        None
    );
    // an operand shared by all samples broadcasts over axis 0: split
    let add = Op::Binary(crate::ir::BinaryOp::Add);
    assert_eq!(
        batch_axis(&graph(add.clone(), 4, &[vec![1, 8, 1, 1]], vec![4, 8, 4, 4])),
        Some(4)
    );
    assert_eq!(
        batch_axis(&graph(add.clone(), 4, &[vec![4, 4]], vec![4, 8, 4, 4])),
        Some(4)
    );
    // an operand with one value per sample (a constant [n, …]): samples would get different
    // operands in a one-sample run
    assert_eq!(
        batch_axis(&graph(add.clone(), 4, &[vec![4, 8, 1, 1]], vec![4, 8, 4, 4])),
        None
    );
    // unless that constant is one slice repeated along axis 0 (token types expanded to the batch):
    // every sample takes the same operand
    let mut repeated = graph(add, 4, &[vec![4, 8, 1, 1]], vec![4, 8, 4, 4]);
    let slice: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let c = repeated.constants.values_mut().next().unwrap();
    *c = Tensor::from_vec(vec![4, 8, 1, 1], slice.repeat(4)).unwrap();
    assert_eq!(batch_axis(&repeated), Some(4));
    // reducing the batch axis mixes samples, even when the result keeps a dim of size n
    let sum = |axes: Vec<i64>, out| {
        graph(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes,
                keepdims: true,
                noop_with_empty_axes: false,
            },
            4,
            &[],
            out,
        )
    };
    assert_eq!(batch_axis(&sum(vec![2, 3], vec![4, 8, 1, 1])), Some(4));
    assert_eq!(batch_axis(&sum(vec![0], vec![1, 8, 4, 4])), None);
    // a softmax over the batch axis
    let softmax = |axis| Op::Softmax {
        axis,
        log: false,
        coerce_2d: false,
        nan_rows_to_zero: false,
    };
    assert_eq!(batch_axis(&graph(softmax(-1), 4, &[], vec![4, 8, 4, 4])), Some(4));
    assert_eq!(batch_axis(&graph(softmax(0), 4, &[], vec![4, 8, 4, 4])), None);
    // a transpose that moves the batch axis, even to a place of the same size
    let t = Op::Transpose {
        perm: vec![3, 1, 2, 0],
    };
    assert_eq!(batch_axis(&graph(t, 4, &[], vec![4, 8, 4, 4])), None);
    // a gather from shared data along a later axis: the output's axis 0 is the data's, not the
    // samples' (here both are 4)
    let mut g = graph(Op::Gather { axis: 1 }, 4, &[vec![4, 8]], vec![4, 4, 8, 4, 4]);
    g.nodes[0].inputs.swap(0, 1);
    g.values[0].dtype = DataType::I64;
    assert_eq!(batch_axis(&g), None);
    // a plain copy
    assert_eq!(
        batch_axis(&graph(Op::Identity, 4, &[], vec![4, 8, 4, 4])),
        Some(4)
    );
}

#[test]
fn the_one_sample_plan_must_be_the_full_plan_with_batch_one() {
    let full = graph(conv(), 4, &[vec![8, 8, 3, 3]], vec![4, 8, 4, 4]);
    let one = graph(conv(), 1, &[vec![8, 8, 3, 3]], vec![1, 8, 4, 4]);
    assert!(same_but_batch(&full, &one));
    // a constant that changed with the batch size (a folded shape computation, say)
    let mut other = one.clone();
    let c = ValueId(1);
    other
        .constants
        .insert(c, Tensor::from_vec(vec![8, 8, 3, 3], vec![1.0f32; 576]).unwrap());
    assert!(!same_but_batch(&full, &other));
    // a different attribute
    let mut other = one.clone();
    if let Op::Conv { pads, .. } = &mut other.nodes[0].op {
        *pads = vec![0, 0, 0, 0];
    }
    assert!(!same_but_batch(&full, &other));
    // a non-batch dim that changed
    let mut other = one;
    other.values[2].shape = vec![1, 8, 2, 2];
    assert!(!same_but_batch(&full, &other));
}

#[test]
fn samples_come_apart_and_stack_back() {
    let t = Tensor::from_vec(vec![3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let parts: Vec<Tensor> = (0..3).map(|i| sample(&t, i).unwrap()).collect();
    assert_eq!(parts[1].shape, vec![1, 2]);
    assert_eq!(parts[1].to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    assert!(sample(&t, 3).is_none());
    let refs: Vec<&Tensor> = parts.iter().collect();
    assert_eq!(stack(&refs).unwrap(), t);
}

#[test]
fn the_choice_takes_turns_until_every_way_ran_twice_then_keeps_the_fastest() {
    let ms = Duration::from_millis;
    let c = Choice::new(&Way::ALL);
    let mut order = Vec::new();
    for (whole, split, serial) in [(ms(10), ms(6), ms(8)), (ms(9), ms(7), ms(8))] {
        for took in [whole, split, serial] {
            let way = c.next();
            order.push(way);
            c.record(way, took);
        }
    }
    use Way::{Serial, Split, Whole};
    assert_eq!(order, [Whole, Split, Serial, Whole, Split, Serial]);
    assert_eq!(order.len(), SETTLING_RUNS);
    assert_eq!(c.settled(), Some(Split));
    assert_eq!(c.next(), Split);
    // a slow run after settling changes nothing
    c.record(Split, ms(100));
    assert_eq!(c.next(), Split);

    // the whole batch wins when it is fastest at its best
    let c = Choice::new(&Way::ALL);
    for _ in 0..2 {
        c.record(Whole, ms(5));
        c.record(Split, ms(8));
        assert_eq!(c.settled(), None, "serial has not run yet");
        c.record(Serial, ms(6));
    }
    assert_eq!(c.settled(), Some(Whole));

    // one sample at a time on every thread wins when the samples cost less as single requests
    let c = Choice::new(&Way::ALL);
    for _ in 0..2 {
        c.record(Whole, ms(20));
        c.record(Split, ms(18));
        c.record(Serial, ms(17));
    }
    assert_eq!(c.settled(), Some(Serial));

    // without the split way, whole and serial take turns and settle after two each
    let c = Choice::new(&Way::NOT_SPLIT);
    let mut order = Vec::new();
    for took in [ms(9), ms(7), ms(9), ms(8)] {
        let way = c.next();
        order.push(way);
        c.record(way, took);
    }
    assert_eq!(order, [Whole, Serial, Whole, Serial]);
    assert_eq!(c.settled(), Some(Serial));
}

/// `x [n, 4, 6]` through `ops` in turn (each with its output shape), as an attention block takes Q, K
/// and V apart.
fn chain(n: usize, ops: Vec<(Op, Vec<usize>)>) -> ConcreteGraph {
    let val = |name: String, shape: Vec<usize>| ConcreteValue {
        name,
        dtype: DataType::F32,
        shape,
    };
    let mut values = vec![val("x".into(), vec![n, 4, 6])];
    let mut nodes = Vec::new();
    for (i, (op, shape)) in ops.into_iter().enumerate() {
        values.push(val(format!("v{i}"), shape));
        nodes.push(Node {
            name: format!("n{i}"),
            op,
            inputs: vec![Some(ValueId(i))],
            outputs: vec![Some(ValueId(i + 1))],
        });
    }
    let last = ValueId(values.len() - 1);
    ConcreteGraph {
        values,
        nodes,
        inputs: vec![ValueId(0)],
        outputs: vec![last],
        constants: BTreeMap::new(),
    }
}

#[test]
fn the_sample_axis_is_followed_through_transpose_slice_and_reshape() {
    let n = 3;
    let reshape = || Op::Reshape { allowzero: false };
    let to_front = Op::Transpose {
        perm: vec![2, 0, 1, 3],
    };
    let take_q = |start: i64, batch_start: i64| Op::Slice {
        starts: vec![start, batch_start, 0, 0],
        steps: vec![1, 1, 1, 1],
    };
    // [n, 4, 6] → [n, 4, 3, 2] → [3, n, 4, 2] → [1, n, 4, 2] → [n, 4, 2]
    let qkv = |slice: Op, sliced: Vec<usize>, last: Option<Op>| {
        let mut ops = vec![
            (reshape(), vec![n, 4, 3, 2]),
            (to_front.clone(), vec![3, n, 4, 2]),
            (slice, sliced.clone()),
        ];
        if let Some(op) = last {
            let mut out = sliced;
            out.remove(0);
            ops.push((op, out));
        }
        chain(n, ops)
    };
    assert_eq!(
        batch_axis(&qkv(take_q(1, 0), vec![1, n, 4, 2], Some(reshape()))),
        Some(n),
        "the samples leave axis 0 and come back"
    );
    // a Slice that drops samples mixes them up
    assert_eq!(
        batch_axis(&qkv(take_q(0, 1), vec![3, n - 1, 4, 2], Some(reshape()))),
        None
    );
    // an output whose samples are not on axis 0 cannot be stacked
    assert_eq!(batch_axis(&qkv(take_q(1, 0), vec![1, n, 4, 2], None)), None);
    // a softmax along the axis that now carries the samples mixes them
    let softmax_off_axis = chain(
        n,
        vec![
            (Op::Transpose { perm: vec![1, 0, 2] }, vec![4, n, 6]),
            (
                Op::Softmax {
                    axis: 1,
                    log: false,
                    coerce_2d: false,
                    nan_rows_to_zero: false,
                },
                vec![4, n, 6],
            ),
            (Op::Transpose { perm: vec![1, 0, 2] }, vec![n, 4, 6]),
        ],
    );
    assert_eq!(batch_axis(&softmax_off_axis), None);
}

#[test]
fn samples_merged_with_heads_or_positions_stay_apart() {
    let n = 3;
    let reshape = || Op::Reshape { allowzero: false };
    let swap01 = || Op::Transpose { perm: vec![1, 0, 2] };
    let softmax = |axis| Op::Softmax {
        axis,
        log: false,
        coerce_2d: false,
        nan_rows_to_zero: false,
    };
    // torchvision's attention: [B, L, E] → [L, B, E] → [L, B·H, D] → [B·H, L, D] (per-head work)
    // → [B, H, L, D] → [L, B, H, D] → [L·B, E] (per-row work) → [L, B, E] → [B, L, E]
    let attention = |per_head: Op| {
        chain(
            n,
            vec![
                (swap01(), vec![4, n, 6]),
                (reshape(), vec![4, n * 3, 2]),
                (swap01(), vec![n * 3, 4, 2]),
                (per_head, vec![n * 3, 4, 2]),
                (reshape(), vec![n, 3, 4, 2]),
                (
                    Op::Transpose {
                        perm: vec![2, 0, 1, 3],
                    },
                    vec![4, n, 3, 2],
                ),
                (reshape(), vec![4 * n, 6]),
                (reshape(), vec![4, n, 6]),
                (swap01(), vec![n, 4, 6]),
            ],
        )
    };
    assert_eq!(batch_axis(&attention(softmax(2))), Some(n));
    // along the merged batch·heads axis, a softmax mixes samples
    assert_eq!(batch_axis(&attention(softmax(0))), None);
    // a Reshape that cuts across samples: [L, B, E] read as [B, L·E]
    let across = chain(n, vec![(swap01(), vec![4, n, 6]), (reshape(), vec![n, 24])]);
    assert_eq!(batch_axis(&across), None);
}

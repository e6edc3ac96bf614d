//! Which plans run on the caller's thread instead of the executor's pool.
//!
//! Handing a run to the pool and its answer back costs two thread wake-ups, plus the pool thread's
//! idle spinning once the job is done: tens of microseconds of CPU and latency on a busy machine,
//! far more than a plan that adds or moves a few thousand elements takes to run (an identity or
//! pre-processing model, a KServe overhead test). Such a plan runs where it is asked for, as a
//! synchronous call inside `CpuExecutor::run`; every other plan still goes to the pool, so a
//! caller on an async runtime is never held up by real work.
//!
//! A plan qualifies when all its nodes are element-wise or data-movement ops and none of its values
//! has more than [`MAX_ELEMENTS`] elements. Those kernels go parallel only from
//! [`elementwise::PAR_MIN`] and [`movement::PAR_MIN`] elements up, so such a run never enters rayon
//! (from a thread outside our pool it would reach rayon's global pool) and stays in the
//! microseconds. The first run of a plan always goes to the pool, which builds it.

use crate::cpu::{elementwise, movement};
use crate::ir::{ConcreteGraph, Op};

/// The largest value, in elements, of a plan that runs on the caller's thread.
pub(crate) const MAX_ELEMENTS: usize = 4096;

const _: () = assert!(MAX_ELEMENTS < elementwise::PAR_MIN && MAX_ELEMENTS < movement::PAR_MIN);

/// Whether a plan for `graph` runs on the caller's thread.
pub(crate) fn runs_on_caller(graph: &ConcreteGraph) -> bool {
    graph.nodes.iter().all(|n| is_light(&n.op)) && graph.values.iter().all(|v| v.len() <= MAX_ELEMENTS)
}

/// Ops whose kernels stay on the calling thread below [`MAX_ELEMENTS`] (their only parallel paths
/// are the element-wise and strided-gather ones).
fn is_light(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::Cast { .. }
            | Op::Identity
            | Op::Reshape { .. }
            | Op::Flatten { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::Transpose { .. }
            | Op::Concat { .. }
            | Op::Split { .. }
            | Op::Slice { .. }
            | Op::Gather { .. }
            | Op::Expand
            | Op::Tile { .. }
    )
}

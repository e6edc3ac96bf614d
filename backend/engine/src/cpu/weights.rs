//! Weights shared by all the plans of one executor: a constant's converted buffer and its packed
//! GEMM panels are built once and borrowed (through `Arc`) by every plan that reads the same tensor,
//! whatever its batch size.
//!
//! A constant is known by the allocation of its bytes. Specialisation hands plans the model's own
//! constant tensors (a `Bytes` clone of the weights, BatchNorm already folded into Conv at load), so
//! every plan of a model sees the same allocation for the same weight; a constant folded during
//! specialisation is a new allocation and simply gets an entry of its own. An entry keeps a clone of
//! the tensor, so its address cannot be reused for other bytes while the entry lives, and only a weak
//! reference to what was built from it: once no plan holds the buffer (plans evicted from the cache),
//! the entry is dropped on the next insertion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::cpu::buf::Buf;
use crate::cpu::conv::{FilterLayout, PackedFilters};
use crate::cpu::mm::PackedB;
use crate::cpu::quant::qconv::{FilterOrder, PackedFilters as QPackedFilters};
use crate::cpu::quant::qgemm::{PackedRight, QKernel};
use crate::cpu::simd::Isa;
use crate::error::{EngineError, Result};
use crate::tensor::{DataType, Tensor};

/// Constant operands of a node converted once, when its plan is built.
pub(crate) enum Prepared {
    /// a Conv's filters, packed for the product it runs
    ConvWeights(PackedFilters),
    /// a MatMul's or Gemm's constant B, packed
    Rhs(PackedB),
    /// an integer convolution's 8-bit filters (ConvInteger, QLinearConv), packed per group
    QConvFilters(QPackedFilters),
    /// an integer product's constant 2-D 8-bit right-hand side (MatMulInteger, QLinearMatMul)
    QRhs(PackedRight),
}

/// The shared weights of one executor's plans.
#[derive(Default)]
pub(crate) struct Weights {
    store: Mutex<Store>,
}

/// How a constant is packed for its kernel; with the tensor, it decides the packed panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Packing {
    /// a Conv's filters, as [`crate::cpu::conv::pack_filters`] packs them
    ConvWeights {
        /// the Conv's `group`
        group: usize,
        /// the kernel they are laid out for
        layout: FilterLayout,
        /// the instruction set the panels are laid out for
        isa: Isa,
    },
    /// a MatMul's or Gemm's 2-D constant right-hand side
    Rhs {
        /// whether the constant is read transposed
        trans: bool,
        /// the instruction set the panels are laid out for
        isa: Isa,
    },
    /// an integer convolution's filters, as [`QPackedFilters::pack`] packs them
    QConvFilters {
        /// the convolution's `group`
        group: usize,
        /// the micro-kernel the panels are laid out for
        kernel: QKernel,
        /// the order of each filter's codes along k
        order: FilterOrder,
    },
    /// an integer product's constant right-hand side, as [`PackedRight::pack`] packs it
    QRhs {
        /// whether the left operand's codes are INT8 (the right one is then read as UINT8)
        left_signed: bool,
        /// the micro-kernel the panels are laid out for
        kernel: QKernel,
    },
}

#[derive(Default)]
struct Store {
    bufs: HashMap<TensorKey, Entry<Buf>>,
    packed: HashMap<(TensorKey, Packing), Entry<Prepared>>,
}

/// What was built from one tensor: the tensor itself (pinning its address) and a weak reference.
struct Entry<T> {
    _pin: Tensor,
    built: Weak<T>,
}

/// A tensor's identity: the address and length of its bytes, its dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TensorKey {
    addr: usize,
    len: usize,
    dtype: DataType,
    shape: Vec<usize>,
}

impl TensorKey {
    fn of(t: &Tensor) -> TensorKey {
        TensorKey {
            addr: t.data.as_ptr() as usize,
            len: t.data.len(),
            dtype: t.dtype,
            shape: t.shape.clone(),
        }
    }
}

impl Weights {
    /// The converted buffer of constant `t`, shared with every other plan that reads it.
    pub(crate) fn buf(&self, t: &Tensor) -> Result<Arc<Buf>> {
        let key = TensorKey::of(t);
        shared(&self.store, |s| &mut s.bufs, key, t, || Buf::from_tensor(t))
    }

    /// `t` packed as `packing` says (by `build`), shared with every other plan that packs it so.
    pub(crate) fn packed(
        &self,
        t: &Tensor,
        packing: Packing,
        build: impl FnOnce() -> Result<Prepared>,
    ) -> Result<Arc<Prepared>> {
        let key = (TensorKey::of(t), packing);
        shared(&self.store, |s| &mut s.packed, key, t, build)
    }

    /// How many converted buffers and packed weights are alive (held by at least one plan).
    #[cfg(test)]
    pub(crate) fn live(&self) -> (usize, usize) {
        let Ok(s) = self.store.lock() else {
            return (0, 0);
        };
        (
            s.bufs.values().filter(|e| e.built.strong_count() > 0).count(),
            s.packed.values().filter(|e| e.built.strong_count() > 0).count(),
        )
    }
}

/// The live entry for `key` in the map `map` selects, or a new one made by `build`. The lock is
/// not held while building: a build may run rayon work, and a plan build waiting on this lock could
/// be stolen onto the same thread. Two racing builds of one weight keep the first one stored.
fn shared<K, T>(
    store: &Mutex<Store>,
    map: impl Fn(&mut Store) -> &mut HashMap<K, Entry<T>>,
    key: K,
    t: &Tensor,
    build: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>>
where
    K: std::hash::Hash + Eq,
{
    let poisoned = || EngineError::internal("shared weight store poisoned");
    {
        let mut s = store.lock().map_err(|_| poisoned())?;
        if let Some(b) = map(&mut s).get(&key).and_then(|e| e.built.upgrade()) {
            return Ok(b);
        }
    }
    let built = Arc::new(build()?);
    let mut s = store.lock().map_err(|_| poisoned())?;
    let m = map(&mut s);
    if let Some(b) = m.get(&key).and_then(|e| e.built.upgrade()) {
        return Ok(b);
    }
    m.retain(|_, e| e.built.strong_count() > 0);
    m.insert(
        key,
        Entry {
            _pin: t.clone(),
            built: Arc::downgrade(&built),
        },
    );
    Ok(built)
}

//! The plans an executor keeps: one per distinct input shapes (and host-input values), least
//! recently used dropped first. Shared by the CPU and wgpu executors; each builds its own plans.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::tensor::Tensor;

/// What a plan is specialised for: the inputs' shapes, and the values of the model's host inputs.
pub(crate) type PlanKey = (Vec<Vec<usize>>, Vec<Tensor>);

/// The key of the plan for `inputs` (in signature order) of `model`.
pub(crate) fn plan_key(model: &Model, inputs: &[Tensor]) -> PlanKey {
    (
        inputs.iter().map(|t| t.shape.clone()).collect(),
        model
            .host_inputs()
            .iter()
            .filter_map(|&i| inputs.get(i).cloned())
            .collect(),
    )
}

/// Cached plans with their keys, most recently used last.
type Entries<P> = Vec<(PlanKey, Arc<P>)>;

/// At most `capacity` plans.
pub(crate) struct PlanCache<P> {
    plans: Mutex<Entries<P>>,
    capacity: usize,
}

impl<P> PlanCache<P> {
    /// A cache of `capacity` plans (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        PlanCache {
            plans: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Entries<P>>> {
        self.plans
            .lock()
            .map_err(|_| EngineError::internal("plan cache poisoned"))
    }

    /// The plan for `key`, marked most recently used; `None` when none is built.
    pub(crate) fn get(&self, key: &PlanKey) -> Result<Option<Arc<P>>> {
        let mut plans = self.lock()?;
        Ok(plans.iter().position(|(k, _)| k == key).map(|pos| {
            let e = plans.remove(pos);
            let p = Arc::clone(&e.1);
            plans.push(e);
            p
        }))
    }

    /// Keeps `plan` for `key` (replacing one built meanwhile), dropping the least recently used when full.
    pub(crate) fn insert(&self, key: PlanKey, plan: Arc<P>) -> Result<()> {
        let mut plans = self.lock()?;
        if let Some(pos) = plans.iter().position(|(k, _)| *k == key) {
            plans.remove(pos);
        }
        if plans.len() >= self.capacity {
            plans.remove(0);
        }
        plans.push((key, plan));
        Ok(())
    }

    /// Drops every plan.
    #[cfg(test)]
    pub(crate) fn clear(&self) {
        if let Ok(mut plans) = self.lock() {
            plans.clear();
        }
    }

    /// The sum of `f` over the cached plans (0 if the lock is poisoned).
    pub(crate) fn sum(&self, f: impl Fn(&P) -> u64) -> u64 {
        self.lock()
            .map(|p| p.iter().map(|(_, plan)| f(plan)).sum())
            .unwrap_or(0)
    }
}

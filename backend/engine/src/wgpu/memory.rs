//! Device memory the engine holds, per device: every plan adds the sizes of the buffers it created when it
//! is built and takes them away when it is dropped. This is the engine's own account of its buffers, not
//! the driver's view of the whole device (other processes, pipelines and driver overhead are not in it).
//!
//! Devices are keyed by adapter name: sessions that open separate wgpu devices on one adapter add up to
//! one figure, and a device that was lost and replaced keeps its series.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Bytes the engine has allocated on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The adapter's name, as wgpu reports it (`NVIDIA H200`, `llvmpipe (LLVM 19.1.7, 256 bits)`).
    pub device: String,
    /// Bytes held in buffers the engine created on it.
    pub allocated_bytes: u64,
}

/// The counters of every device opened in this process, in the order they were first opened.
static DEVICES: Mutex<Vec<(String, Arc<AtomicU64>)>> = Mutex::new(Vec::new());

/// The counter of `device`, registered at zero on first use.
pub(crate) fn counter(device: &str) -> Arc<AtomicU64> {
    // A panic while holding this lock cannot leave the list half-written: take it as it is.
    let mut devices = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, c)) = devices.iter().find(|(name, _)| name == device) {
        return Arc::clone(c);
    }
    let c = Arc::new(AtomicU64::new(0));
    devices.push((device.to_owned(), Arc::clone(&c)));
    c
}

/// Device memory the engine holds on every device opened in this process (zero for one whose plans are
/// all gone), in the order the devices were opened.
pub fn device_memory() -> Vec<DeviceMemory> {
    DEVICES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(device, c)| DeviceMemory {
            device: device.clone(),
            allocated_bytes: c.load(Ordering::Relaxed),
        })
        .collect()
}

/// Bytes held on a device for as long as this value lives.
pub(crate) struct Allocation {
    bytes: u64,
    counter: Arc<AtomicU64>,
}

impl Allocation {
    /// Adds `bytes` to `counter` until the allocation is dropped.
    pub(crate) fn new(counter: &Arc<AtomicU64>, bytes: u64) -> Self {
        counter.fetch_add(bytes, Ordering::Relaxed);
        Allocation {
            bytes,
            counter: Arc::clone(counter),
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_add_up_per_device_and_are_given_back_when_dropped() {
        let a = counter("memory-test adapter A");
        let b = counter("memory-test adapter B");
        let of = |name: &str| {
            device_memory()
                .into_iter()
                .find(|d| d.device == name)
                .map(|d| d.allocated_bytes)
        };
        assert_eq!(of("memory-test adapter A"), Some(0), "registered at zero");
        let first = Allocation::new(&a, 1000);
        let second = Allocation::new(&counter("memory-test adapter A"), 24);
        let other = Allocation::new(&b, 7);
        assert_eq!(of("memory-test adapter A"), Some(1024));
        assert_eq!(of("memory-test adapter B"), Some(7));
        drop(first);
        assert_eq!(of("memory-test adapter A"), Some(24));
        drop((second, other));
        assert_eq!(of("memory-test adapter A"), Some(0));
        assert_eq!(of("memory-test adapter B"), Some(0));
    }
}

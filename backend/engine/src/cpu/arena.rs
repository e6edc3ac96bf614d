//! Reuse of f32 output buffers between the nodes of a run and between runs, per thread: a buffer
//! freed after its value's last use is handed to the next kernel that needs one of about its size,
//! so large activations are neither zeroed nor faulted in again.
//!
//! A taken buffer holds stale (initialised) values; kernels that take one write every element.

use std::cell::RefCell;

/// Buffers kept per thread, at most.
const MAX_BUFFERS: usize = 32;
/// Values kept per thread, at most (128 MiB).
const MAX_VALUES: usize = 1 << 25;

thread_local! {
    static FREE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `n` values with unspecified contents (the caller overwrites all of them).
pub(crate) fn take(n: usize) -> Vec<f32> {
    let found = FREE.with(|f| {
        let mut f = f.borrow_mut();
        // the smallest buffer that holds n values without wasting more than half of it
        let best = f
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= n && v.capacity() <= 2 * n.max(1))
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        best.map(|i| f.swap_remove(i))
    });
    match found {
        Some(mut v) => {
            // values past the old length are zeroed, the others kept
            v.resize(n, 0.0);
            v
        }
        None => vec![0f32; n],
    }
}

/// Give a buffer back for later [`take`]s on this thread.
pub(crate) fn give(v: Vec<f32>) {
    if v.len() < 1024 {
        return;
    }
    FREE.with(|f| {
        let mut f = f.borrow_mut();
        let held: usize = f.iter().map(Vec::capacity).sum();
        if f.len() >= MAX_BUFFERS || held + v.capacity() > MAX_VALUES {
            // keep the larger buffers: they are the expensive ones to fault in
            if let Some((i, _)) = f.iter().enumerate().min_by_key(|(_, b)| b.capacity())
                && f[i].capacity() < v.capacity()
            {
                f[i] = v;
            }
            return;
        }
        f.push(v);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_at_the_size_asked_for() {
        let mut a = take(5000);
        assert_eq!(a.len(), 5000);
        a.iter_mut().for_each(|v| *v = 7.0);
        let ptr = a.as_ptr();
        give(a);
        // about the same size: the same memory, truncated, contents stale
        let b = take(4000);
        assert_eq!((b.len(), b.as_ptr()), (4000, ptr));
        assert!(b.iter().all(|&v| v == 7.0));
        give(b);
        // much smaller: a fresh buffer (the large one is kept for large requests)
        let c = take(100);
        assert_ne!(c.as_ptr(), ptr);
        assert!(c.iter().all(|&v| v == 0.0));
        // larger than any kept: fresh and zeroed
        let d = take(11000);
        assert_eq!(d.len(), 11000);
        assert!(d.iter().all(|&v| v == 0.0));
        // within the kept capacity: the same memory, zeros past what was kept
        let e = take(4500);
        assert_eq!(e.as_ptr(), ptr);
        assert!(e[..4000].iter().all(|&v| v == 7.0) && e[4000..].iter().all(|&v| v == 0.0));
    }
}

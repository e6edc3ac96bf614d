//! Reuse of f32 buffers between the nodes of a run and between runs: a buffer freed after its
//! value's last use is handed to the next kernel that needs one of about its size, so large
//! activations are neither zeroed nor faulted in again.
//!
//! One pool serves every thread. A value is often taken on one thread (a kernel's task) and freed
//! on another (the executor, after its last use); per-thread lists filled up on the freeing side
//! with large buffers while the other side missed on every run, and each miss zeroed fresh memory.
//!
//! A taken buffer holds stale (initialised) values; kernels that take one write every element.

use std::sync::Mutex;

/// Buffers kept, at most.
const MAX_BUFFERS: usize = 64;
/// Values kept, at most (128 MiB).
const MAX_VALUES: usize = 1 << 25;

static POOL: Mutex<Pool> = Mutex::new(Pool::new());

/// A buffer of `n` values with unspecified contents (the caller overwrites all of them).
pub(crate) fn take(n: usize) -> Vec<f32> {
    let found = POOL.lock().unwrap_or_else(|e| e.into_inner()).take(n);
    sized(found, n)
}

/// `found` at length `n` (values past its old length zeroed, the others kept), or a fresh zeroed
/// buffer; outside the pool's lock.
fn sized(found: Option<Vec<f32>>, n: usize) -> Vec<f32> {
    match found {
        Some(mut v) => {
            v.resize(n, 0.0);
            v
        }
        None => vec![0f32; n],
    }
}

/// Give a buffer back for later [`take`]s.
pub(crate) fn give(v: Vec<f32>) {
    if v.len() < 1024 {
        return;
    }
    POOL.lock().unwrap_or_else(|e| e.into_inner()).give(v);
}

/// Free buffers, the least recently given first, and the values they hold.
struct Pool {
    free: Vec<Vec<f32>>,
    values: usize,
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            free: Vec::new(),
            values: 0,
        }
    }

    /// The buffer for `n` values: the smallest that holds them without wasting more than half of
    /// it, one whose length already covers `n` first (nothing to zero), the most recent of equals.
    fn take(&mut self, n: usize) -> Option<Vec<f32>> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= n && v.capacity() <= 2 * n.max(1))
            .min_by_key(|&(i, v)| (v.len() < n, v.capacity(), usize::MAX - i))
            .map(|(i, _)| i)?;
        let v = self.free.remove(best);
        self.values -= v.capacity();
        Some(v)
    }

    /// Keep `v`; past the bounds, the smallest buffers go first. A large buffer is the one that
    /// costs to make again (zeroed, and faulted in page by page); dropping the least recently given
    /// instead let a run's many small scratch buffers push out the activations its first layers
    /// would take again on the next run.
    fn give(&mut self, v: Vec<f32>) {
        if v.capacity() > MAX_VALUES {
            return;
        }
        self.values += v.capacity();
        self.free.push(v);
        while self.free.len() > MAX_BUFFERS || self.values > MAX_VALUES {
            let smallest = (0..self.free.len())
                .min_by_key(|&i| self.free[i].capacity())
                .unwrap_or(0);
            let old = self.free.remove(smallest);
            self.values -= old.capacity();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_at_the_size_asked_for() {
        let mut pool = Pool::new();
        let mut a = sized(pool.take(5000), 5000);
        assert_eq!(a.len(), 5000);
        a.iter_mut().for_each(|v| *v = 7.0);
        let ptr = a.as_ptr();
        pool.give(a);
        // about the same size: the same memory, truncated, contents stale
        let b = sized(pool.take(4000), 4000);
        assert_eq!((b.len(), b.as_ptr()), (4000, ptr));
        assert!(b.iter().all(|&v| v == 7.0));
        pool.give(b);
        // much smaller: none (the large one is kept for large requests)
        assert!(pool.take(100).is_none());
        // larger than any kept: none
        assert!(pool.take(11000).is_none());
        // within the kept capacity: the same memory, zeros past what was kept
        let e = sized(pool.take(4500), 4500);
        assert_eq!(e.as_ptr(), ptr);
        assert!(e[..4000].iter().all(|&v| v == 7.0) && e[4000..].iter().all(|&v| v == 0.0));
        assert_eq!(pool.values, 0);
    }

    /// Of two buffers that fit, the one long enough already is taken (nothing to zero); past
    /// the bounds the smallest go first, however long ago they were given.
    #[test]
    fn the_pool_prefers_buffers_to_reuse_as_they_are_and_drops_the_smallest() {
        let mut pool = Pool::new();
        let mut short = vec![1.0f32; 6000];
        short.truncate(3000);
        let long = vec![2.0f32; 5000];
        let long_ptr = long.as_ptr();
        pool.give(short);
        pool.give(long);
        let got = pool.take(4000).expect("a buffer fits");
        assert_eq!((got.as_ptr(), got.len()), (long_ptr, 5000));

        let mut pool = Pool::new();
        let big = vec![0f32; 1 << 20];
        let big_ptr = big.as_ptr();
        pool.give(big);
        for _ in 0..MAX_BUFFERS {
            pool.give(vec![0f32; 2048]);
        }
        assert_eq!(pool.free.len(), MAX_BUFFERS);
        assert!(
            pool.free.iter().any(|v| v.as_ptr() == big_ptr),
            "the large buffer was dropped"
        );
        assert_eq!(pool.values, (1 << 20) + (MAX_BUFFERS - 1) * 2048);
        // over the size bound: small ones go until it holds
        pool.give(vec![0f32; MAX_VALUES - (1 << 20)]);
        assert!(pool.values <= MAX_VALUES);
        assert!(
            pool.free.iter().any(|v| v.as_ptr() == big_ptr),
            "the large buffer was dropped"
        );
        let before = pool.values;
        pool.give(vec![0f32; MAX_VALUES + 1]);
        assert_eq!(pool.values, before, "a buffer over the bound was kept");
    }

    /// A buffer freed on one thread serves a request on another (the process-wide pool; a size
    /// no other test asks for).
    #[test]
    fn a_buffer_given_on_one_thread_is_taken_on_another() {
        const N: usize = 3_333_331;
        let ptr = std::thread::spawn(|| {
            let v = take(N);
            let ptr = v.as_ptr() as usize;
            give(v);
            ptr
        })
        .join()
        .unwrap();
        let v = take(N);
        assert_eq!(v.as_ptr() as usize, ptr);
        give(v);
    }
}

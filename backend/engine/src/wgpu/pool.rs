//! Buffer pool planning by tensor lifetimes.
//!
//! Every intermediate value lives from the first dispatch that writes it to the last that reads it. Values
//! whose lifetimes do not overlap share a pool buffer. A dispatch's outputs are placed before the values it
//! reads for the last time are released, so an output never shares a buffer with an input of the same dispatch
//! (which would bind one buffer read-only and read-write at once).

use std::collections::BTreeMap;

/// A value's lifetime and size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    pub(crate) value: usize,
    pub(crate) bytes: u64,
    pub(crate) first: usize,
    pub(crate) last: usize,
}

/// Which pool slot holds each value, and each slot's size.
#[derive(Clone, Debug, Default)]
pub(crate) struct Assignment {
    pub(crate) slot_of: BTreeMap<usize, usize>,
    pub(crate) slot_sizes: Vec<u64>,
}

/// Greedy best-fit assignment in step order: reuse the smallest free slot that is large enough, else grow the
/// largest free slot, else open a new one.
pub(crate) fn assign(intervals: &[Interval]) -> Assignment {
    let mut order: Vec<&Interval> = intervals.iter().collect();
    order.sort_by_key(|i| (i.first, std::cmp::Reverse(i.bytes)));
    let mut out = Assignment::default();
    // Slots busy until (and including) a step.
    let mut busy_until: Vec<Option<usize>> = Vec::new();
    for iv in order {
        let free: Vec<usize> = (0..busy_until.len())
            .filter(|&s| busy_until[s].is_none_or(|end| end < iv.first))
            .collect();
        let fit = free
            .iter()
            .copied()
            .filter(|&s| out.slot_sizes[s] >= iv.bytes)
            .min_by_key(|&s| out.slot_sizes[s]);
        let slot = match fit {
            Some(s) => s,
            None => match free.iter().copied().max_by_key(|&s| out.slot_sizes[s]) {
                Some(s) => {
                    out.slot_sizes[s] = iv.bytes;
                    s
                }
                None => {
                    out.slot_sizes.push(iv.bytes);
                    busy_until.push(None);
                    out.slot_sizes.len() - 1
                }
            },
        };
        busy_until[slot] = Some(iv.last);
        out.slot_of.insert(iv.value, slot);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(value: usize, bytes: u64, first: usize, last: usize) -> Interval {
        Interval {
            value,
            bytes,
            first,
            last,
        }
    }

    #[test]
    fn a_chain_needs_two_slots_and_never_shares_with_its_input() {
        // v0 -> step0 -> v1 -> step1 -> v2 -> step2 -> v3 ...
        let ivs: Vec<Interval> = (0..6).map(|k| iv(k, 100, k, k + 1)).collect();
        let a = assign(&ivs);
        assert_eq!(a.slot_sizes.len(), 2);
        for k in 0..5 {
            assert_ne!(a.slot_of[&k], a.slot_of[&(k + 1)]);
        }
    }

    #[test]
    fn overlapping_lifetimes_get_distinct_slots_and_sizes_cover_every_occupant() {
        let ivs = vec![iv(0, 10, 0, 5), iv(1, 50, 1, 2), iv(2, 80, 3, 4), iv(3, 20, 6, 7)];
        let a = assign(&ivs);
        for x in &ivs {
            for y in &ivs {
                let overlap = x.first <= y.last && y.first <= x.last;
                if x.value != y.value && overlap {
                    assert_ne!(a.slot_of[&x.value], a.slot_of[&y.value]);
                }
            }
            assert!(a.slot_sizes[a.slot_of[&x.value]] >= x.bytes);
        }
        assert_eq!(a.slot_sizes.len(), 2);
    }
}

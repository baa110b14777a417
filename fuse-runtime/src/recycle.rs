//! Large f32 vectors of the CPU backend kept for reuse instead of being returned to the system.
//!
//! A call's big intermediates (a prefill's GEMM outputs: megabytes each) are freed at its end and allocated
//! again, of the same lengths, by the next layer's call. The allocator gives vectors that large back to the
//! system (`munmap`), so each new one starts on fresh pages, and every first touch of a page is a page fault:
//! about 33,000 per 128-token prefill of llama-3.2-1b, and on a 16-core machine the faults of the threads
//! writing one product's output contend on the kernel's locks (perf: 12% of every thread's time in
//! `__pv_queued_spin_lock_slowpath` there). Vectors of at least [`MIN_BYTES`] are kept here when their
//! storage is dropped (of the lengths asked for before), at most [`MAX_BYTES`] in all, and a request for the
//! same length takes one back.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Smaller vectors come from the allocator's own free lists (below its threshold for mapping pages).
const MIN_BYTES: usize = 256 << 10;
/// The most bytes kept: a few layers' intermediates at the models' shapes (a 512-token prefill of an 8B
/// model's gate and up products: 59 MB); past it the oldest go back.
const MAX_BYTES: usize = 256 << 20;

#[derive(Default)]
struct Kept {
    /// By length: the vectors of that length, the last given first taken.
    by_len: HashMap<usize, Vec<(u64, Vec<f32>)>>,
    /// The lengths asked for: only vectors of those are kept (a dropped tensor of another length would
    /// only hold memory).
    wanted: HashSet<usize>,
    bytes: usize,
    /// Stamps the vectors in the order they were given, for dropping the oldest.
    clock: u64,
}

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

fn worth_keeping(len: usize) -> bool {
    len.saturating_mul(4) >= MIN_BYTES
}

/// A vector of `len` zeros: a kept one of that length zero-filled where there is one.
pub(crate) fn zeros_f32(len: usize) -> Vec<f32> {
    match take_kept(len) {
        Some(mut v) => {
            v.fill(0.0);
            v
        }
        None => vec![0.0; len],
    }
}

/// A vector of `len` values for a caller that writes every one before reading any: a kept one as it was
/// left, else zeros.
pub(crate) fn for_overwrite_f32(len: usize) -> Vec<f32> {
    take_kept(len).unwrap_or_else(|| vec![0.0; len])
}

fn take_kept(len: usize) -> Option<Vec<f32>> {
    if !worth_keeping(len) {
        return None;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let k = kept.get_or_insert_with(Kept::default);
    k.wanted.insert(len);
    let v = k.by_len.get_mut(&len)?.pop()?.1;
    k.bytes -= 4 * v.capacity();
    Some(v)
}

/// Keeps `v` for a later [`zeros_f32`] or [`for_overwrite_f32`] of its length (or drops it: too small, or the oldest past the bound).
pub(crate) fn give_f32(v: Vec<f32>) {
    if !worth_keeping(v.len()) || v.len() != v.capacity() {
        return;
    }
    let dropped = {
        let mut guard = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        let k = guard.get_or_insert_with(Kept::default);
        if !k.wanted.contains(&v.len()) {
            return;
        }
        k.give(v, MAX_BYTES)
    };
    // Freed outside the lock.
    drop(dropped);
}

impl Kept {
    /// Adds `v`; returns the oldest vectors that no longer fit in `max_bytes`.
    fn give(&mut self, v: Vec<f32>, max_bytes: usize) -> Vec<Vec<f32>> {
        self.clock += 1;
        self.bytes += 4 * v.capacity();
        self.by_len.entry(v.len()).or_default().push((self.clock, v));
        let mut dropped = Vec::new();
        while self.bytes > max_bytes {
            let oldest = self.by_len.iter().filter_map(|(&len, vs)| Some((vs.first()?.0, len))).min();
            let Some((_, len)) = oldest else { break };
            let (_, old) = self.by_len.get_mut(&len).expect("found above").remove(0);
            self.bytes -= 4 * old.capacity();
            dropped.push(old);
        }
        self.by_len.retain(|_, vs| !vs.is_empty());
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_vector_comes_back_zeroed_and_small_ones_are_not_kept() {
        let len = MIN_BYTES / 4 + 3;
        let mut v = zeros_f32(len); // asks for the length: a vector of it is kept from now on
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32 + 1.0);
        let at = v.as_ptr() as usize;
        give_f32(v);
        let back = zeros_f32(len);
        assert!(back.iter().all(|&x| x == 0.0) && back.len() == len);
        // Another test may take it first (the store is the process's); where this one got it, it is the same.
        if back.as_ptr() as usize == at {
            assert_eq!(back.capacity(), len);
        }
        give_f32(vec![1.0; 16]);
        assert!(zeros_f32(16).iter().all(|&x| x == 0.0));
    }

    #[test]
    fn past_the_bound_the_oldest_go() {
        let mut kept = Kept::default();
        assert!(kept.give(vec![1.0; 100], 1000).is_empty());
        assert!(kept.give(vec![2.0; 50], 1000).is_empty());
        // 400 + 200 + 600 bytes: the oldest (the 100) goes, the two others stay.
        let dropped = kept.give(vec![3.0; 150], 1000);
        assert_eq!(dropped.iter().map(Vec::len).collect::<Vec<_>>(), [100]);
        assert_eq!(kept.bytes, 800);
        assert_eq!(kept.by_len.keys().copied().collect::<std::collections::BTreeSet<_>>(), [50, 150].into());
    }
}

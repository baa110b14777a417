//! Freed device buffers kept by byte size for the next allocation of that size, so that a call's outputs
//! and intermediates cost no driver call (an uncaptured call's host time is mostly driver calls: each
//! stream-ordered alloc and free is one). Safe to hand out at once: every use of device memory is ordered on
//! the device's one stream, so work queued with the new owner runs after the old owner's.

use std::collections::BTreeMap;

/// Bytes the cache may hold in all; a buffer past it is freed.
const MAX_BYTES: usize = 256 << 20;
/// Buffers of one size the cache may hold.
const MAX_PER_SIZE: usize = 32;

/// Buffers by byte size (`B`: a device buffer; plain data in the tests). A B-tree, not a hash map: a call
/// takes and puts back a buffer each time, and a few comparisons of sizes cost less than hashing one.
pub(crate) struct BufferCache<B> {
    by_size: BTreeMap<usize, Vec<B>>,
    bytes: usize,
}

impl<B> Default for BufferCache<B> {
    fn default() -> Self {
        BufferCache { by_size: BTreeMap::new(), bytes: 0 }
    }
}

impl<B> BufferCache<B> {
    /// A kept buffer of exactly `bytes`, if any (the most recently kept).
    pub(crate) fn take(&mut self, bytes: usize) -> Option<B> {
        let buffer = self.by_size.get_mut(&bytes)?.pop()?;
        self.bytes -= bytes;
        Some(buffer)
    }

    /// Keeps `buffer` of `bytes`, or gives it back when the cache is full (the caller frees it).
    pub(crate) fn put(&mut self, bytes: usize, buffer: B) -> Option<B> {
        let same = self.by_size.entry(bytes).or_default();
        if same.len() >= MAX_PER_SIZE || self.bytes + bytes > MAX_BYTES {
            return Some(buffer);
        }
        same.push(buffer);
        self.bytes += bytes;
        None
    }

    /// Every kept buffer (to be freed: an allocation failed for want of memory).
    pub(crate) fn drain(&mut self) -> Vec<B> {
        self.bytes = 0;
        std::mem::take(&mut self.by_size).into_values().flatten().collect()
    }

    /// Bytes kept.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_serves_the_same_size_only() {
        let mut cache = BufferCache::default();
        assert!(cache.put(64, vec![1u8; 64]).is_none());
        assert_eq!(cache.take(65), None);
        assert_eq!(cache.take(64), Some(vec![1u8; 64]));
        assert_eq!(cache.take(64), None);
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_full_cache_gives_buffers_back() {
        let mut cache = BufferCache::default();
        for i in 0..MAX_PER_SIZE {
            assert!(cache.put(8, i).is_none());
        }
        assert_eq!(cache.put(8, 99), Some(99), "per size");
        assert_eq!(cache.put(MAX_BYTES, 7), Some(7), "in all");
        assert_eq!(cache.bytes(), 8 * MAX_PER_SIZE);
        let mut all = cache.drain();
        all.sort();
        assert_eq!(all, (0..MAX_PER_SIZE).collect::<Vec<_>>());
        assert_eq!((cache.bytes(), cache.take(8)), (0, None));
    }
}

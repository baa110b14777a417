//! The key/value cache: per layer, the keys and values of every position so far, in memory allocated once
//! at its capacity ([b, hkv, capacity, d]). A step writes only its new rows, in place (`slice_set` inside
//! the attention block), and attention reads the first `len` rows as a view: no copy of the cache and no
//! allocation for it per token. Its capacity is checked: a prompt or a generation past it is an error.
//! Each sequence of a batch holds its own number of positions (prompts of different lengths: see
//! [`super::Llama::forward_sequence`]); a step appends one position to each, at its own.

use fuse::prelude::*;

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    /// Positions each sequence holds.
    lens: Vec<usize>,
    capacity: usize,
    /// Tells caches apart (a recorded decode step writes the memory of the one it was made for).
    id: u64,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl KvCache {
    /// An empty cache for `layers` layers of `kv_heads` heads of `head_dim`, batch `batch`, holding at most
    /// `capacity` positions (allocated now, zero-filled).
    pub fn new(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<KvCache> {
        let shape = [batch, kv_heads, capacity, head_dim];
        let layers = (0..layers)
            .map(|_| Ok((Tensor::zeros(&shape, dtype, dev)?, Tensor::zeros(&shape, dtype, dev)?)))
            .collect::<Result<Vec<_>>>()?;
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(KvCache { layers, lens: vec![0; batch], capacity, id })
    }

    /// Positions held: the longest sequence's (every sequence's when they advance together).
    pub fn len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    /// Positions each sequence holds.
    pub fn lens(&self) -> &[usize] {
        &self.lens
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sequences held.
    pub fn batch(&self) -> usize {
        self.lens.len()
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Another handle to the same memory (the lengths stay with this one): what a recorded step reads.
    pub(crate) fn clone_handles(&self) -> KvCache {
        KvCache { layers: self.layers.clone(), lens: self.lens.clone(), capacity: self.capacity, id: self.id }
    }

    /// Sequence `seq`'s memory as a cache of one sequence (views of this one's; its length is `seq`'s, and
    /// stays with the view): what a step over that sequence alone writes into.
    pub(crate) fn sequence(&self, seq: usize) -> crate::Result<KvCache> {
        if seq >= self.batch() {
            return Err(crate::Error::BadShape { what: format!("sequence {seq} of a cache of {}", self.batch()) });
        }
        let one = |t: &Tensor| t.narrow(0, seq, 1);
        let layers = self.layers.iter().map(|(k, v)| Ok((one(k)?, one(v)?))).collect::<Result<Vec<_>>>()?;
        Ok(KvCache { layers, lens: vec![self.lens[seq]], capacity: self.capacity, id: self.id })
    }

    /// Empties the cache (its memory is kept for the next sequences).
    pub fn clear(&mut self) {
        self.lens.fill(0);
    }

    /// Forgets the positions from `len` on, in every sequence (kept memory; the next step writes over them).
    pub fn truncate(&mut self, len: usize) {
        self.lens.iter_mut().for_each(|l| *l = (*l).min(len));
    }

    /// Checks that `new` more positions fit in every sequence.
    pub fn reserve(&self, new: usize) -> crate::Result<()> {
        let used = self.len();
        if used + new > self.capacity {
            return Err(crate::Error::CacheFull { capacity: self.capacity, used, asked: new });
        }
        Ok(())
    }

    /// Every layer's key and value memory, as [`KvCache::layer`] gives one.
    pub fn layers(&self) -> &[(Tensor, Tensor)] {
        &self.layers
    }

    /// Layer `i`'s key and value memory, [b, hkv, capacity, d] (rows past `len` hold nothing yet).
    pub fn layer(&self, i: usize) -> (&Tensor, &Tensor) {
        let (k, v) = &self.layers[i];
        (k, v)
    }

    /// Layer `i`'s keys and values so far, [b, hkv, len, d] (`len` the longest sequence's: a shorter one's
    /// rows past its own length hold nothing yet): views of the cache's memory.
    pub fn filled(&self, i: usize) -> Result<(Tensor, Tensor)> {
        let (k, v) = &self.layers[i];
        let len = self.len();
        Ok((k.narrow(2, 0, len)?, v.narrow(2, 0, len)?))
    }

    pub(crate) fn advance(&mut self, new: usize) {
        self.lens.iter_mut().for_each(|l| *l += new);
    }

    /// Counts `new` positions written into sequence `seq` alone.
    pub(crate) fn advance_sequence(&mut self, seq: usize, new: usize) {
        self.lens[seq] += new;
    }

    /// Counts `new` positions written into every sequence by a step run directly ([`super::Llama::step`],
    /// which leaves the lengths to its caller).
    pub fn advance_by(&mut self, new: usize) -> crate::Result<()> {
        self.reserve(new)?;
        self.advance(new);
        Ok(())
    }
}

//! The key/value cache: per layer, the keys and values of every position so far, in memory allocated once
//! at its capacity ([b, hkv, capacity, d]). A step writes only its new rows, in place (`slice_set` inside
//! the attention block), and attention reads the first `len` rows as a view: no copy of the cache and no
//! allocation for it per token. Its capacity is checked: a prompt or a generation past it is an error.

use fuse::prelude::*;

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
    batch: usize,
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
        Ok(KvCache { layers, len: 0, capacity, batch, id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed) })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sequences held.
    pub fn batch(&self) -> usize {
        self.batch
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Another handle to the same memory (the length stays with this one): what a recorded step reads.
    pub(crate) fn clone_handles(&self) -> KvCache {
        KvCache { layers: self.layers.clone(), len: self.len, capacity: self.capacity, batch: self.batch, id: self.id }
    }

    /// Empties the cache (its memory is kept for the next sequence).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Forgets the positions from `len` on (kept memory; the next step writes over them).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Checks that `new` more positions fit.
    pub fn reserve(&self, new: usize) -> crate::Result<()> {
        if self.len + new > self.capacity {
            return Err(crate::Error::CacheFull { capacity: self.capacity, used: self.len, asked: new });
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

    /// Layer `i`'s keys and values so far, [b, hkv, len, d]: views of the cache's memory.
    pub fn filled(&self, i: usize) -> Result<(Tensor, Tensor)> {
        let (k, v) = &self.layers[i];
        Ok((k.narrow(2, 0, self.len)?, v.narrow(2, 0, self.len)?))
    }

    pub(crate) fn advance(&mut self, new: usize) {
        self.len += new;
    }

    /// Counts `new` positions written by a step run directly ([`super::Llama::step`], which leaves the
    /// length to its caller).
    pub fn advance_by(&mut self, new: usize) -> crate::Result<()> {
        self.reserve(new)?;
        self.len += new;
        Ok(())
    }
}

//! The key/value cache: per layer, the keys and values of every position so far, in memory allocated once
//! at its capacity ([b, hkv, capacity, d]). A step writes only its new rows, in place (`slice_set` inside
//! the attention block), and attention reads the first `len` rows as a view: no copy of the cache and no
//! allocation for it per token. Its capacity is checked: a prompt or a generation past it is an error.

use fuse::prelude::*;

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `layers` layers of `kv_heads` heads of `head_dim`, batch `batch`, holding at most
    /// `capacity` positions (allocated now, zero-filled).
    pub fn new(layers: usize, batch: usize, kv_heads: usize, head_dim: usize, capacity: usize, dtype: DType, dev: &Device) -> Result<KvCache> {
        let shape = [batch, kv_heads, capacity, head_dim];
        let layers = (0..layers)
            .map(|_| Ok((Tensor::zeros(&shape, dtype, dev)?, Tensor::zeros(&shape, dtype, dev)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache { layers, len: 0, capacity })
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

    /// Empties the cache (its memory is kept for the next sequence).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Checks that `new` more positions fit.
    pub fn reserve(&self, new: usize) -> crate::Result<()> {
        if self.len + new > self.capacity {
            return Err(crate::Error::CacheFull { capacity: self.capacity, used: self.len, asked: new });
        }
        Ok(())
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
}

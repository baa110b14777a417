//! The key/value cache: per layer, the keys and values of every position so far, [b, hkv, len, d].
//!
//! This first version grows by concatenation (the attention block returns the cache with the new rows
//! appended), which copies the cache once per step; a cache written in place, row by row, comes with the
//! decode-speed work. Its capacity is checked: a prompt or a generation past it is an error, not a panic.

use fuse::prelude::*;

pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `layers` layers of `kv_heads` heads of `head_dim`, batch `batch`, holding at most
    /// `capacity` positions.
    pub fn new(layers: usize, batch: usize, kv_heads: usize, head_dim: usize, capacity: usize, dtype: DType, dev: &Device) -> Result<KvCache> {
        let empty = Tensor::zeros(&[batch, kv_heads, 0, head_dim], dtype, dev)?;
        Ok(KvCache { layers: (0..layers).map(|_| (empty.clone(), empty.clone())).collect(), len: 0, capacity })
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

    /// Checks that `new` more positions fit.
    pub fn reserve(&self, new: usize) -> crate::Result<()> {
        if self.len + new > self.capacity {
            return Err(crate::Error::CacheFull { capacity: self.capacity, used: self.len, asked: new });
        }
        Ok(())
    }

    pub(crate) fn layer(&self, i: usize) -> (&Tensor, &Tensor) {
        let (k, v) = &self.layers[i];
        (k, v)
    }

    pub(crate) fn set_layer(&mut self, i: usize, k: Tensor, v: Tensor) {
        self.layers[i] = (k, v);
    }

    pub(crate) fn advance(&mut self, new: usize) {
        self.len += new;
    }
}

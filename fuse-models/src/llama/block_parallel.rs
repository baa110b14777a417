//! The blocks on one rank of a tensor-parallel group (`fuse::parallel`, [`crate::llama::Llama::shard`]): the
//! rank's heads and its columns of the FFN's hidden layer. Each is its single-device twin in `block.rs` with
//! the block's last product (the output projection, down), this rank's part of every output, summed over the
//! ranks by `all_reduce_sum` before the residual. `width` is the rank's hq * d (the columns of its attention
//! output), which the whole model's `hidden` stands for.

use super::{AttentionBlock, FfnBlock};
use fuse::prelude::*;

impl AttentionBlock {
    /// [`AttentionBlock::forward`] on a rank's heads.
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward_parallel(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        at: &Tensor,
        lens: &Tensor,
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        heads: usize,
        hqk: usize,
        d: usize,
        width: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qkv = h.matmul(&self.wqkv.t()).reshape(&[b, s, heads, d]);
        let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, width]);
        Ok(x + all_reduce_sum(&o.matmul(&self.wo.t())))
    }

    /// [`AttentionBlock::forward_biased`] on a rank's heads (`bqkv` its heads' biases).
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward_biased_parallel(
        &self,
        x: &Tensor,
        bqkv: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        at: &Tensor,
        lens: &Tensor,
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        heads: usize,
        hqk: usize,
        d: usize,
        width: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qkv = (h.matmul(&self.wqkv.t()) + bqkv).reshape(&[b, s, heads, d]);
        let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, width]);
        Ok(x + all_reduce_sum(&o.matmul(&self.wo.t())))
    }

    /// [`AttentionBlock::forward_split`] on a rank's heads.
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward_split_parallel(
        &self,
        x: &Tensor,
        wv: &Tensor,
        bqk: &Tensor,
        bv: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        at: &Tensor,
        lens: &Tensor,
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        hqk: usize,
        d: usize,
        width: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qk = (h.matmul(&self.wqkv.t()) + bqk).reshape(&[b, s, hqk, d]);
        let v = (h.matmul(&wv.t()) + bv).reshape(&[b, s, hkv, d]);
        let qk = rope(&qk.transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&v.transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, width]);
        Ok(x + all_reduce_sum(&o.matmul(&self.wo.t())))
    }
}

impl FfnBlock {
    /// [`FfnBlock::forward`] on a rank's columns of the hidden layer.
    #[fuse]
    pub fn forward_parallel(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + all_reduce_sum(&(silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t())))
    }
}

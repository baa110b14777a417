//! The blocks on one rank of a tensor-parallel group (`fuse::parallel`, [`crate::llama::Llama::shard`]): the
//! rank's heads and its columns of the FFN's hidden layer. Each is its single-device twin in `block.rs` with
//! the block's last product (the output projection, down), this rank's part of every output, summed over the
//! ranks by `all_reduce_sum` before the residual. `width` is the rank's hq * d (the columns of its attention
//! output), which the whole model's `hidden` stands for.

use super::{AttentionBlock, FfnBlock};
use fuse::prelude::*;

#[fuse]
impl AttentionBlock {
    /// What the three twins share once q and k carry the rotary embedding (`qk` [b, hq + hkv, s, d]) and `v`
    /// is [b, hkv, s, d]: the cache appends, the attention over the cache, the output projection of this
    /// rank's heads summed over the ranks, and the residual (inlined into each caller's graph).
    #[allow(clippy::too_many_arguments)]
    fn attend_summed(
        &self,
        x: &Tensor,
        qk: &Tensor,
        v: &Tensor,
        k_cache: &Tensor,
        v_cache: &Tensor,
        at: &Tensor,
        lens: &Tensor,
        b: usize,
        s: usize,
        hq: usize,
        hkv: usize,
        width: usize,
    ) -> Result<Tensor> {
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(v, 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, width]);
        Ok(x + all_reduce_sum(&o.matmul(&self.wo.t())))
    }

    /// [`AttentionBlock::forward`] on a rank's heads.
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
        let v = qkv.narrow(2, hqk, hkv).transpose(1, 2);
        self.attend_summed(x, &qk, &v, k_cache, v_cache, at, lens, b, s, hq, hkv, width)
    }

    /// [`AttentionBlock::forward_biased`] on a rank's heads (`bqkv` its heads' biases).
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
        let v = qkv.narrow(2, hqk, hkv).transpose(1, 2);
        self.attend_summed(x, &qk, &v, k_cache, v_cache, at, lens, b, s, hq, hkv, width)
    }

    /// [`AttentionBlock::forward_split`] on a rank's heads.
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
        let v = (h.matmul(&wv.t()) + bv).reshape(&[b, s, hkv, d]).transpose(1, 2);
        let qk = rope(&qk.transpose(1, 2), cos, sin);
        self.attend_summed(x, &qk, &v, k_cache, v_cache, at, lens, b, s, hq, hkv, width)
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

//! One decoder layer as two fused methods: the attention block (rms_norm, the q/k/v projections, rotary
//! embedding, the new keys and values written into the cache in place, attention over the cache, the output
//! projection and the residual) and the FFN block (rms_norm, SwiGLU, the down projection and the residual).
//! A model with a q/k/v bias (Qwen2) runs the attention block's twin that adds it in the projection's epilogue;
//! a file whose v projection is of another block type than q and k (llama.cpp's Q4_K_M gives some layers' v
//! Q6_K) runs the twin with two projections, q|k stacked and v apart, each read as stored.

use fuse::prelude::*;

/// Weights of a layer's attention half, in checkpoint layout ([out, in]).
pub struct AttentionBlock {
    pub norm: Tensor,
    /// The query, key and value projections stacked ([hq * d + 2 * hkv * d, hidden]): one GEMM for the three.
    pub wqkv: Tensor,
    pub wo: Tensor,
    pub eps: f32,
    pub scale: f32,
}

impl AttentionBlock {
    /// `x` `[b, s, hidden]`, the new positions of each sequence. Everything that changes from step to step is
    /// a tensor on the model's device, so that a step can be captured once as a CUDA graph and replayed:
    /// `cos`/`sin` are the rotary tables' rows of these positions (`[s, d/2]`), `at` (u32 `[1]`) where the new
    /// keys and values go in the cache (`[b, hkv, capacity, d]`, written in place), `lens` (u32 `[b]`) how many
    /// cached positions each sequence attends over (the new ones included). `heads` is hq + 2 hkv (the rows
    /// of `wqkv` in heads) and `hqk` hq + hkv (the heads that take the rotary embedding, in one pass).
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
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
        hidden: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qkv = h.matmul(&self.wqkv.t()).reshape(&[b, s, heads, d]);
        let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, hidden]);
        Ok(x + o.matmul(&self.wo.t()))
    }

    /// [`AttentionBlock::forward`] with `bqkv` (`[heads * d]`, the q, k and v biases stacked as `wqkv`'s rows:
    /// Qwen2's) added to the q/k/v projection before the rotary embedding: an epilogue of the projection's
    /// GEMM, not a pass of its own.
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward_biased(
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
        hidden: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qkv = (h.matmul(&self.wqkv.t()) + bqkv).reshape(&[b, s, heads, d]);
        let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, hidden]);
        Ok(x + o.matmul(&self.wo.t()))
    }
}

impl AttentionBlock {
    /// [`AttentionBlock::forward`] with `self.wqkv` holding the q and k projections only (`[hqk * d, hidden]`)
    /// and `wv` (`[hkv * d, hidden]`) the v projection apart, with their biases `bqk` and `bv` (zeros where the
    /// model has none): two GEMMs on the normalised input, for weights of two block types.
    #[fuse]
    #[allow(clippy::too_many_arguments)]
    pub fn forward_split(
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
        hidden: usize,
    ) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        let qk = (h.matmul(&self.wqkv.t()) + bqk).reshape(&[b, s, hqk, d]);
        let v = (h.matmul(&wv.t()) + bv).reshape(&[b, s, hkv, d]);
        let qk = rope(&qk.transpose(1, 2), cos, sin);
        let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
        let v_cache = v_cache.slice_set(&v.transpose(1, 2), 2, at);
        let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, self.scale, true);
        let o = a.transpose(1, 2).reshape(&[b, s, hidden]);
        Ok(x + o.matmul(&self.wo.t()))
    }
}

/// Weights of a layer's feed-forward half.
pub struct FfnBlock {
    pub norm: Tensor,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub eps: f32,
}

impl FfnBlock {
    #[fuse]
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = rms_norm(x, &self.norm, self.eps);
        Ok(x + (silu(h.matmul(&self.gate.t())) * h.matmul(&self.up.t())).matmul(&self.down.t()))
    }
}

//! A decode step's attention as fuse-models' decoder writes it (`AttentionBlock::forward` between its two
//! projections), shared by the test binaries that check it (model_ops, device_checks, the GPU suite's
//! sanitize tests): on a GPU rope, both cache appends and attention run as one launch.

use fuse::prelude::*;

/// Rope over the query and key heads of the stacked projection `qkv` [b, 1, hq + 2 hkv, d], the new key and
/// value rows written into the caches at the position held in `at`, attention_len over the caches; returns
/// the attention and both caches.
#[fuse]
#[allow(clippy::too_many_arguments)]
pub fn decode_step_attention(
    qkv: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    at: &Tensor,
    lens: &Tensor,
    hq: usize,
    hkv: usize,
    hqk: usize,
    scale: f32,
) -> Result<(Tensor, Tensor, Tensor)> {
    let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
    let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
    let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
    let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, scale, true);
    Ok((a, k_cache, v_cache))
}

/// The same step after a kernel of its own call makes `qkv` (`qkv_in * qkv_scale`), as the decoder's QKV
/// projection does: the decode kernel then loads its first keys and values before it waits for that kernel
/// (the caches and lens are arguments that kernel cannot write: `FUSE_DECODE_EARLY`).
#[fuse]
#[allow(clippy::too_many_arguments)]
pub fn decode_step_after_kernel(
    qkv_in: &Tensor,
    qkv_scale: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    at: &Tensor,
    lens: &Tensor,
    hq: usize,
    hkv: usize,
    hqk: usize,
    scale: f32,
) -> Result<(Tensor, Tensor, Tensor)> {
    let qkv = qkv_in * qkv_scale;
    let qk = rope(&qkv.narrow(2, 0, hqk).transpose(1, 2), cos, sin);
    let k_cache = k_cache.slice_set(&qk.narrow(1, hq, hkv), 2, at);
    let v_cache = v_cache.slice_set(&qkv.narrow(2, hqk, hkv).transpose(1, 2), 2, at);
    let a = attention_len(&qk.narrow(1, 0, hq), &k_cache, &v_cache, lens, scale, true);
    Ok((a, k_cache, v_cache))
}

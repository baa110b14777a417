//! What the Llama-3-8B MLP examples share (included by path): the sizes, the fused function, and weights
//! filled from a cheap hash (176M values, never zeros, the same in every run).

use fuse::prelude::*;

pub const HIDDEN: usize = 4096;
pub const INTER: usize = 14336;

/// The MLP with checkpoint-layout ([out, in]) weights read through `.t()`.
#[fuse]
pub fn llama_mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
    let h = silu(x.matmul(&w_gate.t())) * x.matmul(&w_up.t());
    Ok(h.matmul(&w_down.t()))
}

/// Deterministic values in [-scale, scale): a cheap hash, so 176M weights fill quickly.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A bf16 tensor of `shape` on `dev` with `values(.., seed, scale)`.
pub fn bf16_tensor(shape: &[usize], seed: u64, scale: f32, dev: &Device) -> Result<Tensor> {
    Tensor::from_vec(values(shape.iter().product(), seed, scale), shape, dev)?.to_dtype(DType::BF16)
}

/// The gate, up and down weights, [out, in], scaled as an initialised checkpoint's.
pub fn weights(dev: &Device) -> Result<[Tensor; 3]> {
    Ok([
        bf16_tensor(&[INTER, HIDDEN], 11, 0.02, dev)?,
        bf16_tensor(&[INTER, HIDDEN], 12, 0.02, dev)?,
        bf16_tensor(&[HIDDEN, INTER], 13, 0.02, dev)?,
    ])
}

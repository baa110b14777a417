//! Top-p sampling on the device, inside a recorded decode step (`Llama::sampling_decoder`): each sequence's
//! next token drawn from its logits with no host round trip, so that seeded sampling queues steps back to
//! back as greedy decoding does.
//!
//! The draw is the host's (`generate`'s `top_p_choice`): probabilities `exp((logit - max) / temperature)`,
//! sorted down (ties in id order), the fewest whose share reaches `top_p` kept, then the first kept token
//! whose running sum passes `u` times their mass. The uniform `u` of sequence `s` at position `p` is entry
//! `[p, s]` of a table drawn once from the seed ([`sampling_uniforms`]), gathered by the step's own write
//! positions: the same seed gives the same tokens, run after run. f32 on the device against f64 on the host:
//! where `u` falls within rounding of a boundary between two tokens' running sums, the two may pick
//! neighbours.

use super::generate::Sampling;
use crate::Result;
use fuse::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The uniforms of a seeded sampling decoder: `[capacity][batch]`, row `p` the draws of the step that writes
/// position `p`, from `SmallRng` seeded with `seed`.
pub fn sampling_uniforms(seed: u64, batch: usize, capacity: usize) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..batch * capacity).map(|_| rng.gen::<f32>()).collect()
}

/// What a recorded step picks after its logits.
pub(crate) enum Pick {
    Greedy,
    TopP(TopP),
}

/// A top-p draw on the device.
pub(crate) struct TopP {
    inverse_temperature: f32,
    top_p: f32,
    /// `[capacity, batch]` f32 ([`sampling_uniforms`]).
    uniforms: Tensor,
}

impl Pick {
    /// The pick `sampling` asks for (a temperature of 0 is greedy) for steps of `batch` sequences in a cache
    /// of `capacity` positions.
    pub(crate) fn new(sampling: Sampling, batch: usize, capacity: usize, device: &Device) -> Result<Pick> {
        sampling.check()?;
        Ok(match sampling {
            Sampling::TopP { temperature, top_p, seed } if temperature > 0.0 => {
                let uniforms = sampling_uniforms(seed, batch, capacity);
                Pick::TopP(TopP {
                    inverse_temperature: 1.0 / temperature,
                    top_p,
                    uniforms: Tensor::from_vec(uniforms, &[capacity, batch], device)?,
                })
            }
            _ => Pick::Greedy,
        })
    }

    /// Each sequence's next token, u32 `[batch, 1]`, from `logits` (`[batch, 1, vocab]`), the step writing
    /// position `at[s]` of sequence `s`.
    pub(crate) fn next(&self, logits: &Tensor, at: &Tensor) -> fuse::Result<Tensor> {
        let (batch, vocab) = (logits.shape()[0], logits.shape()[logits.rank() - 1]);
        match self {
            Pick::Greedy => logits.argmax(-1)?.reshape(&[batch, 1]),
            Pick::TopP(t) => {
                let logits = logits.reshape(&[batch, vocab])?.to_dtype(DType::F32)?;
                let u = t.uniforms.gather(&at.reshape(&[1, batch])?, 0)?.reshape(&[batch, 1])?;
                let p = ((&logits - logits.max(-1)?)? * t.inverse_temperature)?.exp()?;
                let (sorted, order) = p.sort_last_dim(false)?;
                let running = sorted.cumsum(-1)?;
                // Kept: the tokens before the running share reaches top_p, and the one that reaches it.
                let kept = (&running - &sorted)?.lt(&(sorted.sum(-1)? * t.top_p)?)?;
                let mass = (&sorted * &kept)?.sum(-1)?;
                let passed = (running.gt(&(u * mass)?)? * kept)?;
                let first = passed.argmax(-1)?.reshape(&[batch, 1])?;
                order.gather(&first, -1)
            }
        }
    }
}

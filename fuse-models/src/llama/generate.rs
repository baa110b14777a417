//! Generation: the prompt in one forward pass (prefill), then one token per pass (decode), greedy or
//! sampled, stopping at eos or after `max_tokens`, with the time of each phase.

use super::Llama;
use crate::{Error, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// How the next token is chosen from the logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token (ties: the lowest id).
    Greedy,
    /// Softmax at `temperature`, restricted to the smallest set of tokens whose probability reaches `top_p`,
    /// drawn with a generator seeded by `seed`.
    TopP { temperature: f32, top_p: f32, seed: u64 },
}

/// What [`generate`] produced.
#[derive(Clone, Debug)]
pub struct Generated {
    pub ids: Vec<u32>,
    /// Logits of the position after the prompt (what chose the first generated token).
    pub first_logits: Vec<f32>,
    pub prefill: Duration,
    pub decode: Duration,
}

impl Sampling {
    /// `Err` for a temperature that is NaN, infinite or negative, or a top-p outside (0, 1].
    pub fn check(&self) -> Result<()> {
        let Sampling::TopP { temperature, top_p, .. } = *self else { return Ok(()) };
        if !(temperature.is_finite() && temperature >= 0.0) {
            let what = format!("sampling: temperature {temperature} (a finite number, 0 or more: 0 is greedy)");
            return Err(Error::InvalidArgument { what });
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::InvalidArgument { what: format!("sampling: top_p {top_p} (above 0, at most 1)") });
        }
        Ok(())
    }
}

/// Generates up to `max_tokens` tokens after `prompt`, calling `on_token` with each as it comes. A sampling
/// temperature or top-p out of range is an error ([`Sampling::check`]); `max_tokens` past the model's context
/// generates until the cache is full (then the error says so).
pub fn generate(
    model: &Llama,
    prompt: &[u32],
    max_tokens: usize,
    sampling: Sampling,
    eos: u32,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<Generated> {
    sampling.check()?;
    // Room for the prompt and every token but the last (which is never fed back).
    let capacity = prompt.len().saturating_add(max_tokens.saturating_sub(1)).clamp(1, model.config.context);
    let mut cache = model.new_cache(capacity)?;
    let mut rng = SmallRng::seed_from_u64(match sampling {
        Sampling::TopP { seed, .. } => seed,
        Sampling::Greedy => 0,
    });
    let start = Instant::now();
    let first_logits = model.forward(prompt, &mut cache)?;
    let prefill = start.elapsed();
    let mut ids = Vec::new();
    let mut logits = first_logits.clone();
    let start = Instant::now();
    // The first decode step runs call by call (it compiles and tunes the one-token shapes); the rest replay
    // it as a recorded CUDA graph on a GPU (`Llama::decoder`).
    let mut decoder = None;
    while ids.len() < max_tokens {
        let next = choose(&logits, sampling, &mut rng);
        ids.push(next);
        on_token(next)?;
        if next == eos || ids.len() == max_tokens {
            break;
        }
        logits = match decoder.as_mut() {
            None => {
                let logits = model.forward(&[next], &mut cache)?;
                decoder = Some(model.decoder(&cache, fuse::Fusion::On)?);
                logits
            }
            Some(decoder) => decoder.step(&[next], &mut cache)?,
        };
    }
    Ok(Generated { ids, first_logits, prefill, decode: start.elapsed() })
}

/// The greedy choice: the largest logit's id (the lowest id on a tie).
pub(super) fn argmax(logits: &[f32]) -> u32 {
    logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0
        as u32
}

fn choose(logits: &[f32], sampling: Sampling, rng: &mut SmallRng) -> u32 {
    let argmax = || argmax(logits);
    let Sampling::TopP { temperature, top_p, .. } = sampling else { return argmax() };
    if temperature <= 0.0 {
        return argmax();
    }
    top_p_choice(logits, temperature, top_p, rng.gen::<f64>())
}

/// The top-p draw of `choose` (and of a sampling decoder on the device, `Llama::sampling_decoder`) with its
/// uniform `u` in [0, 1) given: probabilities `exp((logit - max) / temperature)` (temperature > 0), sorted down
/// (ties: the lower id first), the fewest whose share reaches `top_p` kept, then the first kept token whose
/// running sum passes `u` times their mass.
pub fn top_p_choice(logits: &[f32], temperature: f32, top_p: f32, u: f64) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(u32, f64)> =
        logits.iter().enumerate().map(|(i, &v)| (i as u32, (((v - max) / temperature) as f64).exp())).collect();
    let total: f64 = probs.iter().map(|p| p.1).sum();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut kept = 0.0;
    let cut = probs.iter().position(|p| {
        kept += p.1 / total;
        kept >= top_p as f64
    });
    probs.truncate(cut.map_or(probs.len(), |c| c + 1));
    let mass: f64 = probs.iter().map(|p| p.1).sum();
    let mut draw = u * mass;
    for &(id, p) in &probs {
        if draw < p {
            return id;
        }
        draw -= p;
    }
    probs.last().map_or_else(|| argmax(logits), |p| p.0)
}

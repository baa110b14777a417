//! Greedy decoding with the one-launch decode step: the prompt prefilled by the library's bf16 decoder, the
//! rest as one run of launches of the kernel ([`DecodeStep`], `step_kernel/`) on the weights it packs.

use super::cache::KvCache;
use super::generate::argmax;
use super::load::Llama;
use super::step_kernel::{DecodeStep, DecodeStepWeights, StepShape};
use crate::gguf::GgufFile;
use crate::{Error, Result};
use fuse::prelude::*;

/// Greedy decoding with the one-launch decode step (an sm_90 GPU): a prompt prefilled by a [`Llama`] loaded
/// in bf16 (the library's fused path) into its [`KvCache`], then one launch a token, the kernel reading and
/// appending to the same cache. The kernel's numerics are its own (the file's Q4_1 weights as they are, f16
/// activations into the products, f32 sums), so its tokens can part from the bf16 path's near ties.
pub struct OneLaunchDecoder {
    kernel: DecodeStep,
    shape: StepShape,
}

impl OneLaunchDecoder {
    /// Packs `file`'s weights and puts them on `device` with the kernel compiled for their shapes.
    pub fn new(file: &GgufFile, device: &Device) -> Result<OneLaunchDecoder> {
        let w = DecodeStepWeights::pack(file)?;
        Ok(OneLaunchDecoder { kernel: w.kernel(device)?, shape: w.layout.shape })
    }

    /// Up to `max_new` greedy tokens after `prompt` (stopping after `eos`): the prompt through `llama` into
    /// `cache` (bf16, batch 1, at most [`super::STEP_MAX_POSITIONS`] positions; empty or holding this sequence so
    /// far), the first token from its logits, every later one from a launch of the kernel (queued together:
    /// the tokens are read once, at the end; the steps after an eos are computed and dropped).
    pub fn generate(
        &mut self,
        llama: &Llama,
        cache: &mut KvCache,
        prompt: &[u32],
        max_new: usize,
        eos: u32,
    ) -> Result<Vec<u32>> {
        if llama.dtype() != DType::BF16 || cache.batch() != 1 || cache.capacity() > self.shape.max_positions {
            return Err(Error::BadShape {
                what: format!(
                    "the one-launch decode step reads a bf16 cache of one sequence and at most {} positions (model in {}, cache of {} sequences and {} positions)",
                    self.shape.max_positions,
                    llama.dtype(),
                    cache.batch(),
                    cache.capacity()
                ),
            });
        }
        if llama.config.layers != self.shape.layers
            || llama.config.hidden != self.shape.hidden
            || llama.config.vocab != self.shape.vocab
        {
            return Err(Error::BadShape {
                what: "the model is not the one the decoder's weights were packed from".into(),
            });
        }
        if max_new == 0 {
            return Ok(Vec::new());
        }
        cache.reserve(prompt.len() + max_new - 1)?;
        let logits = llama.forward(prompt, cache)?;
        let first = argmax(&logits);
        self.kernel.set_caches(cache.layers())?;
        self.kernel.set_token(first)?;
        let mut out = vec![first];
        if max_new > 1 && first != eos {
            // The rest as one run: the kernel advances the position and logs each token on the device.
            self.kernel.queue_run(cache.len(), max_new - 1)?;
            out.extend(self.kernel.run_tokens(max_new - 1)?);
        }
        if let Some(end) = out.iter().position(|&id| id == eos) {
            out.truncate(end + 1);
        }
        // The positions fed back (every token but the last); the run's rows past an eos are left as scratch.
        cache.advance_by(out.len() - 1)?;
        Ok(out)
    }

    /// Microseconds a step of the kernel alone, `steps` launches queued back to back at `cache`'s next
    /// position (rows past its length are written and left as scratch; the length does not move). The
    /// caches are `cache`'s (bf16, batch 1, as [`OneLaunchDecoder::generate`] takes them).
    pub fn time_steps(&mut self, cache: &KvCache, steps: usize) -> Result<f64> {
        self.kernel.set_caches(cache.layers())?;
        self.kernel.time_steps(cache.len(), steps)
    }
}

//! The Llama-family decoder (SmolLM2-135M-Instruct; the `llama` and `qwen2` architectures of GGUF files)
//! written the way a model crate writes it: weights in structs, each block a `#[fuse]` method, loading from
//! GGUF, and generation on top.
//!
//! - [`Config`]: the sizes from the file's metadata, under its [`Architecture`]'s prefix. A `qwen2` file
//!   (Qwen2, Qwen2.5) adds a bias to the q/k/v projection and keeps its rows as Hugging Face has them; a file
//!   without `output.weight` ties its LM head to the embedding.
//! - [`Llama`]: the weights on a device, in a dtype; [`Llama::forward`] runs a batch of new tokens through
//!   every layer with a [`KvCache`] and returns the last position's logits.
//! - [`generate`]: prefill the prompt in one pass, then decode one token at a time (greedy, or temperature
//!   and top-p sampling with a seed), stopping at eos or a token budget.
//! - [`Llama::shard`]: a rank's share of the model for tensor parallelism (`fuse::parallel`), whose blocks
//!   sum their last products over the ranks.
//! - [`OneLaunchDecoder`]: greedy decoding with the whole decode step as one launch (an sm_90 GPU, batch 1):
//!   the kernel of `step_kernel/` ([`DecodeStep`], a custom kernel on `fuse::custom_kernel`) on weights
//!   [`DecodeStepWeights`] packs from the file's Q4_1 blocks at the offsets of its [`StepLayout`].

mod block;
mod block_parallel;
mod cache;
mod generate;
mod image;
mod load;
mod one_launch;
mod parallel;
#[cfg(test)]
mod qwen2_tests;
#[cfg(test)]
mod reference;
mod sample;
mod step;
pub mod step_kernel;
mod stored;
#[cfg(test)]
mod stored_tests;

pub use block::{AttentionBlock, FfnBlock};
pub use cache::KvCache;
pub use generate::{generate, top_p_choice, Generated, Sampling};
pub use load::{Architecture, Config, Llama, TensorParallel};
pub use one_launch::OneLaunchDecoder;
pub use sample::sampling_uniforms;
pub use step::{Decoder, StepInputs};
pub use step_kernel::{
    DecodeStep, DecodeStepWeights, StepLayout, StepShape, STEP_MAX_POSITIONS, STEP_SHARED_MEMORY_LIMIT, STEP_SHARES,
};

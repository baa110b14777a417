//! The one-launch decode step (docs/persistent-step.md): a Llama decoder's whole batch-1 step as one launch
//! on thread-block clusters, written for this model family as a user's custom kernel would be.
//!
//! - `layout.rs`: [`StepLayout`], the one description of the kernel's shapes, eps and memory layout, and the
//!   limits a model must meet; `header.rs` writes the constants the kernel includes from it (its preamble:
//!   that header, fuse's `CUDA_PRELUDE` and `SM90_HEADER`, then `ptx.cuh`) and `args.rs` is the ordered list
//!   of its argument words.
//! - the kernel's CUDA: `ptx.cuh` (its own few helpers: f16x2 arithmetic, relaxed hand-off words, the timer;
//!   conversions, reductions, clusters, mbarriers and bulk copies are the shared headers'), `layout.cuh` (shared memory at
//!   the generated offsets), `stages.cuh` (the Q4_1 GEMV, hand-offs, attention), `head.cuh` (embedding, LM
//!   head, argmax), `kernel.cu`.
//! - `weights.rs`: [`DecodeStepWeights`] packs a GGUF file's blocks at the layout's offsets;
//!   `decode_step.rs`: [`DecodeStep`] runs it through `fuse::custom_kernel`.

mod args;
mod decode_step;
mod header;
mod layout;
mod weights;

pub use args::{argument_words, Member, StepArg, STEP_ARGS};
pub use decode_step::{DecodeStep, DECODE_STEP_LOG};
pub use header::STEP_ENTRY;
pub use layout::{
    AttentionScratch, HeadRing, Region, ShareLayout, SmemLayout, StageLayout, StepLayout, StepShape, HANDOFF_NAMES,
    STEP_CLUSTERS, STEP_HEAD_DIM, STEP_MAX_POSITIONS, STEP_SHARED_MEMORY_LIMIT, STEP_SHARES, STEP_THREADS,
};
pub use weights::DecodeStepWeights;

#[cfg(test)]
mod tests;

//! The CPU backend: executes a fuse-ir plan with each fused group as one multi-threaded pass over memory.
//!
//! - `exec`: the plan executor (value table, shapes, falling back to one op at a time when a group's
//!   shapes do not fit its fused form);
//! - `rowprog` / `rowrun`: pointwise and row-reduction groups compiled to straight-line row code and run;
//! - `matmul`: Gemm and DualGemm groups (prologue, `gemm` crate, epilogue); `quant`: their products with
//!   block-quantized weights (SIMD kernels that read the blocks as stored);
//! - `model`, `attention`: Model groups (embedding, argmax, rope; attention with an online softmax);
//! - `copy`: `cat` (views are strided tensors, resolved by `exec`; `contiguous` is a row program);
//! - `kernels`, `math`: inner loops, vectorisable exp/tanh;
//! - `spin_pool`: spinning threads for the small parallel loops of decode (rayon serves the rest).
//!
//! The host memory of a tensor (`host.rs`) and iteration domains (`layout.rs`) are shared with the rest of
//! the crate; nothing here knows of the CUDA backend (`exec.rs` at the crate root dispatches).

mod attention;
mod attention_decode;
mod copy;
mod dense;
pub(crate) mod exec;
mod kernels;
mod math;
mod matmul;
mod model;
pub(crate) mod quant;
mod rowprog;
mod rowrun;
mod sort;
mod spin_pool;
mod unfold;

use crate::Tensor;
use fuse_ir::NodeId;

/// Below this much work (output elements; for attention, outputs times keys) a model op runs on the calling
/// thread rather than through rayon.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// What running a group did.
pub(crate) enum Outcome {
    /// The group's outputs.
    Done(Vec<(NodeId, Tensor)>),
    /// The shapes of this call do not fit the group's fused form (the planner decides without shapes).
    DoesNotFit(String),
}

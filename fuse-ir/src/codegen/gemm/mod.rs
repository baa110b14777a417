//! The GEMM templates from the code generator's side, the mirror of fuse-runtime's `cuda/gemm/`: each
//! template's CUDA source (`templates/*.cuh`, included as text) with its configs (tile shapes, stages,
//! split-K) and the generated hooks that splice a group's epilogue, and for the skinny template its
//! prologue, into it.
//!
//! - `hook`: the epilogue hook all the templates share, and horizontal fusion (several products of one
//!   left operand in one kernel);
//! - `skinny`: the skinny template for few rows (streams the weights once), its twin for weights of
//!   quantized blocks;
//! - `prologue`: the skinny template's in-kernel prologue (pointwise work and row reductions on the left
//!   operand as it is loaded);
//! - `wgmma`: the tensor-core template for many rows on sm_90a (TMA, wgmma);
//! - `mma`: the tiled mma.sync template for many rows on sm_80 and later;
//! - `tiling`: what the runtime asks of every config (grid, tiles, split-K workspace).

pub(in crate::codegen) mod hook;
pub(in crate::codegen) mod mma;
pub(in crate::codegen) mod prologue;
pub(in crate::codegen) mod skinny;
mod tiling;
pub(in crate::codegen) mod wgmma;

pub use mma::{MmaConfig, MMA_CONFIGS, MMA_QUANT_COLUMN, MMA_QUANT_TEMPLATE, MMA_TEMPLATE};
pub use prologue::PROLOGUE_MAX_ROWS;
pub use skinny::{
    QuantSkinnyConfig, SkinnyConfig, BULK_STREAM_DEFINE, EARLY_WEIGHTS_DEFINE, QUANT_SKINNY_CONFIGS,
    QUANT_SKINNY_TEMPLATE, ROW_PREFETCH_DEFINE, SCALED_PROLOGUE_DEFINE, SKINNY_CONFIGS, SKINNY_TEMPLATE,
    TASK_PREFETCH_BYTES_DEFINE, X_RING_DEFINE,
};
pub use tiling::GemmTiling;
pub use wgmma::{WgmmaConfig, WGMMA_CONFIGS, WGMMA_TEMPLATE};

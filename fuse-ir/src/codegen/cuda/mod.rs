//! The two CUDA sources every kernel fuse builds is made from, public so that a model crate's own kernel can
//! start with them too: [`CUDA_PRELUDE`] (conversions, reductions, grid dependency, small math, the sm_80
//! instructions several kernels wrap, quantized blocks) and [`SM90_HEADER`] (mbarriers, clusters, bulk
//! copies, st.async). Both are self-contained text (no `#include`); a source concatenates them in that
//! order, then its own code.

/// `prelude.cuh` then `blocks.cuh` (GGUF's quantized blocks decoded in registers): what every kernel source
/// starts with (the generated kernels, the GEMM templates, the model kernels).
pub const CUDA_PRELUDE: &str = concat!(include_str!("prelude.cuh"), include_str!("blocks.cuh"));

/// `sm90.cuh`: the Hopper instructions, for kernels built for sm_90 or sm_90a (the wgmma template); after
/// [`CUDA_PRELUDE`].
pub const SM90_HEADER: &str = include_str!("sm90.cuh");

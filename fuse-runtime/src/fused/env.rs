//! The environment variables the runtime reads, each read once per process. The on-disk kernel cache's
//! directory (`FUSE_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`) is read where it is used, in `cuda/cache.rs`.

use super::args::Fusion;
use std::sync::OnceLock;

/// `FUSE_DEBUG` as an integer (0 when unset or not a number). Each level adds to the ones below it; all of
/// it goes to stderr, prefixed `fuse:`.
///
/// | level | what                                                                                   | when |
/// |-------|----------------------------------------------------------------------------------------|------|
/// | 1     | plan summary: groups, their kinds, nodes and shapes for this call; groups that ran unfused | first call of each function |
/// | 2     | wall time of each group (the GPU is synchronised after each group to measure it)         | every call |
/// | 3     | which matmul path each Gemm/DualGemm group took and why (forced, from the tune results, tuned: each candidate's time, or the fixed rule): the cuBLAS call form (below), the skinny template's config and grid, or the CPU's `gemm::gemm` calls | every call |
/// | 4     | each kernel's `extern "C"` name and CUDA source (the ones `#[fuse]` emitted, else generated) | first call |
/// | 5     | the traced graph as text                                                                 | first call |
///
/// Level 3 on the GPU reports each library call in cuBLAS's column-major terms: the operands swap, so A is
/// the weight (the row-major right operand) and B the left operand; `op(A)=T` reads a `.t()` weight in
/// place. A DualGemm on the `cublas` path is one batched call when its two weights lie a whole number of
/// elements apart (the line says so, or why it made two calls).
///
/// Level 2 and above change timing (a synchronisation per group and no replay of recorded launches): use
/// them to look, not to benchmark.
pub(crate) fn debug_level() -> u32 {
    static LEVEL: OnceLock<u32> = OnceLock::new();
    *LEVEL.get_or_init(|| std::env::var("FUSE_DEBUG").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// `FUSE_FUSION`: `off`, `0` or `false` run every fused function unfused.
pub(crate) fn default_fusion() -> Fusion {
    static FUSION: OnceLock<Fusion> = OnceLock::new();
    *FUSION.get_or_init(|| match std::env::var("FUSE_FUSION") {
        Ok(v) if is_off(&v) => Fusion::Off,
        _ => Fusion::On,
    })
}

/// `FUSE_PDL`: `off`, `0` or `false` launch every kernel after the one before it has finished, without
/// programmatic dependent launch (for comparison, or a driver that mishandles it).
pub(crate) fn launch_overlap() -> bool {
    static OVERLAP: OnceLock<bool> = OnceLock::new();
    *OVERLAP.get_or_init(|| !std::env::var("FUSE_PDL").is_ok_and(|v| is_off(&v)))
}

fn is_off(value: &str) -> bool {
    matches!(value.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false")
}

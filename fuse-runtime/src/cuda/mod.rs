//! The CUDA backend: executes the same plans as the CPU backend, one launch per generated kernel, cuBLAS
//! for the matmuls.
//!
//! - `device`: one context and one non-default stream per GPU, created once per process and shared;
//! - `storage`: device memory of a tensor (bytes + dtype), host <-> device copies;
//! - `kernels`: a plan's generated kernels, kept per fused function; `nvrtc`: CUDA C -> CUBIN;
//!   `modules`: the in-memory module cache of loaded kernels;
//! - `launch`: the kernel ABI (`FuseArgs` packing) and launch geometry; `launch_plan`: per argument
//!   signature, a call recorded once and replayed (addresses filled in, no planning);
//! - `gemm`: row-major matmuls mapped onto cuBLAS's column-major GEMM; `lt`: the same calls through
//!   cuBLASLt with a chosen algorithm; `skinny`: the skinny GEMM template's configs and operands;
//!   `wgmma`: where the tensor-core template for many rows runs, and its operands' TMA descriptors;
//! - `exec`: the plan executor; `gemm_paths`: the ways it can run a Gemm/DualGemm group; `tuning`: which
//!   of them a group takes (timed candidates).

mod cache; // the on-disk cubin cache behind nvrtc::compile_cubin
pub(crate) mod device;
pub(crate) mod exec;
mod gemm;
mod lt;
mod skinny;
mod wgmma;
mod interop;
pub(crate) mod kernels;
pub(crate) mod launch;
mod launch_plan;
mod modules;
pub(crate) mod nvrtc; // pub(crate): lib.rs re-exports its kernel-check helpers for tests/kernels_compile.rs
pub(crate) mod storage;

pub use device::CudaDevice;
pub(crate) use cache::cache_dir;

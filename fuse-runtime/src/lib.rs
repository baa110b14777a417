//! fuse-runtime: tensors, devices, the error type, eager ops, and the backends that execute fused plans
//! (the CPU, and NVIDIA GPUs through CUDA). `FusedFn` is what `#[fuse]`-generated code calls.
//!
//! Rooms: `fused/` (`FusedFn`, its reports) and `eager.rs` call the dispatcher, `exec.rs`, which hands each
//! call to one backend, `cpu/` or `cuda/`; the two never import each other. What a call passes between
//! them is in `call.rs` (values, inferred shapes and dtypes, how each group ran), with `host.rs` (host
//! memory) and `layout.rs` (iteration domains). `env.rs` reads every `FUSE_*` variable and documents them
//! in one table; `tune/` keeps the autotuner's settings and results file.
//!
//! The `cuda` cargo feature (on by default) builds the CUDA backend and cudarc. Without it `cuda_off.rs`
//! stands in for `cuda/`: the same API, with `Device::cuda` returning `Error::CudaUnavailable` and
//! `Device::cuda_if_available` the CPU; the CUDA-only methods it leaves out are listed there.

// Without the CUDA backend, what only it calls (tuning, its env switches, GPU views) is unused, and code
// holding a `CudaDevice` (uninhabited there) is unreachable. The default build keeps every lint.
#![cfg_attr(not(feature = "cuda-backend"), allow(dead_code, unused_imports, unreachable_code, unused_variables))]

mod call;
#[cfg(feature = "candle")]
mod candle;
mod compile_reports;
mod constructors;
mod cpu;
#[cfg(feature = "cuda-backend")]
mod cuda;
// Without the CUDA backend, `cuda_off.rs` stands in for `cuda/` under its name.
#[cfg(not(feature = "cuda-backend"))]
mod cuda_off;
#[cfg(not(feature = "cuda-backend"))]
use cuda_off as cuda;
mod device;
mod eager;
mod eager_model;
mod eager_views;
mod element;
mod env;
mod graph;
pub use env::debug_level;
mod error;
mod exec;
mod fused;
mod host;
pub mod host_profile;
mod layout;
mod operators;
pub mod parallel;
mod quantized;
mod recycle;
mod reference;
mod tensor;
#[doc(hidden)]
pub mod testing;
pub mod tune;
mod views;

/// NVRTC and ptxas checks of generated kernels, for tests and tools (tests/kernels_compile.rs).
#[doc(hidden)]
pub use cuda::compile::nvrtc::{compile_ptx, nvrtc_available, nvrtc_version, ptxas_check, NvrtcError, PtxasReport};
/// A user's own CUDA kernel: compiled with defines for an architecture, its shared-memory and cluster
/// attributes, a co-residency check, launches with argument words, device buffers (feature `cuda`).
#[cfg(feature = "cuda-backend")]
pub use cuda::custom_kernel;
pub use cuda::CudaDevice;
/// The cudarc fuse is built with (feature `cuda`): its slices, streams and raw handles are what the interop
/// functions take (`Tensor::from_cuda_slice`, `CudaDevice::wait_for_stream`, ...).
#[cfg(feature = "cuda-backend")]
pub use cudarc;
pub use device::Device;
pub use eager::{
    abs, cos, exp, gelu, gelu_erf, gelu_tanh, log, maximum, minimum, recip, relu, rms_norm, rsqrt, sigmoid, silu, sin,
    softmax, sqr, sqrt, square, tanh, trunc,
};
pub use eager_model::{all_reduce_sum, attention, attention_len, embedding, rope};
pub use eager_views::{cat, Axis, SliceOffset};
pub use element::Element;
pub use error::{Error, Result};
pub use fuse_ir::DType;
pub use fused::{
    arg, field_is_tensor, prepare, Arg, FromOutput, FromOutputs, FusedFn, Fusion, IntoArg, PrepareArg, Prepared,
    StaticKernel,
};
pub use graph::{CudaGraph, OneLaunchReport};
pub use reference::{reference, rel_l2_error};
pub use tensor::Tensor;

//! From CUDA C to a loaded kernel: NVRTC compiles a source with its defines to a CUBIN for the GPU's
//! exact arch (`nvrtc`), the on-disk cache keeps CUBINs between processes (`cache`), and the in-memory
//! module cache keeps each loaded function for the life of the device (`modules`). Nothing here knows
//! about devices beyond a context to load into.

pub(crate) mod cache; // the on-disk cubin cache behind nvrtc::compile_cubin
mod modules;
pub(crate) mod nvrtc; // pub(crate): lib.rs re-exports its kernel-check helpers for tests/kernels_compile.rs

pub(crate) use modules::{KernelOrigin, ModuleCache};

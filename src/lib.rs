//! # fuse: kernel fusion for Rust tensor code, at `cargo build` time
//!
//! Put `#[fuse]` on an ordinary tensor function. The macro traces its body into a graph, groups the
//! pointwise work around the matmuls into as few kernels as it can (pointwise chains, row reductions,
//! matmul prologues and epilogues, two matmuls sharing their left operand), and the runtime executes that
//! plan, on the CPU or an NVIDIA GPU: one pass over memory per group. Anything the macro cannot trace is a compile error at that token
//! saying what to write instead; there is no silent fallback.
//!
//! ```
//! use fuse::prelude::*;
//!
//! #[fuse]
//! pub fn mlp(x: &Tensor, w_gate: &Tensor, w_up: &Tensor, w_down: &Tensor) -> Result<Tensor> {
//!     let h = silu(x.matmul(w_gate)) * x.matmul(w_up);
//!     Ok(h.matmul(w_down))
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let dev = Device::cuda_if_available(0); // the CPU when there is no GPU
//! let rand = |n: usize| (0..n).map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5).collect::<Vec<f32>>();
//! let x = Tensor::from_vec(rand(3 * 8), &[3, 8], &dev)?;
//! let (wg, wu, wd) = (
//!     Tensor::from_vec(rand(8 * 16), &[8, 16], &dev)?,
//!     Tensor::from_vec(rand(8 * 16), &[8, 16], &dev)?,
//!     Tensor::from_vec(rand(16 * 8), &[16, 8], &dev)?,
//! );
//! let y = mlp(&x, &wg, &wu, &wd)?;
//! assert_eq!(y.shape(), &[3, 8]);
//! // Two kernels: a dual GEMM whose epilogue is silu(g) * u, then the down projection.
//! assert_eq!(mlp_fused().plan(Fusion::On)?.groups.len(), 2);
//! # Ok(())
//! # }
//! ```
//!
//! ## What the body may contain
//!
//! `let` bindings, `+ - * /` and unary `-` with numpy broadcasting on tensors, scalar parameters (`f32`, `f64`,
//! `usize`, `i64`) and number literals, integer or float (`2`, `0.5`, `1e-5`); `a.matmul(b)` (2-D, or 3-D batched by a 2-D weight); `w.t()` (a view:
//! checkpoint weights in `[out, in]` layout need no copy); `exp log sqrt rsqrt tanh sigmoid silu gelu
//! gelu_tanh relu abs square recip sin cos` (and candle's `sqr` and `gelu_erf` for `square` and `gelu`);
//! `x.clamp(min, max)`; the comparisons `a.ge(b) gt le lt eq ne` (1 or 0 in the operands' dtype); `maximum(a, b)`, `minimum(a, b)`, `a.powf(s)`; last-axis reductions that
//! keep the axis as size 1: `x.sum(-1)`, `x.mean(-1)`, `x.max(-1)`, `x.min(-1)`; `softmax(x)`, `rms_norm(x, w, eps)`;
//! `x.to_dtype(DType::F32)`. Return `Result<Tensor>` or `Result<(Tensor, Tensor, ...)>`; the tail is the
//! result, with or without `Ok(..)`. On a method taking `&self`, fields (`self.norm`, `self.eps`) may be
//! tensors or scalars.
//!
//! The same operations exist as eager functions returning `Result<Tensor>` (`silu(&x)?`, `x.matmul(&w)?`,
//! `(&a + &b)?`), so fused and eager code can be mixed and compared.
//!
//! ## Beside each fused function
//!
//! `#[fuse] fn mlp` also defines `mlp_fused() -> &'static FusedFn` (for a method `forward`, the associated
//! function `forward_fused()`): its graph, its plan, an explanation of the plan for given inputs, and a way to
//! run it unfused (`call_with(.., Fusion::Off)`, or `FUSE_FUSION=off` for the whole process) to bisect a wrong
//! answer or measure what fusion buys.
//!
//! ### Fused and unfused
//!
//! ```
//! use fuse::prelude::*;
//!
//! #[fuse]
//! fn scaled_exp(x: &Tensor, s: f32) -> Result<Tensor> {
//!     Ok(exp(x * s))
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let x = Tensor::arange(0.0, 6.0, &Device::Cpu)?;
//! let args = [fuse::arg(&x), fuse::arg(&0.5f32)];
//! let fused = scaled_exp_fused().call_with(&args, Fusion::On)?;
//! let unfused = scaled_exp_fused().call_with(&args, Fusion::Off)?;
//! assert_eq!(fused[0].to_vec::<f32>()?, unfused[0].to_vec::<f32>()?);
//! println!("{}", scaled_exp_fused().explain(&args)?); // one pass instead of three, in the CPU's words
//! # Ok(())
//! # }
//! ```
//!
//! The arguments of a fused method are its parameters, then the fields of `self` it reads, in the order
//! the body first uses them (`forward_fused().graph()?.inputs` lists them).
//!
//! ## Methods and trait impls
//!
//! `#[fuse]` on one method works in an inherent impl (`impl Block { #[fuse] fn forward(&self, ..) }`). In a
//! trait impl it cannot: the companion `forward_fused()` is not a member of the trait, and the macro, seeing
//! only the method, cannot put it elsewhere. Put `#[fuse]` on the impl block instead; it fuses every method
//! marked `#[fuse]` and every method taking `&self` that returns `Result<Tensor>` or a tuple of tensors,
//! leaves the other methods as they are, and puts the companions in an inherent impl of the type
//! (`Lin::forward_fused()`). The graph of a method fused this way is named `Lin::forward`.
//!
//! ```
//! use fuse::prelude::*;
//!
//! trait Module {
//!     fn forward(&self, xs: &Tensor) -> Result<Tensor>;
//! }
//!
//! struct Lin { w: Tensor, b: Tensor }
//!
//! #[fuse]
//! impl Module for Lin {
//!     fn forward(&self, xs: &Tensor) -> Result<Tensor> {
//!         Ok(xs.matmul(&self.w.t()) + &self.b)
//!     }
//! }
//!
//! # fn main() -> fuse::Result<()> {
//! let lin = Lin {
//!     w: Tensor::from_vec(vec![0.5f32; 3 * 2], &[3, 2], &Device::Cpu)?,
//!     b: Tensor::from_vec(vec![1.0f32; 3], &[3], &Device::Cpu)?,
//! };
//! let y = lin.forward(&Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2], &Device::Cpu)?)?;
//! assert_eq!(y.to_vec::<f32>()?, [2.5, 2.5, 2.5]);
//! assert_eq!(Lin::forward_fused().graph()?.name, "Lin::forward");
//! # Ok(())
//! # }
//! ```
//!
//! ## Your own CUDA kernels
//!
//! With the `cuda` feature, `fuse::custom_kernel` compiles a CUDA source of yours with `-D` defines for an
//! architecture (NVRTC and the on-disk cubin cache, as for fuse's kernels), sets its shared-memory and cluster
//! attributes, checks that its clusters are resident at once, and launches it with argument words on the
//! device's stream, in order with fuse's kernels. fuse-models' one-launch decode step is built on it.
//!
//! ## Environment
//!
//! - `FUSE_DEBUG=1` prints each function's plan on its first call, `2` adds per-group times, `3` the matmul
//!   path of each group, `4` the kernel sources, `5` the graph.
//! - `FUSE_FUSION=off` runs every function unfused (one pass per op).
//! - `FUSE_CACHE_DIR`: where compiled CUDA kernels are kept between processes (default `~/.cache/fuse`).

pub use fuse_macros::fuse;
pub use fuse_runtime::*;

// The README's examples are compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The candle-core that fuse's candle conversions take (feature `candle`): a model crate's own `candle-core`
/// dependency must be this version (0.11) for its tensors to be these.
#[cfg(feature = "candle")]
pub use candle_core;
pub mod examples;

/// The graph, planner and reference interpreter, for tools and tests.
pub use fuse_ir as ir;

/// Everything a user of `#[fuse]` needs: `use fuse::prelude::*;`.
pub mod prelude {
    pub use fuse_macros::fuse;
    pub use fuse_runtime::{
        abs, all_reduce_sum, attention, attention_len, cat, cos, embedding, exp, gelu, gelu_erf, gelu_tanh, log,
        maximum, minimum, recip, relu, rms_norm, rope, rsqrt, sigmoid, silu, sin, softmax, sqr, sqrt, square, tanh,
        trunc, Axis, CudaGraph, DType, Device, Error, FusedFn, Fusion, Result, SliceOffset, Tensor,
    };
}

/// What `#[fuse]`-generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use fuse_runtime::{
        field_is_tensor, prepare, Arg, FromOutputs, FusedFn, Fusion, IntoArg, Prepared, Result, StaticKernel,
    };
}

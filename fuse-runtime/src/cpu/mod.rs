//! The CPU backend: executes a fuse-ir plan with each fused group as one multi-threaded pass over memory.
//!
//! - `exec`: the plan executor (value table, shapes, falling back to one op at a time when a group's
//!   shapes do not fit its fused form);
//! - `rowprog` / `rowrun`: pointwise and row-reduction groups compiled to straight-line row code and run;
//! - `matmul`: Gemm and DualGemm groups (prologue, `gemm` crate, epilogue);
//! - `kernels`, `math`, `layout`, `storage`: inner loops, vectorisable exp/tanh, iteration domains, host
//!   memory.

pub(crate) mod exec;
mod kernels;
pub(crate) mod layout;
mod math;
mod matmul;
mod rowprog;
mod rowrun;
pub(crate) mod storage;

use crate::Tensor;

/// A value in the executor: a tensor, or a scalar argument or literal (0-d, no dtype of its own).
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Tensor(Tensor),
    Scalar(f64),
}
